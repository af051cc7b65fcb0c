//! The record of a streamed tools/call after its head has gone to the agent: the call's
//! span ends with the stream, and a refusal found in the stream (or, for a live lead
//! whose client left, in the call's settled outcome) gets an audit record of its own.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use crate::limits::dedupe::{Flight, Settled};
use crate::limits::once::unknown_outcome;
use crate::proxy::gate::Gate;
use crate::proxy::mcp::answer::Before;
use crate::proxy::outcome::Outcome;
use crate::vocab::Reject;

/// The audit record of a streamed call whose result turns out refused after the call's
/// own record was written (the response head had already gone to the agent).
pub struct FollowUp {
    gate: Arc<Gate>,
    /// The call's facts and its span; taken when a refusal records it.
    outcome: Option<Outcome>,
    /// A live lead's call, running detached: if the stream goes before its outcome is
    /// known (the client left), the outcome is still awaited and a failure recorded —
    /// unless the upstream ended its stream to be resumed (`resumed`), the result going
    /// to the client on the stream it resumes.
    watch: Option<(Arc<Flight>, tokio::time::Instant, Duration, Arc<AtomicBool>)>,
}

impl FollowUp {
    /// Takes over the call's span from `outcome`, to end it when the stream ends.
    pub fn of(gate: &Arc<Gate>, outcome: &mut Outcome) -> FollowUp {
        FollowUp {
            gate: gate.clone(),
            outcome: Some(outcome.follow_up()),
            watch: None,
        }
    }

    /// The stream is a live lead's: its call runs on in `flight`, which the lead waits
    /// for until `deadline` (its contract's `timeout`).
    pub fn watch(
        &mut self,
        flight: Arc<Flight>,
        deadline: tokio::time::Instant,
        timeout: Duration,
        resumed: Arc<AtomicBool>,
    ) {
        self.watch = Some((flight, deadline, timeout, resumed));
    }

    /// The tool answered `isError: true` in the stream: the span says so when it ends.
    pub fn tool_error(&mut self) {
        if let Some(outcome) = &mut self.outcome {
            outcome.tool_error();
        }
    }

    /// The server answered the call with a JSON-RPC `error` in the stream.
    pub fn rpc_error(&mut self) {
        if let Some(outcome) = &mut self.outcome {
            outcome.rpc_error();
        }
    }

    /// Marks how an answer read from the stream says the call went ([`super::judge`]).
    pub fn judge(&mut self, message: &serde_json::Value) {
        if let Some(outcome) = &mut self.outcome {
            super::judge(message, outcome);
        }
    }

    /// The answer just read succeeded: what `requires` remembers of the call, to be
    /// written before the answer goes on (DESIGN §16: the agent's next call must see it).
    pub fn remember(&mut self) -> Option<Before> {
        let remember = self.outcome.as_mut()?.take_remembered()?;
        Some(tokio::spawn(remember.commit()))
    }

    pub fn record(mut self, reject: &Reject) {
        let Some(mut outcome) = self.outcome.take() else {
            return;
        };
        tracing::warn!(tool = ?outcome.tool(), code = %reject.code, trace_id = %outcome.trace_id(), "streamed tool result refused");
        outcome.refused(reject);
        let gate = self.gate.clone();
        tokio::spawn(async move {
            outcome.record(&gate.metrics, &gate.audit).await;
        });
    }
}

impl Drop for FollowUp {
    /// The stream ended without a refusal (or its client left): the span ends as the call
    /// went.
    fn drop(&mut self) {
        let Some(mut outcome) = self.outcome.take() else {
            return;
        };
        let (Some((flight, deadline, timeout, resumed)), Ok(runtime)) =
            (self.watch.take(), tokio::runtime::Handle::try_current())
        else {
            return outcome.close(&self.gate.metrics);
        };
        if resumed.load(Ordering::Relaxed) {
            return outcome.close(&self.gate.metrics);
        }
        // The stream went before the call's outcome reached it: a failure of the call
        // that ran is still recorded, as it would have been in the stream.
        let gate = self.gate.clone();
        runtime.spawn(async move {
            let wait = deadline.saturating_duration_since(tokio::time::Instant::now());
            let failed = match flight.outcome(wait).await.as_deref() {
                Some(Settled::Failed { reject, .. }) => reject.clone(),
                Some(Settled::Answered(_)) => return outcome.close(&gate.metrics),
                // What the lead would have been told at its timeout.
                None => unknown_outcome(
                    timeout,
                    "the call may still complete; it will not be sent again",
                ),
            };
            outcome.refused(&failed);
            outcome.record(&gate.metrics, &gate.audit).await;
        });
    }
}
