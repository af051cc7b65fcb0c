//! The controller's probe endpoints, plain HTTP on `listen`: `/healthz` answers while the
//! process serves requests; `/readyz` answers 200 once both kinds are listed, and says
//! whether this replica leads. The chart probes only `/healthz`: the controller shares
//! its pod with the injector, and an API server outage must not take the injector's
//! pod out of its Service.

use http::{Request, Response, StatusCode};
use hyper::body::Incoming;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use crate::proxy::body::{full, Body};

/// What the probes report, shared with the reconcile loop and the elector.
#[derive(Debug, Default)]
pub struct Health {
    pub listed: AtomicBool,
    pub leader: AtomicBool,
}

pub async fn handle(request: Request<Incoming>, health: Arc<Health>) -> Response<Body> {
    let (status, body) = match request.uri().path() {
        "/healthz" => (StatusCode::OK, "ok\n"),
        "/readyz" => match (
            health.listed.load(Ordering::Relaxed),
            health.leader.load(Ordering::Relaxed),
        ) {
            (false, _) => (
                StatusCode::SERVICE_UNAVAILABLE,
                "listing ToolContract and AgentPolicy objects\n",
            ),
            (true, true) => (StatusCode::OK, "ok: leader, writing status\n"),
            (true, false) => (StatusCode::OK, "ok: standby\n"),
        },
        _ => (StatusCode::NOT_FOUND, "not found\n"),
    };
    let mut response = Response::new(full(body));
    *response.status_mut() = status;
    response
}
