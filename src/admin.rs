//! The admin listener: `/healthz` (the process is up), `/readyz` (a policy snapshot is
//! loaded and, with `audit.onFailure: fail_closed`, the audit log can be written),
//! `/metrics` (Prometheus text), `/config` (what is being enforced) and the approval
//! API (`/approvals…`, for approvers; `approvals::api`).
//!
//! Every answer carries `Cache-Control: no-store`: readiness, the enforced policy and
//! approvals are facts of this moment (and approvals are an approver's), never to be
//! kept by a proxy or a browser.

use http::{header, Request, Response, StatusCode};
use hyper::body::Incoming;
use serde_json::json;
use std::sync::Arc;

use crate::approvals::{self, service::Approvals};
use crate::audit::AuditLog;
use crate::control::Control;
use crate::identity::credential;
use crate::proxy::body::{full, Body};
use crate::proxy::mcp::tools_list::tool_drift::ToolDrift;
use crate::state::Shared;
use crate::telemetry::metrics::Metrics;
use crate::vocab::{Code, Reject};

pub struct Admin {
    pub control: Arc<Control>,
    pub metrics: Arc<Metrics>,
    pub audit: AuditLog,
    /// `state.backend: redis`; `None` with `memory`.
    pub state: Option<Arc<Shared>>,
    /// The approval API (`/approvals…`).
    pub approvals: Arc<Approvals>,
    /// `mcp.listing`, `mcp.onDrift` and the tools that drifted from their contracts.
    pub tool_drift: Arc<ToolDrift>,
    /// `identity.tokens`, whose reloads `/config` reports.
    pub tokens: Option<Arc<crate::identity::tokens::Tokens>>,
}

impl Admin {
    pub async fn handle(&self, request: Request<Incoming>) -> Response<Body> {
        let mut response = self.route(request).await;
        response.headers_mut().insert(
            header::CACHE_CONTROL,
            header::HeaderValue::from_static("no-store"),
        );
        response
    }

    async fn route(&self, request: Request<Incoming>) -> Response<Body> {
        // As on the agent port: two credentials name no one caller, whichever a reader
        // would take, so the request is refused before any path reads one.
        if credential::repeated(request.headers()) {
            return repeated_credential();
        }
        match request.uri().path() {
            "/healthz" => text(StatusCode::OK, "ok\n"),
            path if path == "/approvals" || path.starts_with("/approvals/") => {
                let (status, body) = approvals::api::serve(&self.approvals, request).await;
                json(status, &body)
            }
            "/readyz" => self.readiness(),
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
                    "audit": self.audit_status(),
                    "state": self.state_status(),
                    "mcp": self.tool_drift.status(),
                    "identity": self.identity_status(),
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

impl Admin {
    /// Whether the agents' token file in use is the file as it is now: a failed reload
    /// (a revocation with a typo) keeps the previous tokens, and says so here.
    fn identity_status(&self) -> serde_json::Value {
        let Some(tokens) = &self.tokens else {
            return json!({});
        };
        let error = tokens.reload_error();
        json!({"tokens": {"synchronized": error.is_none(), "error": error}})
    }

    /// The state backend and, for Redis, whether it answers. Never part of readiness: a
    /// Redis outage must not take every backend pod out of its Service.
    fn state_status(&self) -> serde_json::Value {
        match &self.state {
            None => json!({"backend": "memory"}),
            Some(shared) => {
                let (target, up) = shared.link().status();
                json!({"backend": "redis", "target": target, "up": up})
            }
        }
    }

    /// Ready when calls can be decided: a snapshot is loaded, and the audit log takes
    /// records (or refusing unrecorded calls is not the setting). Says why when not.
    fn readiness(&self) -> Response<Body> {
        if self.control.snapshot().is_none() {
            return text(
                StatusCode::SERVICE_UNAVAILABLE,
                "no policy snapshot loaded\n",
            );
        }
        if self.audit.refuses_calls() {
            let status = self.audit.status();
            let why = status.failure.unwrap_or_else(|| "unknown".into());
            return text(
                StatusCode::SERVICE_UNAVAILABLE,
                format!("audit log not writable, calls are refused (audit.onFailure: fail_closed): {why}\n"),
            );
        }
        text(StatusCode::OK, "ready\n")
    }

    fn audit_status(&self) -> serde_json::Value {
        let status = self.audit.status();
        json!({
            "target": self.audit.target(),
            "writable": status.writable,
            "lastSeq": status.last_seq,
            "failure": status.failure,
        })
    }
}

/// 401 for a request with more than one `Authorization` header.
fn repeated_credential() -> Response<Body> {
    let reject = Reject::new(
        Code::Unauthenticated,
        "send one Authorization header, not several",
    );
    let trace_id = format!("{:032x}", rand::random::<u128>());
    let mut response = json(StatusCode::UNAUTHORIZED, &reject.body(&trace_id));
    response.headers_mut().insert(
        header::WWW_AUTHENTICATE,
        header::HeaderValue::from_static("Bearer"),
    );
    response
}

fn json(status: StatusCode, value: &serde_json::Value) -> Response<Body> {
    let mut response = text(status, serde_json::to_vec_pretty(value).unwrap_or_default());
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        header::HeaderValue::from_static("application/json"),
    );
    response
}

fn text(status: StatusCode, body: impl Into<bytes::Bytes>) -> Response<Body> {
    let mut response = Response::new(full(body.into()));
    *response.status_mut() = status;
    response
}
