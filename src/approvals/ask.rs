//! The gate's approval step, for a call whose grant asks for a person's approval and
//! that passed every other check (`proxy::govern`).
//!
//! Nothing is forwarded until an approval of this very call (its binding: agent,
//! session, tool, canonical arguments and round, from the call's one identity) is approved; then it is taken (approved → used, atomically), so
//! the call runs once. A repeat while pending gets the same approval id; a denied one
//! gets `APPROVAL_DENIED` until it expires; used or expired, the next call asks anew.

use serde_json::Value;

use super::store::Store;
use super::{new_id, now_ms, rfc3339, Approval, Status};
use crate::limits::Call;
use crate::policy::agent_policy::Approval as Spec;
use crate::policy::contract::Contract;
use crate::vocab::{Code, Detail, Reject};

/// What happened to an approval on the way, for the audit log and metrics.
#[derive(Debug, Clone, PartialEq)]
pub enum Transition {
    /// A new pending approval (the caller notifies).
    Requested(Approval),
    /// An approved approval was taken by this call, which now runs.
    Used(Approval),
    /// A pending or approved approval of this call ran out of time; a new one replaces it.
    Expired(Approval),
}

/// The call's approval: `Ok` with the approval it runs under, or the refusal to answer
/// with. `transitions` receives what changed.
pub async fn ask(
    store: &Store,
    spec: &Spec,
    contract: &Contract,
    call: &Call<'_>,
    args: &Value,
    transitions: &mut Vec<Transition>,
) -> Result<Approval, Reject> {
    let now = now_ms();
    let mut arguments = args.clone();
    contract.redact.iter().for_each(|r| r.apply(&mut arguments));
    // Kept as text: what it is counted as (approvals.maxPendingBytes) is what it costs.
    let arguments = serde_json::to_string(&arguments).unwrap_or_else(|_| "null".into());
    let fresh = Approval {
        id: new_id(),
        status: Status::Pending,
        tool: contract.tool.clone(),
        agent: call.agent.to_string(),
        // A task-bound call's approval names its task (`task:<id>`).
        session: call.session.map(crate::limits::scope::shown),
        arguments,
        condition: spec.condition().to_string(),
        approvers: spec.approvers.clone(),
        created_ms: now,
        expires_ms: now.saturating_add(spec.ttl.as_millis() as u64),
        decided_by: None,
        reason: None,
        binding: hex::encode(call.binding()),
    };
    // Asked at most twice: a second time only when an identical call took the approved
    // approval a moment before this one, which then needs a new approval of its own.
    let mut fresh = fresh;
    for _ in 0..2 {
        let fresh_id = fresh.id.clone();
        let requested = store.request(fresh).await?;
        if let Some(mut expired) = requested.expired {
            expired.status = Status::Expired;
            transitions.push(Transition::Expired(expired));
        }
        let current = requested.current;
        match current.status_at(now_ms()) {
            Status::Approved => {
                if store.take(&current.id).await? {
                    let mut used = current.clone();
                    used.status = Status::Used;
                    transitions.push(Transition::Used(used.clone()));
                    return Ok(used);
                }
                // The same call, asked anew: only the id and the times are its own.
                let now = now_ms();
                fresh = Approval {
                    id: new_id(),
                    status: Status::Pending,
                    created_ms: now,
                    expires_ms: now.saturating_add(spec.ttl.as_millis() as u64),
                    decided_by: None,
                    reason: None,
                    ..current
                };
            }
            Status::Denied => return Err(denied(&current)),
            _ => {
                if current.id == fresh_id {
                    transitions.push(Transition::Requested(current.clone()));
                }
                return Err(required(
                    &current,
                    "repeat the same call once it is approved",
                ));
            }
        }
    }
    Err(Reject::new(
        Code::ApprovalRequired,
        "this call's approval was used by an identical call a moment ago; repeat it to ask for a new approval",
    ))
}

fn required(approval: &Approval, next: &str) -> Reject {
    Reject::new(
        Code::ApprovalRequired,
        format!(
            "{} needs a person's approval ({}); approval {} is pending until {}: {next}",
            approval.tool,
            approval.condition,
            approval.id,
            rfc3339(approval.expires_ms)
        ),
    )
    .with_details(vec![Detail {
        approval_id: Some(approval.id.clone()),
        status: Some(Status::Pending.as_str().into()),
        expires_at: Some(rfc3339(approval.expires_ms)),
        ..Detail::default()
    }])
}

fn denied(approval: &Approval) -> Reject {
    let by = approval.decided_by.as_deref().unwrap_or("an approver");
    let reason = approval
        .reason
        .as_deref()
        .filter(|r| !r.is_empty())
        .unwrap_or("no reason given");
    Reject::new(
        Code::ApprovalDenied,
        format!(
            "{} was denied by {by} (approval {}): {reason}",
            approval.tool, approval.id
        ),
    )
    .with_details(vec![Detail {
        approval_id: Some(approval.id.clone()),
        status: Some(Status::Denied.as_str().into()),
        expires_at: Some(rfc3339(approval.expires_ms)),
        ..Detail::default()
    }])
}
