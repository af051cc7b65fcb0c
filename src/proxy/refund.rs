//! A spend budget's charge given back when the backend never got the call.
//!
//! A call is charged against its spend budgets at admission, right before it is sent
//! (DESIGN §16), because only then is it known to go. When no connection to the backend
//! could be made, nothing was sent and nothing ran: the charge is given back, so an
//! outage of the backend does not spend an agent's day. Anything the backend answered —
//! a 503 included, which a proxy in front of a backend that acted may send too — stays
//! charged, as does a call that may have run.

use std::sync::Arc;

use crate::limits::budget::{Budgets, Charges};
use crate::limits::Call;
use crate::proxy::call::Ground;
use crate::state::Shared;

/// What admission charged one call, and where, owned so a detached send can give it
/// back.
pub struct Refund {
    agent: String,
    charges: Charges,
    to: Spent,
}

enum Spent {
    Local(Budgets),
    Shared(Arc<Shared>),
}

impl Refund {
    /// The charge `call` carries, if any, in this sidecar's ledger or the shared state.
    pub fn of<S>(ground: &Ground<'_, S>, call: &Call<'_>) -> Option<Refund> {
        let charges = call.charges?.clone();
        let to = match ground.shared {
            Some(shared) => Spent::Shared(shared.clone()),
            None => Spent::Local(ground.ledger.budgets().clone()),
        };
        Some(Refund {
            agent: call.agent.to_string(),
            charges,
            to,
        })
    }

    /// Gives the charge back.
    pub async fn give_back(self) {
        match self.to {
            Spent::Local(budgets) => budgets.refund_all(&self.agent, &self.charges),
            Spent::Shared(shared) => shared.refund(&self.agent, &self.charges).await,
        }
    }
}
