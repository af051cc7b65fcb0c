//! What an MCP backend answers a call: the JSON-RPC response to its id, read from one
//! JSON body or collected from an event stream (other events dropped, or relayed to the
//! lead of an at-most-once call), bounded in bytes and time; and the outcome an
//! at-most-once call keeps for its duplicates ([`send_collected`], `Keep::Answer`).
//!
//! The MCP front door turns what is read here into its answer (shaped by the contract,
//! refusals rendered by `mcp::reply`); nothing here calls back into it.

use bytes::Bytes;
use http::{header, HeaderMap, Response, StatusCode};
use http_body_util::BodyExt;
use hyper::body::Incoming;
use serde_json::Value;
use std::time::Duration;
use tokio::time::Instant;

use super::exchange::{Exchange, Received};
use super::failure::status_settled;
use super::relay::Tap;
use super::sse::Parser;
use super::upstream::Upstream;
use super::{Asked, Failure};
use crate::limits::dedupe::{Buffered, Settled};
use crate::proxy::body::read_limited;
use crate::proxy::headers::{strip_hop_by_hop, strip_toolgate};

/// What a response body is, by its content type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Shape {
    Json,
    EventStream,
    Other,
}

pub fn shape_of<B>(response: &Response<B>) -> Shape {
    let content_type = response
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_ascii_lowercase();
    if content_type.starts_with("application/json") {
        Shape::Json
    } else if content_type.starts_with("text/event-stream") {
        Shape::EventStream
    } else {
        Shape::Other
    }
}

/// Reads the response to request `id` from a JSON or SSE body, bounded by `max` bytes
/// (per event for SSE) and `deadline`. Other SSE events are dropped: a collected answer
/// is one JSON-RPC message.
pub async fn collect(
    response: Response<Incoming>,
    id: &Value,
    max: usize,
    deadline: Instant,
) -> Result<Value, Failure> {
    match shape_of(&response) {
        Shape::Json => read_json(response.into_body(), id, max, deadline).await,
        Shape::EventStream => collect_sse(response.into_body(), id, max, deadline, None).await,
        Shape::Other => Err(Failure::NotAnAnswer),
    }
}

/// [`collect`], relaying to `tap` everything an event stream carries besides the answer:
/// first the response's headers, then each event as it arrives.
pub async fn collect_relaying(
    response: Response<Incoming>,
    id: &Value,
    max: usize,
    deadline: Instant,
    tap: &mut Tap,
) -> Result<Value, Failure> {
    if shape_of(&response) != Shape::EventStream {
        return collect(response, id, max, deadline).await;
    }
    let (mut parts, incoming) = response.into_parts();
    strip_hop_by_hop(&mut parts.headers);
    strip_toolgate(&mut parts.headers);
    parts.headers.remove(header::CONTENT_LENGTH);
    tap.open(parts.headers);
    collect_sse(incoming, id, max, deadline, Some(tap)).await
}

/// Reads a JSON body (one message, or a batch of them) and finds the response to `id`.
pub async fn read_json(
    incoming: Incoming,
    id: &Value,
    max: usize,
    deadline: Instant,
) -> Result<Value, Failure> {
    let remaining = deadline.saturating_duration_since(Instant::now());
    let bytes = read_limited(incoming, max, remaining).await?;
    let value: Value = serde_json::from_slice(&bytes).map_err(|_| Failure::NotAnAnswer)?;
    answer_in(value, id).ok_or(Failure::NotAnAnswer)
}

/// Largest JSON-RPC error body read from an upstream HTTP error.
const MAX_ERROR_BODY: usize = 64 * 1024;

/// The JSON-RPC error an upstream HTTP 4xx carries (a 2026-07-28 server answers invalid
/// params with 400), with its status; `None` for any other error, whose body stays
/// unread: backend internals never reach the agent.
pub async fn rpc_error(
    response: Response<Incoming>,
    timeout: std::time::Duration,
) -> Option<(http::StatusCode, Bytes)> {
    let status = response.status();
    if !status.is_client_error() || shape_of(&response) != Shape::Json {
        return None;
    }
    let deadline = timeout.min(std::time::Duration::from_secs(5));
    let bytes = read_limited(response.into_body(), MAX_ERROR_BODY, deadline)
        .await
        .ok()?;
    let value: Value = serde_json::from_slice(&bytes).ok()?;
    let is_rpc_error = value.get("result").is_none()
        && value.pointer("/error/code").is_some_and(Value::is_i64)
        && value
            .pointer("/error/message")
            .is_some_and(Value::is_string);
    is_rpc_error.then_some((status, bytes))
}

