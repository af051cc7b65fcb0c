//! call order: a grant's `requires` checked against the task's or session's earlier
//! successful calls (DESIGN §16; the check itself is `policy::requires::check`).
//!
//! Runs after the rules, on validated arguments, and only for a grant with `requires`:
//! one lookup in this sidecar's history, or one `LRANGE` in Redis. Redis unreachable
//! fails closed (`STATE_UNAVAILABLE`): call order is a safety rule, not a budget.
//! Also decides what of a call is remembered for later calls ([`remember`]).

use serde_json::Value;
use std::sync::Arc;

use crate::crd::Within;
use crate::limits::Ledger;
use crate::policy::agent_policy::{Grant, Policy};
use crate::policy::requires::{self, Prior};
use crate::state::history::now_ms;
use crate::state::remember::{Remember, Sink};
use crate::state::Shared;
use crate::vocab::{Code, Reject};

/// Checks the grant's `requires`; `scope`: the call's task or session.
pub async fn check(
    ledger: &Ledger,
    shared: Option<&Shared>,
    grant: &Grant,
    agent: &str,
    scope: Option<&str>,
    task_bound: bool,
    args: &Value,
) -> Result<(), Reject> {
    let needs = &grant.requires;
    if let Some(first) = needs
        .iter()
        .find(|r| r.within == Within::Task && !task_bound)
    {
        return Err(requires::needs_task(first));
    }
    let Some(scope) = scope else {
        // No task and no session: nothing ran "before" in it.
        return Err(requires::unmet(&needs[0]));
    };
    match shared {
        None => ledger.history().read(agent, scope, |priors| {
            let priors: Vec<Prior<'_>> = priors.collect();
            requires::check(needs, priors.iter().cloned(), args)
        }),
        Some(shared) => {
            let stored = shared.history(agent, scope).await.map_err(|e| {
                Reject::new(
                    Code::StateUnavailable,
                    format!("the call order can't be checked: the shared state can't be reached; nothing was sent; retry shortly ({e})"),
                )
            })?;
            let now = now_ms();
            let priors = stored.iter().map(|s| Prior {
                tool: &s.tool,
                args: &s.args,
                age: s.age(now),
            });
            requires::check(needs, priors, args)
        }
    }
}

/// What to remember of this call should it succeed: only a call of a tool some grant of
/// the policy requires, in a task or session.
pub fn remember(
    ledger: &Ledger,
    shared: Option<&Shared>,
    policy: &Policy,
    tool: &str,
    agent: &Arc<str>,
    scope: Option<&str>,
    args: &Value,
) -> Option<Remember> {
    if policy.remembered.is_empty() || !policy.remembered.contains(tool) {
        return None;
    }
    let history = ledger.history();
    let sink = match shared {
        None => Sink::Memory(history.clone()),
        Some(shared) => Sink::Shared {
            writer: shared.history_writer(),
            idle: history.idle(),
        },
    };
    Some(Remember {
        sink,
        agent: agent.clone(),
        scope: scope?.to_string(),
        tool: tool.to_string(),
        args: Arc::new(args.clone()),
    })
}
