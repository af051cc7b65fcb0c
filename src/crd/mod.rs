//! The policy resources (docs/policies.md) as plain data: `ToolContract` and `AgentPolicy`.
//!
//! These types are the one shape every source (files and the cluster) translates into.
//! They only describe; nothing here compiles or checks semantics — that is
//! `control::snapshot`'s job. Unknown fields are rejected so a typo never silently weakens
//! a policy. The same types derive the CustomResourceDefinitions ([`definition`]), so the
//! cluster's structural validation and the file parser can't disagree.

pub mod definition;
#[cfg(test)]
pub(crate) mod fixtures;
mod manifest;
pub mod seeds;
pub mod status;

pub use manifest::{parse_documents, parse_value, Manifest, ManifestError, Object, ObjectKey};
pub use seeds::{Budget, Cost, Requirement, Within};
pub use status::{Condition, ObjectStatus};

// kube (issue 6): CRD derives. `schemars(...)` attributes only shape the generated schema.
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::collections::BTreeMap;

use crate::vocab::Recovery;

pub const GROUP: &str = "toolgate.dev";
pub const VERSION: &str = "v1alpha1";
pub const API_VERSION: &str = "toolgate.dev/v1alpha1";

/// A tool the backend serves, and the contract every call of it must meet.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, CustomResource, JsonSchema)]
#[kube(
    group = "toolgate.dev",
    version = "v1alpha1",
    kind = "ToolContract",
    namespaced,
    status = "ObjectStatus",
    shortname = "tc",
    category = "toolgate",
    doc = "A tool the backend serves, and the contract every call of it must meet.",
    printcolumn = r#"{"name": "Tool", "type": "string", "jsonPath": ".spec.tool"}"#,
    printcolumn = r#"{"name": "Method", "type": "string", "jsonPath": ".spec.http.method"}"#,
    printcolumn = r#"{"name": "Path", "type": "string", "jsonPath": ".spec.http.path"}"#,
    printcolumn = r#"{"name": "Accepted", "type": "string", "jsonPath": ".status.conditions[?(@.type==\"Accepted\")].status"}"#,
    printcolumn = r#"{"name": "Reason", "type": "string", "jsonPath": ".status.conditions[?(@.type==\"Accepted\")].reason"}"#,
    printcolumn = r#"{"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ToolContractSpec {
    /// The name agents call; also the MCP tool name.
    #[schemars(length(min = 1))]
    pub tool: String,
    /// What the tool does, for humans and for `tools/list`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// REST binding; absent for tools served over MCP.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub http: Option<HttpBinding>,
    /// JSON Schema (2020-12) of the arguments.
    #[serde(default = "empty_object_schema")]
    #[schemars(schema_with = "definition::free_form_schema")]
    pub input: Value,
    /// JSON Schema of the result; undeclared fields are dropped from what the agent sees.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "definition::free_form_schema")]
    pub output: Option<Value>,
    /// JSON pointers (with `*` for any key or index) masked in what the agent sees.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub redact: Vec<String>,
    /// `false`: duplicates are suppressed and the call is never retried. When absent it
    /// follows HTTP semantics: GET, HEAD, PUT, DELETE and OPTIONS are idempotent; POST,
    /// PATCH and MCP-served tools are not.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub idempotent: Option<bool>,
    /// How long a non-idempotent call's result answers its duplicates.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dedupe_window_seconds: Option<u64>,
    /// CEL over `args` and `agent` naming what makes two calls one action (a non-idempotent
    /// tool's business key, e.g. `args.order_id`): within the dedupe window, the same agent
    /// and session get the first call's result, anyone else `DUPLICATE_CALL`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dedupe_key: Option<String>,
    /// The backend's time budget for one call.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub timeout_ms: Option<u64>,
    /// What one call costs against a spend `budget` (a whole number, or CEL over `args`
    /// such as `args.amount`); default 1.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cost: Option<Cost>,
    /// Record argument values in the audit log (with `redact` applied), not only a digest.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub capture_arguments: bool,
    /// Only sidecars whose pod labels match enforce this object (cluster source).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workload_selector: Option<LabelSelector>,
}

