//! Manifests shared by the unit tests of several modules (compiled for tests only).

/// The smallest useful pair: one REST contract with a path parameter, and one agent
/// granted it with no rules.
pub const READ_LOGS: &str = r#"
apiVersion: toolgate.dev/v1alpha1
kind: ToolContract
metadata: {name: read-logs}
spec:
  tool: read_logs
  http: {method: GET, path: "/logs/{service}"}
  input: {type: object}
---
apiVersion: toolgate.dev/v1alpha1
kind: AgentPolicy
metadata: {name: ops-bot}
spec:
  agents: [ops-bot]
  tools: [{name: read_logs}]
"#;
