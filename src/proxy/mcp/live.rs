//! Live progress for a call that runs at most once (an MCP tool that is not idempotent).
//!
//! The call is sent by a detached task (`proxy::forward`, `limits::once`) so that its
//! duplicates can share its outcome. While that task collects the final response for the
//! dedupe store, it relays everything else the upstream streams — progress, log
//! messages, server-to-client requests such as `sampling/createMessage` — to the request
//! that leads the call, through a [`Tap`], event by event as each arrives. The lead's
//! answer is an SSE stream of those events, ended by the final response taken from the
//! settled flight and shaped for this delivery. Duplicates get only the final response:
//! a server-to-client request is meant for the first caller alone.
//!
//! A lead whose client reads too slowly, or has left, stops being relayed to; the call
//! itself is never held up for it beyond the dedupe window.

use bytes::Bytes;
use http::HeaderMap;
use http_body::Frame;
use http_body_util::{BodyExt, StreamBody};
use serde_json::Value;
use std::sync::Arc;
use tokio::sync::mpsc;
use tokio::time::Instant;

use crate::limits::dedupe::{Flight, Settled};
use crate::proxy::body::{Body, BoxError};

/// Events a lead may fall behind by before relaying waits for it.
const RELAY_BUFFER: usize = 64;
/// How long a lead waits for the flight to settle once relaying has ended: the collector
/// settles it as it returns, so this only covers the step between the two.
const SETTLE_GRACE: std::time::Duration = std::time::Duration::from_secs(1);

/// What the collector relays to the lead.
pub enum Relay {
    /// The upstream answered with an event stream: these are its (cleaned) headers.
    Head(HeaderMap),
    /// One event, as the upstream sent it.
    Event(Bytes),
}

/// The collector's end: relays until the lead is gone or too slow.
pub struct Tap {
    tx: Option<mpsc::Sender<Relay>>,
    /// Past it, relaying gives up rather than delay the call's outcome.
    deadline: Instant,
}

/// A tap and the lead's end of it.
pub fn channel(deadline: Instant) -> (Tap, mpsc::Receiver<Relay>) {
    let (tx, rx) = mpsc::channel(RELAY_BUFFER);
    (
        Tap {
            tx: Some(tx),
            deadline,
        },
        rx,
    )
}

impl Tap {
    /// Relays `relay`, waiting for room until the deadline; a lead that has left or
    /// fallen behind is dropped and never waited for again.
    pub async fn send(&mut self, relay: Relay) {
        let Some(tx) = &self.tx else {
            return;
        };
        // Past the lead's deadline it has stopped listening (it answered the timeout).
        if Instant::now() >= self.deadline {
            self.tx = None;
            return;
        }
        let sent = tokio::time::timeout_at(self.deadline, tx.send(relay)).await;
        if !matches!(sent, Ok(Ok(()))) {
            tracing::debug!("the lead of a call stopped taking its progress");
            self.tx = None;
        }
    }
}

/// The lead's SSE body: every relayed event as it comes, then the final response that
/// `finish` makes of the flight's outcome (`None`: not settled by `deadline`).
pub fn body<F>(rx: mpsc::Receiver<Relay>, flight: Arc<Flight>, deadline: Instant, finish: F) -> Body
where
    F: FnOnce(Option<Arc<Settled>>) -> Value + Send + Sync + 'static,
{
    let state = Some(Lead {
        rx,
        flight,
        deadline,
        finish,
    });
    let frames = futures_util::stream::unfold(state, |state| async move {
        let mut lead = state?;
        // The contract's timeout holds until the result arrives, events or not.
        let settled = loop {
            match tokio::time::timeout_at(lead.deadline, lead.rx.recv()).await {
                Ok(Some(Relay::Event(raw))) => {
                    return Some((Ok::<_, BoxError>(Frame::data(raw)), Some(lead)))
                }
                Ok(Some(Relay::Head(_))) => continue,
                // The collector is done relaying: the flight settles as it returns, so
                // wait for it a moment even at the deadline.
                Ok(None) => {
                    let wait = lead.deadline.saturating_duration_since(Instant::now());
                    break lead.flight.outcome(wait.max(SETTLE_GRACE)).await;
                }
                // Out of time while the call runs on: the lead is answered now.
                Err(_) => break lead.flight.settled(),
            }
        };
        let message = (lead.finish)(settled);
        let data = serde_json::to_string(&message).unwrap_or_default();
        let last = Bytes::from(format!("event: message\ndata: {data}\n\n"));
        Some((Ok(Frame::data(last)), None))
    });
    BodyExt::boxed(StreamBody::new(frames))
}

struct Lead<F> {
    rx: mpsc::Receiver<Relay>,
    flight: Arc<Flight>,
    deadline: Instant,
    finish: F,
}
