//! One GET of a key document (a JWKS, an OpenID configuration) over HTTPS, or plain HTTP
//! to a loopback address (`config::jwks::fetchable` decides which URLs get here).
//!
//! Invariants: every answer is bounded — [`MAX_DOCUMENT_BYTES`] of body, read within the
//! caller's timeout — so an identity provider that answers slowly, endlessly or with a
//! huge body costs a bounded wait and no memory beyond the bound. Only `200` is a
//! document; redirects are not followed. Errors and logs show a URL without its query
//! ([`Shown`]), and never the body. The client is built once per sidecar: the system's
//! CA certificates are read then (SSL_CERT_FILE / SSL_CERT_DIR replace them, as for
//! OpenSSL), not per fetch.

use bytes::Bytes;
use http::header::{ACCEPT, CACHE_CONTROL};
use http::{HeaderMap, Request, StatusCode, Uri};
use http_body_util::{BodyExt, Empty, Limited};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

/// The largest key document read (the bound of a key or token file, DESIGN §14).
pub const MAX_DOCUMENT_BYTES: usize = 1 << 20;
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

type Connector = hyper_rustls::HttpsConnector<HttpConnector>;

/// The HTTP(S) client every fetched key source of a sidecar shares.
#[derive(Clone)]
pub struct HttpClient {
    client: Client<Connector, Empty<Bytes>>,
    /// No CA certificate was found: no `https://` URL can be checked.
    no_roots: bool,
}

/// A URL as logs and errors show it: scheme, host, port and path; no userinfo, no query.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Shown(pub Arc<str>);

impl Shown {
    pub fn of(uri: &Uri) -> Shown {
        let host = uri.host().unwrap_or("");
        let port = uri.port().map(|p| format!(":{p}")).unwrap_or_default();
        let scheme = uri.scheme_str().unwrap_or("");
        Shown(Arc::from(format!("{scheme}://{host}{port}{}", uri.path())))
    }
}

impl fmt::Display for Shown {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// What one fetch of a key document can run into. The body is never part of it.
#[derive(Debug, thiserror::Error)]
pub enum FetchError {
    #[error("{0}: unreachable ({1})")]
    Unreachable(Shown, String),
    #[error("{0}: answered HTTP {1}")]
    Status(Shown, u16),
    #[error("{0}: the answer is larger than {MAX_DOCUMENT_BYTES} bytes")]
    TooLarge(Shown),
    #[error("{0}: {1}")]
    Unusable(Shown, String),
    #[error("no answer within {0:?}")]
    TimedOut(Duration),
}

/// A fetched document and how long its server says it may be cached.
pub struct Document {
    pub body: Bytes,
    pub max_age: Option<Duration>,
}

impl HttpClient {
    /// A client that trusts the system's CA certificates (or those of SSL_CERT_FILE /
    /// SSL_CERT_DIR, which replace them).
    pub fn native() -> HttpClient {
        let mut roots = rustls::RootCertStore::empty();
        let found = rustls_native_certs::load_native_certs();
        let (added, _) = roots.add_parsable_certificates(found.certs);
        if !found.errors.is_empty() {
            tracing::warn!(errors = found.errors.len(), "some CA certificates could not be read; https:// key sources are checked with the rest");
        }
        HttpClient::with_roots_inner(roots, added == 0)
    }

    /// A client that trusts exactly `roots` (tests, or a private CA).
    pub fn with_roots(roots: rustls::RootCertStore) -> HttpClient {
        let empty = roots.is_empty();
        HttpClient::with_roots_inner(roots, empty)
    }

    fn with_roots_inner(roots: rustls::RootCertStore, no_roots: bool) -> HttpClient {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let tls = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map(|b| b.with_root_certificates(roots).with_no_client_auth());
        let mut http = HttpConnector::new();
        http.enforce_http(false);
        http.set_nodelay(true);
        http.set_connect_timeout(Some(CONNECT_TIMEOUT));
        let builder = hyper_rustls::HttpsConnectorBuilder::new();
        // The ring provider supports the safe defaults; the fallback can't be reached but
        // keeps this free of a panic path.
        let https = match tls {
            Ok(config) => builder.with_tls_config(config),
            Err(_) => builder.with_tls_config(
                rustls::ClientConfig::builder()
                    .with_root_certificates(rustls::RootCertStore::empty())
                    .with_no_client_auth(),
            ),
        }
        .https_or_http()
        .enable_http1()
        .wrap_connector(http);
        let client = Client::builder(TokioExecutor::new())
            .pool_max_idle_per_host(1)
            .pool_idle_timeout(Duration::from_secs(30))
            .build(https);
        HttpClient { client, no_roots }
    }

