//! At most once for MCP tools that are not idempotent (`idempotent: false`, the default
//! for MCP-served tools): the forward path (`proxy::forward`) sends the first call once,
//! detached, with [`collect`] buffering its JSON-RPC answer, and every duplicate gets that
//! answer under its own request id ([`answer`]), marked `X-Toolgate-Replayed: true`.
//!
//! A buffered answer is the unshaped JSON-RPC response (SSE collected to its one
//! response); shaping runs per delivery, so a policy reload between two duplicates is
//! honoured.

use bytes::Bytes;
use http::{HeaderMap, Response, StatusCode};
use hyper::body::Incoming;
use serde_json::Value;
use std::time::Duration;

use super::live::Tap;
use super::result::shape_answer;
use crate::limits::dedupe::{Buffered, Settled};
use crate::policy::contract::Contract;
use crate::proxy::backend::exchange::{Exchange, Received};
use crate::proxy::backend::failure::status_settled;
use crate::proxy::backend::upstream::Upstream;
use crate::proxy::backend::Asked;
use crate::proxy::mcp::answer;
use crate::proxy::mcp::reply::Refusal;

/// The JSON-RPC answer for request `id`, shaped, from a shared outcome; the HTTP status
/// rides along for JSON-RPC errors an upstream sent with a 4xx.
pub fn answer(
    settled: &Settled,
    contract: &Contract,
    id: &Value,
) -> Result<(StatusCode, Value), Refusal> {
    match settled {
        Settled::Failed { reject, .. } => Err(Refusal::of_call(reject.clone())),
        Settled::Answered(buffered) if !buffered.status.is_success() => {
            Ok((buffered.status, answer::with_id(&buffered.body, id)))
        }
        Settled::Answered(buffered) => {
            let message = answer::with_id(&buffered.body, id);
            let shaped = shape_answer(contract, message).map_err(Refusal::of_call)?;
            Ok((StatusCode::OK, shaped))
        }
    }
}

/// Sends a call once and collects its JSON-RPC answer to `id` (SSE collected to its one
/// response), within `window` and `max` bytes: the at-most-once buffer of
/// `proxy::forward`. With a `tap`, the rest of an event stream is relayed to the lead as
/// it arrives (`live`).
pub async fn collect(
    upstream: Upstream,
    exchange: Exchange,
    id: Value,
    window: Duration,
    max: usize,
    tap: Option<Tap>,
) -> Received {
    let deadline = tokio::time::Instant::now() + window;
    let response = match exchange.send_once(&upstream, window).await {
        Ok(response) => response,
        Err(failure) => return Received::unanswered(failure, window),
    };
    let status = response.status();
    Received {
        settled: settle(response, id, window, deadline, max, tap).await,
        status: Some(status.as_u16()),
    }
}

/// The outcome of an answer the backend began: its JSON-RPC response, or why not.
async fn settle(
    response: Response<Incoming>,
    id: Value,
    window: Duration,
    deadline: tokio::time::Instant,
    max: usize,
    mut tap: Option<Tap>,
) -> Settled {
    let status = response.status();
    if status == StatusCode::SERVICE_UNAVAILABLE {
        // Refused before it ran: a retry may run it.
        return status_settled(status);
    }
    if !status.is_success() {
        // A JSON-RPC error an upstream sends with a 4xx passes; any other failure becomes
        // the contract's refusal, its body unread.
        return match answer::rpc_error(response, window).await {
            Some((status, bytes)) => Settled::Answered(Buffered {
                status,
                headers: HeaderMap::new(),
                body: bytes,
                interim: false,
            }),
            None => status_settled(status),
        };
    }
    let collected = match tap.as_mut() {
        Some(tap) => answer::collect_relaying(response, &id, max, deadline, tap).await,
        None => answer::collect(response, &id, max, deadline).await,
    };
    match collected {
        Ok(message) => Settled::Answered(Buffered {
            status: StatusCode::OK,
            headers: HeaderMap::new(),
            // A round of a multi-round call asking for input (2026-07-28) is not the
            // call's result: the retry that carries the input is a new round.
            interim: asks_for_input(&message),
            body: Bytes::from(serde_json::to_vec(&message).unwrap_or_default()),
        }),
        // A lead's client resumes a `Resumable` stream and gets the result there; the
        // refusal is for duplicates, which can't. Either way the call must not run again.
        Err(failure) => failure.settled(Asked::call(false, window)),
    }
}

/// Whether a tools/call answer is an `InputRequiredResult`: the server needs the client's
/// input (`inputRequests`) before it can finish the call.
pub fn asks_for_input(message: &Value) -> bool {
    message
        .pointer("/result/resultType")
        .and_then(Value::as_str)
        == Some("input_required")
}
