//! The upstream's answer to one forwarded request, when toolgate must see it: rewritten
//! in flight when it is an SSE stream, or read whole (bounded) when it is one JSON body
//! or belongs to a batch.
//!
//! A rewritten stream stays a stream: every event is re-emitted as soon as it is
//! complete, unrelated events byte for byte, so progress notifications and
//! server-to-client requests flow while a call runs. Only the JSON-RPC response to the
//! forwarded request is rewritten. An event that claims to be JSON but isn't is dropped:
//! toolgate never passes on what it could not check.

use bytes::Bytes;
use http::{header, Response};
use http_body::Frame;
use http_body_util::{BodyExt, StreamBody};
use hyper::body::Incoming;
use serde_json::Value;
use tokio::time::Instant;

use super::jsonrpc::{answer_in, is_response};
use super::sse::{Event, Parser};
use super::tools_call::live::Tap;
use crate::proxy::backend::Failure;
use crate::proxy::body::{read_limited, Body, BoxError};
use crate::proxy::headers::{strip_hop_by_hop, strip_toolgate};

/// What to do with the response to the forwarded request.
pub trait Rewrite: Send + Sync + 'static {
    /// The message to deliver instead of `message` (the upstream's result or error).
    fn answer(&mut self, message: Value) -> Value;
    /// The message to deliver when the response can't arrive.
    fn failed(&mut self, failure: Failure) -> Value;
    /// On a resumed stream: the message to deliver for a replayed response, or `None` to
    /// drop one that can't be tied to a call (and so can't be checked).
    fn replayed(&mut self, _message: Value) -> Option<Value> {
        None
    }
}

/// Re-emits an SSE body, rewriting the response to request `id`. Until that response
/// has passed, the stream must deliver it by `deadline`.
///
/// Generic over the upstream body (hyper's `Incoming` in the proxy) so the fuzz target
/// (`crate::fuzzing::sse`) drives this same re-emitter from memory.
pub fn rewrite_sse<R: Rewrite, B: Upstream>(
    incoming: B,
    id: Value,
    rewrite: R,
    max_event: usize,
    deadline: Option<Instant>,
) -> Body {
    into_body(Stream {
        incoming,
        parser: Parser::new(max_event),
        id,
        rewrite,
        answered: false,
        eof: false,
        done: false,
        deadline,
        drop_responses: false,
    })
}

/// Re-emits a resumed GET stream (`Last-Event-ID`) without the responses it replays:
/// they answer calls and listings whose streams broke, and without knowing which,
/// toolgate can't shape or filter them. Requests and notifications pass.
pub fn without_responses<B: Upstream>(incoming: B, max_event: usize) -> Body {
    resumed(incoming, Unchecked, max_event)
}

/// Re-emits a resumed GET stream (`Last-Event-ID`): requests and notifications pass, and
/// each replayed response goes through [`Rewrite::replayed`], which shapes one it can tie
/// to its call and drops the rest.
pub fn resumed<R: Rewrite, B: Upstream>(incoming: B, rewrite: R, max_event: usize) -> Body {
    into_body(Stream {
        incoming,
        parser: Parser::new(max_event),
        id: Value::Null,
        rewrite,
        answered: false,
        eof: false,
        done: false,
        deadline: None,
        drop_responses: true,
    })
}

struct Unchecked;

impl Rewrite for Unchecked {
    fn answer(&mut self, message: Value) -> Value {
        message
    }

    fn failed(&mut self, _: Failure) -> Value {
        Value::Null
    }
}

/// A body the re-emitter can read: hyper's `Incoming`, or any in-memory body.
pub trait Upstream:
    http_body::Body<Data = Bytes, Error: std::fmt::Display> + Send + Sync + Unpin + 'static
{
}

impl<B> Upstream for B where
    B: http_body::Body<Data = Bytes, Error: std::fmt::Display> + Send + Sync + Unpin + 'static
{
}

fn into_body<R: Rewrite, B: Upstream>(state: Stream<R, B>) -> Body {
    let frames = futures_util::stream::unfold(state, |mut state| async move {
        let frame = state.next().await?;
        Some((Ok::<_, BoxError>(Frame::data(frame)), state))
    });
    BodyExt::boxed(StreamBody::new(frames))
}

struct Stream<R, B> {
    incoming: B,
    parser: Parser,
    id: Value,
    rewrite: R,
    answered: bool,
    eof: bool,
    done: bool,
    deadline: Option<Instant>,
    drop_responses: bool,
}

