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
//!
//! A call has one identity, [`Verdict::call`]: agent, session, tool, the validated
//! arguments, the round fields of a multi-round MCP call, the idempotency key and the
//! `dedupeKey` action. The approval step and the forward path (duplicates, session
//! limits, claims) both key on it, so an approval can only ever be matched by the call
//! it was made for (DESIGN §14).

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
use crate::proxy::seeds::{self, Asked};
use crate::proxy::stage::validate::Arguments;
use crate::proxy::stage::{authorize, task_scope};
use crate::proxy::task_token::Presented;
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
    /// A later round of a multi-round MCP call: its `inputResponses` / `requestState`.
    pub round: Option<Value>,
    /// The request's `Idempotency-Key`, already checked.
    pub idempotency_key: Option<&'a str>,
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
    pub agent: &'s Agent,
    pub session: Option<&'s str>,
    /// Validated with defaults filled; unchecked when a shadow policy overrode a refusal.
    pub args: Arguments,
    /// The round fields of a multi-round MCP call, part of the call's identity.
    pub round: Option<Value>,
    pub idempotency_key: Option<&'s str>,
    /// `Allow`, or `ShadowDeny` with the refusal it overrode.
    pub decision: Decision,
    pub shadowed: Option<Reject>,
    /// The shared state couldn't be read for `session.calls`; the rules saw 0.
    pub state_failed_open: bool,
    /// The action the contract's `dedupeKey` names, as a key.
    pub action: Option<String>,
    /// The approval the call runs under (its grant's `approval`), now used.
    pub approval: Option<crate::approvals::Approval>,
    /// The grant asks for approval, and none was taken because an identical call ran or
    /// runs here: this call may only join that one, never run itself.
    pub joins_only: bool,
    /// §16 (`proxy::seeds`): the task its session limits key on instead of `session`,
    /// what to remember of it should it succeed, what it costs when admitted.
    pub scope: Option<String>,
    pub remember: Option<crate::state::remember::Remember>,
    pub charges: Option<crate::limits::budget::Charges>,
}

impl<'s> Verdict<'s> {
    /// The call's one identity: what approvals, duplicates, claims and session limits
    /// key on. Everything in it comes from the verdict, so every step that asks for it
    /// gets the same call.
    pub fn call(&self) -> Call<'_> {
        Call::new(
            &self.agent.id,
            self.scope.as_deref().or(self.session),
            &self.contract.tool,
            self.args.args(),
            self.idempotency_key,
        )
        .in_round(self.round.as_ref())
        .as_action(self.action.as_deref())
        .charging(self.charges.as_ref())
    }
}

/// With `captureArguments`, what the audit record keeps of `args`: a redacted copy.
/// Called once per call, with the arguments the call ended with. Takes `Args`, not their
/// tree: a contract that captures nothing must not build one (a parse per call).
fn capture(contract: &Contract, captured: &mut Captured, args: &Args) {
    if contract.capture_arguments {
        let mut args = args.value().clone();
        contract.redact.iter().for_each(|r| r.apply(&mut args));
        captured.args = Some(args);
    }
}

