//! toolgate's own span attributes and span events: every name the code sets, in one
//! place. They are declared for semantic-convention tooling in the Weaver registry
//! `docs/telemetry/registry/toolgate.yaml`; `tests/reference.rs` fails when the two differ.

pub const DECISION: &str = "toolgate.decision";
pub const AGENT_ID: &str = "toolgate.agent.id";
pub const AGENT_ISSUER: &str = "toolgate.agent.issuer";
pub const CODE: &str = "toolgate.code";
pub const RULE: &str = "toolgate.rule";
pub const POLICY_VERSION: &str = "toolgate.policy.version";
pub const UPSTREAM_STATUS: &str = "toolgate.upstream.status";
pub const STATE: &str = "toolgate.state";
pub const APPROVAL_ID: &str = "toolgate.approval.id";
/// The tools a `tools/list` answer showed unlike their contracts (`tool_drift`).
pub const DRIFTED_TOOLS: &str = "toolgate.drift.tools";

/// Every `toolgate.*` attribute.
pub const ATTRIBUTES: [&str; 10] = [
    DECISION,
    AGENT_ID,
    AGENT_ISSUER,
    CODE,
    RULE,
    POLICY_VERSION,
    UPSTREAM_STATUS,
    STATE,
    APPROVAL_ID,
    DRIFTED_TOOLS,
];

/// Span events marking the stages a call passed.
pub const CLASSIFIED: &str = "classified";
pub const IDENTIFIED: &str = "identified";
pub const ALLOWED: &str = "allowed";
pub const REFUSED: &str = "refused";
/// The call's approval: held (a new or still pending one), denied, or used by the call.
pub const APPROVAL_REQUESTED: &str = "approval_requested";
pub const APPROVAL_DENIED: &str = "approval_denied";
pub const APPROVAL_USED: &str = "approval_used";
/// A `tools/list` answer showed tools unlike their contracts (`proxy::mcp::tools_list::drift`).
pub const TOOL_DRIFT: &str = "tool_drift";

/// Every span event.
pub const EVENTS: [&str; 8] = [
    CLASSIFIED,
    IDENTIFIED,
    ALLOWED,
    REFUSED,
    APPROVAL_REQUESTED,
    APPROVAL_DENIED,
    APPROVAL_USED,
    TOOL_DRIFT,
];
