//! MCP on the wire, with raw HTTP against an in-test MCP backend: the error mapping of
//! docs/errors.md, id echo, batches, notifications, SSE streaming and rewriting, session
//! binding, revision 2026-07-28 routing headers, and the audit record of every call.

#[path = "common/mcp_backend.rs"]
mod backend;
mod common;

use backend::McpBackend;
use bytes::Bytes;
use common::*;
use http::Request;
use http_body_util::{BodyExt, Full};
use serde_json::{json, Value};
use std::sync::Arc;
use std::time::Duration;

/// The tools of [`McpBackend`] and ops-bot's and retired-bot's grants on them.
const POLICIES: &str = include_str!("fixtures/policies/mcp-backend.yaml");

async fn start(backend: &McpBackend) -> Harness {
    Harness::start(
        backend.addr,
        Options {
            policies: POLICIES.into(),
            ..Options::default()
        },
    )
    .await
}

/// The fixture's policies plus a contract for `tool` (`spec`: its other fields, YAML flow
/// style), granted to ops-bot.
async fn start_with_tool(backend: &McpBackend, tool: &str, spec: &str) -> Harness {
    let name = tool.replace('_', "-");
    let policies = format!(
        "{}---\napiVersion: toolgate.dev/v1alpha1\nkind: ToolContract\nmetadata: {{name: {name}}}\nspec: {{tool: {tool}, {spec}}}\n",
        POLICIES.replace(
            "    - name: read_logs\n",
            &format!("    - name: read_logs\n    - name: {tool}\n")
        )
    );
    Harness::start(
        backend.addr,
        Options {
            policies,
            ..Options::default()
        },
    )
    .await
}

fn call(id: Value, name: &str, args: Value) -> String {
    json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {"name": name, "arguments": args}})
        .to_string()
}

async fn post(h: &Harness, token: Option<&str>, headers: &[(&str, &str)], body: &str) -> Reply {
    h.call("POST", "/mcp", token, headers, body).await
}

/// Asserts a refusal as a tool result: HTTP 200, `isError`, the body twice, id echoed.
fn assert_tool_error(r: &Reply, id: Value, code: &str) -> Value {
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(r.json["id"], id, "{}", r.text);
    let result = &r.json["result"];
    assert_eq!(result["isError"], true, "{}", r.text);
    assert_eq!(result["structuredContent"]["status"], "error");
    assert_eq!(
        result["structuredContent"]["error"]["code"], code,
        "{}",
        r.text
    );
    let text: Value = serde_json::from_str(result["content"][0]["text"].as_str().unwrap()).unwrap();
    assert_eq!(text, result["structuredContent"]);
    assert_eq!(r.header("x-toolgate-code"), code);
    result["structuredContent"]["error"].clone()
}

/// Asserts a JSON-RPC error carrying the contract body in `data`.
fn assert_rpc_error(r: &Reply, status: u16, id: Value, rpc: i64, code: &str) {
    assert_eq!(r.status, status, "{}", r.text);
    assert_eq!(r.json["jsonrpc"], "2.0");
    assert_eq!(r.json["id"], id, "{}", r.text);
    assert_eq!(r.json["error"]["code"], rpc, "{}", r.text);
    assert_eq!(r.json["error"]["data"]["status"], "error");
    assert_eq!(r.json["error"]["data"]["error"]["code"], code, "{}", r.text);
    assert!(r.json["error"]["message"].is_string());
}

#[tokio::test]
async fn refusals_map_onto_json_rpc_as_the_contract_says() {
    let backend = McpBackend::start().await;
    let h = start(&backend).await;
    let ops = Some(OPS_TOKEN);
    let r = post(&h, ops, &[], "{not json").await;
    assert_rpc_error(&r, 400, Value::Null, -32700, "MALFORMED_REQUEST");
    let r = post(
        &h,
        ops,
        &[],
        r#"{"jsonrpc":"1.0","id":"a","method":"ping"}"#,
    )
    .await;
    assert_rpc_error(&r, 400, json!("a"), -32600, "MALFORMED_REQUEST");
    let r = post(&h, ops, &[], &call(json!("u-1"), "secret_tool", json!({}))).await;
    assert_rpc_error(&r, 200, json!("u-1"), -32602, "UNKNOWN_TOOL");
    assert_eq!(r.header("x-toolgate-decision"), "deny");
    let r = post(&h, ops, &[], &call(json!(2), "echo", json!({}))).await;
    assert_tool_error(&r, json!(2), "TOOL_NOT_ALLOWED");
    let r = post(
        &h,
        ops,
        &[],
        &call(json!(3), "create_issue", json!({"title": "x"})),
    )
    .await;
    let e = assert_tool_error(&r, json!(3), "MISSING_ARGUMENT");
    assert_eq!(
        (e["details"][0]["pointer"].as_str(), e["recovery"].as_str()),
        (Some("/project_key"), Some("ask_user"))
    );
    let bad = json!({"project_key": "OPS", "title": "x", "priority": "urgent"});
    let r = post(&h, ops, &[], &call(json!(4), "create_issue", bad)).await;
    assert_eq!(
        assert_tool_error(&r, json!(4), "INVALID_ARGUMENTS")["details"][0]["pointer"],
        "/priority"
    );
    let r = post(
        &h,
        ops,
        &[],
        &call(
            json!(5),
            "create_issue",
            json!({"project_key": "SEC", "title": "x"}),
        ),
    )
    .await;
    let e = assert_tool_error(&r, json!(5), "POLICY_DENIED");
    assert_eq!(
        (e["rule"].as_str(), e["recovery"].as_str()),
        (Some("no-security-project"), Some("ask_user"))
    );
    let r = post(
        &h,
        Some(RETIRED_TOKEN),
        &[],
        &call(json!(6), "read_logs", json!({})),
    )
    .await;
    assert_tool_error(&r, json!(6), "AGENT_DISABLED");
    let r = post(
        &h,
        Some(STRANGER_TOKEN),
        &[],
        &call(json!(7), "read_logs", json!({})),
    )
    .await;
    assert_tool_error(&r, json!(7), "TOOL_NOT_ALLOWED");
    assert!(
        backend.posts().is_empty(),
        "nothing refused reaches the backend: {:?}",
        backend.posts()
    );

    let r = post(&h, None, &[], &call(json!(8), "read_logs", json!({}))).await;
    assert_rpc_error(&r, 401, Value::Null, -32010, "UNAUTHENTICATED");
    assert_eq!(r.header("x-toolgate-code"), "UNAUTHENTICATED");
    let r = h.call("GET", "/mcp", Some("wrong"), &[], "").await;
    assert_eq!(r.status, 401, "GET is authenticated too");
    assert!(backend.seen.lock().unwrap().is_empty());
    h.stop().await;
}

