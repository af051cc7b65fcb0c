//! The request pipeline: what every agent request passes, then the dispatch to REST or
//! MCP, and the one place a call's outcome is emitted.
//!
//! ```text
//! framing, path, header count, session headers ─┬─ mcp::handle  (JSON-RPC, per message)
//!                                               └─ rest::handle (classify, identify)
//!   both: govern (proxy::govern) → forward (proxy::forward) → respond → outcome.finish
//! ```
//!
//! Each request loads the snapshot once and uses that version throughout. A client that
//! disconnects can't cut a backend call or its audit record in half: the call then
//! finishes detached ([`Detached`]).

use http::{Request, Response};
use hyper::body::Incoming;
use std::future::Future;
use std::sync::Arc;
use std::time::Instant;

use crate::proxy::body::Body;
use crate::proxy::detach::{self, Detached};
use crate::proxy::gate::Gate;
use crate::proxy::headers;
use crate::proxy::outcome::Outcome;
use crate::proxy::path_check::check_path;
use crate::proxy::render::into_response;
use crate::proxy::server::{AmbiguousFraming, ClientAddress};
use crate::proxy::{mcp, rest};
use crate::telemetry::spans::CallSpan;
use crate::vocab::{Code, Reject};

/// Serves one agent request. The call runs in the connection's task; if the client
/// leaves first, the call finishes in a task of its own ([`Detached`]).
pub fn serve(
    gate: Arc<Gate>,
    request: Request<Incoming>,
) -> impl Future<Output = Response<Body>> + Send {
    let started = Instant::now();
    let span = gate.tracing.start_call(request.headers());
    let trace_id = span.trace_id().to_string();
    let stragglers = gate.stragglers.clone();
    Detached::new(call(gate, request, span, started), move || {
        // Only a bug gets here; the agent gets a generic, retryable answer.
        into_response(
            &Reject::new(Code::NotReady, "the gateway failed to handle the call"),
            &trace_id,
        )
    })
    .counted_in(&stragglers)
}

/// The whole call. Boxed: the state machine of every stage is kilobytes, and unboxed it
/// would be copied whole into the connection's future and again each time it moves.
fn call(
    gate: Arc<Gate>,
    request: Request<Incoming>,
    span: CallSpan,
    started: Instant,
) -> detach::Call<Response<Body>> {
    Box::pin(async move {
        let mut outcome = Outcome::new(span, started, gate.audit.privacy());
        let client = request.extensions().get::<ClientAddress>().copied();
        let response = match process(&gate, request, &mut outcome).await {
            Ok(response) => response,
            Err(reject) => {
                outcome.refused(&reject);
                into_response(&reject, outcome.trace_id())
            }
        };
        // An answer naming no agent, past its address's allowance, is RATE_LIMITED and
        // leaves no record of its own (proxy::anonymous).
        let response = match gate.anonymous.screen(client, &mut outcome) {
            Some(limited) => limited,
            None => response,
        };
        outcome.finish(response, &gate.metrics, &gate.audit).await
    })
}

/// Checks what every request must pass, then hands it to MCP or REST.
async fn process(
    gate: &Arc<Gate>,
    request: Request<Incoming>,
    outcome: &mut Outcome,
) -> Result<Response<Body>, Reject> {
    let (mut parts, body) = request.into_parts();
    outcome.requested(&parts);
    // Smuggling's shape (proxy::server::framing); the connection closes after the answer.
    if parts.extensions.get::<AmbiguousFraming>().is_some() {
        return Err(Reject::new(
            Code::MalformedRequest,
            "the request's framing is ambiguous (Content-Length with Transfer-Encoding, or \
             one of them too long to read): send one of them, plainly",
        ));
    }
    // Before anything routes on the path, MCP's branch included: a path a backend could
    // read differently from the gateway never gets a decision (proxy::path_check).
    check_path(parts.uri.path())?;
    // A target in absolute form (`POST http://admin.internal/x`) asks a forward proxy to
    // go elsewhere; this port is not one. HTTP/2 always names its authority, in a
    // pseudo-header, so only HTTP/1's request line is checked.
    if parts.version < http::Version::HTTP_2 && parts.uri.authority().is_some() {
        return Err(Reject::new(
            Code::MalformedRequest,
            "the request target is an absolute URL: this port is not a forward proxy; \
             send the path alone, with the host in Host",
        ));
    }
    if parts.headers.len() > gate.limits.max_headers {
        return Err(Reject::new(
            Code::HeadersTooLarge,
            format!("more than {} headers", gate.limits.max_headers),
        ));
    }
    // Before anything reads a header: `X_Toolgate_Agent` and its kin never pass.
    headers::screen(&mut parts.headers, gate.limits.headers_with_underscores)
        .map_err(|m| Reject::new(Code::MalformedRequest, m))?;
    let session =
        headers::session_id(&parts.headers).map_err(|m| Reject::new(Code::MalformedRequest, m))?;
    outcome.in_session(session.as_deref());
    let idempotency_key = headers::idempotency_key(&parts.headers)
        .map_err(|m| Reject::new(Code::MalformedRequest, m))?;
    // The MCP endpoint's OAuth metadata (RFC 9728) is public: no credential, no call.
    if let Some(metadata) = gate
        .identity
        .oauth
        .as_ref()
        .and_then(|rs| rs.metadata(&parts.method, parts.uri.path()))
    {
        outcome.passed();
        return Ok(metadata);
    }
    if parts.uri.path() == gate.mcp_path {
        // Boxed, so the REST path's state machine doesn't carry the MCP one's size.
        return Box::pin(mcp::handle(
            gate,
            parts,
            body,
            session,
            idempotency_key,
            outcome,
        ))
        .await;
    }
    rest::handle(gate, parts, body, session, idempotency_key, outcome).await
}
