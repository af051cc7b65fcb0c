//! One decision as the audit log recorded it, and what the gate decided then.

use serde::Deserialize;
use serde_json::Value;

use crate::vocab::Code;

/// A `call` record's fields that replay reads.
#[derive(Debug, Deserialize)]
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
    #[serde(default)]
    pub args: Option<Value>,
    #[serde(default)]
    pub inputs: Option<Value>,
    #[serde(default)]
    pub approval: Option<Value>,
    /// A duplicate answered with an earlier call's result.
    #[serde(default)]
    pub replayed: bool,
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