#[tokio::test]
async fn backend_failures_become_tool_errors_without_internals() {
    let backend = McpBackend::start().await;
    let h = start(&backend).await;
    let ops = Some(OPS_TOKEN);
    let r = post(&h, ops, &[], &call(json!(1), "broken", json!({}))).await;
    assert_tool_error(&r, json!(1), "BACKEND_ERROR");
    for secret in ["Traceback", "psycopg2", "db-7"] {
        assert!(!r.text.contains(secret), "leaked {secret}: {}", r.text);
    }
    let r = post(&h, ops, &[], &call(json!(2), "slow", json!({}))).await;
    assert_tool_error(&r, json!(2), "BACKEND_TIMEOUT");
    let r = post(&h, ops, &[], &call(json!(3), "bad_output", json!({}))).await;
    assert_tool_error(&r, json!(3), "OUTPUT_CONTRACT_VIOLATION");
    // A JSON-RPC error the server sends with an HTTP 4xx is its protocol answer: it passes.
    let r = post(&h, ops, &[], &call(json!(4), "rejects", json!({}))).await;
    assert_eq!(
        (r.status, r.json["error"]["code"].as_i64()),
        (400, Some(-32602)),
        "{}",
        r.text
    );
    assert_eq!(r.json["error"]["data"]["max"], 60);
    h.stop().await;

    let h = Harness::start(
        closed_port().await,
        Options {
            policies: POLICIES.into(),
            ..Options::default()
        },
    )
    .await;
    let r = post(&h, ops, &[], &call(json!(5), "read_logs", json!({}))).await;
    assert_eq!(
        assert_tool_error(&r, json!(5), "BACKEND_UNAVAILABLE")["retryable"],
        true
    );
    let init = r#"{"jsonrpc":"2.0","id":9,"method":"initialize","params":{}}"#;
    assert_rpc_error(
        &post(&h, ops, &[], init).await,
        503,
        json!(9),
        -32603,
        "BACKEND_UNAVAILABLE",
    );
    h.stop().await;
}

