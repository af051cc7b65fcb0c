//! session: count the call against its agent's session just before it runs
//! (`BUDGET_EXHAUSTED`, `LOOP_DETECTED`; see `limits::session`).
//!
//! It runs after the decision and after duplicate detection (`proxy::forward`), so a
//! refused call or a duplicate never costs budget. Under a shadow policy a refusal is
//! returned as the one overridden (`Ok(Some(reject))`, recorded as `shadow-deny`) and the
//! call runs anyway, like any other shadow refusal.

use crate::limits::{Call, Ledger};
use crate::policy::agent_policy::Policy;
use crate::vocab::Reject;

/// Admits the call to its session; `Ok(Some(_))` is a refusal a shadow policy overrode.
pub fn admit(ledger: &Ledger, call: &Call<'_>, policy: &Policy) -> Result<Option<Reject>, Reject> {
    match ledger.admit(call, policy.session.as_ref()) {
        Ok(()) => Ok(None),
        Err(reject) if policy.shadow => {
            tracing::info!(tool = %call.tool, agent = %call.agent, code = %reject.code, "shadow policy would deny; forwarding");
            Ok(Some(reject))
        }
        Err(reject) => Err(reject),
    }
}
