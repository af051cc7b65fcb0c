//! The one sequence of a tool call once its caller is known, for REST, for an MCP
//! `tools/call` and for each call of a batch alike:
//!
//! ```text
//! proposal ─▶ govern (policy, authorize, rate limit, validate, rules, approval)
//!          ─▶ the backend request (the front door's, from the verdict)
//!          ─▶ forward (duplicates, session limits, claims ─▶ send)
//!          ─▶ delivery (what the backend gave, for the front door to shape and render)
//! ```
//!
//! [`run`] is the only place that records in the call's `Outcome` what the gate and the
//! forward path decided: the arguments proposed, the verdict (or refusal) and what it
//! captured, a session limit's refusal, a shadowed limit, a failed-open state, a replay
//! and the backend's status; the refusal a call ends in is recorded where it is
//! rendered. The front doors (`rest`, `mcp::tools_call`) turn a request into a
//! [`Proposal`] and a [`Delivery`] into their response, and render refusals there only.

use hyper::body::Incoming;
use serde_json::Value;
use std::sync::Arc;

use crate::config::Limits;
use crate::limits::dedupe::Settled;
use crate::limits::Ledger;
use crate::policy::contract::Contract;
use crate::policy::Snapshot;
use crate::proxy::backend::exchange::Exchange;
use crate::proxy::backend::upstream::Upstream;
use crate::proxy::backend::{Backend, Keep};
use crate::proxy::forward::{forward, Plan, Sent, Stopped};
use crate::proxy::gate::Gate;
use crate::proxy::govern::{govern, Captured, Governor, Proposal, Verdict};
use crate::proxy::outcome::Outcome;
use crate::state::Shared;
use crate::telemetry::metrics::Metrics;
use crate::telemetry::spans::Tracing;
use crate::vocab::Reject;

/// What the sequence runs on: the governing core's view, the state the forward path
/// keeps (duplicates, session limits, claims), telemetry, and the backend. The
/// sidecar's is its gate's ([`Gate::ground`]); a test that decides without sockets
/// builds its own around a backend of its own.
pub struct Ground<'a, S> {
    pub governor: Governor<'a>,
    pub ledger: &'a Ledger,
    /// `state.backend: redis`: limits and claims shared by every replica.
    pub shared: Option<&'a Arc<Shared>>,
    pub metrics: &'a Arc<Metrics>,
    pub tracing: &'a Tracing,
    pub limits: &'a Limits,
    pub backend: &'a S,
}

impl Gate {
    /// The one sequence's view of this gate, for one call.
    pub fn ground(&self) -> Ground<'_, Upstream> {
        Ground {
            governor: self.governor(),
            ledger: &self.ledger,
            shared: self.shared.as_ref(),
            metrics: &self.metrics,
            tracing: &self.tracing,
            limits: &self.limits,
            backend: &self.upstream,
        }
    }
}

/// How a front door sends: what the forward path needs of it besides the verdict.
pub struct Door<'a> {
    /// An MCP `tools/call` with its JSON-RPC id as forwarded; `None` for REST.
    pub rpc_id: Option<&'a Value>,
    /// An idempotent call may be retried where its answer can't yet have been seen.
    pub retry: bool,
    /// An at-most-once lead comes back as soon as its send has started.
    pub live: bool,
    /// How an at-most-once answer is read and kept for its duplicates.
    pub keep: Keep,
}

/// What a call that ran (or joined one that did) came to, for its front door.
pub struct Delivery<'s, B = Incoming> {
    pub contract: &'s Contract,
    pub sent: Sent<B>,
    /// The session limit a shadow policy overrode, if one would have refused the call
    /// (recorded in the outcome, which keeps the first would-be refusal).
    pub shadowed: Option<Reject>,
}

/// Runs one call: governs the proposal, builds the backend request from the verdict
/// with `request`, forwards it and hands back what the backend gave. A refusal on the
/// way is returned for the front door to render, which records it as it does (a
/// session limit's is recorded here: it turns the decision into `deny`).
pub async fn run<'s, S, R>(
    ground: &Ground<'_, S>,
    snapshot: &'s Snapshot,
    proposal: Proposal<'s>,
    request: R,
    door: Door<'_>,
    outcome: &mut Outcome,
) -> Result<Delivery<'s, S::Body>, Reject>
where
    S: Backend,
    R: FnOnce(&Verdict<'s>) -> Exchange,
{
    outcome.proposed(snapshot.contract(proposal.tool), &proposal.args);
    let mut captured = Captured::default();
    let verdict = govern(&ground.governor, snapshot, proposal, &mut captured).await;
    outcome.captured(captured);
    let verdict = verdict?;
    outcome.governed(&verdict);
    let contract = verdict.contract;
    let identity = verdict.call();
    let plan = Plan {
        contract,
        policy: verdict.policy,
        call: &identity,
        joins_only: verdict.joins_only,
        exchange: request(&verdict),
        parent: outcome.span(),
        mcp: door.rpc_id.is_some(),
        rpc_id: door.rpc_id,
        retry: door.retry,
        live: door.live,
    };
    let forwarded = match forward(ground, plan, door.keep).await {
        Ok(forwarded) => forwarded,
        Err(Stopped::Denied(reject)) => {
            outcome.denied(&reject);
            return Err(reject);
        }
        Err(Stopped::Failed(reject)) => return Err(reject),
    };
    forwarded.note(outcome);
    match &forwarded.sent {
        Sent::Live { response, .. } => outcome.answered(response.status().as_u16()),
        Sent::Leading { .. } => {}
        Sent::Settled { settled, replayed } => {
            outcome.replayed(*replayed);
            // An MCP record names no status for a buffered answer: its JSON-RPC answer
            // is what the agent gets, whatever the HTTP status carrying it.
            if let (Settled::Answered(answer), None) = (settled.as_ref(), door.rpc_id) {
                outcome.answered(answer.status.as_u16());
            }
        }
    }
    Ok(Delivery {
        contract,
        sent: forwarded.sent,
        shadowed: forwarded.shadowed,
    })
}
