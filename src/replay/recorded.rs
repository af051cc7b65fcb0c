//! One decision as the audit log recorded it, and what the gate decided then.

use serde::de::IgnoredAny;
use serde::Deserialize;
use serde_json::Value;

use crate::vocab::Code;

/// A `call` record's fields that replay reads.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Recorded {
    #[serde(default)]
    pub kind: Option<String>,
    #[serde(default)]
    pub trace_id: String,
    #[serde(default)]
    pub agent: Option<String>,
    #[serde(default)]
    pub tool: Option<String>,
    pub decision: Option<String>,
    #[serde(default)]
    pub code: Option<String>,
    #[serde(default)]
    pub rule: Option<String>,
    /// When it was decided (RFC 3339), the session it named, the task its limits keyed
    /// on, and what the backend answered: what `requires` reads of earlier calls.
    #[serde(default)]
    pub ts: Option<String>,
    #[serde(default)]
    pub session: Option<String>,
    #[serde(default)]
    pub task: Option<String>,
    #[serde(default)]
    pub upstream_status: Option<u16>,
    #[serde(default)]
    pub args: Option<Value>,
    #[serde(default)]
    pub inputs: Option<Value>,
    /// Whether the call ran under (or was held by) an approval; only its presence is read.
    #[serde(default)]
    pub approval: Option<IgnoredAny>,
    /// A duplicate answered with an earlier call's result.
    #[serde(default)]
    pub replayed: bool,
    /// Read without its arguments and inputs, whose tree would not fit replay's memory
    /// bound ([`Recorded::without_arguments`]).
    #[serde(skip)]
    pub oversized: bool,
}

/// [`Recorded`] without `args` and `inputs`, which are skipped unbuilt.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Head {
    #[serde(default)]
    kind: Option<String>,
    #[serde(default)]
    trace_id: String,
    #[serde(default)]
    agent: Option<String>,
    #[serde(default)]
    tool: Option<String>,
    decision: Option<String>,
    #[serde(default)]
    code: Option<String>,
    #[serde(default)]
    rule: Option<String>,
    #[serde(default)]
    ts: Option<String>,
    #[serde(default)]
    session: Option<String>,
    #[serde(default)]
    task: Option<String>,
    #[serde(default)]
    upstream_status: Option<u16>,
    #[serde(default)]
    approval: Option<IgnoredAny>,
    #[serde(default)]
    replayed: bool,
}

impl Recorded {
    /// The record read from `line` without building its arguments or inputs: what
    /// needs none of them (the tool, the grant, the kill switch) is re-decided, the
    /// rest stands (`partial`).
    pub fn without_arguments(line: &[u8]) -> serde_json::Result<Recorded> {
        let head: Head = serde_json::from_slice(line)?;
        Ok(Recorded {
            kind: head.kind,
            trace_id: head.trace_id,
            agent: head.agent,
            tool: head.tool,
            decision: head.decision,
            code: head.code,
            rule: head.rule,
            ts: head.ts,
            session: head.session,
            task: head.task,
            upstream_status: head.upstream_status,
            args: None,
            inputs: None,
            approval: head.approval,
            replayed: head.replayed,
            oversized: true,
        })
    }
}

/// What the gate decided, as replay compares it.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Outcome {
    pub allowed: bool,
    pub code: Option<String>,
    pub rule: Option<String>,
}

impl Outcome {
    pub fn allow() -> Outcome {
        Outcome {
            allowed: true,
            code: None,
            rule: None,
        }
    }

    pub fn deny(code: Code, rule: Option<String>) -> Outcome {
        Outcome {
            allowed: false,
            code: Some(code.as_str().to_string()),
            rule,
        }
    }

    pub fn decision(&self) -> &'static str {
        if self.allowed {
            "allow"
        } else {
            "deny"
        }
    }
}

/// Codes that are not the policy's decision but the moment's: limits that depend on
/// timing and on state (never replayed), and failures of the gate itself.
const NOT_REPLAYED: [Code; 9] = [
    Code::RateLimited,
    Code::BudgetExhausted,
    Code::LoopDetected,
    Code::DuplicateCall,
    Code::StateUnavailable,
    Code::AuditUnavailable,
    Code::NotReady,
    Code::Unauthenticated,
    Code::PayloadTooLarge,
];

/// Why a record is not replayed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Skip {
    /// Not a decision (a start, policy or approval record), or one of a newer format.
    NotACall,
    /// No agent or no tool: refused before either was known.
    Unidentified,
    /// Decided by a limit or the gate's own state, not by the policy.
    Limit,
}

impl Recorded {
    /// What the gate decided, or why the record can't be compared.
    pub fn outcome(&self) -> Result<Outcome, Skip> {
        if self.kind.as_deref().is_some_and(|k| k != "call") {
            return Err(Skip::NotACall);
        }
        if self.agent.is_none() || self.tool.is_none() {
            return Err(Skip::Unidentified);
        }
        let code = self.code.as_deref().and_then(Code::parse);
        if code.is_some_and(|c| NOT_REPLAYED.contains(&c)) {
            return Err(Skip::Limit);
        }
        match self.decision.as_deref() {
            // Allowed, whatever the backend did afterwards.
            Some("allow") => Ok(Outcome::allow()),
            // What the shadow policy would have refused, as enforcing it would.
            Some("deny") | Some("shadow-deny") => Ok(Outcome {
                allowed: false,
                code: self.code.clone(),
                rule: self.rule.clone(),
            }),
            _ => Err(Skip::NotACall),
        }
    }
}
