//! A governed tools/call end to end: decide ([`call::govern`]), forward, deliver.
//!
//! Delivery depends on what the upstream answers:
//! - JSON: streamed through when the contract shapes nothing, else read (bounded by
//!   `limits.maxResponseBytes` and the contract's timeout) and shaped;
//! - SSE: re-emitted event by event (progress and server requests flow), the result
//!   event shaped in flight; the contract's timeout holds until the result arrives;
//! - an HTTP error carrying a JSON-RPC error (a 2026-07-28 server answers invalid params
//!   with 400) passes as the server's protocol answer; any other backend failure becomes
//!   the contract's `BACKEND_*` refusal, the backend's body unread.
//!
//! In a batch each call is collected whole and gets its own audit record.

use bytes::Bytes;
use http::{header, HeaderValue, Method, Response, StatusCode};
use hyper::body::Incoming;
use serde_json::Value;
use std::sync::Arc;
use std::time::Instant;

use super::answer::{self, rewrite_sse, shape_of, Failure, Rewrite, Shape};
use super::call::{failure_to_reject, govern, shape_answer, FollowUp};
use super::forward::{self, clean, stream_through, Outbound};
use super::jsonrpc::Message;
use super::once;
use super::reply::{self, Refusal};
use super::Exchange;
use crate::limits::dedupe::Settled;
use crate::limits::Call;
use crate::policy::contract::Contract;
use crate::policy::{Snapshot, ToolId};
use crate::proxy::body::{full, Body};
use crate::proxy::headers::idempotency_key;
use crate::proxy::outcome::Outcome;
use crate::proxy::stage::session;
use crate::proxy::stage::shape;
use crate::proxy::upstream::{failure_reject, status_reject};
use crate::vocab::{Code, Reject};

/// A single tools/call POST; `outcome` is the request's, so the call's record.
pub async fn single(
    ex: &Exchange<'_>,
    mut message: Message,
    original: Bytes,
    outcome: &mut Outcome,
) -> Response<Body> {
    let id = message.reply_id();
    let delivered = match forward_call(ex, &mut message, original, outcome, false).await {
        Ok(Sent::Live(forwarded)) => deliver(ex, forwarded, &id, outcome).await,
        Ok(Sent::Once {
            snapshot,
            tool,
            settled,
        }) => once::answer(&settled, snapshot.contract(tool), &id).map(|(status, answer)| {
            let mut response =
                reply::json_bytes(Bytes::from(serde_json::to_vec(&answer).unwrap_or_default()));
            *response.status_mut() = status;
            response
        }),
        Err(refusal) => Err(refusal),
    };
    delivered.unwrap_or_else(|refusal| ex.refuse(outcome, refusal, &id))
}

/// One tools/call of a batch, with its own audit record; returns its answer.
pub async fn element(ex: &Exchange<'_>, mut message: Message) -> Value {
    let mut outcome = ex.element_outcome();
    let id = message.reply_id();
    let bytes = Bytes::from(message.to_bytes());
    let answer = match forward_call(ex, &mut message, bytes, &mut outcome, true).await {
        Ok(Sent::Live(forwarded)) => collect(ex, forwarded, &id).await,
        Ok(Sent::Once {
            snapshot,
            tool,
            settled,
        }) => once::answer(&settled, snapshot.contract(tool), &id).map(|(_, answer)| answer),
        Err(refusal) => Err(refusal),
    };
    let answer = answer.unwrap_or_else(|refusal| {
        outcome.code = Some(refusal.reject.code);
        outcome.rule = refusal.reject.rule.clone();
        refusal.message(&id, ex.trace_id(), false)
    });
    outcome.record(&ex.gate.metrics, &ex.gate.audit).await;
    answer
}

/// A permitted call and the upstream's response head.
struct Forwarded {
    snapshot: Arc<Snapshot>,
    tool: ToolId,
    response: Response<Incoming>,
    deadline: tokio::time::Instant,
}

/// What forwarding produced: the live response of an idempotent call, or the one shared
/// outcome of a call that runs at most once.
enum Sent {
    Live(Forwarded),
    Once {
        snapshot: Arc<Snapshot>,
        tool: ToolId,
        settled: Arc<Settled>,
    },
}

/// Decides the call and, when it may run, forwards it; 2xx answers only come back live.
async fn forward_call(
    ex: &Exchange<'_>,
    message: &mut Message,
    original: Bytes,
    outcome: &mut Outcome,
    split: bool,
) -> Result<Sent, Refusal> {
    let Some(snapshot) = ex.snapshot.clone() else {
        return Err(Refusal::of_call(Reject::new(
            Code::NotReady,
            "no policy is loaded yet",
        )));
    };
    outcome.mcp_method = Some("tools/call".into());
    outcome.call_id = message.id.as_ref().map(|id| match id {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    });
    let permit = govern(ex, &snapshot, message, original, outcome)?;
    let contract = permit.contract;
    let key = idempotency_key(&ex.parts.headers)
        .map_err(|m| Refusal::of_call(Reject::new(Code::MalformedRequest, m)))?;
    let call = Call::new(
        &ex.agent.id,
        ex.session,
        &contract.tool,
        &permit.args,
        key.as_deref(),
    );
    let request = Outbound {
        method: Method::POST,
        tool: Some(&contract.tool),
        body: permit.body.clone(),
        split,
        timeout: contract.timeout,
    };
    let (path, mut headers) = forward::outbound(ex, &request);
    let span_name = format!("tools/call {}", contract.tool);
    let client_span = ex
        .gate
        .tracing
        .start_client(&outcome.span, span_name, &mut headers);
    if !contract.idempotent {
        let outbound = once::Outbound {
            path,
            headers,
            body: request.body,
            id: message.reply_id(),
            span: client_span,
        };
        let settled = once::run(ex, &call, &permit, outbound, outcome).await?;
        return Ok(Sent::Once {
            snapshot: snapshot.clone(),
            tool: permit.tool,
            settled,
        });
    }
    session::admit(&ex.gate.ledger, &call, permit.policy, outcome).map_err(Refusal::of_call)?;
    let sent = Instant::now();
    let response = ex
        .gate
        .upstream
        .send(Method::POST, &path, headers, request.body, contract.timeout)
        .await;
    client_span.end(response.as_ref().ok().map(|r| r.status().as_u16()));
    let response = response
        .map_err(|f| Refusal::of_call(failure_reject(f, contract.idempotent, contract.timeout)))?;
    ex.gate
        .metrics
        .record_upstream(&contract.tool, sent.elapsed());
    outcome.upstream_status = Some(response.status().as_u16());
    if response.status() == StatusCode::ACCEPTED {
        return Err(Refusal::of_call(Reject::new(
            Code::BackendError,
            "the backend accepted the call without answering it",
        )));
    }
    let tool = permit.tool;
    Ok(Sent::Live(Forwarded {
        tool,
        response,
        deadline: tokio::time::Instant::from_std(sent + contract.timeout),
        snapshot,
    }))
}

