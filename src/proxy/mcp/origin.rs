//! DNS-rebinding protection for the MCP endpoint: `mcp.allowedOrigins` and
//! `mcp.allowedHosts`.
//!
//! A web page an agent's user opens can make their browser send requests to a local MCP
//! server under a name the attacker controls. The backend's own check can't see it
//! through toolgate (it receives toolgate's request with its own `Host`), so toolgate
//! checks before anything is forwarded: a request that carries an `Origin` not on the
//! list, or (when pinned) a `Host` not on the list, is refused with HTTP 403. Requests
//! without `Origin` — agents and servers, not browsers — pass the origin check.
//!
//! A pattern is `scheme://host[:port]` for origins and `host[:port]` for hosts, with `*`
//! for the port meaning any port or none; `*` alone matches everything. Scheme and host
//! compare case-insensitively; IPv6 hosts are written in brackets.

use http::request::Parts;

use crate::vocab::{Code, Reject};

/// The compiled `mcp.allowedOrigins` and `mcp.allowedHosts`.
#[derive(Debug, Clone, Default)]
pub struct Guard {
    origins: Vec<Pattern>,
    /// Empty: any host.
    hosts: Vec<Pattern>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Pattern {
    Any,
    Exact {
        scheme: Option<String>,
        host: String,
        port: Port,
    },
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Port {
    Any,
    None,
    Is(String),
}

impl Guard {
    /// Compiles the settings; an unreadable pattern is an error naming it.
    pub fn new(origins: &[String], hosts: &[String]) -> Result<Guard, String> {
        let origins = origins
            .iter()
            .map(|p| {
                Pattern::parse(p, true)
                    .ok_or_else(|| format!("mcp.allowedOrigins: {p:?} is not scheme://host[:port]"))
            })
            .collect::<Result<_, _>>()?;
        let hosts = hosts
            .iter()
            .map(|p| {
                Pattern::parse(p, false)
                    .ok_or_else(|| format!("mcp.allowedHosts: {p:?} is not host[:port]"))
            })
            .collect::<Result<_, _>>()?;
        Ok(Guard { origins, hosts })
    }

    /// Refuses a request from an origin or to a host that is not allowed.
    pub fn check(&self, parts: &Parts) -> Result<(), Reject> {
        // Every Origin is checked: with two, a backend may read the one not checked.
        for origin in parts.headers.get_all(http::header::ORIGIN) {
            let allowed = origin
                .to_str()
                .ok()
                .and_then(|o| Pattern::parse(o, true))
                .is_some_and(|o| self.origins.iter().any(|p| p.covers(&o)));
            if !allowed {
                return Err(refused("the request's Origin is not in mcp.allowedOrigins"));
            }
        }
        if self.hosts.is_empty() {
            return Ok(());
        }
        let mut hosts = parts.headers.get_all(http::header::HOST).iter();
        let host = match (hosts.next(), hosts.next()) {
            (_, Some(_)) => return Err(refused("the request names its Host twice")),
            (host, None) => host
                .and_then(|h| h.to_str().ok())
                .or_else(|| parts.uri.authority().map(|a| a.as_str())),
        };
        let allowed = host
            .and_then(|h| Pattern::parse(h, false))
            .is_some_and(|h| self.hosts.iter().any(|p| p.covers(&h)));
        if allowed {
            Ok(())
        } else {
            Err(refused("the request's Host is not in mcp.allowedHosts"))
        }
    }
}

fn refused(message: &str) -> Reject {
    Reject::new(Code::OriginNotAllowed, message)
}

impl Pattern {
    /// Parses a pattern, or (with no `*`) a concrete origin or host.
    fn parse(text: &str, with_scheme: bool) -> Option<Pattern> {
        let text = text.trim();
        if text == "*" {
            return Some(Pattern::Any);
        }
        let (scheme, rest) = if with_scheme {
            let (scheme, rest) = text.split_once("://")?;
            if scheme.is_empty()
                || !scheme
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || "+-.".contains(c))
            {
                return None;
            }
            (Some(scheme.to_ascii_lowercase()), rest)
        } else {
            (None, text)
        };
        // An origin has no path; a trailing slash is tolerated in a pattern.
        let rest = rest.strip_suffix('/').unwrap_or(rest);
        let (host, port) = if let Some(v6) = rest.strip_prefix('[') {
            let (inside, after) = v6.split_once(']')?;
            let port = match after {
                "" => None,
                p => Some(p.strip_prefix(':')?),
            };
            (format!("[{}]", inside.to_ascii_lowercase()), port)
        } else {
            match rest.rsplit_once(':') {
                Some((host, port)) => (host.to_ascii_lowercase(), Some(port)),
                None => (rest.to_ascii_lowercase(), None),
            }
        };
        if host.is_empty() || host.contains(['/', '@', '?', '#', ' ']) {
            return None;
        }
        let port = match port {
            None => Port::None,
            Some("*") => Port::Any,
            Some(p) if !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()) => Port::Is(p.into()),
            Some(_) => return None,
        };
        Some(Pattern::Exact { scheme, host, port })
    }

