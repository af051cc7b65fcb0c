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
//! Most answers are one JSON body: then nothing is relayed, and the only cost is a
//! oneshot that closes. The event channel exists only once the upstream answers with an
//! event stream. A lead whose client reads too slowly, or has left, stops being relayed
//! to; the call itself is never held up for it beyond the lead's deadline.

use bytes::Bytes;
use http_body::Frame;
use http_body_util::{BodyExt, StreamBody};
use serde_json::Value;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::mpsc;
use tokio::time::Instant;

use crate::limits::dedupe::{Flight, Settled};
use crate::proxy::backend::relay::Relayed;
use crate::proxy::body::{Body, BoxError};
use crate::proxy::mcp::answer::Before;

/// How long a lead waits for the flight to settle once relaying has ended: the collector
/// settles it as it returns, so this only covers the step between the two.
const SETTLE_GRACE: Duration = Duration::from_secs(1);

/// The lead's SSE body: every relayed event as it comes, then the final response that
/// `finish` makes of the flight's outcome (`None`: not settled by `deadline`) — unless
/// the upstream ended its stream to be resumed ([`Relayed::resumed`]): then the body
/// ends as the upstream's did, and the client resumes the session's stream.
pub fn body<F>(relayed: Relayed, flight: Arc<Flight>, deadline: Instant, finish: F) -> Body
where
    F: FnOnce(Option<Arc<Settled>>) -> (Value, Option<Before>) + Send + Sync + 'static,
{
    let state = Some(Lead {
        events: relayed.events,
        resumed: relayed.resumed,
        flight,
        deadline,
        finish,
    });
    let frames = futures_util::stream::unfold(state, |state| async move {
        let mut lead = state?;
        // The contract's timeout holds until the result arrives, events or not.
        let settled = match tokio::time::timeout_at(lead.deadline, lead.events.recv()).await {
            Ok(Some(event)) => return Some((Ok::<_, BoxError>(Frame::data(event)), Some(lead))),
            // The upstream closed its stream to be resumed: so does the lead.
            Ok(None) if lead.resumed.load(Ordering::Relaxed) => return None,
            // The collector is done relaying: the flight settles as it returns, so wait
            // for it a moment even at the deadline.
            Ok(None) => lead.flight.outcome(settle_wait(lead.deadline)).await,
            // Out of time while the call runs on: the lead is answered now.
            Err(_) => lead.flight.settled(),
        };
        let (message, before) = (lead.finish)(settled);
        if let Some(before) = before {
            let _ = before.await;
        }
        let data = serde_json::to_string(&message).unwrap_or_default();
        let last = Bytes::from(format!("event: message\ndata: {data}\n\n"));
        Some((Ok(Frame::data(last)), None))
    });
    BodyExt::boxed(StreamBody::new(frames))
}

/// How long to wait for a flight whose collector has returned.
pub fn settle_wait(deadline: Instant) -> Duration {
    deadline
        .saturating_duration_since(Instant::now())
        .max(SETTLE_GRACE)
}

struct Lead<F> {
    events: mpsc::Receiver<Bytes>,
    resumed: Arc<AtomicBool>,
    flight: Arc<Flight>,
    deadline: Instant,
    finish: F,
}
