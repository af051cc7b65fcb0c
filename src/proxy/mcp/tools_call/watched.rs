//! An unshaped JSON answer to a `tools/call`, streamed through as it arrives while
//! [`Scan`] looks for `result.isError: true` (or a JSON-RPC `error`): the call's span
//! ends with the stream and says so.
//!
//! The last frame is held back until the upstream's body has ended: only then is it
//! known whether the call succeeded, and a success `requires` remembers (DESIGN §16) is
//! written before the answer is complete for the agent, whose next call may depend on
//! it. Every other frame goes on as soon as the next one arrives. A body that breaks
//! before its end is the call's failure (`BodyBroke`), recorded as such: never a
//! success.

use http::Response;
use http_body::{Body as _, Frame};
use http_body_util::{BodyExt, StreamBody};
use hyper::body::Incoming;
use std::pin::Pin;

use super::follow_up::FollowUp;
use super::tool_error::Scan;
use crate::proxy::backend::{Asked, Failure};
use crate::proxy::body::{Body, BoxError};

/// The answer's body, watched; `asked`: what the call asked, for the refusal of a body
/// that breaks.
pub fn body(incoming: Incoming, follow_up: FollowUp, asked: Asked) -> Body {
    let state = Watched {
        incoming,
        follow_up: Some(follow_up),
        asked,
        scan: Scan::default(),
        held: None,
        done: false,
    };
    let frames = futures_util::stream::unfold(state, |mut watched| async move {
        let frame = watched.next().await?;
        Some((frame, watched))
    });
    BodyExt::boxed(StreamBody::new(frames))
}

/// Streams `response` through, watched.
pub fn response(response: Response<Incoming>, follow_up: FollowUp, asked: Asked) -> Response<Body> {
    let (parts, incoming) = response.into_parts();
    Response::from_parts(parts, body(incoming, follow_up, asked))
}

struct Watched {
    incoming: Incoming,
    /// The call's record; taken when a broken body records the call's failure.
    follow_up: Option<FollowUp>,
    asked: Asked,
    scan: Scan,
    /// The frame last read, sent on when the next one arrives or the body ends.
    held: Option<Frame<bytes::Bytes>>,
    done: bool,
}

impl Watched {
    async fn next(&mut self) -> Option<Result<Frame<bytes::Bytes>, BoxError>> {
        loop {
            if self.done {
                return None;
            }
            let read = std::future::poll_fn(|cx| Pin::new(&mut self.incoming).poll_frame(cx));
            match read.await {
                Some(Ok(frame)) => {
                    self.watch(&frame);
                    if let Some(previous) = self.held.replace(frame) {
                        return Some(Ok(previous));
                    }
                }
                Some(Err(e)) => {
                    self.done = true;
                    if let Some(follow_up) = self.follow_up.take() {
                        follow_up.record(&Failure::BodyBroke.reject(self.asked));
                    }
                    return Some(Err(e.into()));
                }
                None => {
                    self.done = true;
                    // Only a whole answer with a result counts (not one cut short, or
                    // garbage a backend sent as JSON).
                    let remember = match self.scan.succeeded() {
                        true => self.follow_up.as_mut().and_then(FollowUp::remember),
                        false => None,
                    };
                    if let Some(before) = remember {
                        let _ = before.await;
                    }
                    return self.held.take().map(Ok);
                }
            }
        }
    }

    fn watch(&mut self, frame: &Frame<bytes::Bytes>) {
        let Some(data) = frame.data_ref().filter(|_| !self.scan.done()) else {
            return;
        };
        self.scan.feed(data);
        let Some(follow_up) = self.follow_up.as_mut() else {
            return;
        };
        if self.scan.found() {
            follow_up.tool_error();
        } else if self.scan.rpc_error() {
            follow_up.rpc_error();
        }
    }
}
