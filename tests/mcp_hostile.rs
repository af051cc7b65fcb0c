//! The MCP endpoint's adversarial corpus: every JSON-RPC shape a hostile agent can send
//! — notifications, batches, responses posing as requests, odd ids, unknown fields,
//! method spellings, routing headers that disagree — against a backend that records
//! every request it receives. Each row names the answer the agent must get and exactly
//! what the backend may see: a call that is not governed never arrives, in any form.
//! (The HTTP-level corpus, framing and sizes included, is `tests/hostile.rs`.)

#[path = "common/mcp_backend.rs"]
mod backend;
mod common;

use backend::McpBackend;
use bytes::Bytes;
use common::*;
use http::{HeaderName, Request};
use http_body_util::Full;
use serde_json::{json, Value};

const POLICIES: &str = include_str!("fixtures/policies/mcp-backend.yaml");

/// What the agent must get back.
#[derive(Debug, Clone, Copy)]
enum Answer {
    /// A JSON-RPC error: HTTP status, JSON-RPC code, toolgate code in `data`.
    Rpc(u16, i64, &'static str),
    /// A tool result with `isError: true` carrying this code (HTTP 200).
    Tool(&'static str),
    /// The backend's own answer, with this HTTP status.
    Passed(u16),
}

struct Row {
    name: &'static str,
    body: String,
    headers: Vec<(&'static str, &'static str)>,
    answer: Answer,
    /// What the backend must receive, in order: `method`, or `tools/call <tool>`.
    forwarded: &'static [&'static str],
}

fn row(name: &'static str, body: Value, answer: Answer, forwarded: &'static [&'static str]) -> Row {
    raw(name, body.to_string(), answer, forwarded)
}

fn raw(
    name: &'static str,
    body: String,
    answer: Answer,
    forwarded: &'static [&'static str],
) -> Row {
    Row {
        name,
        body,
        headers: vec![],
        answer,
        forwarded,
    }
}

fn call(id: Value, tool: &str, args: Value) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {"name": tool, "arguments": args}})
}

const MALFORMED: &str = "MALFORMED_REQUEST";
const INVALID: Answer = Answer::Rpc(400, -32600, MALFORMED);
const LOGS: &[&str] = &["tools/call read_logs"];
const NOTHING: &[&str] = &[];

fn notifications() -> Vec<Row> {
    let no_id =
        |method: &str, params: Value| json!({"jsonrpc": "2.0", "method": method, "params": params});
    vec![
        row(
            "tools/call without an id",
            no_id("tools/call", json!({"name": "read_logs"})),
            INVALID,
            NOTHING,
        ),
        row(
            "ungranted tool without an id",
            no_id("tools/call", json!({"name": "echo", "arguments": {}})),
            INVALID,
            NOTHING,
        ),
        row(
            "unknown tool without an id",
            no_id("tools/call", json!({"name": "secret_tool"})),
            INVALID,
            NOTHING,
        ),
        row(
            "resources/read without an id",
            no_id("resources/read", json!({"uri": "config://app"})),
            INVALID,
            NOTHING,
        ),
        row(
            "prompts/get without an id",
            no_id("prompts/get", json!({"name": "summarize"})),
            INVALID,
            NOTHING,
        ),
        row(
            "initialize without an id",
            no_id("initialize", json!({})),
            INVALID,
            NOTHING,
        ),
        row(
            "ping without an id",
            no_id("ping", json!({})),
            INVALID,
            NOTHING,
        ),
        row(
            "a capitalized notification",
            no_id("Notifications/initialized", json!({})),
            INVALID,
            NOTHING,
        ),
        row(
            "notification without its slash",
            no_id("notifications", json!({})),
            INVALID,
            NOTHING,
        ),
        row(
            "a real notification",
            no_id("notifications/initialized", json!({})),
            Answer::Passed(202),
            &["notifications/initialized"],
        ),
        row(
            "a cancellation",
            no_id("notifications/cancelled", json!({"requestId": 7})),
            Answer::Passed(202),
            &["notifications/cancelled"],
        ),
    ]
}

