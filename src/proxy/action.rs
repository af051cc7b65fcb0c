//! The forward path's `dedupeKey` step: one action, one caller, within its window
//! (`limits::actions` in memory, `state::actions` on Redis).
//!
//! It runs before the duplicate table, so a call refused here (`DUPLICATE_CALL`) never
//! claims, sends or counts against a session. The first caller of an action owns it; if
//! its call certainly did not run (refused by a session limit, or the backend refused
//! the connection), it gives the action back so the next caller may run it.

use std::sync::Arc;
use std::time::Duration;

use crate::limits::actions::{self, Actions, Claimed, Owner};
use crate::limits::Call;
use crate::proxy::call::Ground;
use crate::state::{self, Shared};
use crate::vocab::Reject;

/// An action this call owns, to give back if the call never runs.
pub struct Ownership {
    tool: String,
    action: String,
    owner: Owner,
    shared: Option<Arc<Shared>>,
    actions: Actions,
}

/// Claims the call's action, if its contract names one. `Ok(Some(_))`: this call is the
/// action's first; `Ok(None)`: no action, or a duplicate from the same caller.
pub async fn claim<S>(
    ground: &Ground<'_, S>,
    call: &Call<'_>,
    trace_id: &str,
    window: Duration,
) -> Result<Option<Ownership>, Reject> {
    let Some(action) = call.action else {
        return Ok(None);
    };
    let owner = Owner {
        agent: call.agent.to_string(),
        session: call.session.map(str::to_string),
        trace_id: trace_id.to_string(),
    };
    let claimed = match ground.shared {
        Some(shared) => shared
            .claim_action(call.tool, action, &owner, window)
            .await
            .map_err(|e| state::unavailable(&e))?,
        None => ground
            .ledger
            .actions()
            .claim(call.tool, action, &owner, window),
    };
    match claimed {
        Claimed::First => Ok(Some(Ownership {
            tool: call.tool.to_string(),
            action: action.to_string(),
            owner,
            shared: ground.shared.cloned(),
            actions: ground.ledger.actions().clone(),
        })),
        Claimed::Again => Ok(None),
        Claimed::Taken(first) => Err(actions::duplicate(call.tool, &first)),
    }
}

impl Ownership {
    /// Gives the action back: its call certainly did not run. Never waits on Redis.
    pub fn release(self) {
        match self.shared {
            Some(shared) => {
                tokio::spawn(async move {
                    shared
                        .release_action(&self.tool, &self.action, &self.owner)
                        .await
                });
            }
            None => self.actions.release(&self.tool, &self.action, &self.owner),
        }
    }
}