fn empty_object_schema() -> Value {
    serde_json::json!({"type": "object"})
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct HttpBinding {
    /// An HTTP method: GET, POST, PUT, PATCH, DELETE …
    #[schemars(length(min = 1))]
    pub method: String,
    /// A path template: `/logs/{service}`.
    #[schemars(regex(pattern = "^/"))]
    pub path: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct LabelSelector {
    /// Every label listed must be on the pod with this value.
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
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, CustomResource, JsonSchema)]
#[kube(
    group = "toolgate.dev",
    version = "v1alpha1",
    kind = "AgentPolicy",
    plural = "agentpolicies",
    namespaced,
    status = "ObjectStatus",
    shortname = "ap",
    category = "toolgate",
    doc = "What a set of agents may call, and under which limits and rules.",
    printcolumn = r#"{"name": "Agents", "type": "string", "jsonPath": ".spec.agents"}"#,
    printcolumn = r#"{"name": "Mode", "type": "string", "jsonPath": ".spec.mode"}"#,
    printcolumn = r#"{"name": "Enabled", "type": "boolean", "jsonPath": ".spec.enabled"}"#,
    printcolumn = r#"{"name": "Accepted", "type": "string", "jsonPath": ".status.conditions[?(@.type==\"Accepted\")].status"}"#,
    printcolumn = r#"{"name": "Reason", "type": "string", "jsonPath": ".status.conditions[?(@.type==\"Accepted\")].reason"}"#,
    printcolumn = r#"{"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct AgentPolicySpec {
    /// Agent identities this policy governs.
    #[schemars(length(min = 1))]
    pub agents: Vec<String>,
    /// `false` is the kill switch: every call is `AGENT_DISABLED`.
    #[serde(default = "yes")]
    pub enabled: bool,
    /// `enforce`, or `shadow`: decide and record, but forward anyway.
    #[serde(default)]
    pub mode: Mode,
    /// Calls of all this policy's tools together, per agent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rate_limit: Option<RateLimit>,
    /// What each agent may spend per day on all this policy's tools (their `cost`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub budget: Option<Budget>,
    /// Per-session budget and repeat-call (loop) detection.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session: Option<SessionLimits>,
    /// The tools these agents may call; every other tool is `TOOL_NOT_ALLOWED`.
    #[serde(default)]
    pub tools: Vec<ToolGrant>,
    /// MCP methods beyond tools (`resources/list`, `resources/*`, `prompts/*` …) this agent
    /// may use. `resources/*` and `prompts/*` are refused unless listed here.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub mcp_methods: Vec<String>,
    /// Only sidecars whose pod labels match enforce this object (cluster source).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workload_selector: Option<LabelSelector>,
}

fn yes() -> bool {
    true
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub enum Mode {
    #[default]
    Enforce,
    /// Decide and record, but forward anyway (only where `policies.allowShadow` is true).
    Shadow,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RateLimit {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub per_second: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub per_minute: Option<u32>,
    /// Calls allowed at once above the steady rate.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub burst: Option<u32>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SessionLimits {
    /// Calls one session may make; then `BUDGET_EXHAUSTED`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub max_calls: Option<u64>,
    /// The same call this many times in a row is `LOOP_DETECTED`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub max_repeats: Option<u32>,
    /// The same call (tool and arguments) this many times in one task or session, in a
    /// row or not, is `LOOP_DETECTED`: a cycle `maxRepeats` never sees.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub max_same: Option<u32>,
    /// Refuse calls without a task token (`OUT_OF_TASK_SCOPE`), so every call's limits
    /// key on a task the orchestrator confirmed.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub require_task: bool,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ToolGrant {
    /// A `spec.tool` of some ToolContract.
    #[schemars(length(min = 1))]
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rate_limit: Option<RateLimit>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub rules: Vec<Rule>,
    /// A person must approve a call of this grant before it runs (docs/approvals.md).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub approval: Option<ApprovalSpec>,
    /// Earlier calls this one needs, in the same task or session (call order).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub requires: Vec<Requirement>,
    /// What each agent may spend per day on this tool (its contract's `cost`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub budget: Option<Budget>,
}

/// When a grant's calls need a person's approval, and whose.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ApprovalSpec {
    /// CEL like a rule's: when true, the call needs approval. Absent: every call does.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub when: Option<String>,
    /// Approver groups that may decide (`approvals.approvers`).
    #[schemars(length(min = 1))]
    pub approvers: Vec<String>,
    /// A pending or approved call expires this long after it was held (default 900).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub ttl_seconds: Option<u64>,
}

/// A CEL expression that must be true for the call to run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Rule {
    pub name: String,
    /// CEL over `args`, `agent`, `task`, `session` and `request`.
    #[schemars(length(min = 1))]
    pub expr: String,
    /// What the agent is told when the rule is false.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// The agent's next move when the rule is false (default `stop`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "definition::recovery_schema")]
    pub recovery: Option<Recovery>,
}
