//! A whole call in one process: a fast backend and a real sidecar on loopback, and a
//! keep-alive client connection to either. Shared by `benches/hot_path.rs` and
//! `benchkit inproc` (which runs it under callgrind to count instructions per call).

use bytes::Bytes;
use http::{Request, Response};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::client::conn::http1::SendRequest;
use hyper_util::rt::TokioIo;
use std::convert::Infallible;
use std::net::SocketAddr;
use tokio::net::{TcpListener, TcpStream};

use toolgate::config::{Settings, TaskIssuer};
use toolgate::sidecar::Sidecar;

const ROOT: &str = env!("CARGO_MANIFEST_DIR");

/// A backend that answers everything with a small JSON body.
pub async fn backend() -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            tokio::spawn(async move {
                let service = hyper::service::service_fn(|request: Request<Incoming>| async {
                    let _ = request.into_body().collect().await;
                    Ok::<_, Infallible>(Response::new(Full::new(Bytes::from_static(
                        br#"{"ok":true,"matches":3}"#,
                    ))))
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), service)
                    .await;
            });
        }
    });
    addr
}

/// A sidecar in front of `upstream` with `bench/policies/{policies}.yaml`; `audit` is a
/// settings value (`off` or a file).
pub async fn sidecar(upstream: SocketAddr, policies: &str, audit: &str) -> Sidecar {
    start(settings(upstream, policies, audit)).await
}

/// The settings [`sidecar`] starts with: the agent named by a static token, task tokens
/// from the demo orchestrator.
pub fn settings(upstream: SocketAddr, policies: &str, audit: &str) -> Settings {
    let mut settings = Settings {
        listen: "127.0.0.1:0".parse().unwrap(),
        admin: "127.0.0.1:0".parse().unwrap(),
        upstream: format!("http://{upstream}"),
        ..Settings::default()
    };
    settings.policies.files = vec![format!("{ROOT}/bench/policies/{policies}.yaml").into()];
    settings.identity.tokens = Some(format!("{ROOT}/bench/tokens.yaml").into());
    settings.identity.task_issuers = vec![TaskIssuer {
        issuer: "orchestrator".into(),
        jwks: Some(std::path::PathBuf::from(format!("{ROOT}/examples/keys/task-jwks.json")).into()),
        discovery: false,
        audience: None,
        require_agent: true,
    }];
    settings.audit.path = audit.into();
    settings
}

/// Starts a sidecar and waits for its first policy snapshot.
pub async fn start(settings: Settings) -> Sidecar {
    let sidecar = Sidecar::start(settings).await.unwrap();
    // Policies load from files in the background: wait for the first snapshot.
    while sidecar.control.snapshot().is_none() {
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
    sidecar
}

pub async fn connect(addr: SocketAddr) -> SendRequest<Full<Bytes>> {
    let stream = TcpStream::connect(addr).await.unwrap();
    stream.set_nodelay(true).unwrap();
    let (sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .unwrap();
    tokio::spawn(conn);
    sender
}

/// Sends `request` and reads the whole answer; panics unless it is a 2xx.
pub async fn call(sender: &mut SendRequest<Full<Bytes>>, request: Request<Full<Bytes>>) -> Bytes {
    sender.ready().await.unwrap();
    let response = sender.send_request(request).await.unwrap();
    let status = response.status();
    let body = response.into_body().collect().await.unwrap().to_bytes();
    assert!(status.is_success(), "{status}: {body:?}");
    body
}
