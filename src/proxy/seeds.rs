//! The rules of DESIGN §16 a call meets once its rules passed: the task its limits key
//! on (`stage::task_scope`), its call order (`stage::call_order`) and its spend
//! (`stage::spend`), gathered for the governing core (`proxy::govern`) in one step.
//!
//! A policy with none of them (no session limits, no `requires`, no `budget`) returns at
//! the first line: no header is read, no map looked up, nothing allocated.

use crate::limits::budget::Charges;
use crate::policy::agent_policy::Policy;
use crate::policy::contract::Contract;
use crate::proxy::govern::{Governor, Verdict};
use crate::proxy::stage::{call_order, spend, task_scope};
use crate::proxy::task_token::Presented;
use crate::state::remember::Remember;
use crate::vocab::{Agent, Args, Decision, Reject};

/// What §16 adds to a call the gate lets run.
#[derive(Default)]
pub struct Seeds {
    /// The task its session limits and history key on, when it carries a task token.
    pub scope: Option<String>,
    /// What to remember of it, should it succeed.
    pub remember: Option<Remember>,
    /// What it costs, charged when it is admitted.
    pub charges: Option<Charges>,
    /// The refusal a shadow policy overrode.
    pub shadowed: Option<Reject>,
}

/// The call as the gate proposed it, as far as §16 reads it.
pub struct Asked<'a> {
    pub agent: &'a Agent,
    pub session: Option<&'a str>,
    /// Its task token, verified once for the rules and for this.
    pub task: &'a Presented<'a>,
}

/// Decides §16's rules for a call with validated `args`; `Err` refuses it.
pub async fn decide(
    governor: &Governor<'_>,
    policy: &Policy,
    contract: &Contract,
    asked: Asked<'_>,
    args: &Args,
) -> Result<Seeds, Reject> {
    if !policy.keys_on_task && !policy.spends {
        return Ok(Seeds::default());
    }
    // Only here is the tree built: a body checked but never parsed stays so above.
    match decide_all(governor, policy, contract, &asked, args.value()).await {
        Ok(seeds) => Ok(seeds),
        Err(reject) if policy.shadow => {
            tracing::info!(tool = %contract.tool, agent = %asked.agent.id, code = %reject.code, "shadow policy would deny; forwarding");
            Ok(Seeds {
                shadowed: Some(reject),
                ..Seeds::default()
            })
        }
        Err(reject) => Err(reject),
    }
}

async fn decide_all(
    governor: &Governor<'_>,
    policy: &Policy,
    contract: &Contract,
    asked: &Asked<'_>,
    args: &serde_json::Value,
) -> Result<Seeds, Reject> {
    let agent = &asked.agent.id;
    let task = task_scope::task_scope(policy, asked.task)?;
    let scope = task.as_deref().or(asked.session);
    let grant = match policy.grants.get(contract.tool.as_str()) {
        Some(grant) if !policy.remembered.is_empty() || policy.spends => grant,
        _ => {
            return Ok(Seeds {
                scope: task,
                ..Seeds::default()
            })
        }
    };
    if !grant.requires.is_empty() {
        let bound = task.is_some();
        call_order::check(
            governor.ledger,
            governor.shared,
            grant,
            agent,
            scope,
            bound,
            args,
        )
        .await?;
    }
    let charges = spend::charges(policy, grant, contract, asked.agent, args)?;
    let remember = call_order::remember(
        governor.ledger,
        governor.shared,
        policy,
        &contract.tool,
        agent,
        scope,
        args,
    );
    Ok(Seeds {
        scope: task,
        remember,
        charges,
        shadowed: None,
    })
}

impl Seeds {
    /// Hands the call's §16 facts to its verdict.
    pub fn apply(self, verdict: &mut Verdict<'_>) {
        verdict.scope = self.scope;
        verdict.remember = self.remember;
        verdict.charges = self.charges;
        if let Some(reject) = self.shadowed {
            if verdict.shadowed.is_none() {
                verdict.decision = Decision::ShadowDeny;
                verdict.shadowed = Some(reject);
            }
        }
    }
}