/// Decides a call; `Err` is the refusal to answer with, and nothing may be forwarded.
/// Awaits the shared state's `session.calls` (only when rules read it) and the approval
/// store (only for a grant with `approval`). With `captureArguments`, `captured` receives
/// what the audit record keeps, whatever the verdict.
pub async fn govern<'s>(
    governor: &Governor<'_>,
    snapshot: &'s Snapshot,
    proposal: Proposal<'s>,
    captured: &mut Captured,
) -> Result<Verdict<'s>, Reject> {
    let contract = snapshot.contract(proposal.tool);
    // A disabled or ungoverned agent is refused even in shadow mode.
    let policy = match authorize::policy(snapshot, &proposal.agent.id) {
        Ok(policy) => policy,
        Err(reject) => {
            capture(contract, captured, &proposal.args);
            return Err(reject);
        }
    };
    // The task token, verified at most once whatever reads it (rules, §16's scope).
    let task = Presented::new(proposal.headers, &proposal.agent.id, governor.tasks);
    let view = RequestView {
        method: proposal.method,
        path: proposal.path,
        headers: proposal.headers,
        session: proposal.session,
        task: &task,
    };
    // The arguments as proposed, kept only for what may need them after `decide` has
    // taken them: the record of a refusal, or a shadow policy forwarding it unvalidated.
    let raw_args = (policy.shadow || contract.capture_arguments).then(|| proposal.args.clone());
    let (tallies, state_failed_open) = tallies(governor, policy, contract, &proposal, &task).await;
    let decided = decide(
        tallies,
        policy,
        proposal.agent,
        contract,
        proposal.args,
        &view,
        contract.capture_arguments.then_some(&mut captured.inputs),
    );
    let (args, decision, shadowed, needs_approval) = match decided {
        Ok(decided) => (decided.args, Decision::Allow, None, decided.needs_approval),
        Err(reject) if policy.shadow => {
            tracing::info!(tool = %contract.tool, agent = %proposal.agent.id, code = %reject.code, "shadow policy would deny; forwarding");
            let args = Arguments::unchecked(raw_args.unwrap_or_default());
            (args, Decision::ShadowDeny, Some(reject), false)
        }
        Err(reject) => {
            if let Some(raw) = &raw_args {
                capture(contract, captured, raw);
            }
            return Err(reject);
        }
    };
    // Past `decide`, the record keeps the arguments the call goes on with: validated,
    // defaults filled (or, overridden by a shadow policy, as proposed).
    capture(contract, captured, args.args());
    // §16: the task the call's limits key on, its call order, its spend (proxy::seeds).
    let asked = Asked {
        agent: proposal.agent,
        session: proposal.session,
        task: &task,
    };
    let seeds = seeds::decide(governor, policy, contract, asked, args.args()).await?;
    let action = action(contract, policy, proposal.agent, args.args())?;
    if governor.audit_refuses {
        return Err(Reject::new(
            Code::AuditUnavailable,
            "the audit log can't be written, so no call may run",
        ));
    }
    let mut verdict = Verdict {
        contract,
        policy,
        agent: proposal.agent,
        session: proposal.session,
        args,
        round: proposal.round,
        idempotency_key: proposal.idempotency_key,
        decision,
        shadowed,
        state_failed_open,
        action,
        approval: None,
        joins_only: false,
        scope: None,
        remember: None,
        charges: None,
    };
    seeds.apply(&mut verdict);
    // The second gate, last: only a call that passed everything else waits for a person.
    if needs_approval {
        hold(governor, &mut verdict, proposal.trace_id).await?;
    }
    Ok(verdict)
}

/// The approval step of a call whose grant asks for one (`approval`): used, joined, or
/// (a shadow policy) overridden; `Err`: the call waits for a person, or was refused.
async fn hold(
    governor: &Governor<'_>,
    verdict: &mut Verdict<'_>,
    trace_id: &str,
) -> Result<(), Reject> {
    let (policy, tool) = (verdict.policy, verdict.contract.tool.as_str());
    let Some(spec) = policy.grants.get(tool).and_then(|g| g.approval.as_ref()) else {
        return Ok(());
    };
    match approve(governor, verdict, spec, trace_id).await? {
        Approved::Used(approval) => verdict.approval = Some(approval),
        // A shadow policy forwards whatever happens; it holds nothing to joining.
        Approved::JoinsOnly => verdict.joins_only = !policy.shadow,
        Approved::Shadowed(reject) => {
            verdict.decision = Decision::ShadowDeny;
            verdict.shadowed = Some(reject);
        }
    }
    Ok(())
}

/// What the rate limits and rules count with: the ledger, or the shared state's
/// `session.calls` (asked only when a rule of the grant reads `session`). `true`: the
/// shared state couldn't be asked, and the rules see 0.
async fn tallies<'g>(
    governor: &Governor<'g>,
    policy: &Policy,
    contract: &Contract,
    proposal: &Proposal<'_>,
    task: &Presented<'_>,
) -> (Tallies<'g>, bool) {
    let Some(shared) = governor.shared else {
        return (Tallies::Local(governor.ledger), false);
    };
    let reads_session = policy
        .grants
        .get(contract.tool.as_str())
        .is_some_and(|g| g.reads.session && !g.rules.is_empty());
    if !reads_session {
        return (Tallies::Shared { session_calls: 0 }, false);
    }
    let Some(counted) = task_scope::counted(policy, task, proposal.session) else {
        return (Tallies::Shared { session_calls: 0 }, false);
    };
    match shared.session_calls(&proposal.agent.id, &counted).await {
        Ok(session_calls) => (Tallies::Shared { session_calls }, false),
        Err(_) => (Tallies::Shared { session_calls: 0 }, true),
    }
}

/// The action the contract's `dedupeKey` names for these arguments, as a key; a shadow
/// policy forwards a call whose key can't be made without one. The arguments' tree is
/// built only for a contract with a key.
fn action(
    contract: &Contract,
    policy: &Policy,
    agent: &Agent,
    args: &Args,
) -> Result<Option<String>, Reject> {
    let Some(key) = &contract.dedupe_key else {
        return Ok(None);
    };
    match key.evaluate(args.value(), || agent.cel_value()) {
        Ok(action) => Ok(Some(action)),
        Err(_) if policy.shadow => {
            tracing::info!(tool = %contract.tool, agent = %agent.id, "shadow policy would deny (dedupeKey); forwarding without it");
            Ok(None)
        }
        Err(reject) => Err(reject),
    }
}