    /// Whether this pattern admits `concrete` (a parsed Origin or Host).
    fn covers(&self, concrete: &Pattern) -> bool {
        let (
            Pattern::Exact { scheme, host, port },
            Pattern::Exact {
                scheme: s,
                host: h,
                port: p,
            },
        ) = (self, concrete)
        else {
            return matches!(self, Pattern::Any);
        };
        scheme == s && host == h && (port == &Port::Any || port == p)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mk_parts(headers: &[(&str, &str)]) -> Parts {
        let mut request = http::Request::builder().uri("/mcp");
        for (k, v) in headers {
            request = request.header(*k, *v);
        }
        request.body(()).unwrap().into_parts().0
    }

    fn mk_guard(hosts: &[&str]) -> Guard {
        let hosts: Vec<String> = hosts.iter().map(|h| h.to_string()).collect();
        Guard::new(&crate::config::default_allowed_origins(), &hosts).unwrap()
    }

    #[test]
    fn local_origins_pass_and_others_are_refused() {
        let guard = mk_guard(&[]);
        for origin in [
            "http://localhost:3000",
            "http://127.0.0.1:8080",
            "http://[::1]:1",
            "http://LOCALHOST:5",
        ] {
            assert!(
                guard.check(&mk_parts(&[("origin", origin)])).is_ok(),
                "{origin}"
            );
        }
        for origin in [
            "http://evil.example.com",
            "https://localhost:3000",
            "null",
            "http://localhost.evil.com:80",
            "garbage",
        ] {
            let e = guard.check(&mk_parts(&[("origin", origin)])).unwrap_err();
            // Nor does it pass behind an allowed one.
            let both = [("origin", "http://localhost:1"), ("origin", origin)];
            assert!(guard.check(&mk_parts(&both)).is_err(), "{origin}");
            assert_eq!(e.code, Code::OriginNotAllowed, "{origin}");
            assert_eq!(e.status(), 403);
        }
    }

    #[test]
    fn requests_without_origin_pass() {
        let guard = mk_guard(&[]);
        assert!(guard
            .check(&mk_parts(&[("host", "evil.example.com")]))
            .is_ok());
    }

    #[test]
    fn pinned_hosts() {
        let guard = mk_guard(&["localhost:*", "orders.shop.svc:15100"]);
        assert!(guard
            .check(&mk_parts(&[("host", "localhost:15100")]))
            .is_ok());
        assert!(guard.check(&mk_parts(&[("host", "localhost")])).is_ok());
        assert!(guard
            .check(&mk_parts(&[("host", "orders.shop.svc:15100")]))
            .is_ok());
        assert!(guard
            .check(&mk_parts(&[("host", "orders.shop.svc:80")]))
            .is_err());
        assert!(guard
            .check(&mk_parts(&[("host", "evil.example.com")]))
            .is_err());
        assert!(guard.check(&mk_parts(&[])).is_err(), "no Host at all");
    }

    #[test]
    fn bad_patterns_are_named() {
        let e = Guard::new(&["localhost:3000".into()], &[]).unwrap_err();
        assert!(e.contains("allowedOrigins"), "{e}");
        let e = Guard::new(&[], &["host:port".into()]).unwrap_err();
        assert!(e.contains("allowedHosts"), "{e}");
        assert!(Guard::new(&["*".into()], &["*".into()]).is_ok());
    }
}