#[tokio::test]
async fn allowed_calls_are_shaped_and_carry_filled_defaults() {
    let backend = McpBackend::start().await;
    let h = start(&backend).await;
    let r = post(
        &h,
        Some(OPS_TOKEN),
        &[],
        &call(json!(1), "read_logs", json!({})),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(r.header("x-toolgate-decision"), "allow");
    let expected = json!({"lines": [{"msg": "order 17 shipped", "client_ip": "[REDACTED]"}]});
    assert_eq!(r.json["result"]["structuredContent"], expected);
    let text = r.json["result"]["content"][0]["text"].as_str().unwrap();
    assert_eq!(
        serde_json::from_str::<Value>(text).unwrap(),
        expected,
        "the text copy is shaped too"
    );
    let seen = backend.last();
    assert_eq!(seen.headers["x-toolgate-agent"], "ops-bot");
    assert_eq!(seen.headers["x-toolgate-tool"], "read_logs");
    assert!(seen.headers.get("authorization").is_none());
    assert!(seen.headers["host"]
        .to_str()
        .unwrap()
        .ends_with(&backend.addr.port().to_string()));

    let args = json!({"project_key": "OPS", "title": "disk full"});
    let r = post(
        &h,
        Some(OPS_TOKEN),
        &[],
        &call(json!(2), "create_issue", args),
    )
    .await;
    assert_eq!(
        r.json["result"]["structuredContent"]["args"]["priority"], "low",
        "{}",
        r.text
    );
    assert_eq!(
        backend.last().body["params"]["arguments"]["priority"],
        "low"
    );
    h.stop().await;
}

#[tokio::test]
async fn a_batch_is_governed_and_answered_element_by_element() {
    let backend = McpBackend::start().await;
    let h = start(&backend).await;
    let batch = json!([
        {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "read_logs", "arguments": {}}},
        {"jsonrpc": "2.0", "id": "two", "method": "tools/call", "params": {"name": "secret_tool"}},
        {"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {"name": "echo"}},
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
        {"jsonrpc": "2.0", "id": 4, "method": "ping"},
        {"jsonrpc": "2.0", "id": 5, "method": "tools/list"},
        {"jsonrpc": "2.0", "id": 6, "method": "resources/list"},
        {"id": 7, "method": "ping"},
        {"jsonrpc": "2.0", "id": 8, "method": "tools/call", "params": {"name": "stream_logs"}}
    ]);
    let r = post(&h, Some(OPS_TOKEN), &[], &batch.to_string()).await;
    assert_eq!(r.status, 200, "{}", r.text);
    let answers = r.json.as_array().expect("an array of answers");
    let by_id = |id: Value| {
        answers
            .iter()
            .find(|a| a["id"] == id)
            .unwrap_or_else(|| panic!("no answer for {id}: {}", r.text))
            .clone()
    };
    assert_eq!(
        answers.len(),
        8,
        "the notification gets no answer: {}",
        r.text
    );
    assert_eq!(
        by_id(json!(1))["result"]["structuredContent"]["lines"][0]["client_ip"],
        "[REDACTED]"
    );
    assert_eq!(
        by_id(json!("two"))["error"]["data"]["error"]["code"],
        "UNKNOWN_TOOL"
    );
    assert_eq!(
        by_id(json!(3))["result"]["structuredContent"]["error"]["code"],
        "TOOL_NOT_ALLOWED"
    );
    assert_eq!(by_id(json!(4))["result"], json!({"resources": []}));
    let listing = by_id(json!(5));
    let tools: Vec<&str> = listing["result"]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    assert_eq!(tools, ["read_logs", "create_issue", "stream_logs"]);
    assert_eq!(by_id(json!(6))["error"]["code"], -32601);
    assert_eq!(by_id(json!(7))["error"]["code"], -32600);
    assert_eq!(
        by_id(json!(8))["result"]["structuredContent"]["lines"][0]["client_ip"],
        "[REDACTED]"
    );
    // Forwarded one by one (the backend refuses batches), refused elements never.
    assert_eq!(backend.calls(), ["read_logs", "stream_logs"]);
    assert!(backend.posts().iter().all(|p| p.is_object()));
    assert_eq!(
        backend.posts().len(),
        5,
        "2 calls, the notification, ping, list; not resources"
    );

    let only_notes = json!([{"jsonrpc": "2.0", "method": "notifications/initialized"}]);
    let r = post(&h, Some(OPS_TOKEN), &[], &only_notes.to_string()).await;
    assert_eq!((r.status, r.text.as_str()), (202, ""));

    // One audit record per tools/call of the batch, plus one per HTTP request.
    let dir = h.stop_keeping_files().await;
    let text = std::fs::read_to_string(dir.path().join("audit.log")).unwrap();
    assert_eq!(audit_verify(&text).calls, 6);
    let records: Vec<Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let calls: Vec<(&str, &str, &str)> = records
        .iter()
        .filter(|r| !r["tool"].is_null() || r["code"] == "UNKNOWN_TOOL")
        .map(|r| {
            (
                r["tool"].as_str().unwrap_or("-"),
                r["decision"].as_str().unwrap(),
                r["code"].as_str().unwrap_or("OK"),
            )
        })
        .collect();
    assert_eq!(
        calls,
        [
            ("read_logs", "allow", "OK"),
            ("-", "deny", "UNKNOWN_TOOL"),
            ("echo", "deny", "TOOL_NOT_ALLOWED"),
            ("stream_logs", "allow", "OK")
        ]
    );
}

/// Reads the next chunk of a streamed response body.
async fn next_chunk(body: &mut hyper::body::Incoming) -> String {
    let frame = tokio::time::timeout(Duration::from_secs(5), body.frame())
        .await
        .expect("a chunk in time")
        .expect("the stream is open")
        .unwrap();
    String::from_utf8_lossy(&frame.into_data().unwrap()).into_owned()
}

async fn open(
    h: &Harness,
    method: &str,
    headers: &[(&str, &str)],
    body: String,
) -> http::Response<hyper::body::Incoming> {
    let mut request = Request::builder()
        .method(method)
        .uri(format!("{}/mcp", h.base))
        .header("authorization", format!("Bearer {OPS_TOKEN}"))
        .header("accept", "application/json, text/event-stream");
    if !body.is_empty() {
        request = request.header("content-type", "application/json");
    }
    for (k, v) in headers {
        request = request.header(*k, *v);
    }
    h.client
        .request(request.body(Full::new(Bytes::from(body))).unwrap())
        .await
        .unwrap()
}

#[tokio::test]
async fn event_streams_flow_through_as_they_are_sent() {
    let backend = McpBackend::start().await;
    let h = start(&backend).await;
    // A call's progress arrives while the backend still holds the result.
    let response = open(&h, "POST", &[], call(json!(1), "slow_stream", json!({}))).await;
    assert_eq!(response.headers()["content-type"], "text/event-stream");
    let mut body = response.into_body();
    let first = next_chunk(&mut body).await;
    assert!(first.contains("notifications/progress"), "{first}");
    backend.release.notify_one();
    let rest = next_chunk(&mut body).await;
    assert!(rest.contains(r#""text":"done""#), "{rest}");

    // A result that doesn't come within the contract's timeout is answered in the stream.
    let response = open(
        &h,
        "POST",
        &[],
        call(json!("t"), "slow_stream_short", json!({})),
    )
    .await;
    let mut body = response.into_body();
    assert!(next_chunk(&mut body)
        .await
        .contains("notifications/progress"));
    let timeout = next_chunk(&mut body).await;
    let data: Value =
        serde_json::from_str(timeout.trim().trim_start_matches("event: message\ndata: ")).unwrap();
    assert_eq!(data["id"], "t");
    assert_eq!(
        data["result"]["structuredContent"]["error"]["code"], "BACKEND_TIMEOUT",
        "{timeout}"
    );
    assert!(
        body.frame().await.is_none(),
        "the stream ends after the refusal"
    );

    // The GET stream of a session, likewise.
    let init = r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{}}"#;
    let r = post(&h, Some(OPS_TOKEN), &[], init).await;
    let session = r.header("mcp-session-id").to_string();
    assert_eq!(session, "sess-0", "{r:?}");
    let response = open(&h, "GET", &[("mcp-session-id", &session)], String::new()).await;
    assert_eq!(response.status(), 200);
    let mut body = response.into_body();
    assert!(next_chunk(&mut body).await.contains("progress"));
    backend.release.notify_one();
    assert!(next_chunk(&mut body).await.contains("progress"));
    drop(body);
    // A resumed GET stream would replay a result toolgate can't tie to its call: dropped.
    let resumed = [
        ("mcp-session-id", session.as_str()),
        ("last-event-id", "e-1"),
    ];
    let response = open(&h, "GET", &resumed, String::new()).await;
    let text = String::from_utf8_lossy(&response.into_body().collect().await.unwrap().to_bytes())
        .into_owned();
    assert!(text.contains("notifications/progress"), "{text}");
    assert!(
        !text.contains("10.1.2.3") && !text.contains("result"),
        "{text}"
    );
    // The streamed call that timed out has its call record and a follow-up refusal.
    let dir = h.stop_keeping_files().await;
    let text = std::fs::read_to_string(dir.path().join("audit.log")).unwrap();
    let short: Vec<Value> = text
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .filter(|r| r["tool"] == "slow_stream_short")
        .collect();
    assert_eq!(short.len(), 2, "{text}");
    assert_eq!(
        (&short[0]["code"], &short[1]["code"]),
        (&Value::Null, &json!("BACKEND_TIMEOUT"))
    );
    assert_eq!(short[0]["traceId"], short[1]["traceId"]);
}

#[tokio::test]
async fn streamed_results_and_listings_are_rewritten_in_flight() {
    let backend = McpBackend::start().await;
    let h = start(&backend).await;
    let r = post(
        &h,
        Some(OPS_TOKEN),
        &[],
        &call(json!(1), "stream_logs", json!({})),
    )
    .await;
    assert_eq!(r.header("content-type"), "text/event-stream");
    assert!(
        r.text.starts_with("event: message\r\ndata: "),
        "unrewritten events pass byte for byte"
    );
    let text = r.text.replace("\r\n", "\n");
    let events: Vec<&str> = text
        .split("\n\n")
        .filter(|e| !e.trim().is_empty())
        .collect();
    assert_eq!(events.len(), 2, "{}", r.text);
    assert!(
        events[0].contains("notifications/progress"),
        "other events pass as sent"
    );
    let data: Value = serde_json::from_str(events[1].split("data: ").nth(1).unwrap()).unwrap();
    assert_eq!(
        data["result"]["structuredContent"],
        json!({"lines": [{"msg": "order 17 shipped", "client_ip": "[REDACTED]"}]})
    );
    assert!(
        !r.text.contains("10.1.2.3") && !r.text.contains("db-7"),
        "{}",
        r.text
    );

    let r = post(
        &h,
        Some(OPS_TOKEN),
        &[],
        &call(json!(2), "stray_id", json!({})),
    )
    .await;
    assert!(
        !r.text.contains("10.1.2.3"),
        "a stray id doesn't dodge shaping: {}",
        r.text
    );
    assert!(r.text.contains(r#""id":2"#), "{}", r.text);

    let list = r#"{"jsonrpc":"2.0","id":"l","method":"tools/list"}"#;
    let r = post(&h, Some(OPS_TOKEN), &[], list).await;
    assert!(r.text.contains("notifications/message"), "{}", r.text);
    let last = r.text.split("data: ").last().unwrap().trim();
    let listing: Value = serde_json::from_str(last).unwrap();
    let tools = listing["result"]["tools"].as_array().unwrap();
    let names: Vec<&str> = tools.iter().map(|t| t["name"].as_str().unwrap()).collect();
    assert_eq!(
        names,
        ["read_logs", "create_issue", "stream_logs"],
        "granted tools with contracts only"
    );
    // Listed output schemas describe what the agent receives, mask included.
    let output = &tools[0]["outputSchema"];
    assert_eq!(output["properties"]["lines"]["type"], "array");
    assert!(
        output.get("required").is_none(),
        "the backend's schema is replaced: {output}"
    );
    assert_eq!(
        tools[1]["outputSchema"]["required"],
        json!(["host"]),
        "unshaped tools keep theirs"
    );
    let r = post(&h, Some(STRANGER_TOKEN), &[], list).await;
    assert!(
        r.text.contains(r#""tools":[]"#),
        "an agent without policy sees no tool: {}",
        r.text
    );
    h.stop().await;
}

#[tokio::test]
async fn sessions_belong_to_the_agent_that_opened_them() {
    let backend = McpBackend::start().await;
    let h = start(&backend).await;
    let init = r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{}}"#;
    let ping = r#"{"jsonrpc":"2.0","id":"p","method":"ping"}"#;
    let r = post(&h, Some(OPS_TOKEN), &[], init).await;
    let session = r.header("mcp-session-id").to_string();
    let with = [("mcp-session-id", session.as_str())];
    assert_eq!(post(&h, Some(OPS_TOKEN), &with, ping).await.status, 200);
    let seen = backend.posts().len();
    // Another agent with the same session id never reaches that session upstream.
    let r = post(&h, Some(STRANGER_TOKEN), &with, ping).await;
    assert_rpc_error(&r, 404, json!("p"), -32600, "MALFORMED_REQUEST");
    assert_eq!(
        h.call("GET", "/mcp", Some(STRANGER_TOKEN), &with, "")
            .await
            .status,
        404
    );
    assert_eq!(
        h.call("DELETE", "/mcp", Some(STRANGER_TOKEN), &with, "")
            .await
            .status,
        404
    );
    let unknown = [("mcp-session-id", "sess-999")];
    assert_eq!(post(&h, Some(OPS_TOKEN), &unknown, ping).await.status, 404);
    assert_eq!(backend.posts().len(), seen);
    assert_eq!(backend.seen.lock().unwrap().len(), seen);
    // The owner ends it; then it is gone for everyone.
    assert_eq!(
        h.call("DELETE", "/mcp", Some(OPS_TOKEN), &with, "")
            .await
            .status,
        200
    );
    assert_eq!(post(&h, Some(OPS_TOKEN), &with, ping).await.status, 404);
    h.stop().await;
}

#[tokio::test]
async fn notifications_pings_and_methods_follow_policy() {
    let backend = McpBackend::start().await;
    let h = start(&backend).await;
    let ops = Some(OPS_TOKEN);
    let r = post(
        &h,
        ops,
        &[],
        r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#,
    )
    .await;
    assert_eq!(r.status, 202, "{}", r.text);
    let r = post(
        &h,
        ops,
        &[],
        r#"{"jsonrpc":"2.0","id":"s1","result":{"roots":[]}}"#,
    )
    .await;
    assert_eq!(
        r.status, 202,
        "a client's response to a server request passes"
    );
    let r = post(&h, ops, &[], r#"{"jsonrpc":"2.0","id":41,"method":"ping"}"#).await;
    assert_eq!(
        (r.status, r.json["id"].as_i64()),
        (200, Some(41)),
        "{}",
        r.text
    );
    assert_eq!(backend.posts().len(), 3);
    let r = post(
        &h,
        ops,
        &[],
        r#"{"jsonrpc":"2.0","id":42,"method":"resources/list"}"#,
    )
    .await;
    assert_rpc_error(&r, 200, json!(42), -32601, "TOOL_NOT_ALLOWED");
    let r = post(
        &h,
        ops,
        &[],
        r#"{"jsonrpc":"2.0","id":43,"method":"tools/destroy"}"#,
    )
    .await;
    assert_rpc_error(&r, 200, json!(43), -32601, "TOOL_NOT_ALLOWED");
    assert_eq!(
        backend.posts().len(),
        3,
        "refused methods are not forwarded"
    );
    let r = h.call("PUT", "/mcp", ops, &[], "{}").await;
    assert_eq!(r.status, 405);
    h.stop().await;
}

#[tokio::test]
async fn routing_headers_of_2026_07_28_must_match_the_body() {
    let backend = McpBackend::start().await;
    let h = start(&backend).await;
    let modern = [
        ("mcp-protocol-version", "2026-07-28"),
        ("mcp-method", "tools/call"),
        ("mcp-name", "read_logs"),
    ];
    let r = post(
        &h,
        Some(OPS_TOKEN),
        &modern,
        &call(json!(1), "read_logs", json!({})),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.text);
    let r = post(
        &h,
        Some(OPS_TOKEN),
        &modern,
        &call(
            json!(2),
            "create_issue",
            json!({"project_key": "OPS", "title": "x"}),
        ),
    )
    .await;
    assert_rpc_error(&r, 400, json!(2), -32020, "MALFORMED_REQUEST");
    let r = post(
        &h,
        Some(OPS_TOKEN),
        &modern[..2],
        &call(json!(3), "read_logs", json!({})),
    )
    .await;
    assert_rpc_error(&r, 400, json!(3), -32020, "MALFORMED_REQUEST");
    // Mcp-Method is required at 2026-07-28, as Mcp-Name is.
    let r = post(
        &h,
        Some(OPS_TOKEN),
        &[modern[0], modern[2]],
        &call(json!(31), "read_logs", json!({})),
    )
    .await;
    assert_rpc_error(&r, 400, json!(31), -32020, "MALFORMED_REQUEST");
    let named = |name| [modern[0], modern[1], ("mcp-name", name)];
    let r = post(
        &h,
        Some(OPS_TOKEN),
        &named("secret_tool"),
        &call(json!(4), "secret_tool", json!({})),
    )
    .await;
    assert_rpc_error(&r, 400, json!(4), -32602, "UNKNOWN_TOOL");
    let r = post(
        &h,
        Some(OPS_TOKEN),
        &named("echo"),
        &call(json!(5), "echo", json!({})),
    )
    .await;
    assert_eq!(r.json["result"]["resultType"], "complete", "{}", r.text);
    let batch = format!("[{}]", call(json!(6), "read_logs", json!({})));
    let r = post(&h, Some(OPS_TOKEN), &modern[..1], &batch).await;
    assert_rpc_error(&r, 400, Value::Null, -32600, "MALFORMED_REQUEST");
    assert_eq!(
        backend.calls(),
        ["read_logs"],
        "mismatched requests are never forwarded"
    );
    h.stop().await;
}

#[tokio::test]
async fn a_non_idempotent_tool_runs_once_for_concurrent_duplicates() {
    let backend = McpBackend::start().await;
    let h = Arc::new(start(&backend).await);
    let args = json!({"project_key": "OPS", "title": "disk full"});
    let calls = (0..20).map(|i| {
        let h = h.clone();
        let body = call(json!(i), "create_issue", args.clone());
        tokio::spawn(async move {
            post(&h, Some(OPS_TOKEN), &[("x-toolgate-session", "s1")], &body).await
        })
    });
    let replies = futures_util::future::join_all(calls).await;
    let mut replayed = 0;
    for (i, reply) in replies.into_iter().enumerate() {
        let r = reply.unwrap();
        assert_eq!(r.status, 200, "{}", r.text);
        assert_eq!(
            r.json["id"],
            json!(i),
            "each duplicate gets its own id back"
        );
        assert_eq!(
            r.json["result"]["structuredContent"]["args"]["priority"],
            "low"
        );
        replayed += usize::from(r.header("x-toolgate-replayed") == "true");
    }
    assert_eq!(replayed, 19);
    let ran = backend
        .seen
        .lock()
        .unwrap()
        .iter()
        .filter(|s| s.body.to_string().contains("create_issue"))
        .count();
    assert_eq!(ran, 1, "the backend ran the call once");
}

/// DNS rebinding: a browser-borne request from a foreign origin (or, when pinned, to a
/// foreign Host) is refused with 403 before anything is read or forwarded.
#[tokio::test]
async fn foreign_origins_and_hosts_are_refused_before_forwarding() {
    let backend = McpBackend::start().await;
    let h = start(&backend).await;
    let ping = r#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#;
    let evil = [
        ("host", "evil.example.com"),
        ("origin", "http://evil.example.com"),
    ];
    let r = post(&h, Some(OPS_TOKEN), &evil, ping).await;
    assert_eq!(r.status, 403, "{}", r.text);
    assert_eq!(r.json["error"]["code"], "ORIGIN_NOT_ALLOWED", "{}", r.text);
    assert_eq!(r.header("x-toolgate-code"), "ORIGIN_NOT_ALLOWED");
    let r = post(&h, None, &evil, ping).await;
    assert_eq!(r.status, 403, "refused before the credential is even read");
    assert!(backend.posts().is_empty(), "nothing was forwarded");
    let local = [("origin", "http://localhost:5173")];
    let r = post(&h, Some(OPS_TOKEN), &local, ping).await;
    assert_eq!(r.status, 200, "{}", r.text);
    let r = post(&h, Some(OPS_TOKEN), &[("host", "evil.example.com")], ping).await;
    assert_eq!(
        r.status, 200,
        "no Origin, no pinned hosts: an agent, not a browser"
    );
    assert_eq!(backend.posts().len(), 2);

    let pinned = Harness::start(
        backend.addr,
        Options {
            policies: POLICIES.into(),
            tweak: Box::new(|s| s.mcp.allowed_hosts = vec!["127.0.0.1:*".into()]),
            ..Options::default()
        },
    )
    .await;
    let r = post(
        &pinned,
        Some(OPS_TOKEN),
        &[("host", "evil.example.com")],
        ping,
    )
    .await;
    assert_eq!(r.status, 403, "{}", r.text);
    assert_eq!(r.json["error"]["code"], "ORIGIN_NOT_ALLOWED");
    let r = post(&pinned, Some(OPS_TOKEN), &[], ping).await;
    assert_eq!(r.status, 200, "the sidecar's own address: {}", r.text);
    assert_eq!(backend.posts().len(), 3);
}

/// A tool that runs at most once streams live too: its progress reaches the first caller
/// while the call runs, a concurrent duplicate gets only the final response, and the
/// backend runs it once.
#[tokio::test]
async fn a_call_that_runs_once_streams_its_progress_live() {
    let backend = McpBackend::start().await;
    // slow_stream_once: progress at once, the result 2 s later; not idempotent.
    let h = start_with_tool(&backend, "slow_stream_once", "timeoutMs: 5000").await;
    let started = std::time::Instant::now();
    let body = call(json!(1), "slow_stream_once", json!({"n": 1}));
    let lead = open(&h, "POST", &[], body.clone()).await;
    assert_eq!(lead.headers()["content-type"], "text/event-stream");
    let mut stream = lead.into_body();
    let first = next_chunk(&mut stream).await;
    assert!(first.contains("notifications/progress"), "{first}");
    assert!(
        started.elapsed() < Duration::from_millis(1500),
        "progress arrived while the backend held the result: {:?}",
        started.elapsed()
    );
    // The same call again while the first runs: joined, answered with the final response.
    let duplicate = open(
        &h,
        "POST",
        &[],
        call(json!(2), "slow_stream_once", json!({"n": 1})),
    )
    .await;
    assert_eq!(duplicate.headers()["x-toolgate-replayed"], "true");
    let replayed =
        String::from_utf8_lossy(&duplicate.into_body().collect().await.unwrap().to_bytes())
            .into_owned();
    let replayed: Value = serde_json::from_str(&replayed).unwrap();
    assert_eq!(replayed["id"], 2);
    assert_eq!(
        replayed["result"]["content"][0]["text"], "done",
        "{replayed}"
    );
    let rest = next_chunk(&mut stream).await;
    assert!(
        rest.contains(r#""text":"done""#) && rest.contains(r#""id":1"#),
        "{rest}"
    );
    assert!(
        stream.frame().await.is_none(),
        "the stream ends with the result"
    );
    assert_eq!(backend.calls(), ["slow_stream_once"], "one execution");
}

/// A multi-round call (2026-07-28): an `input_required` answer is not the call's result,
/// and the retry carrying `inputResponses` / `requestState` is a new round, governed and
/// forwarded — never answered from the dedupe store with the first round's answer.
#[tokio::test]
async fn each_round_of_a_multi_round_call_is_forwarded() {
    let backend = McpBackend::start().await;
    let h = start_with_tool(&backend, "ask_twice", "redact: [/secret]").await;
    let first = call(json!(1), "ask_twice", json!({"amount": 5}));
    let r = post(&h, Some(OPS_TOKEN), &[], &first).await;
    assert_eq!(
        r.json["result"]["resultType"], "input_required",
        "{}",
        r.text
    );
    let retry = json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {
        "name": "ask_twice", "arguments": {"amount": 5},
        "inputResponses": {"confirm": {"action": "accept"}}, "requestState": "round-1"}})
    .to_string();
    let r = post(&h, Some(OPS_TOKEN), &[], &retry).await;
    assert_eq!(r.json["result"]["resultType"], "complete", "{}", r.text);
    // Shaped by the contract (its redact applies to the final round only).
    let shaped = &r.json["result"]["structuredContent"];
    assert_eq!(shaped["done"], true, "{}", r.text);
    assert_eq!(shaped["secret"], "[REDACTED]", "{}", r.text);
    assert_eq!(
        r.header("x-toolgate-replayed"),
        "",
        "the retry is a round of its own"
    );
    // The first round again: its input_required answer was not kept, so it runs again.
    let r = post(&h, Some(OPS_TOKEN), &[], &first).await;
    assert_eq!(
        r.json["result"]["resultType"], "input_required",
        "{}",
        r.text
    );
    assert_eq!(r.header("x-toolgate-replayed"), "");
    // The same last round again is a duplicate of it: replayed, not run.
    let r = post(&h, Some(OPS_TOKEN), &[], &retry).await;
    assert_eq!(r.json["result"]["resultType"], "complete", "{}", r.text);
    assert_eq!(r.header("x-toolgate-replayed"), "true");
    assert_eq!(backend.calls(), ["ask_twice", "ask_twice", "ask_twice"]);
    // Every round is governed and audited.
    let dir = h.stop_keeping_files().await;
    let text = std::fs::read_to_string(dir.path().join("audit.log")).unwrap();
    let rounds = text
        .lines()
        .filter(|l| l.contains(r#""tool":"ask_twice""#))
        .count();
    assert_eq!(rounds, 4, "{text}");
}

/// Resumption: a client whose stream broke mid-call resumes with `Last-Event-ID`, and
/// the response the server replays is delivered, shaped by the contract of the call it
/// answers; a replayed response that answers no call of the session is still dropped.
#[tokio::test]
async fn a_replayed_answer_on_a_resumed_stream_is_shaped_and_delivered() {
    let backend = McpBackend::start().await;
    let h = start(&backend).await;
    let init = r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{}}"#;
    let session = post(&h, Some(OPS_TOKEN), &[], init)
        .await
        .header("mcp-session-id")
        .to_string();
    let in_session = [("mcp-session-id", session.as_str())];
    // Call 5 (stream_logs: its contract redacts client_ip and keeps only `lines`)
    // answers with an event stream, which breaks after its first chunk.
    let broken = open(
        &h,
        "POST",
        &in_session,
        call(json!(5), "stream_logs", json!({})),
    )
    .await;
    assert_eq!(broken.headers()["content-type"], "text/event-stream");
    let mut stream = broken.into_body();
    next_chunk(&mut stream).await;
    drop(stream);
    let resumed = [
        ("mcp-session-id", session.as_str()),
        ("last-event-id", "e-1"),
    ];
    let response = open(&h, "GET", &resumed, String::new()).await;
    let text = String::from_utf8_lossy(&response.into_body().collect().await.unwrap().to_bytes())
        .into_owned();
    let replay = text
        .split("\n\n")
        .filter_map(|e| e.lines().find_map(|l| l.strip_prefix("data: ")))
        .map(|d| serde_json::from_str::<Value>(d).unwrap())
        .find(|m| m["id"] == 5)
        .unwrap_or_else(|| panic!("the replayed answer was delivered: {text}"));
    let shaped = &replay["result"]["structuredContent"];
    assert_eq!(shaped["lines"][0]["client_ip"], "[REDACTED]", "{text}");
    assert!(shaped.get("host").is_none(), "{text}");
    assert!(
        !text.contains("10.1.2.3") && !text.contains("db-7"),
        "{text}"
    );
    assert!(text.contains("notifications/progress"), "{text}");

    // Another session made no call 5: the same replay is dropped there.
    let other = post(&h, Some(OPS_TOKEN), &[], init)
        .await
        .header("mcp-session-id")
        .to_string();
    let resumed = [("mcp-session-id", other.as_str()), ("last-event-id", "e-1")];
    let response = open(&h, "GET", &resumed, String::new()).await;
    let text = String::from_utf8_lossy(&response.into_body().collect().await.unwrap().to_bytes())
        .into_owned();
    assert!(!text.contains("result"), "{text}");
}

/// With `identity.oauth`, the MCP endpoint is an OAuth resource server as the MCP
/// authorization specification says: RFC 9728 metadata, a challenge naming it on 401,
/// `insufficient_scope` on 403, tokens only for this resource, never passed upstream.
#[tokio::test]
async fn the_mcp_endpoint_is_an_oauth_resource_server() {
    use common::keys::{jwks, now, SigningKey};
    const RESOURCE: &str = "https://orders.example.com/mcp";
    const METADATA: &str = "https://orders.example.com/.well-known/oauth-protected-resource/mcp";
    let keys_dir = tempfile::tempdir().unwrap();
    let idp = SigningKey::rsa("as-1");
    let jwks_path = keys_dir.path().join("jwks.json");
    std::fs::write(&jwks_path, jwks(&[&idp])).unwrap();
    let backend = McpBackend::start().await;
    let h = Harness::start(
        backend.addr,
        Options {
            policies: POLICIES.into(),
            tweak: Box::new(move |s| {
                // The authorization server is the only source of agent ids.
                s.identity.tokens = None;
                s.identity.jwt = vec![toolgate::config::JwtIssuer {
                    issuer: "https://auth.example.com".into(),
                    audience: RESOURCE.into(),
                    jwks: Some(jwks_path.into()),
                    discovery: false,
                    agent_claim: "sub".into(),
                    agent_prefix: None,
                }];
                s.identity.oauth = Some(toolgate::config::OAuth {
                    resource: RESOURCE.into(),
                    authorization_servers: vec!["https://auth.example.com".into()],
                    scopes_supported: vec!["tools".into()],
                    required_scopes: vec!["tools".into()],
                });
            }),
            ..Options::default()
        },
    )
    .await;
    // The metadata is public, at the path-suffixed and the root form.
    for path in [
        "/.well-known/oauth-protected-resource/mcp",
        "/.well-known/oauth-protected-resource",
    ] {
        let r = h.call("GET", path, None, &[], "").await;
        assert_eq!(r.status, 200, "{path}: {}", r.text);
        assert_eq!(r.json["resource"], RESOURCE);
        assert_eq!(
            r.json["authorization_servers"][0],
            "https://auth.example.com"
        );
        assert_eq!(r.json["scopes_supported"][0], "tools");
    }
    let ping = r#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#;
    let r = post(&h, None, &[], ping).await;
    assert_eq!(r.status, 401, "{}", r.text);
    assert_eq!(
        r.header("www-authenticate"),
        format!(r#"Bearer resource_metadata="{METADATA}""#)
    );
    let r = post(&h, Some("not-a-token"), &[], ping).await;
    assert_eq!(r.status, 401);
    assert!(r
        .header("www-authenticate")
        .ends_with(r#"error="invalid_token""#));
    let token = |aud: &str, scope: &str| {
        idp.sign(
            &json!({"iss": "https://auth.example.com", "aud": aud, "sub": "ops-bot",
                         "scope": scope, "exp": now() + 300}),
        )
    };
    // A token for another resource is not valid here (RFC 8707).
    let r = post(
        &h,
        Some(&token("https://other.example.com/mcp", "tools")),
        &[],
        ping,
    )
    .await;
    assert_eq!(r.status, 401, "{}", r.text);
    let r = post(&h, Some(&token(RESOURCE, "profile")), &[], ping).await;
    assert_eq!(r.status, 403, "{}", r.text);
    let challenge = r.header("www-authenticate").to_string();
    assert!(
        challenge.contains(r#"error="insufficient_scope""#),
        "{challenge}"
    );
    assert!(challenge.contains(r#"scope="tools""#), "{challenge}");
    assert!(backend.posts().is_empty(), "nothing was forwarded");
    let r = post(&h, Some(&token(RESOURCE, "tools profile")), &[], ping).await;
    assert_eq!(r.status, 200, "{}", r.text);
    let forwarded = backend.last();
    assert!(
        !forwarded.headers.contains_key("authorization"),
        "the token never goes upstream"
    );
}

/// The contract's timeout holds for the lead of a call that runs at most once, even while
/// the call streams its progress: it gets `BACKEND_TIMEOUT` at the timeout, not when the
/// backend finally answers.
#[tokio::test]
async fn a_live_call_that_runs_once_is_answered_at_its_timeout() {
    let backend = McpBackend::start().await;
    // slow_stream_late: progress at once, the result 2 s later; 300 ms allowed.
    let h = start_with_tool(&backend, "slow_stream_late", "timeoutMs: 300").await;
    let started = std::time::Instant::now();
    let lead = open(
        &h,
        "POST",
        &[],
        call(json!(9), "slow_stream_late", json!({})),
    )
    .await;
    assert_eq!(lead.headers()["content-type"], "text/event-stream");
    let text =
        String::from_utf8_lossy(&lead.into_body().collect().await.unwrap().to_bytes()).into_owned();
    let took = started.elapsed();
    assert!(text.contains("notifications/progress"), "{text}");
    assert!(text.contains("BACKEND_TIMEOUT"), "{text}");
    assert!(
        took < Duration::from_millis(1500),
        "answered at the contract's timeout, not the backend's 2 s: {took:?}"
    );
    // A lead whose client leaves mid-stream: the call's failure is still recorded.
    let gone = open(
        &h,
        "POST",
        &[],
        call(json!(10), "slow_stream_late", json!({"n": 2})),
    )
    .await;
    let mut stream = gone.into_body();
    assert!(next_chunk(&mut stream)
        .await
        .contains("notifications/progress"));
    drop(stream);
    tokio::time::sleep(Duration::from_millis(800)).await;
    let dir = h.stop_keeping_files().await;
    let text = std::fs::read_to_string(dir.path().join("audit.log")).unwrap();
    let late: Vec<Value> = text
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .filter(|r| r["tool"] == "slow_stream_late")
        .collect();
    let codes: Vec<&Value> = late.iter().map(|r| &r["code"]).collect();
    assert_eq!(
        codes,
        [
            &Value::Null,
            &json!("BACKEND_TIMEOUT"),
            &Value::Null,
            &json!("BACKEND_TIMEOUT")
        ],
        "each lead's record, then its timeout: {text}"
    );
}

/// With `state.backend: redis` a session issued through one replica is honoured on the
/// others, and still refused to any other agent there; ended on one, it is gone on all.
#[tokio::test]
async fn sessions_hold_across_replicas_sharing_redis() {
    if !common::redis::available() {
        return;
    }
    let server = common::redis::Server::start(&[]).await;
    let backend = McpBackend::start().await;
    let mut pods = Vec::new();
    for _ in 0..2 {
        let url = server.url();
        pods.push(
            Harness::start(
                backend.addr,
                Options {
                    policies: POLICIES.into(),
                    tweak: Box::new(move |s| {
                        s.state.backend = toolgate::config::StateBackend::Redis;
                        s.state.redis.url = url;
                        s.state.redis.timeout_ms = 500;
                    }),
                    ..Options::default()
                },
            )
            .await,
        );
    }
    let init = r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{}}"#;
    let ping = r#"{"jsonrpc":"2.0","id":"p","method":"ping"}"#;
    let r = post(&pods[0], Some(OPS_TOKEN), &[], init).await;
    let session = r.header("mcp-session-id").to_string();
    let with = [("mcp-session-id", session.as_str())];
    assert_eq!(
        post(&pods[1], Some(OPS_TOKEN), &with, ping).await.status,
        200
    );
    let r = post(&pods[1], Some(STRANGER_TOKEN), &with, ping).await;
    assert_rpc_error(&r, 404, json!("p"), -32600, "MALFORMED_REQUEST");
    assert_eq!(
        pods[1]
            .call("DELETE", "/mcp", Some(OPS_TOKEN), &with, "")
            .await
            .status,
        200
    );
    // Ended through the second pod: the first, which issued it, no longer knows it
    // only once its own copy ages out; a third pod never learns it.
    let url = server.url();
    let third = Harness::start(
        backend.addr,
        Options {
            policies: POLICIES.into(),
            tweak: Box::new(move |s| {
                s.state.backend = toolgate::config::StateBackend::Redis;
                s.state.redis.url = url;
            }),
            ..Options::default()
        },
    )
    .await;
    assert_eq!(post(&third, Some(OPS_TOKEN), &with, ping).await.status, 404);
}
