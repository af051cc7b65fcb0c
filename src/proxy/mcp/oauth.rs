//! The agent port as an OAuth 2.1 resource server, as the MCP authorization
//! specification describes it (`identity.oauth`):
//!
//! - RFC 9728 Protected Resource Metadata at `/.well-known/oauth-protected-resource` and
//!   at its path-suffixed form for the resource (`…/oauth-protected-resource/mcp`), so a
//!   client given only the MCP URL finds the authorization servers;
//! - a missing or invalid credential is 401 with `WWW-Authenticate: Bearer
//!   resource_metadata="…"` (and `error="invalid_token"` when a token was presented);
//! - a token without a required scope is 403 with `error="insufficient_scope"`;
//! - tokens are accepted only for this resource (settings: every agent-token issuer's
//!   audience is `resource`, RFC 8707), and never passed upstream.
//!
//! The challenges and the scope check are applied by `identify`, the one stage every
//! call on the agent port passes, REST as much as MCP: no door can skip the scopes. A
//! credential that carries no scope (a static token, a client certificate) has none of
//! the required ones.

use bytes::Bytes;
use http::{header, HeaderValue, Method, Response, StatusCode};
use serde_json::{json, Value};

use crate::config::OAuth;
use crate::proxy::body::{full, Body};
use crate::vocab::{Agent, Code, Reject};

const WELL_KNOWN: &str = "/.well-known/oauth-protected-resource";

pub struct ResourceServer {
    /// Where the metadata is served: the root form and the resource's path-suffixed form.
    paths: Vec<String>,
    metadata: Bytes,
    /// The metadata's URL, named in every challenge.
    metadata_url: String,
    required: Vec<String>,
}

impl ResourceServer {
    pub fn new(oauth: &OAuth) -> ResourceServer {
        let uri = oauth.resource.parse::<http::Uri>().ok();
        let origin = uri
            .as_ref()
            .and_then(|u| Some(format!("{}://{}", u.scheme_str()?, u.authority()?)))
            .unwrap_or_default();
        let path = uri
            .as_ref()
            .map(|u| u.path().trim_end_matches('/').to_string())
            .unwrap_or_default();
        let suffixed = format!("{WELL_KNOWN}{path}");
        let mut metadata = json!({
            "resource": oauth.resource,
            "authorization_servers": oauth.authorization_servers,
            "bearer_methods_supported": ["header"],
        });
        if !oauth.scopes_supported.is_empty() {
            metadata["scopes_supported"] = json!(oauth.scopes_supported);
        }
        let mut paths = vec![WELL_KNOWN.to_string()];
        if suffixed != WELL_KNOWN {
            paths.push(suffixed.clone());
        }
        ResourceServer {
            paths,
            metadata: Bytes::from(serde_json::to_vec(&metadata).unwrap_or_default()),
            metadata_url: format!("{origin}{suffixed}"),
            required: oauth.required_scopes.clone(),
        }
    }

    /// The metadata document, when the request asks for it.
    pub fn metadata(&self, method: &Method, path: &str) -> Option<Response<Body>> {
        if method != Method::GET || !self.paths.iter().any(|p| p == path) {
            return None;
        }
        let mut response = Response::new(full(self.metadata.clone()));
        response.headers_mut().insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
        Some(response)
    }

