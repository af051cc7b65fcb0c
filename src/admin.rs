//! The admin listener: `/healthz` (the process is up), `/readyz` (a policy snapshot is
//! loaded), `/metrics` (Prometheus text) and `/config` (what is being enforced).

use http::{header, Request, Response, StatusCode};
use hyper::body::Incoming;
use serde_json::json;
use std::sync::Arc;

use crate::control::Control;
use crate::proxy::body::{full, Body};
use crate::telemetry::metrics::Metrics;

pub struct Admin {
    pub control: Arc<Control>,
    pub metrics: Arc<Metrics>,
}

impl Admin {
    pub async fn handle(&self, request: Request<Incoming>) -> Response<Body> {
        match request.uri().path() {
            "/healthz" => text(StatusCode::OK, "ok\n"),
            "/readyz" => match self.control.snapshot() {
                Some(_) => text(StatusCode::OK, "ready\n"),
                None => text(
                    StatusCode::SERVICE_UNAVAILABLE,
                    "no policy snapshot loaded\n",
                ),
            },
            "/metrics" => {
                let mut response = text(StatusCode::OK, self.metrics.encode());
                response.headers_mut().insert(
                    header::CONTENT_TYPE,
                    header::HeaderValue::from_static(
                        "application/openmetrics-text; version=1.0.0; charset=utf-8",
                    ),
                );
                response
            }
            "/config" => {
                let snapshot = self.control.snapshot();
                let body = json!({
                    "ready": snapshot.is_some(),
                    "version": snapshot.as_ref().map(|s| s.version),
                    "digest": snapshot.as_ref().map(|s| s.digest.clone()),
                    "objects": snapshot.as_ref().map(|s| s.object_names()).unwrap_or_default(),
                    "tools": snapshot.as_ref().map(|s| s.contracts.iter().map(|c| c.tool.clone()).collect::<Vec<_>>()).unwrap_or_default(),
                    "errors": self.control.errors(),
                });
                let mut response = text(
                    StatusCode::OK,
                    serde_json::to_string_pretty(&body).unwrap_or_default(),
                );
                response.headers_mut().insert(
                    header::CONTENT_TYPE,
                    header::HeaderValue::from_static("application/json"),
                );
                response
            }
            _ => text(StatusCode::NOT_FOUND, "not found\n"),
        }
    }
}

fn text(status: StatusCode, body: impl Into<bytes::Bytes>) -> Response<Body> {
    let mut response = Response::new(full(body.into()));
    *response.status_mut() = status;
    response
}
