//! authorize: may this agent call this tool at all? The kill switch first, then the
//! tool allowlist. Everything not granted is refused: there is no default allow.

use crate::control::policy::{Grant, Policy};
use crate::proxy::reject::{Code, Reject};

/// The policy and grant a call runs under.
#[derive(Debug, Clone, Copy)]
pub struct Permit<'s> {
    pub policy: &'s Policy,
    pub grant: &'s Grant,
}

/// The policy governing an agent; none means the agent may call nothing.
pub fn policy<'s>(
    snapshot: &'s crate::control::Snapshot,
    agent: &str,
) -> Result<&'s Policy, Reject> {
    let policy = snapshot.policy_for(agent).ok_or_else(|| {
        Reject::new(
            Code::ToolNotAllowed,
            format!("no AgentPolicy governs agent {agent}"),
        )
    })?;
    if !policy.enabled {
        return Err(Reject::new(
            Code::AgentDisabled,
            format!("agent {agent} is disabled by {}", policy.object),
        ));
    }
    Ok(policy)
}

pub fn authorize<'s>(policy: &'s Policy, agent: &str, tool: &str) -> Result<Permit<'s>, Reject> {
    match policy.grants.get(tool) {
        Some(grant) => Ok(Permit { policy, grant }),
        None => Err(Reject::new(
            Code::ToolNotAllowed,
            format!("agent {agent} may not call {tool}"),
        )),
    }
}
