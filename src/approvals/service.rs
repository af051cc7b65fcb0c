//! The approvals of one sidecar: the store, who may decide, and what every transition
//! leaves behind — an audit record, a count in `toolgate_approvals_total`, and for a new
//! pending approval a notification (`approvals.notifyUrl`), never waited on.

use std::sync::Arc;

use super::approvers::ApproverIdentity;
use super::ask::{self, Transition};
use super::memory::{Bounds, MemoryStore};
use super::notify::Notifier;
use super::shared::SharedApprovals;
use super::store::Store;
use super::{now_ms, Approval, DecideError, Decision};
use crate::audit::record::{now, ApprovalEvent};
use crate::audit::AuditLog;
use crate::config::Approvals as Settings;
use crate::policy::agent_policy::Approval as Spec;
use crate::policy::contract::Contract;
use crate::state::Shared;
use crate::telemetry::metrics::{ApprovalLabels, Metrics};
use crate::vocab::Reject;

/// The largest arguments (as stored) a notification carries. The notification queue
/// holds up to 1024 approvals while a receiver is slow, so larger arguments are left
/// out (`null`; `GET /approvals/{id}` shows them) and the queue stays small whatever
/// the held calls carry.
pub const NOTIFIED_ARGUMENTS: usize = 16 * 1024;

/// What a new pending approval's notification carries: the `APPROVAL` object, its
/// arguments only when they are small.
fn notification(approval: &Approval) -> serde_json::Value {
    let now = now_ms();
    if approval.arguments.len() <= NOTIFIED_ARGUMENTS {
        return approval.view(now);
    }
    let mut view = approval.summary(now);
    view["arguments"] = serde_json::Value::Null;
    view
}

pub struct Approvals {
    pub store: Store,
    pub approvers: ApproverIdentity,
    notifier: Option<Notifier>,
    audit: AuditLog,
    metrics: Arc<Metrics>,
}

impl Approvals {
    pub fn new(
        settings: &Settings,
        shared: Option<Arc<Shared>>,
        agents: super::approvers::Agents,
        audit: AuditLog,
        metrics: Arc<Metrics>,
    ) -> anyhow::Result<Approvals> {
        let bounds = Bounds {
            count: settings.max_pending,
            bytes: settings.max_pending_bytes,
        };
        let store = match shared {
            Some(shared) => Store::Shared(SharedApprovals::new(shared, bounds)),
            None => Store::Memory(MemoryStore::new(bounds)),
        };
        let fetcher = crate::identity::remote::Fetcher::new(metrics.jwks_refreshes.clone());
        let approvers = ApproverIdentity::load(&settings.approvers, agents, &fetcher)
            .map_err(|e| anyhow::anyhow!("approvals.approvers: {e}"))?;
        let notifier = match &settings.notify_url {
            Some(url) => Some(
                Notifier::start(url).map_err(|e| anyhow::anyhow!("approvals.notifyUrl: {e}"))?,
            ),
            None => None,
        };
        Ok(Approvals {
            store,
            approvers,
            notifier,
            audit,
            metrics,
        })
    }

    /// The approval step of a call (see [`ask::ask`]), with its transitions recorded.
    #[allow(clippy::too_many_arguments)]
    pub async fn ask(
        &self,
        spec: &Spec,
        contract: &Contract,
        call: &crate::limits::Call<'_>,
        args: &serde_json::Value,
        trace_id: &str,
    ) -> Result<Approval, Reject> {
        let mut transitions = Vec::new();
        let asked = ask::ask(&self.store, spec, contract, call, args, &mut transitions).await;
        for transition in transitions {
            match transition {
                Transition::Requested(approval) => {
                    if let Some(notifier) = &self.notifier {
                        notifier.pending(notification(&approval));
                    }
                    self.note("requested", &approval, Some(trace_id)).await;
                }
                Transition::Used(approval) => self.note("used", &approval, Some(trace_id)).await,
                Transition::Expired(approval) => self.note("expired", &approval, None).await,
            }
        }
        asked
    }

    /// An approver's decision on a pending approval, recorded.
    pub async fn decide(&self, id: &str, decision: &Decision) -> Result<Approval, DecideError> {
        let decided = self.store.decide(id, decision).await?;
        let event = if decision.approve {
            "approved"
        } else {
            "denied"
        };
        self.note(event, &decided, None).await;
        Ok(decided)
    }

    async fn note(&self, event: &'static str, approval: &Approval, trace_id: Option<&str>) {
        self.metrics
            .approvals
            .get_or_create(&ApprovalLabels {
                tool: approval.tool.clone(),
                outcome: event,
            })
            .inc();
        let decided = matches!(event, "approved" | "denied");
        self.audit
            .record_approval(ApprovalEvent {
                ts: now(),
                event,
                approval_id: approval.id.clone(),
                tool: approval.tool.clone(),
                agent: approval.agent.clone(),
                session: approval.session.clone(),
                approver: approval.decided_by.clone().filter(|_| decided),
                reason: approval.reason.clone().filter(|_| decided),
                trace_id: trace_id.map(str::to_string),
            })
            .await;
    }
}
