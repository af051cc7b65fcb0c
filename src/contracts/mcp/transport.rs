//! The HTTP side of drafting from an MCP server: one JSON-RPC message POSTed to the
//! Streamable HTTP endpoint, its answer read as `application/json` or as an SSE stream
//! until the response with the request's id arrives.
//!
//! Bounded: every exchange ends within the timeout (connecting included), a message is at
//! most [`answer::MAX_MESSAGE`] bytes, a stream at most [`answer::MAX_STREAM`], and all
//! answers of a run together at most [`answer::MAX_TOTAL`]. The bearer token is a
//! sensitive header, never followed through a redirect (none is followed) and never part
//! of a message; the URL is shown without userinfo or query.

use bytes::Bytes;
use http::header::{HeaderValue, ACCEPT, AUTHORIZATION, CONTENT_TYPE, USER_AGENT};
use http::{Method, Request, StatusCode, Uri};
use http_body_util::Full;
use hyper::body::Incoming;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::{Client, ResponseFuture};
use hyper_util::rt::TokioExecutor;
use serde_json::Value;
use std::sync::atomic::AtomicUsize;
use std::sync::Arc;
use std::time::Duration;

use super::answer;
use crate::contracts::DraftError;

const SESSION: &str = "mcp-session-id";
const PROTOCOL: &str = "mcp-protocol-version";

enum Connector {
    Plain(Client<HttpConnector, Full<Bytes>>),
    Tls(Client<hyper_rustls::HttpsConnector<HttpConnector>, Full<Bytes>>),
}

impl Connector {
    fn request(&self, request: Request<Full<Bytes>>) -> ResponseFuture {
        match self {
            Connector::Plain(c) => c.request(request),
            Connector::Tls(c) => c.request(request),
        }
    }
}

/// The server's endpoint, with the credential to present.
pub struct Endpoint {
    uri: Uri,
    /// The URL as printed: scheme, host, port and path only.
    pub shown: String,
    connector: Connector,
    authorization: Option<HeaderValue>,
    timeout: Duration,
    /// Bytes of answers read so far, against [`MAX_TOTAL`].
    read: AtomicUsize,
}

/// What the session adds to each request after `initialize`.
#[derive(Default, Clone)]
pub struct Session {
    pub id: Option<HeaderValue>,
    pub protocol: Option<HeaderValue>,
}

/// A request's answer: its JSON-RPC response, and the session id the server set.
pub struct Reply {
    pub message: Value,
    pub session: Option<HeaderValue>,
}

impl Endpoint {
    /// Checks the URL and builds the client; nothing is sent yet. `token` is the bearer
    /// token, already read from its file.
    pub fn open(url: &str, token: Option<&str>, timeout: Duration) -> Result<Endpoint, DraftError> {
        let bad = |reason: &str| DraftError::Url {
            given: shown_url(url),
            reason: reason.to_string(),
        };
        let uri: Uri = url.parse().map_err(|_| bad("not a URL"))?;
        let authority = uri.authority().ok_or_else(|| bad("has no host"))?;
        if authority.as_str().contains('@') {
            return Err(bad(
                "credentials in the URL are never sent; use --token-file",
            ));
        }
        let tls = match uri.scheme_str() {
            Some("http") => false,
            Some("https") => true,
            _ => return Err(bad("must be an http:// or https:// URL")),
        };
        let authorization = match token {
            Some(token) => {
                let mut value = HeaderValue::from_str(&format!("Bearer {token}"))
                    .map_err(|_| bad("the token holds characters no bearer token has"))?;
                value.set_sensitive(true);
                Some(value)
            }
            None => None,
        };
        let mut http = HttpConnector::new();
        http.set_connect_timeout(Some(timeout));
        http.set_nodelay(true);
        let builder = Client::builder(TokioExecutor::new());
        let connector = if tls {
            http.enforce_http(false);
            let provider = Arc::new(rustls::crypto::ring::default_provider());
            let https = hyper_rustls::HttpsConnectorBuilder::new()
                .with_provider_and_native_roots(provider)
                .map_err(|e| bad(&format!("no system CA certificates to check it with ({e})")))?
                .https_only()
                .enable_http1()
                .wrap_connector(http);
            Connector::Tls(builder.build(https))
        } else {
            Connector::Plain(builder.build(http))
        };
        Ok(Endpoint {
            shown: shown_url(url),
            uri,
            connector,
            authorization,
            timeout,
            read: AtomicUsize::new(0),
        })
    }

    /// Whether a token would cross the network in the clear (plain http to a host that
    /// isn't this machine): worth a warning.
    pub fn token_in_the_clear(&self) -> bool {
        let loopback = matches!(
            self.uri.host(),
            Some("localhost" | "127.0.0.1" | "[::1]" | "::1")
        ) || self.uri.host().is_some_and(|h| h.starts_with("127."));
        self.authorization.is_some() && self.uri.scheme_str() == Some("http") && !loopback
    }

    /// Sends a request and waits for the response carrying its `id`.
    pub async fn call(
        &self,
        method: &'static str,
        message: &Value,
        session: &Session,
    ) -> Result<Reply, DraftError> {
        let id = message.get("id").cloned().unwrap_or(Value::Null);
        let exchange = async {
            let response = self
                .send(Method::POST, Some(message), session, method)
                .await?;
            let status = response.status();
            let session_id = response.headers().get(SESSION).cloned();
            if status != StatusCode::OK {
                return Err(self.status(method, status));
            }
            let answer = answer::read(response, &id, &self.read).await;
            let message = answer.map_err(|reason| self.protocol(method, reason))?;
            Ok(Reply {
                message,
                session: session_id,
            })
        };
        tokio::time::timeout(self.timeout, exchange)
            .await
            .map_err(|_| self.timed_out(method))?
    }