/// How a call that needs approval may go on.
enum Approved {
    /// Under this approval, now used: it runs once.
    Used(crate::approvals::Approval),
    /// Without one: an identical call ran (approved) or runs here, and this one joins it
    /// and replays its answer, running nothing.
    JoinsOnly,
    /// A shadow policy would have held it; it is forwarded, marked.
    Shadowed(Reject),
}

/// The approval step, keyed on the call's one identity ([`Verdict::call`]).
async fn approve(
    governor: &Governor<'_>,
    verdict: &Verdict<'_>,
    spec: &crate::policy::agent_policy::Approval,
    trace_id: &str,
) -> Result<Approved, Reject> {
    let call = verdict.call();
    // A duplicate of a non-idempotent call joins the one that ran: it needs no approval
    // of its own. The forward path holds it to that (`joins_only`): should the first
    // call's entry go before this one claims, it is refused, never run.
    if !verdict.contract.idempotent && governor.ledger.dedupe().holds(&call) {
        return Ok(Approved::JoinsOnly);
    }
    if verdict.policy.shadow {
        tracing::info!(tool = %verdict.contract.tool, agent = %verdict.agent.id, "shadow policy would hold the call for approval; forwarding");
        let condition = spec.condition();
        return Ok(Approved::Shadowed(Reject::new(
            Code::ApprovalRequired,
            format!("the call would need approval ({condition})"),
        )));
    }
    let Some(approvals) = governor.approvals else {
        return Err(Reject::new(
            Code::ApprovalRequired,
            "this call needs a person's approval, and no approvals are kept here",
        ));
    };
    // Boxed: asking is kilobytes of state, and only a grant with `approval` asks.
    let approval = Box::pin(approvals.ask(
        spec,
        verdict.contract,
        &call,
        verdict.args.value(),
        trace_id,
    ))
    .await?;
    Ok(Approved::Used(approval))
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;
    use serde_json::json;
    use std::sync::Arc;

    const POLICIES: &str = r#"
apiVersion: toolgate.dev/v1alpha1
kind: ToolContract
metadata: {name: open}
spec: {tool: open, input: {}, idempotent: true}
---
apiVersion: toolgate.dev/v1alpha1
kind: ToolContract
metadata: {name: kept}
spec: {tool: kept, input: {}, idempotent: true, captureArguments: true}
---
apiVersion: toolgate.dev/v1alpha1
kind: AgentPolicy
metadata: {name: p}
spec:
  agents: [ops-bot]
  tools: [{name: open}, {name: kept}]
"#;

    /// Governs a call of `tool` whose body was checked and not parsed (as REST's classify
    /// leaves it): whether the verdict's arguments got parsed, and what was captured.
    async fn governed(tool: &str) -> (bool, Captured) {
        let (snapshot, ledger) = crate::proxy::decide::tests::fixture(POLICIES);
        let governor = Governor {
            ledger: &ledger,
            shared: None,
            tasks: None,
            audit_refuses: false,
            approvals: None,
        };
        let agent = Agent {
            id: Arc::from("ops-bot"),
            issuer: Arc::from("tokens"),
            claims: json!({}),
        };
        let headers = HeaderMap::new();
        let proposal = Proposal {
            tool: snapshot.tool(tool).unwrap(),
            args: Args::from_object_body(Bytes::from_static(br#"{"q":"x"}"#)).unwrap(),
            round: None,
            idempotency_key: None,
            agent: &agent,
            method: "POST",
            path: "/t",
            headers: &headers,
            session: None,
            trace_id: "0af7651916cd43dd8448eb211c80319c",
        };
        let mut captured = Captured::default();
        let verdict = govern(&governor, &snapshot, proposal, &mut captured)
            .await
            .unwrap();
        (verdict.args.args().is_parsed(), captured)
    }

    /// A parse per call was the largest cost of a minimal call: the decision must not
    /// build the arguments' tree when nothing reads it (issue 49).
    #[tokio::test]
    async fn arguments_nothing_reads_stay_unparsed() {
        let (parsed, captured) = governed("open").await;
        assert!(!parsed, "nothing read the arguments, yet they were parsed");
        assert!(captured.args.is_none());
        let (_, captured) = governed("kept").await;
        assert_eq!(captured.args, Some(json!({"q": "x"})));
    }
}
