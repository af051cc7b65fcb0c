//! A URL as logs and errors show it: scheme, host, port and path; never the userinfo
//! (`user:password@`) or the query (`?token=…`), either of which may hold a secret.
//!
//! Used wherever a URL from the settings is logged or put in an error
//! (`approvals.notifyUrl`, `state.redis.url`, `telemetry.otlpEndpoint`, `upstream`, a
//! kubeconfig's server), including URLs that don't parse — the case where the whole
//! value used to be quoted. For a malformed value the shown form errs on the side of
//! showing less: a host that isn't one, or an `@` after the authority (a password with
//! an unescaped `/`), is shown as `REDACTED`.

/// The longest path shown; the rest is elided.
const MAX_PATH: usize = 200;

/// `url` without userinfo, query or fragment.
pub fn shown(url: &str) -> String {
    let url = url.trim();
    let (scheme, rest) = match url.split_once("://") {
        Some((scheme, rest)) if is_scheme(scheme) => (Some(scheme), rest),
        _ => (None, url),
    };
    // The query and fragment go whole; the authority ends at the path.
    let rest = rest.split(['?', '#']).next().unwrap_or("");
    let (authority, path) = match rest.find('/') {
        Some(at) => rest.split_at(at),
        None => (rest, ""),
    };
    let host = authority.rsplit('@').next().unwrap_or("");
    let mut out = String::new();
    if let Some(scheme) = scheme {
        out.push_str(scheme);
        out.push_str("://");
    }
    if path.contains('@') || !is_host(host) {
        out.push_str("REDACTED");
        return out;
    }
    out.push_str(host);
    out.extend(
        path.chars()
            .take(MAX_PATH)
            .map(|c| if c.is_control() { '?' } else { c }),
    );
    if path.chars().count() > MAX_PATH {
        out.push('…');
    }
    out
}

fn is_scheme(scheme: &str) -> bool {
    let mut chars = scheme.chars();
    chars.next().is_some_and(|c| c.is_ascii_alphabetic())
        && chars.all(|c| c.is_ascii_alphanumeric() || "+-.".contains(c))
}

/// `name`, `name:port`, `[v6]` or `[v6]:port`, with name characters only.
fn is_host(authority: &str) -> bool {
    let digits = |port: &str| port.chars().all(|c| c.is_ascii_digit());
    if let Some(v6) = authority.strip_prefix('[') {
        let Some((inner, after)) = v6.split_once(']') else {
            return false;
        };
        let port_ok = after.is_empty() || after.strip_prefix(':').is_some_and(digits);
        return !inner.is_empty()
            && inner
                .chars()
                .all(|c| c.is_ascii_hexdigit() || ":.".contains(c))
            && port_ok;
    }
    let (host, port) = authority.split_once(':').unwrap_or((authority, ""));
    !host.is_empty()
        && host
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-._".contains(c))
        && digits(port)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn userinfo_and_query_never_show() {
        for (url, want) in [
            (
                "https://bot:hunter2@hooks.example:8443/page?token=s3cret#frag",
                "https://hooks.example:8443/page",
            ),
            (
                "redis://:hunter2@redis.internal:6379/0",
                "redis://redis.internal:6379/0",
            ),
            ("http://collector:4317", "http://collector:4317"),
            ("http://[::1]:4317/v1", "http://[::1]:4317/v1"),
            ("http://127.0.0.1:8080", "http://127.0.0.1:8080"),
            // Malformed: the secret must still go.
            ("https://bot:hunter2@", "https://REDACTED"),
            ("https://bot:hun/ter2@hooks.example/x", "https://REDACTED"),
            ("https://bot:hun?ter2@hooks.example/x", "https://REDACTED"),
            ("https://bot:hun#ter2@hooks.example/x", "https://REDACTED"),
            ("bot:hunter2@hooks.example/x?k=v", "hooks.example/x"),
            ("not a url hunter2", "REDACTED"),
            ("https://hooks.example/a\nb", "https://hooks.example/a?b"),
        ] {
            let shown = shown(url);
            assert_eq!(shown, want, "{url}");
            for secret in ["hunter2", "s3cret", "ter2", "frag"] {
                assert!(!shown.contains(secret), "{url}: {shown}");
            }
        }
    }

    #[test]
    fn long_paths_are_elided() {
        let url = format!("https://h/{}", "a".repeat(1000));
        assert!(shown(&url).len() < 250);
    }
}
