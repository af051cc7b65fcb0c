//! The request pipeline: one function that runs the typed stages in order.
//!
//! ```text
//! limits → snapshot → classify → identify → authorize → rate → validate → rules → audit gate
//!   → dedupe → session → forward → shape
//! ```
//!
//! Each request loads the snapshot once and uses that version throughout. A client that
//! disconnects can't cut a backend call or its audit record in half: the call then
//! finishes detached ([`Detached`]).

use bytes::Bytes;
use http::{header, Request, Response};
use hyper::body::Incoming;
use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::limits::Call;
use crate::proxy::body::{read_limited, Body, ReadError};
use crate::proxy::decide::{decide, RequestView};
use crate::proxy::detach::{self, Detached};
use crate::proxy::gate::Gate;
use crate::proxy::headers;
use crate::proxy::outcome::{Decision, Outcome};
use crate::proxy::path_check::check_path;
use crate::proxy::render::into_response;
use crate::proxy::rest;
use crate::proxy::server::AmbiguousFraming;
use crate::proxy::stage::authorize;
use crate::proxy::stage::classify::classify;
use crate::proxy::stage::identify::identify;
use crate::proxy::stage::validate::Arguments;
use crate::telemetry::spans::CallSpan;
use crate::tls::PeerIdentity;
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
        let mut outcome = Outcome::new(span, started);
        outcome.audited = gate.audit.is_on();
        let response = match process(&gate, request, &mut outcome).await {
            Ok(response) => response,
            Err(reject) => {
                outcome.code = Some(reject.code);
                outcome.rule = reject.rule.clone();
                into_response(&reject, outcome.trace_id())
            }
        };
        outcome.finish(response, &gate.metrics, &gate.audit).await
    })
}

async fn process(
    gate: &Arc<Gate>,
    request: Request<Incoming>,
    outcome: &mut Outcome,
) -> Result<Response<Body>, Reject> {
    let (parts, body) = request.into_parts();
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
    if parts.headers.len() > gate.limits.max_headers {
        return Err(Reject::new(
            Code::HeadersTooLarge,
            format!("more than {} headers", gate.limits.max_headers),
        ));
    }
    let session =
        headers::session_id(&parts.headers).map_err(|m| Reject::new(Code::MalformedRequest, m))?;
    outcome.session = session.clone();
    let idempotency_key = headers::idempotency_key(&parts.headers)
        .map_err(|m| Reject::new(Code::MalformedRequest, m))?;
    // MCP has its own dispatch: JSON-RPC messages and batches, streams (proxy::mcp).
    if parts.uri.path() == gate.mcp_path {
        // Boxed, so the REST path's state machine doesn't carry the MCP one's size.
        return Box::pin(crate::proxy::mcp::handle(
            gate, parts, body, session, outcome,
        ))
        .await;
    }
    // Fail closed: without a snapshot nothing is known to be allowed.
    let snapshot = gate
        .snapshots
        .load()
        .ok_or_else(|| Reject::new(Code::NotReady, "no policy is loaded yet"))?;
    outcome.policy_version = Some(snapshot.version);

    let body = read_body(gate, &parts.headers, body).await?;
    // The audit digest and a session's fingerprint read every call's arguments.
    let reads_args = outcome.audited || session.is_some();
    let call = classify(
        &snapshot,
        &parts.method,
        parts.uri.path(),
        parts.uri.query(),
        &body,
        reads_args,
    )?;
    let contract = snapshot.contract(call.tool);
    outcome.set_tool(&contract.tool);
    outcome.set_args(&call.args);
    outcome.span.event("classified", vec![]);

    let agent = identify(
        &gate.identity,
        &parts.headers,
        parts.extensions.get::<PeerIdentity>(),
    )?;
    outcome.agent = Some(agent.id.to_string());
    outcome.span.event("identified", vec![]);
    // A disabled or ungoverned agent is refused even in shadow mode.
    let policy = authorize::policy(&snapshot, &agent.id)?;
    let view = RequestView {
        method: parts.method.as_str(),
        path: parts.uri.path(),
        headers: &parts.headers,
        session: session.as_deref(),
    };
    // Kept only where a shadow policy may forward the call unvalidated.
    let raw_args = policy.shadow.then(|| call.args.clone());
    let args = match decide(
        &gate.ledger,
        policy,
        &agent,
        contract,
        call.args,
        &view,
        gate.identity.tasks.as_ref(),
    ) {
        Ok(args) => {
            outcome.decision = Decision::Allow;
            outcome.span.event("allowed", vec![]);
            args
        }
        Err(reject) if policy.shadow => {
            tracing::info!(tool = %contract.tool, agent = %agent.id, code = %reject.code, "shadow policy would deny; forwarding");
            outcome.decision = Decision::ShadowDeny;
            outcome.code = Some(reject.code);
            outcome.rule = reject.rule;
            Arguments::unchecked(raw_args.unwrap_or_default())
        }
        Err(reject) => return Err(reject),
    };
    if contract.capture_arguments {
        let mut captured = args.value().clone();
        contract.redact.iter().for_each(|r| r.apply(&mut captured));
        outcome.captured_args = Some(captured);
    }
    if gate.audit.refuses_calls() {
        outcome.decision = Decision::Deny;
        return Err(Reject::new(
            Code::AuditUnavailable,
            "the audit log can't be written, so no call may run",
        ));
    }
    // Dedupe and session limits run inside forward: a duplicate is answered from the
    // first call and never counted, so counting must wait until it is known to run.
    let limited = Call::new(
        &agent.id,
        session.as_deref(),
        &contract.tool,
        args.args(),
        idempotency_key.as_deref(),
    );
    let forward = rest::Forward {
        parts: &parts,
        body,
        json_body: call.json_body,
        url_keys: &call.url_keys,
        args: &args,
        agent: &agent.id,
        session: session.as_deref(),
        contract,
        call: &limited,
        policy,
    };
    rest::forward(gate, forward, outcome).await
}

pub(crate) async fn read_body(
    gate: &Gate,
    headers: &http::HeaderMap,
    body: Incoming,
) -> Result<Bytes, Reject> {
    let limit = gate.limits.max_body_bytes;
    let too_large = || {
        Reject::new(
            Code::PayloadTooLarge,
            format!("the body is larger than {limit} bytes"),
        )
    };
    // Refuse a declared oversize body before reading a byte of it.
    let declared = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|n| n > limit as u64) {
        return Err(too_large());
    }
    read_limited(
        body,
        limit,
        Duration::from_millis(gate.limits.body_read_timeout_ms),
    )
    .await
    .map_err(|e| match e {
        ReadError::TooLarge(_) => too_large(),
        ReadError::TimedOut => {
            Reject::new(Code::MalformedRequest, "the body did not arrive in time")
        }
        ReadError::Broken(_) => Reject::new(Code::MalformedRequest, "the body could not be read"),
    })
}
