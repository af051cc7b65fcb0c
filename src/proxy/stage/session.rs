//! session: count the call against its agent's session just before it runs
//! (`BUDGET_EXHAUSTED`, `LOOP_DETECTED`; see `limits::session`).
//!
//! It runs after the decision and after duplicate detection, so a refused call or a
//! duplicate never costs budget. Under a shadow policy a refusal is recorded as
//! `shadow-deny` and the call runs anyway, like any other shadow refusal.

use crate::limits::{Call, Ledger};
use crate::policy::agent_policy::Policy;
use crate::proxy::outcome::{Decision, Outcome};
use crate::vocab::Reject;

pub fn admit(
    ledger: &Ledger,
    call: &Call<'_>,
    policy: &Policy,
    outcome: &mut Outcome,
) -> Result<(), Reject> {
    match ledger.admit(call, policy.session.as_ref()) {
        Ok(()) => Ok(()),
        Err(reject) if policy.shadow => {
            tracing::info!(tool = %call.tool, agent = %call.agent, code = %reject.code, "shadow policy would deny; forwarding");
            outcome.decision = Decision::ShadowDeny;
            if outcome.code.is_none() {
                outcome.code = Some(reject.code);
            }
            Ok(())
        }
        Err(reject) => {
            outcome.decision = Decision::Deny;
            Err(reject)
        }
    }
}
