//! An `AgentPolicy` compiled for the hot path: tool grants in a map, rules compiled,
//! quotas resolved. Shadow mode is resolved here against `policies.allowShadow`, so the
//! pipeline never has to ask whether a shadow policy is honoured.

use std::collections::{HashMap, HashSet};

use super::contract::FieldError;
use super::quota::Quota;
use super::requires::Requirement;
use super::rule::{CompiledRule, FieldReads, HeaderReads, Reads};
use super::spend::SpendBudget;
use crate::crd::{AgentPolicySpec, Mode, RateLimit, SessionLimits};
use crate::vocab::agent::canonical;

#[derive(Debug)]
pub struct Policy {
    pub object: String,
    /// The agents governed, each in its one spelling (a ServiceAccount named
    /// `serviceaccount:<ns>/<name>` is `system:serviceaccount:<ns>:<name>`), as sources
    /// assert them.
    pub agents: Vec<String>,
    pub enabled: bool,
    /// `mode: shadow` and the sidecar allows it.
    pub shadow: bool,
    pub rate_limit: Option<Quota>,
    pub session: Option<SessionLimits>,
    pub grants: HashMap<String, Grant>,
    pub mcp_methods: Vec<String>,
    /// What each agent may spend per day on all its tools (`spec.budget`).
    pub budget: Option<SpendBudget>,
    /// The tools some grant `requires`: only their successful calls are remembered, so
    /// a policy without `requires` keeps no history at all.
    pub remembered: HashSet<String>,
    /// Session limits or `requires` apply: a call's task (from its task token) is
    /// looked up to key them. False: no call of this policy reads its task token for that.
    pub keys_on_task: bool,
    /// A `budget` applies to some of its calls (the policy's or a grant's).
    pub spends: bool,
}

#[derive(Debug)]
pub struct Grant {
    pub rate_limit: Option<Quota>,
    pub rules: Vec<CompiledRule>,
    /// What the rules (and the approval's `when`) read together: a call converts only
    /// these variables.
    pub reads: Reads,
    /// The request headers they read together: a call binds (and records) only these.
    pub headers: HeaderReads,
    /// The arguments they read together: a call converts only these for CEL.
    pub args: FieldReads,
    pub approval: Option<Approval>,
    /// Earlier calls this one needs (call order); empty for most grants.
    pub requires: Vec<Requirement>,
    /// What each agent may spend per day on this tool.
    pub budget: Option<SpendBudget>,
}

/// A grant's `approval`, compiled.
#[derive(Debug)]
pub struct Approval {
    /// `None`: every call needs approval.
    pub when: Option<CompiledRule>,
    pub approvers: Vec<String>,
    pub ttl: std::time::Duration,
}

/// How long an approval lives when the grant doesn't say.
pub const DEFAULT_APPROVAL_TTL: std::time::Duration = std::time::Duration::from_secs(900);

impl Approval {
    /// The condition as an approval shows it: the `when` expression, or `always`.
    pub fn condition(&self) -> &str {
        self.when.as_ref().map_or("always", |w| w.source.as_str())
    }
}

