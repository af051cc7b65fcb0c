//! An at-most-once call's progress, relayed to the request that leads it while the
//! backend's answer is collected for the call's duplicates (`Keep::Answer`).
//!
//! The collector (`backend::collect`) holds the [`Tap`]; the lead holds the other end
//! and, once the backend answers with an event stream, receives its headers and then
//! each event as it arrives ([`Relayed`]). The MCP front door turns that into the lead's
//! own stream (`mcp::tools_call::live`). Most answers are one JSON body: then nothing is
//! relayed, and the only cost is a oneshot that closes.

use bytes::Bytes;
use http::HeaderMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;

/// Events a lead may fall behind by before relaying waits for it.
const RELAY_BUFFER: usize = 64;

/// An upstream event stream, as the lead receives it.
pub struct Relayed {
    /// The stream's (cleaned) response headers.
    pub headers: HeaderMap,
    pub events: mpsc::Receiver<Bytes>,
    /// Set when the upstream ended its stream to be resumed (SSE polling, SEP-1699): the
    /// result reaches the client on the stream it resumes, so the lead's ends without it.
    pub resumed: Arc<AtomicBool>,
}

/// The collector's end: relays until the lead is gone, too slow, or past its deadline.
pub struct Tap {
    head: Option<oneshot::Sender<Relayed>>,
    events: Option<mpsc::Sender<Bytes>>,
    deadline: Instant,
    resumed: Arc<AtomicBool>,
}

/// A tap, and the lead's end of it: an event stream, or closed when the answer is not one.
pub fn channel(deadline: Instant) -> (Tap, oneshot::Receiver<Relayed>) {
    let (head, opened) = oneshot::channel();
    let tap = Tap {
        head: Some(head),
        events: None,
        deadline,
        resumed: Arc::new(AtomicBool::new(false)),
    };
    (tap, opened)
}

impl Tap {
    /// The upstream answers with an event stream: hand it to the lead.
    pub fn open(&mut self, headers: HeaderMap) {
        let Some(head) = self.head.take() else {
            return;
        };
        let (tx, events) = mpsc::channel(RELAY_BUFFER);
        let resumed = self.resumed.clone();
        if head
            .send(Relayed {
                headers,
                events,
                resumed,
            })
            .is_ok()
        {
            self.events = Some(tx);
        }
    }

    /// The upstream ended its stream cleanly, to be resumed: the lead ends its own without
    /// a final response, and its client resumes the session's stream for the result.
    pub fn resumable(&mut self) {
        self.resumed.store(true, Ordering::Relaxed);
    }

    /// Relays one event, waiting for room until the deadline; a lead that has left or
    /// fallen behind is dropped and never waited for again.
    pub async fn send(&mut self, event: Bytes) {
        let Some(tx) = &self.events else {
            return;
        };
        // Past the lead's deadline it has stopped listening (it answered the timeout).
        if Instant::now() >= self.deadline {
            self.events = None;
            return;
        }
        let sent = tokio::time::timeout_at(self.deadline, tx.send(event)).await;
        if !matches!(sent, Ok(Ok(()))) {
            tracing::debug!("the lead of a call stopped taking its progress");
            self.events = None;
        }
    }
}
