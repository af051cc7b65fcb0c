//! MCP `tools/call`, the front door's side of the one call sequence
//! (`proxy::call::run`): the message becomes a [`proposal`], the call runs, and what
//! the backend gave is delivered as a JSON-RPC answer, refusals rendered here only.
//!
//! - [`proposal`]: message → `Proposal`, and the message the backend runs;
//! - [`live`]: an at-most-once lead's progress, relayed while the call runs;
//! - [`result`]: the tool result shaped by its contract, live or kept for duplicates;
//! - [`follow_up`]: the record of a streamed call after its head went out;
//! - [`tool_error`]: spotting `isError: true` in an answer streamed through unread;
//! - [`watched`]: such an answer, streamed through, its success remembered before its end.
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

pub mod follow_up;
pub mod live;
pub mod proposal;
pub mod result;
pub mod tool_error;
pub mod watched;

use bytes::Bytes;
use http::{header, HeaderValue, Method, Response, StatusCode};
use hyper::body::Incoming;
use serde_json::Value;
use std::sync::Arc;
use tokio::sync::oneshot;

use super::answer::{rewrite_sse, Before, Rewrite};
use super::forward::{self, clean, stream_through, Outbound};
use super::jsonrpc::Message;
use super::reply::{self, Refusal};
use super::Inbound;
use crate::limits::dedupe::{Flight, Settled};
use crate::limits::once::unknown_outcome;
use crate::policy::contract::Contract;
use crate::policy::{Snapshot, ToolId};
use crate::proxy::backend::collect::{self, shape_of, Shape};
use crate::proxy::backend::exchange;
use crate::proxy::backend::failure::unanswered_status;
use crate::proxy::backend::relay::{self, Relayed};
use crate::proxy::backend::{Asked, Failure, Keep};
use crate::proxy::body::{full, Body};
use crate::proxy::call::Door;
use crate::proxy::forward::Sent;
use crate::proxy::govern::Verdict;
use crate::proxy::outcome::Outcome;
use crate::proxy::stage::shape;
use crate::vocab::{Code, Reject};
use follow_up::FollowUp;
use result::shape_answer;

/// A single tools/call POST; `outcome` is the request's, so the call's record.
pub async fn single(
    ex: &Inbound<'_>,
    mut message: Message,
    original: Bytes,
    outcome: &mut Outcome,
) -> Response<Body> {
    let id = message.reply_id();
    let delivered = match forward_call(ex, &mut message, original, outcome, false).await {
        Ok(Reply::Live(live)) => deliver(ex, live, &id, outcome).await,
        Ok(Reply::Once {
            snapshot,
            tool,
            settled,
        }) => once_response(&settled, snapshot.contract(tool), &id, outcome),
        Ok(Reply::Leading(leading)) => lead(ex, leading, &id, outcome).await,
        Err(refusal) => Err(refusal),
    };
    delivered.unwrap_or_else(|refusal| ex.refuse(outcome, refusal, &id))
}

/// One tools/call of a batch, with its own audit record; returns its answer.
pub async fn element(ex: &Inbound<'_>, mut message: Message) -> Value {
    let mut outcome = ex.element_outcome();
    // A single call's message is noted by the dispatch (mcp::single), an element's here.
    outcome.mcp_message("tools/call", message.id.as_ref(), None);
    let id = message.reply_id();
    let bytes = Bytes::from(message.to_bytes());
    let answer = match forward_call(ex, &mut message, bytes, &mut outcome, true).await {
        Ok(Reply::Live(live)) => collect(ex, live, &id).await,
        Ok(Reply::Once {
            snapshot,
            tool,
            settled,
        }) => result::from_kept(&settled, snapshot.contract(tool), &id).map(|(_, answer)| answer),
        // Batch elements are not live (`split`): they are collected whole.
        Ok(Reply::Leading(_)) => Err(Refusal::of_call(Reject::new(
            Code::NotReady,
            "the gateway failed to handle the call",
        ))),
        Err(refusal) => Err(refusal),
    };
    if let Ok(answer) = &answer {
        judge(answer, &mut outcome);
    }
    let answer = answer.unwrap_or_else(|refusal| {
        outcome.refused(&refusal.reject);
        ex.refused(&refusal, &id)
    });
    outcome.record(&ex.gate.metrics, &ex.gate.audit).await;
    answer
}

