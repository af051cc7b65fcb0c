//! The upstream's SSE answer to one forwarded request, rewritten in flight. (An answer
//! read whole — one JSON body, a batch's, an at-most-once call's — is read by the
//! backend module, `backend::collect`.)
//!
//! A rewritten stream stays a stream: every event is re-emitted as soon as it is
//! complete, unrelated events byte for byte, so progress notifications and
//! server-to-client requests flow while a call runs. Only the JSON-RPC response to the
//! forwarded request is rewritten. An event that claims to be JSON but isn't is dropped:
//! toolgate never passes on what it could not check.

use bytes::Bytes;
use http_body::Frame;
use http_body_util::{BodyExt, StreamBody};
use serde_json::Value;
use tokio::time::Instant;

use crate::proxy::backend::collect::{answer_in, is_response};
use crate::proxy::backend::sse::{Event, Parser};
use crate::proxy::backend::Failure;
use crate::proxy::body::{Body, BoxError};

/// Work that must finish before a rewritten answer goes on to the client, already
/// running: a task's handle, so the bodies that await it stay `Sync`.
pub type Before = tokio::task::JoinHandle<()>;

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
    /// What must be done before the rewritten response (just returned by
    /// [`answer`](Self::answer)) goes on to the client.
    fn before_delivery(&mut self) -> Option<Before> {
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
                let answered = self.answered;
                let Some(bytes) = self.process(event) else {
                    continue;
                };
                if self.answered && !answered {
                    if let Some(before) = self.rewrite.before_delivery() {
                        let _ = before.await;
                    }
                }
                return Some(bytes);
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
