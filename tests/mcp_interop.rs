//! The official MCP SDKs through toolgate: the Python SDK's client (`ClientSession` over
//! `streamable_http_client`, legacy / modern / auto negotiation) against the Python SDK's
//! server (SSE and JSON modes, stateful and stateless) and against the TypeScript
//! reference server `@modelcontextprotocol/server-everything`.
//!
//! Each client run is a separate process (about a second, mostly importing the SDK), so
//! the runs of a test go concurrently.

mod common;
#[path = "common/mcp.rs"]
mod peers;

use common::*;
use futures_util::future::join_all;
use peers::{client, Peer};
use serde_json::{json, Value};

/// The tools of the Python SDK's server (`tests/mcp/server.py`) and ops-bot's grants.
const POLICIES: &str = include_str!("fixtures/policies/python-mcp-server.yaml");

async fn start(peer: &Peer, policies: &str) -> Harness {
    Harness::start(
        peer.addr,
        Options {
            policies: policies.to_string(),
            ..Options::default()
        },
    )
    .await
}

fn url(h: &Harness) -> String {
    format!("{}/mcp", h.base)
}

/// What server.py's read_logs returns for `api`, shaped by the contract: undeclared
/// `window_minutes` dropped, client IPs masked.
fn shaped_logs() -> Value {
    json!({"service": "api", "lines": [
        {"msg": "api: GET /health 200", "client_ip": "[REDACTED]"},
        {"msg": "api: login failed for user alice", "client_ip": "[REDACTED]"}
    ]})
}