    /// The challenge of a 401: where to learn how to get a token, and, when the request
    /// carried one, that it was not valid.
    pub fn challenge(&self, presented: bool) -> HeaderValue {
        let error = if presented {
            r#", error="invalid_token""#
        } else {
            ""
        };
        let value = format!(r#"Bearer resource_metadata="{}"{error}"#, self.metadata_url);
        HeaderValue::from_str(&value).unwrap_or_else(|_| HeaderValue::from_static("Bearer"))
    }

    /// The refusal of an agent whose token lacks a required scope (the `scope` claim,
    /// space separated, or a `scp` list), with the challenge the 403 carries.
    pub fn insufficient(&self, agent: &Agent) -> Option<(Reject, HeaderValue)> {
        if self.required.is_empty() {
            return None;
        }
        let granted: Vec<&str> = match (&agent.claims["scope"], &agent.claims["scp"]) {
            // RFC 6749 §3.3: scopes are separated by ASCII spaces, nothing else (a
            // no-break space inside `x\u{a0}tools` does not make `tools` a scope).
            (Value::String(scope), _) => scope.split(' ').filter(|s| !s.is_empty()).collect(),
            (_, Value::Array(scopes)) => scopes.iter().filter_map(Value::as_str).collect(),
            _ => Vec::new(),
        };
        let missing: Vec<&str> = self
            .required
            .iter()
            .map(String::as_str)
            .filter(|s| !granted.contains(s))
            .collect();
        if missing.is_empty() {
            return None;
        }
        let scope = self.required.join(" ");
        let reject = Reject::new(
            Code::Unauthenticated,
            format!("the token lacks the scope {}", missing.join(" ")),
        )
        .with_status(StatusCode::FORBIDDEN.as_u16());
        let value = format!(
            r#"Bearer error="insufficient_scope", scope="{scope}", resource_metadata="{}""#,
            self.metadata_url
        );
        let challenge =
            HeaderValue::from_str(&value).unwrap_or_else(|_| HeaderValue::from_static("Bearer"));
        Some((reject, challenge))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    fn mk_server(required: &[&str]) -> ResourceServer {
        ResourceServer::new(&OAuth {
            resource: "https://orders.example.com/mcp".into(),
            authorization_servers: vec!["https://auth.example.com".into()],
            scopes_supported: vec!["tools".into()],
            required_scopes: required.iter().map(|s| s.to_string()).collect(),
        })
    }

    #[test]
    fn metadata_is_served_at_both_forms() {
        let rs = mk_server(&[]);
        for path in [WELL_KNOWN, "/.well-known/oauth-protected-resource/mcp"] {
            assert!(rs.metadata(&Method::GET, path).is_some(), "{path}");
        }
        assert!(rs.metadata(&Method::POST, WELL_KNOWN).is_none());
        assert!(rs.metadata(&Method::GET, "/mcp").is_none());
        let doc: Value = serde_json::from_slice(&rs.metadata).unwrap();
        assert_eq!(doc["resource"], "https://orders.example.com/mcp");
        assert_eq!(doc["authorization_servers"][0], "https://auth.example.com");
    }

    #[test]
    fn challenges_name_the_metadata() {
        let rs = mk_server(&[]);
        let none = rs.challenge(false);
        assert_eq!(
            none,
            r#"Bearer resource_metadata="https://orders.example.com/.well-known/oauth-protected-resource/mcp""#
        );
        assert!(rs
            .challenge(true)
            .to_str()
            .unwrap()
            .ends_with(r#"error="invalid_token""#));
    }

    #[test]
    fn required_scopes() {
        let rs = mk_server(&["tools", "orders"]);
        let agent = |claims: Value| Agent {
            id: Arc::from("a"),
            issuer: Arc::from("https://auth.example.com"),
            claims,
        };
        let both = agent(json!({"scope": "orders tools"}));
        assert!(rs.insufficient(&both).is_none());
        let listed = agent(json!({"scp": ["tools", "orders"]}));
        assert!(rs.insufficient(&listed).is_none());
        let short = agent(json!({"scope": "tools"}));
        let (reject, challenge) = rs.insufficient(&short).unwrap();
        assert_eq!(reject.status(), 403);
        assert!(reject.message.contains("orders"));
        let challenge = challenge.to_str().unwrap().to_string();
        assert!(
            challenge.contains(r#"error="insufficient_scope""#),
            "{challenge}"
        );
        assert!(mk_server(&[]).insufficient(&agent(json!({}))).is_none());
    }
}