/// A JSON-RPC error's bytes as the answer to request `id` (servers may answer `null`).
pub fn with_id(bytes: &[u8], id: &Value) -> Value {
    let mut value: Value = serde_json::from_slice(bytes).unwrap_or(Value::Null);
    if let Some(object) = value.as_object_mut() {
        object.insert("id".into(), id.clone());
    }
    value
}

async fn collect_sse(
    mut incoming: Incoming,
    id: &Value,
    max: usize,
    deadline: Instant,
    mut tap: Option<&mut Tap>,
) -> Result<Value, Failure> {
    let mut parser = Parser::new(max);
    let mut eof = false;
    // Events with ids make the stream resumable: its end is then no failure.
    let mut resumable = false;
    loop {
        while let Some(event) = parser.next_event(eof) {
            resumable |= event.id.is_some();
            // Relayed as `rewrite_sse` re-emits: what is not JSON is dropped unchecked.
            let relay = if !event.is_message() || event.data.is_empty() {
                true
            } else if let Ok(value) = serde_json::from_str::<Value>(&event.data) {
                // A request or notification for the client passes; a response is the
                // answer (or, to another request, dropped).
                if !value.is_array() && !is_response(&value) {
                    true
                } else if let Some(answer) = answer_in(value, id) {
                    return Ok(answer);
                } else {
                    false
                }
            } else {
                false
            };
            if let Some(tap) = tap.as_deref_mut().filter(|_| relay) {
                tap.send(event.raw).await;
            }
        }
        if eof && resumable {
            if let Some(tap) = tap.as_deref_mut() {
                tap.resumable();
            }
            return Err(Failure::Resumable);
        }
        if eof {
            return Err(Failure::BodyBroke);
        }
        parser.check().map_err(|e| Failure::TooLarge(e.0))?;
        match tokio::time::timeout_at(deadline, incoming.frame()).await {
            Err(_) => return Err(Failure::BodyTimedOut),
            Ok(None) => eof = true,
            Ok(Some(Err(_))) => return Err(Failure::BodyBroke),
            Ok(Some(Ok(frame))) => {
                if let Ok(data) = frame.into_data() {
                    parser.push(&data);
                }
            }
        }
    }
}

/// Sends a call once and collects its JSON-RPC answer to `id` (SSE collected to its one
/// response), within `window` and `max` bytes: how `Keep::Answer` keeps an
/// at-most-once answer. With a `tap`, the rest of an event stream is relayed to the lead as
/// it arrives (`live`).
pub async fn send_collected(
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
        return match rpc_error(response, window).await {
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
        Some(tap) => collect_relaying(response, &id, max, deadline, tap).await,
        None => collect(response, &id, max, deadline).await,
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

/// Whether `value` is a response (a result or an error).
pub fn is_response(value: &Value) -> bool {
    value.get("method").is_none() && (value.get("result").is_some() || value.get("error").is_some())
}

/// The response to the request with `id` among what answered it.
///
/// On the stream or body answering one request, SDK clients take *any* response as that
/// request's answer, whatever its id: so must toolgate, or a response with a stray id
/// would reach the agent unchecked. Only in a batch array does the id pick the answer.
pub fn answer_in(value: Value, id: &Value) -> Option<Value> {
    let mut found = match value {
        Value::Array(items) => items
            .into_iter()
            .find(|m| is_response(m) && m.get("id") == Some(id)),
        other => Some(other).filter(is_response),
    }?;
    if let Some(object) = found.as_object_mut() {
        object.insert("id".into(), id.clone());
    }
    Some(found)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn any_response_answers_the_one_request_it_came_for() {
        let id = json!(4);
        let stray = json!({"jsonrpc": "2.0", "id": "4", "result": {}});
        assert_eq!(
            answer_in(stray, &id).unwrap()["id"],
            4,
            "the id is made the request's"
        );
        assert!(answer_in(json!({"jsonrpc": "2.0", "id": 4, "method": "ping"}), &id).is_none());
        let batch = json!([{"jsonrpc": "2.0", "id": 3, "result": 1}, {"jsonrpc": "2.0", "id": 4, "result": 2}]);
        assert_eq!(answer_in(batch, &id).unwrap()["result"], 2);
        assert!(is_response(
            &json!({"jsonrpc": "2.0", "id": null, "error": {}})
        ));
    }
}