fn error_code(out: &Value) -> &str {
    out["structuredContent"]["error"]["code"]
        .as_str()
        .unwrap_or("")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn legacy_client_through_the_python_sse_server() {
    let dir = tempfile::tempdir().unwrap();
    let peer = Peer::python_server(&[], dir.path());
    let h = start(&peer, POLICIES).await;
    let u = url(&h);
    let tok = Some(OPS_TOKEN);
    let runs = join_all([
        client(&u, tok, "legacy", &["list"]),
        client(
            &u,
            tok,
            "legacy",
            &[
                "call",
                "create_issue",
                r#"{"project_key":"OPS","title":"disk full"}"#,
            ],
        ),
        client(
            &u,
            tok,
            "legacy",
            &["call", "read_logs", r#"{"service":"api"}"#],
        ),
        client(&u, tok, "legacy", &["call", "echo", r#"{"text":"hi"}"#]),
        client(&u, tok, "legacy", &["call", "secret_tool", "{}"]),
        client(
            &u,
            tok,
            "legacy",
            &["call", "read_logs", r#"{"service":"billing"}"#],
        ),
        client(&u, None, "legacy", &["list"]),
        client(&u, tok, "legacy", &["prompts"]),
    ])
    .await;
    let [list, issue, logs, echo, secret, invalid, anonymous, prompts] =
        <[Value; 8]>::try_from(runs).unwrap();

    assert_eq!(
        list["tools"],
        json!(["read_logs", "create_issue"]),
        "{list}"
    );
    assert_eq!(list["protocolVersion"], "2025-11-25");
    // An allowed, unshaped call: the server's result as it sent it.
    let created = json!({"id": "OPS-1", "project_key": "OPS", "title": "disk full"});
    assert_eq!(issue["isError"], false, "{issue}");
    assert_eq!(issue["structuredContent"], created);
    assert_eq!(
        issue["content"],
        json!([{"type": "text", "text": r#"{"id": "OPS-1", "project_key": "OPS", "title": "disk full"}"#}])
    );
    // Shaped, and accepted by the SDK's outputSchema check (toolgate advertises its own).
    assert_eq!(logs["isError"], false, "{logs}");
    assert_eq!(logs["structuredContent"], shaped_logs());
    assert!(!logs.to_string().contains("10.0.0."), "{logs}");

    assert_eq!(echo["isError"], true, "{echo}");
    assert_eq!(error_code(&echo), "TOOL_NOT_ALLOWED");
    assert_eq!(echo["content"][0]["type"], "text");
    assert_eq!(secret["error"]["code"], -32602, "{secret}");
    assert_eq!(secret["error"]["data"]["error"]["code"], "UNKNOWN_TOOL");
    assert_eq!(invalid["isError"], true, "{invalid}");
    assert_eq!(error_code(&invalid), "INVALID_ARGUMENTS");
    assert_eq!(
        invalid["structuredContent"]["error"]["details"][0]["pointer"],
        "/service"
    );

    assert_eq!(anonymous["http_status"], 401, "{anonymous}");
    assert_eq!(
        anonymous["data"]["error"]["code"], "UNAUTHENTICATED",
        "{anonymous}"
    );
    assert_eq!(prompts["prompts"], json!(["summarize"]), "{prompts}");

    // Refused calls never ran.
    assert_eq!(peer.counts(), json!({"create_issue": 1, "read_logs": 1}));
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn modern_and_auto_clients_through_the_python_json_server() {
    let dir = tempfile::tempdir().unwrap();
    let peer = Peer::python_server(&["--json-response"], dir.path());
    let h = start(&peer, POLICIES).await;
    let u = url(&h);
    let tok = Some(OPS_TOKEN);
    let runs = join_all([
        client(&u, tok, "modern", &["list"]),
        client(
            &u,
            tok,
            "modern",
            &["call", "read_logs", r#"{"service":"api"}"#],
        ),
        client(
            &u,
            tok,
            "modern",
            &[
                "call",
                "read_logs",
                r#"{"service":"api","window_minutes":5000}"#,
            ],
        ),
        client(&u, tok, "modern", &["call", "secret_tool", "{}"]),
        client(
            &u,
            tok,
            "auto",
            &[
                "call",
                "create_issue",
                r#"{"project_key":"OPS","title":"t"}"#,
            ],
        ),
    ])
    .await;
    let [list, logs, server_error, secret, issue] = <[Value; 5]>::try_from(runs).unwrap();

    assert_eq!(list["protocolVersion"], "2026-07-28", "{list}");
    assert_eq!(list["tools"], json!(["read_logs", "create_issue"]));
    assert_eq!(logs["structuredContent"], shaped_logs(), "{logs}");
    // Within the contract but not the server's range: the server's own -32602 (HTTP 400
    // in this revision) reaches the client unchanged.
    assert_eq!(server_error["error"]["code"], -32602, "{server_error}");
    assert_eq!(server_error["error"]["data"]["max"], 1440);
    assert_eq!(secret["error"]["code"], -32602, "{secret}");
    assert_eq!(secret["error"]["data"]["error"]["code"], "UNKNOWN_TOOL");
    assert_eq!(issue["protocolVersion"], "2026-07-28", "{issue}");
    assert_eq!(issue["structuredContent"]["project_key"], "OPS");
    assert_eq!(peer.counts(), json!({"create_issue": 1, "read_logs": 2}));
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stateless_sse_server_serves_legacy_and_modern_clients() {
    let dir = tempfile::tempdir().unwrap();
    let peer = Peer::python_server(&["--stateless"], dir.path());
    let h = start(&peer, POLICIES).await;
    let u = url(&h);
    let tok = Some(OPS_TOKEN);
    let runs = join_all([
        client(
            &u,
            tok,
            "legacy",
            &["call", "read_logs", r#"{"service":"orders"}"#],
        ),
        client(
            &u,
            tok,
            "auto",
            &[
                "call",
                "create_issue",
                r#"{"project_key":"OPS","title":""}"#,
            ],
        ),
    ])
    .await;
    let [logs, empty_title] = <[Value; 2]>::try_from(runs).unwrap();
    assert_eq!(logs["structuredContent"]["service"], "orders", "{logs}");
    assert_eq!(
        logs["structuredContent"]["lines"][0]["client_ip"],
        "[REDACTED]"
    );
    assert_eq!(
        error_code(&empty_title),
        "INVALID_ARGUMENTS",
        "{empty_title}"
    );
    assert_eq!(empty_title["protocolVersion"], "2026-07-28");
    assert_eq!(peer.counts(), json!({"read_logs": 1}));
    h.stop().await;
}

const EVERYTHING_POLICIES: &str = r#"
apiVersion: toolgate.dev/v1alpha1
kind: ToolContract
metadata: {name: echo}
spec:
  tool: echo
  input: {type: object, required: [message], properties: {message: {type: string, maxLength: 20}}}
---
apiVersion: toolgate.dev/v1alpha1
kind: ToolContract
metadata: {name: get-sum}
spec:
  tool: get-sum
  input: {type: object, properties: {a: {type: number}, b: {type: number}}}
---
apiVersion: toolgate.dev/v1alpha1
kind: AgentPolicy
metadata: {name: ops-bot}
spec:
  agents: [ops-bot]
  tools: [{name: echo}, {name: get-sum}]
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn auto_client_through_server_everything() {
    let peer = Peer::everything_server();
    let h = start(&peer, EVERYTHING_POLICIES).await;
    let u = url(&h);
    let tok = Some(OPS_TOKEN);
    let runs = join_all([
        client(&u, tok, "auto", &["list"]),
        client(
            &u,
            tok,
            "legacy",
            &["call", "echo", r#"{"message":"hello"}"#],
        ),
        client(&u, tok, "legacy", &["call", "get-env", "{}"]),
    ])
    .await;
    let [list, echo, env] = <[Value; 3]>::try_from(runs).unwrap();
    // The TypeScript server speaks no 2026-07-28: auto falls back to initialize.
    assert_eq!(list["protocolVersion"], "2025-11-25", "{list}");
    assert_eq!(list["tools"], json!(["echo", "get-sum"]));
    assert_eq!(echo["isError"], false, "{echo}");
    assert_eq!(
        echo["content"],
        json!([{"type": "text", "text": "Echo: hello"}])
    );
    assert_eq!(
        env["error"]["data"]["error"]["code"], "UNKNOWN_TOOL",
        "{env}"
    );
    h.stop().await;
}