    /// Whether `https://` URLs can be checked at all.
    pub fn can_verify(&self) -> bool {
        !self.no_roots
    }

    /// GETs `uri`: its body (at most [`MAX_DOCUMENT_BYTES`]) and cache lifetime. The
    /// caller bounds the time.
    pub async fn get(&self, uri: &Uri) -> Result<Document, FetchError> {
        let shown = Shown::of(uri);
        let request = Request::get(uri.clone())
            .header(ACCEPT, "application/json")
            .body(Empty::new())
            .map_err(|_| FetchError::Unusable(shown.clone(), "not a request URL".into()))?;
        let response = self
            .client
            .request(request)
            .await
            .map_err(|e| FetchError::Unreachable(shown.clone(), innermost(&e)))?;
        read(shown, response).await
    }
}

/// A response's document, bounded: any body type (hyper's, kube's).
pub async fn read<B>(shown: Shown, response: http::Response<B>) -> Result<Document, FetchError>
where
    B: http_body::Body<Data = Bytes>,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    if response.status() != StatusCode::OK {
        return Err(FetchError::Status(shown, response.status().as_u16()));
    }
    let max_age = max_age(response.headers());
    let body = Limited::new(response.into_body(), MAX_DOCUMENT_BYTES)
        .collect()
        .await
        .map_err(|e| {
            if e.is::<http_body_util::LengthLimitError>() {
                FetchError::TooLarge(shown.clone())
            } else {
                FetchError::Unreachable(shown.clone(), "the answer broke off".into())
            }
        })?
        .to_bytes();
    Ok(Document { body, max_age })
}

/// `Cache-Control: max-age=N` (`no-store` / `no-cache` read as 0: refresh as soon as
/// allowed). Other directives are ignored; a malformed value is no value.
pub fn max_age(headers: &HeaderMap) -> Option<Duration> {
    let mut found = None;
    for value in headers.get_all(CACHE_CONTROL) {
        let Ok(text) = value.to_str() else { continue };
        for directive in text.split(',').map(str::trim) {
            let lower = directive.to_ascii_lowercase();
            if lower == "no-store" || lower == "no-cache" {
                return Some(Duration::ZERO);
            }
            if let Some(seconds) = lower.strip_prefix("max-age=") {
                found = seconds
                    .trim_matches('"')
                    .parse()
                    .ok()
                    .map(Duration::from_secs);
            }
        }
    }
    found
}

/// The most specific cause of a client error ("Connection refused"), not hyper's
/// generic "client error (Connect)".
fn innermost(error: &(dyn std::error::Error + 'static)) -> String {
    let mut cause = error;
    while let Some(next) = cause.source() {
        cause = next;
    }
    cause.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mk_headers(values: &[&str]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for v in values {
            h.append(CACHE_CONTROL, v.parse().unwrap());
        }
        h
    }

    #[test]
    fn cache_control_max_age() {
        let secs = |v: &[&str]| max_age(&mk_headers(v)).map(|d| d.as_secs());
        assert_eq!(secs(&["public, max-age=3600"]), Some(3600));
        assert_eq!(secs(&["Max-Age=60, must-revalidate"]), Some(60));
        assert_eq!(secs(&["max-age=\"120\""]), Some(120));
        assert_eq!(secs(&["public", "max-age=7"]), Some(7));
        assert_eq!(secs(&["no-store"]), Some(0));
        assert_eq!(secs(&["max-age=600, no-cache"]), Some(0));
        assert_eq!(secs(&["max-age=-1"]), None);
        assert_eq!(secs(&["max-age=soon"]), None);
        assert_eq!(secs(&[]), None);
    }

    #[test]
    fn shown_urls_lose_their_query() {
        let uri: Uri = "https://idp.example:8443/keys?secret=x".parse().unwrap();
        assert_eq!(Shown::of(&uri).to_string(), "https://idp.example:8443/keys");
    }
}
