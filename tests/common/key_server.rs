//! An identity provider's key endpoints on the wire, for the JWKS-by-URL tests: a JWKS at
//! `/jwks` and an OpenID configuration at `/.well-known/openid-configuration` naming it,
//! over plain HTTP on loopback or HTTPS with a certificate from a test CA.
//!
//! The test changes what it serves as it goes: rotate the keys, set `Cache-Control`, or
//! misbehave ([`Mode`]): answer slowly, go away (every connection reset on accept), answer
//! garbage, an oversized body or an error status. Every request is counted by path.
#![allow(dead_code)]

use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body_util::Full;
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use serde_json::json;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpListener;

use super::keys::{jwks, Pki, SigningKey};

pub const JWKS_PATH: &str = "/jwks";
pub const CONFIGURATION_PATH: &str = "/.well-known/openid-configuration";

/// How the server answers.
#[derive(Debug, Clone, PartialEq)]
pub enum Mode {
    Serve,
    /// Every answer waits this long first.
    Slow(Duration),
    /// Every connection is closed on accept.
    Down,
    /// `200` with a body that is not JSON.
    Garbage,
    /// `200` with a body of this many bytes (a JSON document padded with spaces).
    Huge(usize),
    Status(u16),
}

struct State {
    jwks: String,
    cache_control: Option<String>,
    mode: Mode,
    /// The configuration's `issuer`; `None`: the server's own base URL.
    issuer: Option<String>,
    /// The configuration's `jwks_uri`; `None`: this server's `/jwks`.
    jwks_uri: Option<String>,
    seen: Vec<String>,
    connections: Vec<tokio::task::AbortHandle>,
}

pub struct KeyServer {
    pub addr: SocketAddr,
    /// `http` or `https`.
    scheme: &'static str,
    state: Arc<Mutex<State>>,
}

impl KeyServer {
    /// Plain HTTP on 127.0.0.1, serving `keys`.
    pub async fn start(keys: &[&SigningKey]) -> KeyServer {
        KeyServer::serve(keys, None).await
    }

    /// HTTPS on 127.0.0.1 with a certificate for `localhost` signed by `pki`.
    pub async fn start_tls(keys: &[&SigningKey], pki: &Pki) -> KeyServer {
        let (cert, key) = pki.issue(&["localhost"], &[], false);
        let config = rustls::ServerConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(
            CertificateDer::pem_slice_iter(cert.as_bytes())
                .map(Result::unwrap)
                .collect(),
            PrivateKeyDer::from_pem_slice(key.as_bytes()).unwrap(),
        )
        .unwrap();
        KeyServer::serve(
            keys,
            Some(tokio_rustls::TlsAcceptor::from(Arc::new(config))),
        )
        .await
    }