fn batches() -> Vec<Row> {
    let ping = json!({"jsonrpc": "2.0", "id": 1, "method": "ping"});
    let hidden = json!({"jsonrpc": "2.0", "method": "tools/call", "params": {"name": "create_issue", "arguments": {"project_key": "SEC", "title": "x"}}});
    vec![
        row(
            "a call dressed as a notification beside a ping",
            json!([ping, hidden]),
            INVALID,
            NOTHING,
        ),
        row(
            "a call dressed as a notification first",
            json!([hidden, ping]),
            INVALID,
            NOTHING,
        ),
        row(
            "a nested batch",
            json!([[call(json!(1), "read_logs", json!({}))]]),
            Answer::Passed(200),
            NOTHING,
        ),
        row(
            "granted and ungranted calls together",
            json!([
                call(json!(1), "read_logs", json!({})),
                call(json!(2), "echo", json!({}))
            ]),
            Answer::Passed(200),
            LOGS,
        ),
        row(
            "a refused rule inside a batch",
            json!([call(
                json!(1),
                "create_issue",
                json!({"project_key": "SEC", "title": "x"})
            )]),
            Answer::Passed(200),
            NOTHING,
        ),
        row(
            "a batch of responses only",
            json!([{"jsonrpc": "2.0", "id": 9, "result": {}}]),
            Answer::Passed(202),
            &["response"],
        ),
    ]
}

fn shapes() -> Vec<Row> {
    vec![
        row(
            "a request that is also a response",
            json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "read_logs"}, "result": {}}),
            INVALID,
            NOTHING,
        ),
        row(
            "a request that is also an error",
            json!({"jsonrpc": "2.0", "id": 1, "method": "ping", "error": {"code": 1, "message": "x"}}),
            INVALID,
            NOTHING,
        ),
        row("a client's response to a server request", json!({"jsonrpc": "2.0", "id": 3, "result": {"action": "accept"}}), Answer::Passed(202), &["response"]),
        row("a response with neither result nor error", json!({"jsonrpc": "2.0", "id": 3}), INVALID, NOTHING),
        row("id null", call(Value::Null, "read_logs", json!({})), INVALID, NOTHING),
        row("id true", call(json!(true), "read_logs", json!({})), INVALID, NOTHING),
        row("id fraction", call(json!(1.5), "read_logs", json!({})), INVALID, NOTHING),
        row("id empty string", call(json!(""), "read_logs", json!({})), Answer::Passed(200), LOGS),
        row("id negative", call(json!(-7), "read_logs", json!({})), Answer::Passed(200), LOGS),
        row("id u64::MAX", call(json!(u64::MAX), "read_logs", json!({})), Answer::Passed(200), LOGS),
        raw(
            "name given twice",
            r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"read_logs","name":"echo"}}"#.into(),
            Answer::Rpc(400, -32700, MALFORMED),
            NOTHING,
        ),
        row("jsonrpc with a space", json!({"jsonrpc": "2.0 ", "id": 1, "method": "ping"}), INVALID, NOTHING),
        row(
            "unknown envelope fields ride along",
            json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "read_logs", "arguments": {}}, "x-extra": 1}),
            Answer::Passed(200),
            LOGS,
        ),
        row(
            "a rule still reads arguments sent beside round fields",
            json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "create_issue", "arguments": {"project_key": "SEC", "title": "x"}, "inputResponses": {}, "requestState": "s"}}),
            Answer::Tool("POLICY_DENIED"),
            NOTHING,
        ),
        // Go's encoding/json reads members ignoring case (and `ſ` as `s`): a second
        // spelling of a member would be judged one way here and run another there.
        row(
            "a notification with a Method in capitals",
            json!({"jsonrpc": "2.0", "method": "notifications/progress", "Method": "tools/call", "ID": 5, "params": {"name": "create_issue", "arguments": {"project_key": "OPS", "title": "x"}}}),
            Answer::Rpc(400, -32700, MALFORMED),
            NOTHING,
        ),
        row(
            "a response with a Method",
            json!({"jsonrpc": "2.0", "id": 7, "result": {}, "Method": "tools/call", "params": {"name": "read_logs"}}),
            INVALID,
            NOTHING,
        ),
        row(
            "a ping with a METHOD",
            json!({"jsonrpc": "2.0", "id": 13, "method": "ping", "METHOD": "tools/call", "params": {"name": "read_logs"}}),
            Answer::Rpc(400, -32700, MALFORMED),
            NOTHING,
        ),
        row(
            "params spelled with a long s",
            json!({"jsonrpc": "2.0", "id": 1, "method": "ping", "param\u{017f}": {"name": "read_logs"}}),
            INVALID,
            NOTHING,
        ),
        row(
            "a granted call naming another tool as Name",
            json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "read_logs", "arguments": {}, "Name": "echo", "Arguments": {"x": 1}}}),
            Answer::Rpc(400, -32700, MALFORMED),
            NOTHING,
        ),
        row(
            "arguments spelled in capitals alone",
            json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "create_issue", "ARGUMENTS": {"project_key": "SEC", "title": "x"}}}),
            INVALID,
            NOTHING,
        ),
        raw(
            "an argument given twice in two cases",
            r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"create_issue","arguments":{"project_key":"OPS","PROJECT_KEY":"SEC","title":"x"}}}"#.into(),
            Answer::Rpc(400, -32700, MALFORMED),
            NOTHING,
        ),
        raw(
            "an integer past 64 bits",
            r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"read_logs","arguments":{"n":100000000000000000001}}}"#.into(),
            Answer::Rpc(400, -32700, MALFORMED),
            NOTHING,
        ),
        row("name not a string", json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": ["read_logs"]}}), INVALID, NOTHING),
        row("no name", json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"arguments": {}}}), INVALID, NOTHING),
        row("arguments as a list", call(json!(1), "create_issue", json!(["OPS", "x"])), Answer::Tool("INVALID_ARGUMENTS"), NOTHING),
        row("a required argument missing", call(json!(1), "create_issue", json!({"title": "x"})), Answer::Tool("MISSING_ARGUMENT"), NOTHING),
    ]
}