/// A permitted call and the upstream's response head.
struct Live {
    snapshot: Arc<Snapshot>,
    tool: ToolId,
    response: Response<Incoming>,
    deadline: tokio::time::Instant,
}

/// A call this request leads at most once, running, its progress relayed to it.
struct Leading {
    snapshot: Arc<Snapshot>,
    tool: ToolId,
    flight: Arc<Flight>,
    relays: oneshot::Receiver<Relayed>,
    deadline: tokio::time::Instant,
}

/// What forwarding produced: the live response of an idempotent call, the running call
/// this request leads, or the one shared outcome of a call that runs at most once.
enum Reply {
    Live(Live),
    Leading(Leading),
    Once {
        snapshot: Arc<Snapshot>,
        tool: ToolId,
        settled: Arc<Settled>,
    },
}

/// Runs the call through the one sequence (`proxy::call::run`); 2xx answers only come
/// back live.
async fn forward_call(
    ex: &Inbound<'_>,
    message: &mut Message,
    original: Bytes,
    outcome: &mut Outcome,
    split: bool,
) -> Result<Reply, Refusal> {
    let Some(snapshot) = ex.snapshot.clone() else {
        return Err(Refusal::of_call(Reject::new(
            Code::NotReady,
            "no policy is loaded yet",
        )));
    };
    // `mcp.onDrift: hide`: a tool the listing withholds is no tool (`tool_drift`).
    if let Some(reject) = ex.withheld_call(message) {
        return Err(Refusal::of_call(reject));
    }
    let (tool, proposal) = proposal::proposal(ex, &snapshot, message)?;
    let contract = snapshot.contract(tool);
    // The lead of a call that runs at most once streams its progress as it comes; a
    // batch element is collected whole.
    let live = !contract.idempotent && !split;
    let deadline = tokio::time::Instant::now() + contract.timeout;
    let (tap, relays) = live.then(|| relay::channel(deadline)).unzip();
    let id = message.reply_id();
    let request = |verdict: &Verdict<'_>| backend_request(ex, message, original, verdict, split);
    // The upstream answers the leader's JSON-RPC id; every duplicate gets the answer
    // under its own (result::from_kept).
    let answer_id = id.clone();
    let door = Door {
        rpc_id: Some(&id),
        retry: false,
        live,
        keep: Keep::Answer { id: answer_id, tap },
    };
    let ground = ex.gate.ground();
    let delivery = crate::proxy::call::run(&ground, &snapshot, proposal, request, door, outcome)
        .await
        .map_err(Refusal::of_call)?;
    reply(snapshot.clone(), tool, delivery.sent, relays, deadline)
}

/// The request the backend gets for a permitted call: the message as checked (its
/// defaults filled), with the outbound headers (`mcp::forward`).
fn backend_request(
    ex: &Inbound<'_>,
    message: &Message,
    original: Bytes,
    verdict: &Verdict<'_>,
    split: bool,
) -> exchange::Exchange {
    let body = proposal::with_defaults(message, verdict, original);
    let out = Outbound {
        method: Method::POST,
        tool: Some(&verdict.contract.tool),
        body,
        split,
        timeout: verdict.contract.timeout,
    };
    let (path_and_query, headers) = forward::outbound(ex, &out);
    exchange::Exchange {
        method: Method::POST,
        path_and_query,
        headers,
        body: out.body,
    }
}

/// What the backend gave a call, as this front door delivers it.
fn reply(
    snapshot: Arc<Snapshot>,
    tool: ToolId,
    sent: Sent,
    relays: Option<oneshot::Receiver<Relayed>>,
    deadline: tokio::time::Instant,
) -> Result<Reply, Refusal> {
    let contract = snapshot.contract(tool);
    match sent {
        // Only a live plan leads this way, and a live plan has its relays.
        Sent::Leading { flight } => match relays {
            Some(relays) => Ok(Reply::Leading(Leading {
                snapshot,
                tool,
                flight,
                relays,
                deadline,
            })),
            None => Err(Refusal::of_call(Reject::new(
                Code::NotReady,
                "the gateway failed to handle the call",
            ))),
        },
        Sent::Settled { settled, .. } => Ok(Reply::Once {
            snapshot,
            tool,
            settled,
        }),
        Sent::Live { response, sent } => {
            if response.status() == StatusCode::ACCEPTED {
                return Err(Refusal::of_call(unanswered_status(response.status()).0));
            }
            let deadline = tokio::time::Instant::from_std(sent + contract.timeout);
            Ok(Reply::Live(Live {
                tool,
                response,
                deadline,
                snapshot,
            }))
        }
    }
}