    async fn serve(keys: &[&SigningKey], tls: Option<tokio_rustls::TlsAcceptor>) -> KeyServer {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let state = Arc::new(Mutex::new(State {
            jwks: jwks(keys),
            cache_control: None,
            mode: Mode::Serve,
            issuer: None,
            jwks_uri: None,
            seen: Vec::new(),
            connections: Vec::new(),
        }));
        let scheme = if tls.is_some() { "https" } else { "http" };
        let base = format!("{scheme}://{}", host_port(scheme, addr));
        let accept_state = state.clone();
        tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    return;
                };
                if accept_state.lock().unwrap().mode == Mode::Down {
                    drop(stream);
                    continue;
                }
                let (state, base, tls) = (accept_state.clone(), base.clone(), tls.clone());
                let task = tokio::spawn(async move {
                    match tls {
                        Some(tls) => {
                            if let Ok(stream) = tls.accept(stream).await {
                                connection(stream, state, base).await;
                            }
                        }
                        None => connection(stream, state, base).await,
                    }
                });
                accept_state
                    .lock()
                    .unwrap()
                    .connections
                    .push(task.abort_handle());
            }
        });
        KeyServer {
            addr,
            scheme,
            state,
        }
    }

    /// The server's base URL (`https://localhost:PORT` with TLS, so the name matches the
    /// certificate).
    pub fn base(&self) -> String {
        format!("{}://{}", self.scheme, host_port(self.scheme, self.addr))
    }

    pub fn jwks_url(&self) -> String {
        format!("{}{JWKS_PATH}", self.base())
    }

    pub fn set_keys(&self, keys: &[&SigningKey]) {
        self.state.lock().unwrap().jwks = jwks(keys);
    }

    pub fn set_body(&self, body: &str) {
        self.state.lock().unwrap().jwks = body.to_string();
    }

    /// Down also cuts the connections already open (a client's pooled one included).
    pub fn set_mode(&self, mode: Mode) {
        let mut state = self.state.lock().unwrap();
        if mode == Mode::Down {
            for connection in state.connections.drain(..) {
                connection.abort();
            }
        }
        state.mode = mode;
    }

    pub fn set_cache_control(&self, value: Option<&str>) {
        self.state.lock().unwrap().cache_control = value.map(String::from);
    }

    /// What the configuration says its issuer is (default: [`KeyServer::base`]).
    pub fn set_issuer(&self, issuer: &str) {
        self.state.lock().unwrap().issuer = Some(issuer.to_string());
    }

    pub fn set_jwks_uri(&self, uri: &str) {
        self.state.lock().unwrap().jwks_uri = Some(uri.to_string());
    }

    /// Requests received for `path`.
    pub fn hits(&self, path: &str) -> usize {
        self.state
            .lock()
            .unwrap()
            .seen
            .iter()
            .filter(|p| *p == path)
            .count()
    }
}

fn host_port(scheme: &str, addr: SocketAddr) -> String {
    if scheme == "https" {
        format!("localhost:{}", addr.port())
    } else {
        addr.to_string()
    }
}

async fn connection<S>(stream: S, state: Arc<Mutex<State>>, base: String)
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let service = hyper::service::service_fn(move |req| {
        let (state, base) = (state.clone(), base.clone());
        async move { Ok::<_, Infallible>(answer(&state, &base, req).await) }
    });
    let _ = hyper::server::conn::http1::Builder::new()
        .serve_connection(TokioIo::new(stream), service)
        .await;
}

async fn answer(state: &Mutex<State>, base: &str, req: Request<Incoming>) -> Response<Full<Bytes>> {
    let path = req.uri().path().to_string();
    let (mode, body, cache_control) = {
        let mut s = state.lock().unwrap();
        s.seen.push(path.clone());
        let body = match path.as_str() {
            JWKS_PATH => Some(s.jwks.clone()),
            CONFIGURATION_PATH => Some(
                json!({
                    "issuer": s.issuer.clone().unwrap_or_else(|| base.to_string()),
                    "jwks_uri": s.jwks_uri.clone().unwrap_or_else(|| format!("{base}{JWKS_PATH}")),
                    "response_types_supported": ["id_token"],
                })
                .to_string(),
            ),
            _ => None,
        };
        (s.mode.clone(), body, s.cache_control.clone())
    };
    if let Mode::Slow(delay) = mode {
        tokio::time::sleep(delay).await;
    }
    let Some(body) = body else {
        return reply(404, "not found".into(), None);
    };
    match mode {
        Mode::Garbage => reply(200, "<html>not json{".into(), None),
        Mode::Huge(bytes) => {
            let mut padded = body.into_bytes();
            padded.resize(bytes.max(padded.len()), b' ');
            reply(200, padded, None)
        }
        Mode::Status(code) => reply(code, "{}".into(), None),
        _ => reply(200, body.into_bytes(), cache_control),
    }
}

fn reply(code: u16, body: Vec<u8>, cache_control: Option<String>) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(Bytes::from(body)));
    *response.status_mut() = StatusCode::from_u16(code).unwrap();
    response
        .headers_mut()
        .insert("content-type", "application/json".parse().unwrap());
    if let Some(value) = cache_control {
        response
            .headers_mut()
            .insert("cache-control", value.parse().unwrap());
    }
    response
}
