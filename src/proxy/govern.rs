//! The governing core: the one function that decides whether a call may run, for REST,
//! for MCP `tools/call` and for each call of a batch alike.
//!
//! ```text
//! proposal (tool, arguments, agent, request) → policy lookup → authorize → rate limit
//!   → validate → rules → shadow → action key → capture → audit gate → approval → verdict
//! ```
//!
//! It returns values and writes nothing: the caller records the [`Verdict`] (or the
//! refusal) in the call's outcome. What runs after it — duplicate detection, session
//! limits, the send — is the forward path's (`proxy::forward`).

use http::HeaderMap;
use serde_json::Value;

use crate::approvals::service::Approvals;
use crate::identity::task::TaskTokens;
use crate::limits::{Call, Ledger};
use crate::policy::agent_policy::Policy;
use crate::policy::contract::Contract;
use crate::policy::{Snapshot, ToolId};
use crate::proxy::decide::{decide, RequestView, Tallies};
use crate::proxy::gate::Gate;
use crate::proxy::stage::authorize;
use crate::proxy::stage::validate::Arguments;
use crate::state::Shared;
use crate::vocab::{Agent, Args, Code, Decision, Reject};

/// What the core reads besides the snapshot and the call: the state that outlives
/// snapshots, the task-token verifier, and whether the audit log takes records. The
/// sidecar's comes from its gate ([`Gate::governor`]); tests and offline tools build
/// their own, so they decide with this same code.
pub struct Governor<'a> {
    pub ledger: &'a Ledger,
    /// `state.backend: redis`: limits live there instead of in `ledger`.
    pub shared: Option<&'a Shared>,
    pub tasks: Option<&'a TaskTokens>,
    /// With `audit.onFailure: fail_closed`, whether the log currently refuses calls.
    pub audit_refuses: bool,
    /// Where a grant's `approval` holds calls; `None` (offline tools): such a call is
    /// refused, since no one can approve it.
    pub approvals: Option<&'a Approvals>,
}

impl Gate {
    /// The governing core's view of this gate, for one call.
    pub fn governor(&self) -> Governor<'_> {
        Governor {
            ledger: &self.ledger,
            shared: self.shared.as_deref(),
            tasks: self.identity.tasks.as_ref(),
            audit_refuses: self.audit.refuses_calls(),
            approvals: Some(&self.approvals),
        }
    }
}

/// A classified call, as the gate is asked to decide it.
pub struct Proposal<'a> {
    pub tool: ToolId,
    pub args: Args,
    pub agent: &'a Agent,
    /// The HTTP request it came in, for rules reading `request` and the task token.
    pub method: &'a str,
    pub path: &'a str,
    pub headers: &'a HeaderMap,
    pub session: Option<&'a str>,
    /// The call's trace id, for the records of its approval.
    pub trace_id: &'a str,
}

/// What the audit record keeps of a call whose contract sets `captureArguments`, allowed
/// or refused: its arguments (redacted) and the other variables its rules read.
#[derive(Debug, Default)]
pub struct Captured {
    pub args: Option<Value>,
    pub inputs: Option<Value>,
}

/// A call the gate lets run.
pub struct Verdict<'s> {
    pub contract: &'s Contract,
    pub policy: &'s Policy,
    /// Validated with defaults filled; unchecked when a shadow policy overrode a refusal.
    pub args: Arguments,
    /// `Allow`, or `ShadowDeny` with the refusal it overrode.
    pub decision: Decision,
    pub shadowed: Option<Reject>,
    /// The shared state couldn't be read for `session.calls`; the rules saw 0.
    pub state_failed_open: bool,
    /// The action the contract's `dedupeKey` names, as a key.
    pub action: Option<String>,
    /// The approval the call runs under (its grant's `approval`), now used.
    pub approval: Option<crate::approvals::Approval>,
}

/// With `captureArguments`, what the audit record keeps of `args`: a redacted copy.
/// Called once per call, with the arguments the call ended with.
fn capture(contract: &Contract, captured: &mut Captured, args: &Value) {
    if contract.capture_arguments {
        let mut args = args.clone();
        contract.redact.iter().for_each(|r| r.apply(&mut args));
        captured.args = Some(args);
    }
}

/// Whether this sidecar's duplicate table holds an identical call of `contract`.
fn duplicate_of_a_run(
    governor: &Governor<'_>,
    request: &RequestView<'_>,
    agent: &Agent,
    contract: &Contract,
    args: &Arguments,
    action: &Option<String>,
) -> bool {
    let Ok(key) = crate::proxy::headers::idempotency_key(request.headers) else {
        return false;
    };
    let call = Call::new(
        &agent.id,
        request.session,
        &contract.tool,
        args.args(),
        key.as_deref(),
    )
    .as_action(action.as_deref());
    governor.ledger.dedupe().holds(&call)
}

