//! The one forward path for a call the gate let run, REST and MCP alike.
//!
//! ```text
//! idempotent:      session limits → send (with retries where the caller allows) → live
//! not idempotent:  claim ─ join a running identical call → its settled answer (replayed)
//!                        └ lead → session limits → send once, detached, buffered → settled
//! ```
//!
//! Session limits run here, after duplicate detection, so a duplicate never costs budget
//! and a refused call never counts. How an at-most-once answer is read and kept is the
//! caller's (`exchange::send_buffered` for REST, the JSON-RPC collector for MCP); when
//! and how often the backend is called is decided here only.

use http::Response;
use hyper::body::Incoming;
use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::limits::dedupe::{Flight, Settled};
use crate::limits::once::{self, Started};
use crate::limits::Call;
use crate::policy::agent_policy::Policy;
use crate::policy::contract::Contract;
use crate::proxy::exchange::{send_retrying, Exchange};
use crate::proxy::gate::Gate;
use crate::proxy::stage::session;
use crate::proxy::upstream::{failure_reject, Upstream};
use crate::telemetry::spans::CallSpan;
use crate::vocab::Reject;

/// A permitted call, ready to send.
pub struct Plan<'a> {
    pub contract: &'a Contract,
    /// The policy whose session limits the call meets.
    pub policy: &'a Policy,
    /// The call as limits see it (agent, session, tool, arguments, idempotency key).
    pub call: &'a Call<'a>,
    pub exchange: Exchange,
    /// The call's server span, and the name of the client span a send starts under it:
    /// started only when the request is really sent, so a duplicate or a refusal has none.
    pub parent: &'a CallSpan,
    pub span_name: String,
    /// An idempotent call may be retried where its answer can't yet have been seen (a
    /// failed connect, a 503). MCP sends once: its answer may be a stream already
    /// relayed in part.
    pub retry: bool,
    /// An at-most-once lead returns as soon as its send has started ([`Sent::Leading`]),
    /// to relay the call's progress while it runs; duplicates still get the outcome.
    pub live: bool,
}

/// What the backend gave.
pub enum Sent {
    /// An idempotent call's response, live (the body not read yet).
    Live {
        response: Response<Incoming>,
        sent: Instant,
    },
    /// An at-most-once call this request leads, sent and still running (`Plan::live`):
    /// the caller relays its progress and waits for the flight's outcome itself.
    Leading { flight: Arc<Flight> },
    /// An at-most-once call's outcome, shared with its duplicates.
    Settled {
        settled: Arc<Settled>,
        /// A duplicate's copy of the first call's answer.
        replayed: bool,
    },
}

pub struct Forwarded {
    pub sent: Sent,
    /// The session limit a shadow policy overrode, if one would have refused the call.
    pub shadowed: Option<Reject>,
}

/// Why a call that the gate let through got no answer.
pub enum Stopped {
    /// A session limit refused it: it never ran, and the decision is `deny`.
    Denied(Reject),
    /// It was sent, or joined one that was, and failed (or its outcome is unknown).
    Failed(Reject),
}

/// Sends the call: idempotent ones live, others at most once. `buffer` reads an
/// at-most-once answer whole, given the upstream, the request, how long it may take and
/// how many bytes it may keep.
pub async fn forward<B, F>(gate: &Gate, plan: Plan<'_>, buffer: B) -> Result<Forwarded, Stopped>
where
    B: FnOnce(Upstream, Exchange, Duration, usize) -> F,
    F: Future<Output = Settled> + Send + 'static,
{
    let Plan {
        contract,
        policy,
        call,
        mut exchange,
        parent,
        span_name,
        retry,
        live,
    } = plan;
    if contract.idempotent {
        let shadowed = session::admit(&gate.ledger, call, policy).map_err(Stopped::Denied)?;
        let span = gate
            .tracing
            .start_client(parent, span_name, &mut exchange.headers);
        let sent = Instant::now();
        let response = if retry {
            send_retrying(&gate.upstream, &exchange, contract.timeout).await
        } else {
            exchange.send_once(&gate.upstream, contract.timeout).await
        };
        span.end(response.as_ref().ok().map(|r| r.status().as_u16()));
        let response =
            response.map_err(|f| Stopped::Failed(failure_reject(f, true, contract.timeout)))?;
        gate.metrics.record_upstream(&contract.tool, sent.elapsed());
        return Ok(Forwarded {
            sent: Sent::Live { response, sent },
            shadowed,
        });
    }
    // At most once. The send runs detached, bounded by the dedupe window, so a duplicate
    // can still get its answer after this request stops waiting.
    let window = contract.dedupe_window.max(contract.timeout);
    // Made only for a lead the session admitted: the one request really sent.
    let send = || {
        let span = gate
            .tracing
            .start_client(parent, span_name, &mut exchange.headers);
        let buffered = buffer(
            gate.upstream.clone(),
            exchange,
            window,
            gate.limits.max_response_bytes,
        );
        let metrics = gate.metrics.clone();
        let tool = contract.tool.clone();
        async move {
            let sent = Instant::now();
            let settled = buffered.await;
            metrics.record_upstream(&tool, sent.elapsed());
            span.end(match &settled {
                Settled::Answered(answer) => Some(answer.status.as_u16()),
                Settled::Failed { .. } => None,
            });
            settled
        }
    };
    let mut shadowed = None;
    let mut denied = false;
    let admit = || match session::admit(&gate.ledger, call, policy) {
        Ok(overridden) => {
            shadowed = overridden;
            Ok(())
        }
        Err(reject) => {
            denied = true;
            Err(reject)
        }
    };
    let started = once::start(
        gate.ledger.dedupe(),
        call,
        contract.dedupe_window,
        admit,
        send,
    );
    let delivered = match started {
        Ok(Started::Led(flight)) if live => {
            return Ok(Forwarded {
                sent: Sent::Leading { flight },
                shadowed,
            })
        }
        Ok(started) => started.wait(contract.timeout).await,
        Err(reject) => Err(reject),
    };
    match delivered {
        Ok(delivered) => Ok(Forwarded {
            sent: Sent::Settled {
                settled: delivered.settled,
                replayed: delivered.replayed,
            },
            shadowed,
        }),
        Err(reject) if denied => Err(Stopped::Denied(reject)),
        Err(reject) => Err(Stopped::Failed(reject)),
    }
}
