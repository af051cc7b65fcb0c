//! The webhook's HTTPS listener: `POST /inject` answers pods' `AdmissionReview`s, `POST
//! /validate` those of `ToolContract` and `AgentPolicy` objects, `GET /healthz` and
//! `/readyz` answer probes. It reuses the sidecar's server (connection limits,
//! handshake timeout, graceful drain) and TLS (rustls, files reloaded on change).
//!
//! Invariant: every request gets an answer and no request can take the process down —
//! bodies are read against a size limit and a deadline, and the decision itself is the
//! pure [`review`] or [`validate`]; a validation compiles schemas and CEL, so it runs
//! off the async workers.

use anyhow::Context as _;
use http::{header, Method, Request, Response, StatusCode};
use hyper::body::Incoming;
use serde_json::json;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use super::review::{review, Answer};
use super::settings::{InjectSettings, SidecarSettings};
use super::validate::validate;
use crate::config::Tls;
use crate::proxy::body::{full, read_limited, Body, ReadError};
use crate::proxy::server::{serve, Closes, ConnLimits, Linger};
use crate::tls::TlsConfig;

/// The path the `MutatingWebhookConfiguration` calls.
pub const PATH: &str = "/inject";
/// The path the `ValidatingWebhookConfiguration` calls.
pub const VALIDATE_PATH: &str = "/validate";
/// A review carries one pod (etcd caps objects at about 1.5 MiB) and, on updates, its
/// old version: 8 MiB is ample and still bounded.
const MAX_BODY: usize = 8 << 20;
/// The API server gives a webhook at most 30 s; a body that takes longer is not a review.
const BODY_DEADLINE: Duration = Duration::from_secs(10);

pub struct Injector {
    pub addr: SocketAddr,
    stop: watch::Sender<bool>,
    listener: JoinHandle<()>,
    reload: JoinHandle<()>,
}

impl Injector {
    /// Loads the certificate, binds `listen` and serves until [`Injector::shutdown`].
    pub async fn start(settings: InjectSettings) -> anyhow::Result<Injector> {
        let tls = Tls {
            cert: settings.tls.cert.clone(),
            key: settings.tls.key.clone(),
            client_ca: None,
            agent_san: Default::default(),
        };
        let tls = Arc::new(
            TlsConfig::load(&tls)
                .map_err(anyhow::Error::msg)
                .context("webhook tls")?,
        );
        let reload = tokio::spawn(tls.clone().watch());
        let listener = TcpListener::bind(settings.listen)
            .await
            .with_context(|| format!("cannot listen on {}", settings.listen))?;
        let addr = listener.local_addr()?;
        let (stop, mut stopped) = watch::channel(false);
        let sidecar = Arc::new(settings.sidecar);
        let limits = ConnLimits {
            header_read_timeout: Duration::from_secs(5),
            max_headers_backstop: 100,
            max_connections: 1024,
            per_address: None,
            drain_timeout: Duration::from_secs(5),
            // The API server reads its answers; anything else holding a slot is cut off.
            write_timeout: Duration::from_secs(10),
            linger: Linger::for_body(MAX_BODY as u64, BODY_DEADLINE),
            tag_connections: false,
            closes: Closes::default(),
        };
        tracing::info!(%addr, image = %sidecar.image, "toolgate injector listening");
        let listener = tokio::spawn(serve(
            listener,
            limits,
            Some(tls),
            move |request| handle(request, sidecar.clone()),
            async move {
                let _ = stopped.wait_for(|stop| *stop).await;
            },
        ));
        Ok(Injector {
            addr,
            stop,
            listener,
            reload,
        })
    }

    /// Stops accepting and lets in-flight reviews finish.
    pub async fn shutdown(self) {
        let _ = self.stop.send(true);
        let _ = self.listener.await;
        self.reload.abort();
    }
}

async fn handle(request: Request<Incoming>, sidecar: Arc<SidecarSettings>) -> Response<Body> {
    let validating = match (request.method(), request.uri().path()) {
        (&Method::POST, PATH) => false,
        (&Method::POST, VALIDATE_PATH) => true,
        (&Method::GET, "/healthz" | "/readyz") => return text(StatusCode::OK, "ok\n"),
        (_, PATH | VALIDATE_PATH) => {
            return status(StatusCode::METHOD_NOT_ALLOWED, "POST an AdmissionReview")
        }
        _ => return status(StatusCode::NOT_FOUND, "not found"),
    };
    let body = match read_limited(request.into_body(), MAX_BODY, BODY_DEADLINE).await {
        Ok(body) => body,
        Err(e) => {
            let code = match e {
                ReadError::TooLarge(_) => StatusCode::PAYLOAD_TOO_LARGE,
                ReadError::TimedOut => StatusCode::REQUEST_TIMEOUT,
                ReadError::Broken(_) => StatusCode::BAD_REQUEST,
            };
            tracing::warn!(error = %e, "review body not read");
            return status(code, &e.to_string());
        }
    };
    if validating {
        let answer = match tokio::task::spawn_blocking(move || validate(&body)).await {
            Ok(answer) => answer,
            Err(e) => {
                tracing::error!(error = %e, "validation failed");
                return status(StatusCode::INTERNAL_SERVER_ERROR, "validation failed");
            }
        };
        tracing::info!(outcome = answer.outcome, object = %answer.subject, "validation review");
        return respond(answer);
    }
    // A pod spec is a few kilobytes of JSON: deciding is quick enough to run inline.
    let answer = review(&body, &sidecar);
    tracing::info!(outcome = answer.outcome, pod = %answer.subject, "admission review");
    respond(answer)
}

fn respond(answer: Answer) -> Response<Body> {
    json_response(answer.status, &answer.body)
}

fn json_response(code: StatusCode, body: &serde_json::Value) -> Response<Body> {
    let mut response = Response::new(full(body.to_string()));
    *response.status_mut() = code;
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        header::HeaderValue::from_static("application/json"),
    );
    response
}

/// A Kubernetes `Status` body, the shape API clients expect from an error.
fn status(code: StatusCode, message: &str) -> Response<Body> {
    let body = json!({
        "kind": "Status", "apiVersion": "v1", "status": "Failure",
        "code": code.as_u16(), "message": message,
    });
    json_response(code, &body)
}

fn text(code: StatusCode, body: &'static str) -> Response<Body> {
    let mut response = Response::new(full(body));
    *response.status_mut() = code;
    response
}