/// Decides a call; `Err` is the refusal to answer with, and nothing may be forwarded.
/// Awaits the shared state's `session.calls` (only when rules read it) and the approval
/// store (only for a grant with `approval`). With `captureArguments`, `captured` receives
/// what the audit record keeps, whatever the verdict.
pub async fn govern<'s>(
    governor: &Governor<'_>,
    snapshot: &'s Snapshot,
    proposal: Proposal<'_>,
    captured: &mut Captured,
) -> Result<Verdict<'s>, Reject> {
    let contract = snapshot.contract(proposal.tool);
    // A disabled or ungoverned agent is refused even in shadow mode.
    let policy = match authorize::policy(snapshot, &proposal.agent.id) {
        Ok(policy) => policy,
        Err(reject) => {
            capture(contract, captured, proposal.args.value());
            return Err(reject);
        }
    };
    let view = RequestView {
        method: proposal.method,
        path: proposal.path,
        headers: proposal.headers,
        session: proposal.session,
        tasks: governor.tasks,
    };
    // The arguments as proposed, kept only for what may need them after `decide` has
    // taken them: the record of a refusal, or a shadow policy forwarding it unvalidated.
    let raw_args = (policy.shadow || contract.capture_arguments).then(|| proposal.args.clone());
    let mut state_failed_open = false;
    let tallies = match governor.shared {
        None => Tallies::Local(governor.ledger),
        Some(shared) => {
            let reads_session = policy
                .grants
                .get(contract.tool.as_str())
                .is_some_and(|g| g.reads.session && !g.rules.is_empty());
            let session_calls = match proposal.session.filter(|_| reads_session) {
                Some(session) => match shared.session_calls(&proposal.agent.id, session).await {
                    Ok(calls) => calls,
                    Err(_) => {
                        state_failed_open = true;
                        0
                    }
                },
                None => 0,
            };
            Tallies::Shared { session_calls }
        }
    };
    let decided = decide(
        tallies,
        policy,
        proposal.agent,
        contract,
        proposal.args,
        &view,
        contract.capture_arguments.then_some(&mut captured.inputs),
    );
    let (args, decision, mut shadowed, needs_approval) = match decided {
        Ok(decided) => (decided.args, Decision::Allow, None, decided.needs_approval),
        Err(reject) if policy.shadow => {
            tracing::info!(tool = %contract.tool, agent = %proposal.agent.id, code = %reject.code, "shadow policy would deny; forwarding");
            let args = Arguments::unchecked(raw_args.unwrap_or_default());
            (args, Decision::ShadowDeny, Some(reject), false)
        }
        Err(reject) => {
            if let Some(raw) = &raw_args {
                capture(contract, captured, raw.value());
            }
            return Err(reject);
        }
    };
    // Past `decide`, the record keeps the arguments the call goes on with: validated,
    // defaults filled (or, overridden by a shadow policy, as proposed).
    capture(contract, captured, args.value());
    let action = match &contract.dedupe_key {
        Some(key) => match key.evaluate(args.value(), || proposal.agent.cel_value()) {
            Ok(action) => Some(action),
            Err(_) if policy.shadow => {
                tracing::info!(tool = %contract.tool, agent = %proposal.agent.id, "shadow policy would deny (dedupeKey); forwarding without it");
                None
            }
            Err(reject) => return Err(reject),
        },
        None => None,
    };
    if governor.audit_refuses {
        return Err(Reject::new(
            Code::AuditUnavailable,
            "the audit log can't be written, so no call may run",
        ));
    }
    // The second gate, last: only a call that passed everything else waits for a person.
    let spec = policy
        .grants
        .get(contract.tool.as_str())
        .and_then(|g| g.approval.as_ref())
        .filter(|_| needs_approval)
        // A duplicate of a non-idempotent call that ran (approved) or runs here joins it
        // and replays its answer: it runs nothing, so it needs no approval of its own.
        .filter(|_| {
            contract.idempotent
                || !duplicate_of_a_run(governor, &view, proposal.agent, contract, &args, &action)
        });
    let mut decision = decision;
    let approval = match (spec, governor.approvals) {
        (None, _) => None,
        (Some(spec), _) if policy.shadow => {
            tracing::info!(tool = %contract.tool, agent = %proposal.agent.id, "shadow policy would hold the call for approval; forwarding");
            decision = Decision::ShadowDeny;
            shadowed = Some(Reject::new(
                Code::ApprovalRequired,
                format!("the call would need approval ({})", spec.condition()),
            ));
            None
        }
        // Boxed: asking is kilobytes of state, and only a grant with `approval` asks.
        (Some(spec), Some(approvals)) => Some(
            Box::pin(approvals.ask(
                spec,
                contract,
                &proposal.agent.id,
                proposal.session,
                args.value(),
                proposal.trace_id,
            ))
            .await?,
        ),
        (Some(_), None) => {
            return Err(Reject::new(
                Code::ApprovalRequired,
                "this call needs a person's approval, and no approvals are kept here",
            ))
        }
    };
    Ok(Verdict {
        contract,
        policy,
        args,
        decision,
        shadowed,
        state_failed_open,
        action,
        approval,
    })
}