/// The answer to a single call, streamed where it can be.
async fn deliver(
    ex: &Exchange<'_>,
    forwarded: Forwarded,
    id: &Value,
    outcome: &Outcome,
) -> Result<Response<Body>, Refusal> {
    let max = ex.gate.limits.max_response_bytes;
    let Forwarded {
        snapshot,
        tool,
        response,
        deadline,
    } = forwarded;
    let contract = snapshot.contract(tool);
    let shaped = shape::needed(contract);
    if !response.status().is_success() {
        let (status, bytes) = upstream_error(response, contract).await?;
        let mut response = reply::json_bytes(bytes);
        // The revision's status for this error (2026-07-28: 400 for invalid params).
        *response.status_mut() = status;
        return Ok(response);
    }
    match shape_of(&response) {
        Shape::EventStream => {
            let (mut parts, incoming) = response.into_parts();
            clean(&mut parts.headers);
            parts.headers.remove(header::CONTENT_LENGTH);
            let rewrite = CallRewrite {
                snapshot: snapshot.clone(),
                tool,
                id: id.clone(),
                trace_id: ex.trace_id().to_string(),
                modern: ex.modern,
                follow_up: Some(FollowUp::of(ex.gate, outcome)),
            };
            let body = rewrite_sse(incoming, id.clone(), rewrite, max, Some(deadline));
            Ok(Response::from_parts(parts, body))
        }
        Shape::Json if shaped => {
            let (mut parts, incoming) = response.into_parts();
            let value = answer::read_json(incoming, id, max, deadline)
                .await
                .map_err(|f| Refusal::of_call(failure_to_reject(f, contract)))?;
            let shaped = shape_answer(contract, value).map_err(Refusal::of_call)?;
            let bytes = serde_json::to_vec(&shaped).unwrap_or_default();
            clean(&mut parts.headers);
            parts
                .headers
                .insert(header::CONTENT_LENGTH, HeaderValue::from(bytes.len()));
            Ok(Response::from_parts(parts, full(bytes)))
        }
        _ if shaped => Err(Refusal::of_call(failure_to_reject(
            Failure::NotAnAnswer,
            contract,
        ))),
        _ => Ok(stream_through(response)),
    }
}

/// The answer to a call of a batch, read whole.
async fn collect(ex: &Exchange<'_>, forwarded: Forwarded, id: &Value) -> Result<Value, Refusal> {
    let Forwarded {
        snapshot,
        tool,
        response,
        deadline,
    } = forwarded;
    let contract = snapshot.contract(tool);
    if !response.status().is_success() {
        let (_, bytes) = upstream_error(response, contract).await?;
        return Ok(answer::with_id(&bytes, id));
    }
    let max = ex.gate.limits.max_response_bytes;
    let value = answer::collect(response, id, max, deadline)
        .await
        .map_err(|f| Refusal::of_call(failure_to_reject(f, contract)))?;
    shape_answer(contract, value).map_err(Refusal::of_call)
}

/// The JSON-RPC error an upstream HTTP 4xx carries, or the contract's refusal.
async fn upstream_error(
    response: Response<Incoming>,
    contract: &Contract,
) -> Result<(StatusCode, Bytes), Refusal> {
    let status = response.status();
    answer::rpc_error(response, contract.timeout)
        .await
        .ok_or_else(|| {
            let reject = status_reject(status).unwrap_or_else(|| {
                Reject::new(Code::BackendError, "the backend did not answer the call")
            });
            Refusal::of_call(reject)
        })
}

/// Shapes the result event of a streamed call.
struct CallRewrite {
    snapshot: Arc<Snapshot>,
    tool: ToolId,
    id: Value,
    trace_id: String,
    modern: bool,
    follow_up: Option<FollowUp>,
}

impl CallRewrite {
    fn refused(&mut self, reject: Reject) -> Value {
        if let Some(follow_up) = self.follow_up.take() {
            follow_up.record(&reject);
        }
        Refusal::of_call(reject).message(&self.id, &self.trace_id, self.modern)
    }
}

impl Rewrite for CallRewrite {
    fn answer(&mut self, message: Value) -> Value {
        match shape_answer(self.snapshot.contract(self.tool), message) {
            Ok(message) => message,
            Err(reject) => self.refused(reject),
        }
    }

    fn failed(&mut self, failure: Failure) -> Value {
        let reject = failure_to_reject(failure, self.snapshot.contract(self.tool));
        self.refused(reject)
    }
}