impl Policy {
    pub fn compile(
        object: String,
        spec: &AgentPolicySpec,
        allow_shadow: bool,
    ) -> Result<Policy, FieldError> {
        if spec.agents.is_empty() {
            return Err(FieldError::spec(
                "spec.agents",
                "must name at least one agent",
            ));
        }
        let agents = spec
            .agents
            .iter()
            .enumerate()
            .map(|(i, agent)| {
                canonical(agent)
                    .map(|c| c.into_owned())
                    .map_err(|e| FieldError::spec(format!("spec.agents[{i}]"), e))
            })
            .collect::<Result<Vec<_>, _>>()?;
        let rate_limit = compile_rate("spec.rateLimit", spec.rate_limit.as_ref())?;
        check_session(spec.session.as_ref())?;
        let mut grants = HashMap::new();
        for (i, tool) in spec.tools.iter().enumerate() {
            let at = format!("spec.tools[{i}]");
            let rate_limit = compile_rate(&format!("{at}.rateLimit"), tool.rate_limit.as_ref())?;
            let rules = tool
                .rules
                .iter()
                .enumerate()
                .map(|(j, rule)| {
                    CompiledRule::compile(rule)
                        .map_err(|e| FieldError::rule(format!("{at}.rules[{j}].expr"), e))
                })
                .collect::<Result<Vec<_>, _>>()?;
            let approval = match &tool.approval {
                Some(spec) => Some(compile_approval(&at, spec)?),
                None => None,
            };
            let conditions = || {
                rules
                    .iter()
                    .chain(approval.as_ref().and_then(|a| a.when.as_ref()))
            };
            let reads = conditions().fold(Reads::default(), |all, r| all.union(r.reads));
            let headers = conditions().fold(HeaderReads::None, |all, r| all.union(&r.headers));
            let args = conditions().fold(FieldReads::None, |all, r| all.union(&r.args));
            let requires = tool
                .requires
                .iter()
                .enumerate()
                .map(|(j, r)| Requirement::compile(&format!("{at}.requires[{j}]"), r))
                .collect::<Result<Vec<_>, _>>()?;
            let budget = tool
                .budget
                .as_ref()
                .map(|b| SpendBudget::compile(&format!("{at}.budget"), b))
                .transpose()?;
            let grant = Grant {
                rate_limit,
                rules,
                reads,
                headers,
                args,
                approval,
                requires,
                budget,
            };
            if grants.insert(tool.name.clone(), grant).is_some() {
                return Err(FieldError::spec(
                    format!("{at}.name"),
                    format!("tool {} is listed twice", tool.name),
                ));
            }
        }
        for (i, method) in spec.mcp_methods.iter().enumerate() {
            if method.starts_with("tools/") {
                return Err(FieldError::spec(
                    format!("spec.mcpMethods[{i}]"),
                    "tools/* is governed per tool through spec.tools",
                ));
            }
        }
        let budget = spec
            .budget
            .as_ref()
            .map(|b| SpendBudget::compile("spec.budget", b))
            .transpose()?;
        let remembered: HashSet<String> = grants
            .values()
            .flat_map(|g| g.requires.iter().map(|r| r.tool.clone()))
            .collect();
        Ok(Policy {
            object,
            agents,
            enabled: spec.enabled,
            shadow: spec.mode == Mode::Shadow && allow_shadow,
            rate_limit,
            keys_on_task: spec.session.is_some() || !remembered.is_empty(),
            spends: budget.is_some() || grants.values().any(|g| g.budget.is_some()),
            session: spec.session,
            grants,
            mcp_methods: spec.mcp_methods.clone(),
            budget,
            remembered,
        })
    }

    /// Whether the policy lets the agent use an MCP method other than `tools/*`
    /// (`resources/read`, …): an exact entry or a `prefix/*` entry.
    pub fn allows_method(&self, method: &str) -> bool {
        self.mcp_methods.iter().any(|m| match m.strip_suffix('*') {
            Some(prefix) => method.starts_with(prefix),
            None => m == method,
        })
    }
}

fn compile_rate(at: &str, rate: Option<&RateLimit>) -> Result<Option<Quota>, FieldError> {
    rate.map(|r| Quota::compile(at, r)).transpose()
}

/// Zero would refuse every call of every session: almost certainly a typo.
fn compile_approval(at: &str, spec: &crate::crd::ApprovalSpec) -> Result<Approval, FieldError> {
    if spec.approvers.is_empty() || spec.approvers.iter().any(|g| g.trim().is_empty()) {
        return Err(FieldError::spec(
            format!("{at}.approval.approvers"),
            "must name at least one approver group",
        ));
    }
    let when = match &spec.when {
        Some(expr) => Some(
            CompiledRule::compile(&crate::crd::Rule {
                name: "approval".into(),
                expr: expr.clone(),
                message: None,
                recovery: None,
            })
            .map_err(|e| FieldError::rule(format!("{at}.approval.when"), e))?,
        ),
        None => None,
    };
    let ttl = match spec.ttl_seconds {
        Some(0) => {
            return Err(FieldError::spec(
                format!("{at}.approval.ttlSeconds"),
                "must be positive",
            ))
        }
        Some(seconds) => std::time::Duration::from_secs(seconds),
        None => DEFAULT_APPROVAL_TTL,
    };
    Ok(Approval {
        when,
        approvers: spec.approvers.clone(),
        ttl,
    })
}

fn check_session(session: Option<&SessionLimits>) -> Result<(), FieldError> {
    let Some(session) = session else {
        return Ok(());
    };
    if session.max_calls == Some(0) {
        return Err(FieldError::spec(
            "spec.session.maxCalls",
            "must be positive",
        ));
    }
    if session.max_repeats == Some(0) {
        return Err(FieldError::spec(
            "spec.session.maxRepeats",
            "must be positive",
        ));
    }
    if session.max_same == Some(0) {
        return Err(FieldError::spec("spec.session.maxSame", "must be positive"));
    }
    Ok(())
}
