//! authorize: may this agent call this tool at all? The kill switch first, then the
//! tool allowlist. Everything not granted is refused: there is no default allow.

use crate::policy::agent_policy::{Grant, Policy};
use crate::vocab::{Code, Reject};

/// The policy and grant a call runs under.
#[derive(Debug, Clone, Copy)]
pub struct Permit<'s> {
    pub policy: &'s Policy,
    pub grant: &'s Grant,
}

/// The policy governing an agent; none means the agent may call nothing.
pub fn policy<'s>(
    snapshot: &'s crate::policy::Snapshot,
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::crd::parse_documents;
    use crate::policy::{BuildOptions, Snapshot};

    fn mk_snapshot(enabled: bool) -> Snapshot {
        let text = format!(
            "apiVersion: toolgate.dev/v1alpha1\nkind: ToolContract\nmetadata: {{name: a}}\nspec: {{tool: a}}\n---\n\
             apiVersion: toolgate.dev/v1alpha1\nkind: ToolContract\nmetadata: {{name: b}}\nspec: {{tool: b}}\n---\n\
             apiVersion: toolgate.dev/v1alpha1\nkind: AgentPolicy\nmetadata: {{name: p}}\nspec: {{agents: [bot], enabled: {enabled}, tools: [{{name: a}}]}}\n"
        );
        Snapshot::build(&parse_documents("t", &text).0, &BuildOptions::default(), 1).0
    }

    #[test]
    fn granted_tools_only() {
        let s = mk_snapshot(true);
        let p = policy(&s, "bot").unwrap();
        assert!(authorize(p, "bot", "a").is_ok());
        assert_eq!(
            authorize(p, "bot", "b").unwrap_err().code,
            Code::ToolNotAllowed
        );
    }

    #[test]
    fn ungoverned_and_disabled_agents() {
        let s = mk_snapshot(true);
        assert_eq!(
            policy(&s, "stranger").unwrap_err().code,
            Code::ToolNotAllowed
        );
        let s = mk_snapshot(false);
        assert_eq!(policy(&s, "bot").unwrap_err().code, Code::AgentDisabled);
    }
}