fn spellings() -> Vec<Row> {
    let with_method = |method: &str| json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": {"name": "read_logs", "arguments": {}}});
    let not_granted = Answer::Rpc(200, -32601, "TOOL_NOT_ALLOWED");
    vec![
        row(
            "a tool name with a trailing space",
            call(json!(1), "read_logs ", json!({})),
            Answer::Rpc(200, -32602, "UNKNOWN_TOOL"),
            NOTHING,
        ),
        row(
            "a tool name with a Cyrillic a",
            call(json!(1), "re\u{0430}d_logs", json!({})),
            Answer::Rpc(200, -32602, "UNKNOWN_TOOL"),
            NOTHING,
        ),
        row(
            "a tool name in capitals",
            call(json!(1), "READ_LOGS", json!({})),
            Answer::Rpc(200, -32602, "UNKNOWN_TOOL"),
            NOTHING,
        ),
        row(
            "an ungranted tool",
            call(json!(1), "echo", json!({})),
            Answer::Tool("TOOL_NOT_ALLOWED"),
            NOTHING,
        ),
        row(
            "a tool no contract names",
            call(json!(1), "secret_tool", json!({})),
            Answer::Rpc(200, -32602, "UNKNOWN_TOOL"),
            NOTHING,
        ),
        row(
            "TOOLS/CALL",
            with_method("TOOLS/CALL"),
            not_granted,
            NOTHING,
        ),
        row(
            "tools/Call",
            with_method("tools/Call"),
            not_granted,
            NOTHING,
        ),
        row(
            "tools/call with a leading space",
            with_method(" tools/call"),
            not_granted,
            NOTHING,
        ),
        row(
            "tools/call with a NUL",
            with_method("tools/call\u{0}"),
            not_granted,
            NOTHING,
        ),
        row(
            "tools/call/",
            with_method("tools/call/"),
            not_granted,
            NOTHING,
        ),
        row(
            "resources/read not granted",
            json!({"jsonrpc": "2.0", "id": 1, "method": "resources/read", "params": {"uri": "config://app"}}),
            not_granted,
            NOTHING,
        ),
        row(
            "logging/setLevel not granted",
            json!({"jsonrpc": "2.0", "id": 1, "method": "logging/setLevel", "params": {"level": "debug"}}),
            not_granted,
            NOTHING,
        ),
        row(
            "a granted tool",
            call(json!(1), "read_logs", json!({})),
            Answer::Passed(200),
            LOGS,
        ),
    ]
}

fn routing_headers() -> Vec<Row> {
    let modern = |name, method: &'static str, tool: &'static str, answer, forwarded| Row {
        name,
        body: call(json!(1), "read_logs", json!({})).to_string(),
        headers: vec![
            ("mcp-protocol-version", "2026-07-28"),
            ("mcp-method", method),
            ("mcp-name", tool),
        ],
        answer,
        forwarded,
    };
    let mismatch = Answer::Rpc(400, -32020, MALFORMED);
    vec![
        modern(
            "Mcp-Method naming another method",
            "ping",
            "read_logs",
            mismatch,
            NOTHING,
        ),
        modern(
            "Mcp-Name naming another tool",
            "tools/call",
            "echo",
            mismatch,
            NOTHING,
        ),
        modern(
            "routing headers that agree",
            "tools/call",
            "read_logs",
            Answer::Passed(200),
            LOGS,
        ),
        Row {
            name: "a ping with an Mcp-Name",
            body: json!({"jsonrpc": "2.0", "id": 1, "method": "ping"}).to_string(),
            headers: vec![
                ("mcp-protocol-version", "2026-07-28"),
                ("mcp-method", "ping"),
                ("mcp-name", "create_issue"),
            ],
            answer: mismatch,
            forwarded: NOTHING,
        },
    ]
}

