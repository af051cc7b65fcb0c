//! The backend's client: one pooled HTTP/1.1 client, and a send that fails as a
//! [`Failure`] saying how far it got (what that means for the agent is `failure.rs`'s).
//!
//! What the backend says in an error body never reaches the agent: internals such as
//! stack traces, SQL or hostnames stop here.

use bytes::Bytes;
use http::uri::{self, Authority, PathAndQuery, Scheme};
use http::{HeaderMap, Method, Request, Response, Uri};
use http_body_util::Full;
use hyper::body::Incoming;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use std::time::Duration;

use super::Failure;
use crate::input::url::shown;

/// Cheap to clone (the pool is shared), so a backend call can run in its own task.
#[derive(Clone)]
pub struct Upstream {
    client: Client<HttpConnector, Full<Bytes>>,
    /// Parsed once: every call's URI is these plus its own path.
    scheme: Scheme,
    authority: Authority,
    /// The upstream URL's path prefix, without a trailing slash (often empty).
    prefix: String,
}

#[derive(Debug, thiserror::Error)]
#[error("upstream must be an http:// URL, got {0}")]
pub struct BadUpstream(String);

impl Upstream {
    pub fn new(url: &str) -> Result<Upstream, BadUpstream> {
        let uri: Uri = url.parse().map_err(|_| BadUpstream(shown(url)))?;
        if uri.scheme_str() != Some("http") || uri.authority().is_none() {
            return Err(BadUpstream(shown(url)));
        }
        // A user and password in the URL are never sent (hyper sends no userinfo), and
        // would be shown wherever the URL is (the client span's `url.full`): refused.
        if uri.authority().is_some_and(|a| a.as_str().contains('@')) {
            return Err(BadUpstream(
                "a URL with a user or password, which toolgate would not send".into(),
            ));
        }
        let mut connector = HttpConnector::new();
        connector.set_nodelay(true);
        connector.set_connect_timeout(Some(Duration::from_secs(5)));
        let client = Client::builder(TokioExecutor::new())
            .pool_idle_timeout(Duration::from_secs(60))
            .pool_max_idle_per_host(512)
            .build(connector);
        let parts = uri.into_parts();
        let (Some(scheme), Some(authority)) = (parts.scheme, parts.authority) else {
            return Err(BadUpstream(shown(url)));
        };
        let prefix = parts
            .path_and_query
            .as_ref()
            .map_or("", |p| p.path())
            .trim_end_matches('/')
            .to_string();
        Ok(Upstream {
            client,
            scheme,
            authority,
            prefix,
        })
    }

    /// The backend's host, as its URL names it (the conventions' `server.address`).
    pub fn host(&self) -> &str {
        self.authority.host()
    }

    /// The backend's port (`server.port`), 80 when its URL names none.
    pub fn port(&self) -> u16 {
        self.authority.port_u16().unwrap_or(80)
    }

    /// The URL every call's path is appended to: scheme, authority and path prefix.
    pub fn base(&self) -> String {
        format!("{}://{}{}", self.scheme, self.authority, self.prefix)
    }

    /// The backend URI of a call's path and query; `None` if it isn't a valid one.
    fn uri(&self, path_and_query: &str) -> Option<Uri> {
        let path = if self.prefix.is_empty() {
            PathAndQuery::try_from(path_and_query)
        } else {
            PathAndQuery::try_from(format!("{}{path_and_query}", self.prefix))
        };
        let mut parts = uri::Parts::default();
        parts.scheme = Some(self.scheme.clone());
        parts.authority = Some(self.authority.clone());
        parts.path_and_query = Some(path.ok()?);
        Uri::from_parts(parts).ok()
    }

    /// Sends one request and waits for the response head within `timeout`.
    pub async fn send(
        &self,
        method: Method,
        path_and_query: &str,
        headers: HeaderMap,
        body: Bytes,
        timeout: Duration,
    ) -> Result<Response<Incoming>, Failure> {
        let uri = self.uri(path_and_query).ok_or(Failure::Unreachable)?;
        let mut request = Request::builder().method(method).uri(uri);
        if let Some(h) = request.headers_mut() {
            *h = headers;
        }
        let request = request
            .body(Full::new(body))
            .map_err(|_| Failure::Unreachable)?;
        match tokio::time::timeout(timeout, self.client.request(request)).await {
            Err(_) => Err(Failure::NoHeadInTime),
            Ok(Err(e)) => {
                tracing::debug!(error = %e, "backend request failed");
                Err(if e.is_connect() {
                    Failure::Unreachable
                } else {
                    Failure::NoHead
                })
            }
            Ok(Ok(response)) => Ok(response),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_plain_http_upstreams() {
        assert!(Upstream::new("https://x:1").is_err());
        assert!(Upstream::new("nope").is_err());
        assert!(Upstream::new("http://127.0.0.1:8080/").is_ok());
        let e = Upstream::new("http://user:s3cret@127.0.0.1:8080")
            .err()
            .unwrap();
        assert!(!e.to_string().contains("s3cret"), "{e}");
    }

    #[test]
    fn call_paths_join_the_upstream_prefix() {
        let plain = Upstream::new("http://127.0.0.1:8080/").unwrap();
        let uri = |u: &Upstream, p: &str| u.uri(p).map(|u| u.to_string());
        assert_eq!(
            uri(&plain, "/a?b=1").as_deref(),
            Some("http://127.0.0.1:8080/a?b=1")
        );
        let nested = Upstream::new("http://svc:9000/api/").unwrap();
        assert_eq!(uri(&nested, "/a").as_deref(), Some("http://svc:9000/api/a"));
        assert_eq!(uri(&plain, "/a b"), None, "never sent somewhere else");
    }
}