/// The shared outcome of a call that ran at most once, as one JSON answer.
fn once_response(
    settled: &Settled,
    contract: &Contract,
    id: &Value,
    outcome: &mut Outcome,
) -> Result<Response<Body>, Refusal> {
    result::from_kept(settled, contract, id).map(|(status, answer)| {
        judge(&answer, outcome);
        let mut response =
            reply::json_bytes(Bytes::from(serde_json::to_vec(&answer).unwrap_or_default()));
        *response.status_mut() = status;
        response
    })
}

/// The answer to a call this request leads: an event stream relayed live when the
/// upstream streams, else the settled outcome as one JSON answer.
async fn lead(
    ex: &Inbound<'_>,
    leading: Leading,
    id: &Value,
    outcome: &mut Outcome,
) -> Result<Response<Body>, Refusal> {
    let Leading {
        snapshot,
        tool,
        flight,
        relays,
        deadline,
    } = leading;
    let timeout = snapshot.contract(tool).timeout;
    let unknown = || Refusal::of_call(unsettled(timeout));
    let mut relayed = match tokio::time::timeout_at(deadline, relays).await {
        Err(_) => return Err(unknown()),
        Ok(Ok(relayed)) => relayed,
        // Nothing streams (a JSON answer, a failure): the outcome is the answer; the
        // collector settles the flight as it returns.
        Ok(Err(_)) => {
            let settled = flight
                .outcome(live::settle_wait(deadline))
                .await
                .ok_or_else(unknown)?;
            return once_response(&settled, snapshot.contract(tool), id, outcome);
        }
    };
    outcome.answered(StatusCode::OK.as_u16());
    may_resume(ex, id, snapshot.contract(tool));
    let mut rewrite = CallRewrite::new(ex, snapshot.clone(), tool, id, outcome);
    if let Some(follow_up) = rewrite.follow_up.as_mut() {
        follow_up.watch(flight.clone(), deadline, timeout, relayed.resumed.clone());
    }
    let answer_id = id.clone();
    let finish = move |settled: Option<Arc<Settled>>| {
        let contract = snapshot.contract(tool);
        let answered = match settled {
            None => Err(unsettled(timeout)),
            Some(settled) => {
                result::from_kept(&settled, contract, &answer_id).map_err(|r| r.reject)
            }
        };
        match answered {
            Ok((_, message)) => {
                let before = rewrite.follow_up.as_mut().and_then(|follow_up| {
                    follow_up.judge(&message);
                    follow_up.remember()
                });
                (message, before)
            }
            Err(reject) => (rewrite.refused(reject), None),
        }
    };
    let headers = std::mem::take(&mut relayed.headers);
    let mut response = Response::new(live::body(relayed, flight, deadline, finish));
    *response.headers_mut() = headers;
    Ok(response)
}

/// A call answered with an event stream: if the stream breaks, its answer may come back
/// on the session's resumed stream instead, so remember which tool it called
/// (`pending`). A call answered with one JSON body can't be resumed.
fn may_resume(ex: &Inbound<'_>, id: &Value, contract: &Contract) {
    if let Some(session) = ex.mcp_session().filter(|_| !id.is_null()) {
        ex.gate
            .mcp_pending
            .record(session, id, &contract.tool, contract.timeout);
    }
}

/// What a call under `contract` asked of the backend, for the refusal of its failure.
fn asked(contract: &Contract) -> Asked {
    Asked::call(contract.idempotent, contract.timeout)
}

/// Marks on the call's record how a tools/call answer says it went: the tool's own error
/// (`isError: true`, which the span names `tool_error`), or the server's JSON-RPC
/// `error`. Neither is a successful call, so `requires` remembers neither.
fn judge(message: &Value, outcome: &mut Outcome) {
    if message.pointer("/result/isError") == Some(&Value::Bool(true)) {
        outcome.tool_error();
    } else if message.get("error").is_some() {
        outcome.rpc_error();
    }
}

/// The refusal of a lead whose call did not settle within its timeout.
fn unsettled(timeout: std::time::Duration) -> Reject {
    unknown_outcome(
        timeout,
        "the call may still complete; it will not be sent again",
    )
}