/// What the backend received, one label per message: `method`, `tools/call <tool>`, or
/// `response`.
fn labels(posts: &[Value]) -> Vec<String> {
    posts
        .iter()
        .map(
            |body| match (body["method"].as_str(), body["params"]["name"].as_str()) {
                (Some("tools/call"), Some(tool)) => format!("tools/call {tool}"),
                (Some(method), _) => method.to_string(),
                (None, _) => "response".to_string(),
            },
        )
        .collect()
}

async fn send(h: &Harness, row: &Row) -> Reply {
    let mut request = Request::post(format!("{}/mcp", h.base))
        .header("authorization", format!("Bearer {OPS_TOKEN}"))
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream");
    for (name, value) in &row.headers {
        request = request.header(HeaderName::from_static(name), *value);
    }
    let response = h
        .client
        .request(
            request
                .body(Full::new(Bytes::from(row.body.clone())))
                .unwrap(),
        )
        .await
        .unwrap();
    Reply::read(response).await
}

fn check(row: &Row, r: &Reply) -> Result<(), String> {
    let fail = |what: String| Err(format!("{what}: HTTP {} {}", r.status, r.text));
    match row.answer {
        Answer::Rpc(status, rpc, code) => {
            if r.status != status || r.json["error"]["code"] != rpc {
                return fail(format!("expected HTTP {status} and JSON-RPC {rpc}"));
            }
            if r.json["error"]["data"]["error"]["code"] != code {
                return fail(format!("expected {code} in error.data"));
            }
        }
        Answer::Tool(code) => {
            let result = &r.json["result"];
            if r.status != 200 || result["isError"] != true {
                return fail("expected a tool error".into());
            }
            if result["structuredContent"]["error"]["code"] != code {
                return fail(format!("expected {code}"));
            }
        }
        Answer::Passed(status) if r.status != status => {
            return fail(format!("expected HTTP {status}"));
        }
        Answer::Passed(_) => {}
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_json_rpc_shape_is_governed_before_anything_is_forwarded() {
    let backend = McpBackend::start().await;
    let h = Harness::start(
        backend.addr,
        Options {
            policies: POLICIES.into(),
            ..Options::default()
        },
    )
    .await;
    let rows: Vec<Row> = [
        notifications(),
        batches(),
        shapes(),
        spellings(),
        routing_headers(),
    ]
    .into_iter()
    .flatten()
    .collect();
    let mut failures = Vec::new();
    for row in &rows {
        let before = backend.posts().len();
        let reply = send(&h, row).await;
        let received = labels(&backend.posts()[before..]);
        if let Err(e) = check(row, &reply) {
            failures.push(format!("{}: {e}", row.name));
        }
        if received != row.forwarded {
            failures.push(format!(
                "{}: the backend received {received:?}, expected {:?}",
                row.name, row.forwarded
            ));
        }
        // Whatever reached the backend was stamped by the gateway.
        for seen in backend.seen.lock().unwrap().iter().skip(before) {
            if seen.headers.get("x-toolgate-agent").map(|v| v.as_bytes()) != Some(b"ops-bot") {
                failures.push(format!("{}: forwarded without its agent", row.name));
            }
            if seen.headers.contains_key("authorization") {
                failures.push(format!("{}: the credential crossed", row.name));
            }
            // And carries the trace of the decision that let it, a tool call or not.
            let trace = reply.json["error"]["data"]["error"]["traceId"].as_str();
            match seen
                .headers
                .get("traceparent")
                .and_then(|v| v.to_str().ok())
            {
                None => failures.push(format!("{}: forwarded without a traceparent", row.name)),
                Some(tp) if trace.is_some_and(|t| !tp.contains(t)) => {
                    failures.push(format!("{}: a traceparent of another trace", row.name))
                }
                Some(_) => {}
            }
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} rows failed:\n{}",
        failures.len(),
        rows.len(),
        failures.join("\n")
    );
    // Every governed tools/call the backend saw has an allowed call in the audit log.
    let file = h.audit_file();
    let _kept = h.stop_keeping_files().await;
    let calls = audit_calls(&std::fs::read_to_string(file).unwrap());
    let allowed = calls
        .iter()
        .filter(|c| c["tool"] == "read_logs" && c["decision"] == "allow")
        .count();
    let ran = labels(&backend.posts())
        .iter()
        .filter(|l| *l == "tools/call read_logs")
        .count();
    assert_eq!(allowed, ran, "every call that ran was decided and recorded");
}
