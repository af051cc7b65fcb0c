//! URLs as logs and errors may show them (DESIGN §14, "Errors never echo what they
//! read"): scheme, host, port and path, never userinfo, query or fragment, where a
//! password or an API key rides.

/// The URL without userinfo, query or fragment.
pub fn shown_url(url: &str) -> String {
    let cut = url.find(['?', '#']).map_or(url, |i| &url[..i]);
    match cut.split_once("://") {
        Some((scheme, rest)) => {
            let (authority, path) = rest.find('/').map_or((rest, ""), |i| rest.split_at(i));
            let host = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
            format!("{scheme}://{host}{path}")
        }
        None => cut.chars().take(200).collect(),
    }
}

/// `text` (a client library's error, say) with every URL in it shown as
/// [`shown_url`] shows it.
pub fn scrub_urls(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find("://") {
        let scheme_len = rest[..at]
            .chars()
            .rev()
            .take_while(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.'))
            .count();
        let start = at - scheme_len;
        let end = rest[at..]
            .find(|c: char| c.is_whitespace() || matches!(c, '"' | '\'' | '<' | '>' | '`' | ')'))
            .map_or(rest.len(), |i| at + i);
        out.push_str(&rest[..start]);
        out.push_str(&shown_url(&rest[start..end]));
        rest = &rest[end..];
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shown_urls_hold_no_secrets() {
        assert_eq!(
            shown_url("https://user:pw@mcp.example.com:8443/mcp?api_key=s3cret#x"),
            "https://mcp.example.com:8443/mcp"
        );
        assert_eq!(
            shown_url("http://127.0.0.1:9/mcp"),
            "http://127.0.0.1:9/mcp"
        );
        assert_eq!(shown_url("http://h?k=v"), "http://h");
    }

    #[test]
    fn urls_inside_a_message_are_scrubbed() {
        let error = "error sending request for url (http://otuser:PASS@127.0.0.1:4318/v1?api_key=KEY/v1/traces): \
                     connection refused; also grpc://u:p@collector:4317";
        let scrubbed = scrub_urls(error);
        for secret in ["PASS", "KEY", "otuser", "u:p"] {
            assert!(!scrubbed.contains(secret), "{scrubbed}");
        }
        assert!(scrubbed.contains("http://127.0.0.1:4318/v1)"), "{scrubbed}");
        assert!(scrubbed.contains("grpc://collector:4317"), "{scrubbed}");
        assert_eq!(scrub_urls("no url here"), "no url here");
    }
}
