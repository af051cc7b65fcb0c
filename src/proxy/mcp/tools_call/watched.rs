//! An unshaped JSON answer to a `tools/call`, streamed through as it arrives while
//! [`Scan`] looks for `result.isError: true` (or a JSON-RPC `error`): the call's span
//! ends with the stream and says so.
//!
//! The last frame is held back until the upstream's body has ended: only then is it
//! known whether the call succeeded, and a success `requires` remembers (DESIGN §16) is
//! written before the answer is complete for the agent, whose next call may depend on
//! it. Every other frame goes on as soon as the next one arrives.

use http::Response;
use http_body::{Body as _, Frame};
use http_body_util::{BodyExt, StreamBody};
use hyper::body::Incoming;
use std::pin::Pin;

use super::follow_up::FollowUp;
use super::tool_error::Scan;
use crate::proxy::body::{Body, BoxError};

/// The answer's body, watched.
pub fn body(incoming: Incoming, follow_up: FollowUp) -> Body {
    let state = Watched {
        incoming,
        follow_up,
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
pub fn response(response: Response<Incoming>, follow_up: FollowUp) -> Response<Body> {
    let (parts, incoming) = response.into_parts();
    Response::from_parts(parts, body(incoming, follow_up))
}

struct Watched {
    incoming: Incoming,
    follow_up: FollowUp,
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
                    return Some(Err(e.into()));
                }
                None => {
                    self.done = true;
                    // Spawned and awaited: the body must stay `Sync`, the work needn't.
                    if let Some(before) = self.follow_up.remember().map(tokio::spawn) {
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
        if self.scan.found() {
            self.follow_up.tool_error();
        } else if self.scan.rpc_error() {
            self.follow_up.rpc_error();
        }
    }
}
