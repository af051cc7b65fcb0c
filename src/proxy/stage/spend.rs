//! spend: what a call costs against its policy's and grant's spend budgets (DESIGN §16).
//!
//! Decided with the call (the cost from its validated arguments, the local day of each
//! budget), charged only when it is admitted (`Ledger::admit`, or the admission script
//! in Redis), so a call held for approval costs nothing until it runs. A policy and
//! grant without `budget` pay nothing here.

use serde_json::Value;

use crate::limits::budget::{Charge, Charges};
use crate::policy::agent_policy::{Grant, Policy};
use crate::policy::contract::Contract;
use crate::policy::spend::SpendBudget;
use crate::vocab::{Agent, Reject};

/// The call's charges, if a budget applies; `Err` when its cost can't be computed.
pub fn charges(
    policy: &Policy,
    grant: &Grant,
    contract: &Contract,
    agent: &Agent,
    args: &Value,
) -> Result<Option<Charges>, Reject> {
    if policy.budget.is_none() && grant.budget.is_none() {
        return Ok(None);
    }
    let cost = contract.cost.of(args, || agent.cel_value())?;
    let charge = |budget: &SpendBudget, name: String| {
        let day = budget.today();
        Charge {
            budget: name,
            per_day: budget.per_day,
            day: day.date,
            resets_in: day.resets_in,
            zone: budget.zone_name.clone(),
        }
    };
    let budgets = [
        policy
            .budget
            .as_ref()
            .map(|b| charge(b, format!("p:{}", policy.object))),
        grant
            .budget
            .as_ref()
            .map(|b| charge(b, format!("g:{}:{}", policy.object, contract.tool))),
    ];
    Ok(Some(Charges {
        cost,
        budgets: budgets.into_iter().flatten().collect(),
    }))
}