    /// Sends a notification; the server answers 202 (or 200) with nothing to read.
    pub async fn notify(
        &self,
        method: &'static str,
        message: &Value,
        session: &Session,
    ) -> Result<(), DraftError> {
        let exchange = async {
            let response = self
                .send(Method::POST, Some(message), session, method)
                .await?;
            match response.status() {
                StatusCode::ACCEPTED | StatusCode::OK | StatusCode::NO_CONTENT => Ok(()),
                status => Err(self.status(method, status)),
            }
        };
        tokio::time::timeout(self.timeout, exchange)
            .await
            .map_err(|_| self.timed_out(method))?
    }

    /// Ends the session (DELETE); a server that doesn't allow it (405) or is gone is fine.
    pub async fn close(&self, session: &Session) {
        if session.id.is_none() {
            return;
        }
        let _ = tokio::time::timeout(
            self.timeout,
            self.send(Method::DELETE, None, session, "DELETE"),
        )
        .await;
    }

    async fn send(
        &self,
        method: Method,
        message: Option<&Value>,
        session: &Session,
        label: &'static str,
    ) -> Result<hyper::Response<Incoming>, DraftError> {
        let mut request = Request::builder()
            .method(method)
            .uri(self.uri.clone())
            .header(USER_AGENT, concat!("toolgate/", env!("CARGO_PKG_VERSION")))
            .header(ACCEPT, "application/json, text/event-stream");
        if let Some(value) = &self.authorization {
            request = request.header(AUTHORIZATION, value.clone());
        }
        if let Some(id) = &session.id {
            request = request.header(SESSION, id.clone());
        }
        if let Some(protocol) = &session.protocol {
            request = request.header(PROTOCOL, protocol.clone());
        }
        let body = match message {
            Some(message) => {
                request = request.header(CONTENT_TYPE, "application/json");
                Bytes::from(message.to_string())
            }
            None => Bytes::new(),
        };
        let request = request
            .body(Full::new(body))
            .map_err(|e| self.protocol(label, format!("building the request: {e}")))?;
        self.connector.request(request).await.map_err(|e| {
            // The legacy client's own text ("client error (Connect)") hides the cause.
            let mut causes = vec![e.to_string()];
            let mut next = std::error::Error::source(&e);
            while let Some(cause) = next {
                causes.push(cause.to_string());
                next = cause.source();
            }
            DraftError::Unreachable {
                url: self.shown.clone(),
                reason: causes.join(": "),
            }
        })
    }

    fn status(&self, method: &'static str, status: StatusCode) -> DraftError {
        let hint = match status {
            StatusCode::UNAUTHORIZED | StatusCode::FORBIDDEN if self.authorization.is_none() => {
                "; the server wants a credential: pass --token-file FILE"
            }
            StatusCode::UNAUTHORIZED | StatusCode::FORBIDDEN => {
                "; the server refused the token in --token-file"
            }
            StatusCode::NOT_FOUND => "; is this the server's MCP endpoint (often …/mcp)?",
            s if s.is_redirection() => "; redirects are not followed: give the URL it points to",
            _ => "",
        };
        DraftError::Status {
            url: self.shown.clone(),
            method,
            status: status.as_u16(),
            hint: hint.to_string(),
        }
    }

    pub fn protocol(&self, method: &'static str, reason: String) -> DraftError {
        DraftError::Protocol {
            url: self.shown.clone(),
            method,
            reason,
        }
    }

    fn timed_out(&self, method: &'static str) -> DraftError {
        DraftError::Timeout {
            url: self.shown.clone(),
            method,
            after: self.timeout,
        }
    }
}

pub use crate::vocab::shown_url::shown_url;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_are_checked_before_anything_is_sent() {
        let t = Duration::from_secs(1);
        for (url, says) in [
            ("ftp://h/mcp", "http:// or https://"),
            ("/mcp", "no host"),
            ("http://u:p@h/mcp", "credentials in the URL"),
            ("not a url at all", "not a URL"),
        ] {
            let e = Endpoint::open(url, None, t).err().unwrap().to_string();
            assert!(e.contains(says), "{url}: {e}");
            assert!(!e.contains("u:p"), "{e}");
        }
        let e = Endpoint::open("http://h/mcp", Some("a\nb"), t)
            .err()
            .unwrap()
            .to_string();
        assert!(
            e.contains("characters no bearer token has") && !e.contains("a\nb"),
            "{e}"
        );
    }

    #[test]
    fn a_token_to_a_remote_plain_http_server_is_flagged() {
        let t = Duration::from_secs(1);
        let remote = Endpoint::open("http://mcp.example.com/mcp", Some("x"), t).unwrap();
        assert!(remote.token_in_the_clear());
        let local = Endpoint::open("http://127.0.0.1:1/mcp", Some("x"), t).unwrap();
        assert!(!local.token_in_the_clear());
        let none = Endpoint::open("http://mcp.example.com/mcp", None, t).unwrap();
        assert!(!none.token_in_the_clear());
    }
}