impl<R: Rewrite, B: Upstream> Stream<R, B> {
    async fn next(&mut self) -> Option<Bytes> {
        loop {
            if self.done {
                return None;
            }
            if let Some(event) = self.parser.next_event(self.eof) {
                match self.process(event) {
                    Some(bytes) => return Some(bytes),
                    None => continue,
                }
            }
            if self.eof {
                return None;
            }
            if let Err(e) = self.parser.check() {
                return self.fail(Failure::TooLarge(e.0));
            }
            let frame = match self.deadline.filter(|_| !self.answered) {
                Some(deadline) => {
                    match tokio::time::timeout_at(deadline, self.incoming.frame()).await {
                        Ok(frame) => frame,
                        Err(_) => return self.fail(Failure::BodyTimedOut),
                    }
                }
                None => self.incoming.frame().await,
            };
            match frame {
                None => self.eof = true,
                Some(Err(e)) => {
                    tracing::debug!(error = %e, "upstream event stream broke");
                    return self.fail(Failure::BodyBroke);
                }
                Some(Ok(frame)) => {
                    if let Ok(data) = frame.into_data() {
                        self.parser.push(&data);
                    }
                }
            }
        }
    }

    fn process(&mut self, event: Event) -> Option<Bytes> {
        if event.data.is_empty() || !event.is_message() {
            return Some(event.raw);
        }
        let Ok(value) = serde_json::from_str::<Value>(&event.data) else {
            tracing::warn!("dropping an upstream event that is not JSON");
            return None;
        };
        // A request or notification for the client passes as it came; a response, or a
        // batch that may hold one, is checked.
        if !value.is_array() && !is_response(&value) {
            return Some(event.raw);
        }
        if self.drop_responses {
            let Some(message) = self.rewrite.replayed(value) else {
                tracing::warn!("dropping a replayed response toolgate can't check");
                return None;
            };
            return Some(event.with_data(&serde_json::to_string(&message).unwrap_or_default()));
        }
        let Some(answer) = answer_in(value, &self.id) else {
            tracing::warn!("dropping an upstream batch that holds no answer to the call");
            return None;
        };
        self.answered = true;
        let message = self.rewrite.answer(answer);
        Some(event.with_data(&serde_json::to_string(&message).unwrap_or_default()))
    }

    /// Ends the stream, with a replacement response if the real one never came.
    fn fail(&mut self, failure: Failure) -> Option<Bytes> {
        self.done = true;
        if self.answered || self.drop_responses {
            return None;
        }
        self.answered = true;
        let message = self.rewrite.failed(failure);
        let data = serde_json::to_string(&message).unwrap_or_default();
        Some(Bytes::from(format!("event: message\ndata: {data}\n\n")))
    }
}

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

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::Full;
    use serde_json::json;

    struct Mark;

    impl Rewrite for Mark {
        fn answer(&mut self, mut message: Value) -> Value {
            message["checked"] = json!(true);
            message
        }

        fn failed(&mut self, _: Failure) -> Value {
            json!("failed")
        }
    }

    async fn reemit(body: Body) -> String {
        String::from_utf8(body.collect().await.unwrap().to_bytes().to_vec()).unwrap()
    }

    fn stream(data: &str) -> Full<Bytes> {
        Full::new(Bytes::from(format!("event: message\ndata: {data}\n\n")))
    }

    #[tokio::test]
    async fn a_batch_in_a_stream_is_checked_not_passed() {
        let batch = r#"[{"jsonrpc":"2.0","id":1,"result":{"x":1}}]"#;
        let out = reemit(rewrite_sse(stream(batch), json!(1), Mark, 1 << 16, None)).await;
        assert!(out.contains(r#""checked":true"#), "{out}");
        let out = reemit(rewrite_sse(stream(batch), json!(2), Mark, 1 << 16, None)).await;
        assert!(
            !out.contains("result"),
            "no answer to the call: dropped: {out}"
        );
        let out = reemit(without_responses(stream(batch), 1 << 16)).await;
        assert!(!out.contains("result"), "{out}");
        let note = r#"{"jsonrpc":"2.0","method":"notifications/progress","params":{}}"#;
        let out = reemit(without_responses(stream(note), 1 << 16)).await;
        assert!(out.contains("notifications/progress"), "{out}");
    }
}