/// The answer to a single call, streamed where it can be.
async fn deliver(
    ex: &Inbound<'_>,
    live: Live,
    id: &Value,
    outcome: &mut Outcome,
) -> Result<Response<Body>, Refusal> {
    let max = ex.gate.limits.max_response_bytes;
    let Live {
        snapshot,
        tool,
        response,
        deadline,
    } = live;
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
            may_resume(ex, id, contract);
            let (mut parts, incoming) = response.into_parts();
            clean(&mut parts.headers);
            parts.headers.remove(header::CONTENT_LENGTH);
            let rewrite = CallRewrite::new(ex, snapshot.clone(), tool, id, outcome);
            let body = rewrite_sse(incoming, id.clone(), rewrite, max, Some(deadline));
            Ok(Response::from_parts(parts, body))
        }
        Shape::Json if shaped => {
            let (mut parts, incoming) = response.into_parts();
            let value = collect::read_json(incoming, id, max, deadline)
                .await
                .map_err(|f| Refusal::of_call(f.reject(asked(contract))))?;
            let shaped = shape_answer(contract, value).map_err(Refusal::of_call)?;
            judge(&shaped, outcome);
            let bytes = serde_json::to_vec(&shaped).unwrap_or_default();
            clean(&mut parts.headers);
            parts
                .headers
                .insert(header::CONTENT_LENGTH, HeaderValue::from(bytes.len()));
            Ok(Response::from_parts(parts, full(bytes)))
        }
        _ if shaped => Err(Refusal::of_call(
            Failure::NotAnAnswer.reject(asked(contract)),
        )),
        // Unread, but watched: a tool's own error still marks the call's span.
        Shape::Json => Ok(watched(ex, response, contract, outcome)),
        _ => Ok(stream_through(response)),
    }
}

/// An unshaped JSON answer, streamed through while watched ([`watched`]).
fn watched(
    ex: &Inbound<'_>,
    mut response: Response<Incoming>,
    contract: &Contract,
    outcome: &mut Outcome,
) -> Response<Body> {
    clean(response.headers_mut());
    let follow_up = FollowUp::of(ex.gate, outcome);
    watched::response(response, follow_up, asked(contract))
}

/// The answer to a call of a batch, read whole.
async fn collect(ex: &Inbound<'_>, live: Live, id: &Value) -> Result<Value, Refusal> {
    let Live {
        snapshot,
        tool,
        response,
        deadline,
    } = live;
    let contract = snapshot.contract(tool);
    if !response.status().is_success() {
        let (_, bytes) = upstream_error(response, contract).await?;
        return Ok(collect::with_id(&bytes, id));
    }
    let max = ex.gate.limits.max_response_bytes;
    let value = collect::collect(response, id, max, deadline)
        .await
        .map_err(|f| Refusal::of_call(f.reject(asked(contract))))?;
    shape_answer(contract, value).map_err(Refusal::of_call)
}

/// The JSON-RPC error an upstream HTTP 4xx carries, or the contract's refusal.
async fn upstream_error(
    response: Response<Incoming>,
    contract: &Contract,
) -> Result<(StatusCode, Bytes), Refusal> {
    let status = response.status();
    collect::rpc_error(response, contract.timeout)
        .await
        .ok_or_else(|| Refusal::of_call(unanswered_status(status).0))
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
    /// The rewrite of the response to call `id` whose record `outcome` is; it takes over
    /// the call's span, which ends with the stream, and a refusal found in the stream gets
    /// a record of its own ([`FollowUp`]).
    fn new(
        ex: &Inbound<'_>,
        snapshot: Arc<Snapshot>,
        tool: ToolId,
        id: &Value,
        outcome: &mut Outcome,
    ) -> CallRewrite {
        CallRewrite {
            snapshot,
            tool,
            id: id.clone(),
            trace_id: ex.trace_id().to_string(),
            modern: ex.modern,
            follow_up: Some(FollowUp::of(ex.gate, outcome)),
        }
    }

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
            Ok(message) => {
                if let Some(follow_up) = self.follow_up.as_mut() {
                    follow_up.judge(&message);
                }
                message
            }
            Err(reject) => self.refused(reject),
        }
    }

    fn failed(&mut self, failure: Failure) -> Value {
        let reject = failure.reject(asked(self.snapshot.contract(self.tool)));
        self.refused(reject)
    }

    fn before_delivery(&mut self) -> Option<Before> {
        self.follow_up.as_mut()?.remember()
    }
}
