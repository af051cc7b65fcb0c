//! The policy resources of DESIGN §2 as plain data: `ToolContract` and `AgentPolicy`.
//!
//! These types are the one shape every source (files today, the cluster later) translates
//! into. They only describe; nothing here compiles or checks semantics — that is
//! `control::snapshot`'s job. Unknown fields are rejected so a typo never silently weakens
//! a policy.

mod manifest;

pub use manifest::{parse_documents, Manifest, ManifestError, Object, ObjectKey};

use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::collections::BTreeMap;

use crate::proxy::reject::Recovery;

pub const GROUP: &str = "toolgate.dev";
pub const VERSION: &str = "v1alpha1";
pub const API_VERSION: &str = "toolgate.dev/v1alpha1";

/// A tool the backend serves, and the contract every call of it must meet.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ToolContractSpec {
    /// The name agents call; also the MCP tool name.
    pub tool: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// REST binding; absent for tools served over MCP.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub http: Option<HttpBinding>,
    /// JSON Schema (2020-12) of the arguments.
    #[serde(default = "empty_object_schema")]
    pub input: Value,
    /// JSON Schema of the result; undeclared fields are dropped from what the agent sees.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output: Option<Value>,
    /// JSON pointers (with `*` for any key or index) masked in what the agent sees.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub redact: Vec<String>,
    /// `false`: duplicates are suppressed and the call is never retried. When absent it
    /// follows HTTP semantics: GET, HEAD, PUT, DELETE and OPTIONS are idempotent; POST,
    /// PATCH and MCP-served tools are not.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub idempotent: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dedupe_window_seconds: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_ms: Option<u64>,
    /// Record argument values in the audit log (with `redact` applied), not only a digest.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub capture_arguments: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workload_selector: Option<LabelSelector>,
}

fn empty_object_schema() -> Value {
    serde_json::json!({"type": "object"})
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct HttpBinding {
    pub method: String,
    /// A path template: `/logs/{service}`.
    pub path: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct LabelSelector {
    #[serde(default)]
    pub match_labels: BTreeMap<String, String>,
}

impl LabelSelector {
    pub fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        self.match_labels
            .iter()
            .all(|(k, v)| labels.get(k) == Some(v))
    }
}

/// What a set of agents may call, and under which limits and rules.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct AgentPolicySpec {
    pub agents: Vec<String>,
    /// `false` is the kill switch: every call is `AGENT_DISABLED`.
    #[serde(default = "yes")]
    pub enabled: bool,
    #[serde(default)]
    pub mode: Mode,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rate_limit: Option<RateLimit>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session: Option<SessionLimits>,
    #[serde(default)]
    pub tools: Vec<ToolGrant>,
    /// MCP methods beyond tools (`resources/list`, `resources/*`, `prompts/*` …) this agent
    /// may use. `resources/*` and `prompts/*` are refused unless listed here.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub mcp_methods: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workload_selector: Option<LabelSelector>,
}

fn yes() -> bool {
    true
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum Mode {
    #[default]
    Enforce,
    /// Decide and record, but forward anyway (only where `policies.allowShadow` is true).
    Shadow,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RateLimit {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub per_second: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub per_minute: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub burst: Option<u32>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SessionLimits {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_calls: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_repeats: Option<u32>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ToolGrant {
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rate_limit: Option<RateLimit>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub rules: Vec<Rule>,
}

/// A CEL expression that must be true for the call to run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Rule {
    pub name: String,
    pub expr: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub recovery: Option<Recovery>,
}
