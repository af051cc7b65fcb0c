//! The hostile-input corpus (issue 19), over real sockets against one sidecar.
//!
//! Every case is a named row: the bytes (or steps) a hostile client sends and what it
//! must get — the structured error of docs/errors.md (REST body, JSON-RPC error or tool
//! error), or a clean close where HTTP itself is broken. One checker asserts, for every
//! row, that nothing reached the backend (or exactly one request, for rows where the
//! backend is the hostile side), and that a good REST and a good MCP call on fresh
//! connections still succeed. At the end: every structured refusal left an audit record
//! with its trace id and code, the 100 MB answers were read only in part, and the
//! process's memory stayed bounded.

// The allocator the binary runs with (src/main.rs), so resident memory is what a
// sidecar would show.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

mod common;
#[path = "common/hostile_corpus.rs"]
mod corpus;
#[path = "common/hostile_backend.rs"]
mod hostile_backend;

use bytes::Bytes;
use common::keys::{jwks, SigningKey};
use common::raw::{exchange, exchange_nth, request, RawReply, Step};
use common::*;
use corpus::{all_cases, Case, Expect, Keys};
use hostile_backend::{HostileBackend, HUGE};
use http::Request;
use http_body_util::Full;
use hyper_util::client::legacy::{connect::HttpConnector, Client};
use hyper_util::rt::TokioExecutor;
use serde_json::{json, Value};
use std::collections::HashMap;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

const POLICIES: &str = r#"
apiVersion: toolgate.dev/v1alpha1
kind: ToolContract
metadata: {name: read-logs}
spec:
  tool: read_logs
  http: {method: GET, path: "/logs/{service}"}
  input:
    type: object
    additionalProperties: false
    required: [service]
    properties:
      service: {type: string, enum: [orders, payments]}
  output: {type: object, properties: {lines: {type: array}}}
  redact: [/lines/*/client_ip]
---
apiVersion: toolgate.dev/v1alpha1
kind: ToolContract
metadata: {name: create-issue}
spec:
  tool: create_issue
  http: {method: POST, path: /issues}
  idempotent: false
  input:
    type: object
    required: [project_key, title]
    properties:
      project_key: {type: string}
      title: {type: string}
---
apiVersion: toolgate.dev/v1alpha1
kind: ToolContract
metadata: {name: admin-reset}
spec:
  tool: admin_reset
  http: {method: POST, path: /admin/reset}
---
apiVersion: toolgate.dev/v1alpha1
kind: ToolContract
metadata: {name: huge-report}
spec:
  tool: huge_report
  http: {method: GET, path: /huge}
  output: {type: object}
  timeoutMs: 20000
---
apiVersion: toolgate.dev/v1alpha1
kind: ToolContract
metadata: {name: endless-report}
spec:
  tool: endless_report
  http: {method: GET, path: /endless}
  output: {type: object}
  timeoutMs: 500
---
apiVersion: toolgate.dev/v1alpha1
kind: ToolContract
metadata: {name: flood}
spec:
  tool: header_flood
  http: {method: GET, path: /flood}
  idempotent: false
  output: {type: object}
---
apiVersion: toolgate.dev/v1alpha1
kind: ToolContract
metadata: {name: task-logs}
spec:
  tool: task_logs
  http: {method: GET, path: "/task/{service}"}
  input: {type: object, properties: {service: {type: string}}}
---
apiVersion: toolgate.dev/v1alpha1
kind: ToolContract
metadata: {name: cel-probe}
spec:
  tool: cel_probe
  http: {method: POST, path: /cel}
  idempotent: true
---
apiVersion: toolgate.dev/v1alpha1
kind: ToolContract
metadata: {name: mcp-logs}
spec: {tool: mcp_logs, idempotent: true}
---
apiVersion: toolgate.dev/v1alpha1
kind: ToolContract
metadata: {name: endless-sse}
spec: {tool: endless_sse, idempotent: true, timeoutMs: 500}
---
apiVersion: toolgate.dev/v1alpha1
kind: ToolContract
metadata: {name: huge-event}
spec: {tool: huge_event, idempotent: true, timeoutMs: 20000}
---
apiVersion: toolgate.dev/v1alpha1
kind: ToolContract
metadata: {name: huge-event-once}
spec: {tool: huge_event_once, timeoutMs: 20000}
---
apiVersion: toolgate.dev/v1alpha1
kind: ToolContract
metadata: {name: huge-json}
spec: {tool: huge_json, idempotent: true, timeoutMs: 20000, output: {type: object}}
---
apiVersion: toolgate.dev/v1alpha1
kind: AgentPolicy
metadata: {name: ops-bot}
spec:
  agents: [ops-bot]
  tools:
    - name: read_logs
    - name: create_issue
      rules:
        - name: no-security-project
          expr: "args.project_key != 'SEC'"
    - name: huge_report
    - name: endless_report
    - name: header_flood
    - name: task_logs
      rules:
        - name: within-task
          expr: "args.service == task.service"
          recovery: ask_user
    - name: cel_probe
      rules:
        - name: short-items
          expr: "!has(args.items) || args.items.all(i, i.size() < 4)"
        - name: doubled-positive
          expr: "!has(args.n) || args.n * 2 > 0"
        - name: lowercase-query
          expr: "!has(args.q) || args.q.matches('^[a-z]*$')"
    - name: mcp_logs
    - name: endless_sse
    - name: huge_event
    - name: huge_event_once
    - name: huge_json
"#;

/// The most of one hostile answer the gateway may read: maxResponseBytes (8 MiB) plus
/// what the sockets and hyper buffer; far below the 100 MB sent when nobody stops.
const MAX_READ: u64 = HUGE / 4;

/// What a row left behind, for the audit check at the end.
struct Seen {
    name: &'static str,
    trace_id: String,
    code: &'static str,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_inputs_are_refused_and_the_sidecar_keeps_serving() {
    let started = Instant::now();
    let keys_dir = tempfile::tempdir().unwrap();
    let keys = Keys {
        idp: SigningKey::ec("idp-1"),
        orchestrator: SigningKey::ec("orch-1"),
    };
    let agent_jwks = keys_dir.path().join("jwks.json");
    std::fs::write(&agent_jwks, jwks(&[&keys.idp])).unwrap();
    let task_jwks = keys_dir.path().join("task-jwks.json");
    std::fs::write(&task_jwks, jwks(&[&keys.orchestrator])).unwrap();
    let backend = HostileBackend::start().await;
    let h = Harness::start(
        backend.addr,
        Options {
            policies: POLICIES.into(),
            tweak: Box::new(move |s| {
                // Short, so the slowloris rows take half a second each.
                s.limits.header_read_timeout_ms = 500;
                s.limits.body_read_timeout_ms = 500;
                // Every row's own answer, not the flood limit on answers that name no
                // agent (tests/hygiene.rs): the limits clock is fake and never refills.
                s.limits.unauthenticated_per_second = 1_000_000;
                // Beside the token file, so the issuer speaks for `idp:` ids only.
                s.identity.jwt = vec![toolgate::config::JwtIssuer {
                    issuer: "https://idp.example".into(),
                    audience: "toolgate".into(),
                    jwks: Some(agent_jwks.into()),
                    discovery: false,
                    agent_claim: "sub".into(),
                    agent_prefix: Some("idp:".into()),
                }];
                s.identity.task_issuers = vec![toolgate::config::TaskIssuer {
                    issuer: "orchestrator".into(),
                    jwks: Some(task_jwks.into()),
                    discovery: false,
                    audience: None,
                    require_agent: true,
                }];
            }),
            ..Options::default()
        },
    )
    .await;
    let addr = h.sidecar.as_ref().unwrap().agent_addr;
    good_calls(addr, "warm-up").await;
    let (rss_before, _) = memory();
    let cases = all_cases(&keys);
    let (rss_built, _) = memory();

    let names: std::collections::HashSet<_> = cases.iter().map(|c| c.name).collect();
    assert_eq!(names.len(), cases.len(), "every row has its own name");
    assert!(cases.len() >= 40, "{} rows", cases.len());
    let rows = cases.len();
    let mut refused = Vec::new();
    let mut failures = Vec::new();
    for case in cases {
        match run(addr, &backend, case).await {
            Ok(seen) => refused.extend(seen),
            Err(mut failed) => failures.append(&mut failed),
        }
    }
    assert!(
        failures.is_empty(),
        "{} rows failed:\n{}",
        failures.len(),
        failures.join("\n")
    );
    refused.extend(over_http2(addr, &backend).await);
    assert_eq!(
        backend.upgrades(),
        0,
        "an Upgrade header reached the backend"
    );

    let streamed = backend.streamed();
    // Freed pages go back to the system after a short delay.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let (rss_after, peak) = memory();
    assert!(
        rss_after < rss_before + 64 * 1024,
        "VmRSS grew from {rss_before} kB to {rss_after} kB"
    );
    // At no point did anything hold a 100 MB answer whole (the rows' own bytes and
    // the 8 MiB buffers of a shaped answer account for the rest).
    assert!(
        peak < rss_before + 128 * 1024,
        "VmHWM reached {peak} kB from {rss_before} kB"
    );
    eprintln!("memory: VmRSS {rss_before} kB, {rss_built} kB with the rows built, {rss_after} kB after; VmHWM {peak} kB; streamed {streamed} bytes");

    let dir = h.stop_keeping_files().await;
    check_audit(&dir.path().join("audit.log"), &refused);
    eprintln!(
        "{rows} hostile rows ({} structured refusals) in {:?}",
        refused.len(),
        started.elapsed()
    );
}

/// Runs one row and the good calls after it: what it refused (for the audit check), or
/// what went wrong.
async fn run(
    addr: SocketAddr,
    backend: &HostileBackend,
    mut case: Case,
) -> Result<Option<Seen>, Vec<String>> {
    let label = format!("{} / {}", case.group, case.name);
    if std::env::var_os("HOSTILE_LIST").is_some() {
        eprintln!("{label} -> {:?}, forwarded {}", case.expect, case.forwarded);
    }
    let before = backend.requests();
    let streamed_before = backend.streamed();
    let probe = matches!(case.expect, Expect::Closed | Expect::RefusedAndClosed(..));
    let steps = std::mem::take(&mut case.steps);
    let reply = exchange_nth(addr, steps, case.deadline, case.answer, probe).await;
    if reply.elapsed > Duration::from_millis(1500) {
        eprintln!("slow row: {label} took {:?}", reply.elapsed);
    }
    let mut failures = Vec::new();
    if let Err(e) = check(&case, &reply) {
        failures.push(format!("{label}: {e}"));
    }
    // A 100 MB answer is read only as far as maxResponseBytes (8 MiB) and the sockets'
    // buffers: never whole.
    let read = backend.streamed() - streamed_before;
    if read > MAX_READ {
        failures.push(format!(
            "{label}: the gateway read {read} bytes of the answer"
        ));
    }
    good_calls(addr, &label).await;
    if std::env::var_os("HOSTILE_TRACE_MEMORY").is_some() {
        eprintln!("{label}: {:?}", memory());
    }
    let forwarded = backend.requests() - before - 2;
    if forwarded != case.forwarded {
        failures.push(format!(
            "{label}: the backend saw {forwarded} requests, expected {}",
            case.forwarded
        ));
    }
    match failures.is_empty() {
        true => Ok(refusal_of(&case, &reply)),
        false => Err(failures),
    }
}

/// HTTP/2 (h2c with prior knowledge) meets the same path rule: `:path` reaches the
/// pipeline as sent. A good call on the same connection shows the framing watch leaves
/// HTTP/2 alone.
async fn over_http2(addr: SocketAddr, backend: &HostileBackend) -> Vec<Seen> {
    let client: Client<HttpConnector, Full<Bytes>> = Client::builder(TokioExecutor::new())
        .http2_only(true)
        .build_http();
    let send = |path: &str| {
        let request = Request::get(format!("http://{addr}{path}"))
            .header("authorization", format!("Bearer {OPS_TOKEN}"))
            .body(Full::new(Bytes::new()))
            .unwrap();
        client.request(request)
    };
    let before = backend.requests();
    let mut refused = Vec::new();
    for (name, path) in [
        ("HTTP/2 encoded dot-dot", "/logs/%2e%2e/admin/reset"),
        ("HTTP/2 encoded slash", "/logs/orders%2F..%2Fadmin"),
        ("HTTP/2 encoded NUL", "/logs/orders%00"),
    ] {
        let reply = Reply::read(send(path).await.unwrap()).await;
        reply.assert_refused("MALFORMED_REQUEST", 400);
        refused.push(Seen {
            name,
            trace_id: reply.json["error"]["traceId"].as_str().unwrap().to_string(),
            code: "MALFORMED_REQUEST",
        });
    }
    assert_eq!(
        backend.requests(),
        before,
        "nothing refused over HTTP/2 was forwarded"
    );
    let reply = Reply::read(send("/logs/orders").await.unwrap()).await;
    assert_eq!(reply.status, 200, "{}", reply.text);
    refused
}

/// A good REST call and a good MCP call, each on a fresh connection.
async fn good_calls(addr: SocketAddr, after: &str) {
    let rest = request(
        "GET",
        "/logs/orders",
        &[("Authorization", &format!("Bearer {OPS_TOKEN}"))],
        b"",
    );
    let reply = exchange(addr, vec![Step::Send(rest)], Duration::from_secs(10)).await;
    assert_eq!(
        reply.status,
        Some(200),
        "REST call after {after}: {}",
        reply.text()
    );
    let call = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                      "params": {"name": "mcp_logs", "arguments": {}}});
    let mcp = corpus::mcp_request(&call.to_string(), &[]);
    let reply = exchange(addr, vec![Step::Send(mcp)], Duration::from_secs(10)).await;
    assert_eq!(
        reply.status,
        Some(200),
        "MCP call after {after}: {}",
        reply.text()
    );
    let answer = corpus::rpc_answer(&reply);
    assert!(
        answer["result"]["isError"] != true && answer["result"].is_object(),
        "MCP call after {after}: {answer}"
    );
}

/// Checks one row's answer against its expectation.
fn check(case: &Case, reply: &RawReply) -> Result<(), String> {
    let got = || {
        format!(
            "got {:?} closed={} {}",
            reply.status,
            reply.closed,
            reply.text()
        )
    };
    let body = match case.expect {
        Expect::Served(status) => {
            let fine = reply.status == Some(status) && reply.json()["status"] != "error";
            return match fine {
                true => Ok(()),
                false => Err(format!("expected HTTP {status} served, {}", got())),
            };
        }
        Expect::Closed => {
            // A bare error status from hyper is allowed; a structured answer or a success
            // would mean the gateway treated broken HTTP as a request.
            let bare = reply.status.is_none_or(|s| s >= 400) && reply.json().is_null();
            return if reply.closed && bare {
                Ok(())
            } else {
                Err(format!("expected a clean close, {}", got()))
            };
        }
        Expect::Refused(status, code) | Expect::RefusedAndClosed(status, code) => {
            if reply.status != Some(status) {
                return Err(format!("expected HTTP {status}, {}", got()));
            }
            if reply.header("x-toolgate-code") != Some(code) {
                return Err(format!("expected X-Toolgate-Code {code}, {}", got()));
            }
            let closes = matches!(case.expect, Expect::RefusedAndClosed(..));
            if closes && (!reply.closed || reply.header("connection") != Some("close")) {
                return Err(format!("expected Connection: close and a close, {}", got()));
            }
            reply.json()
        }
        Expect::RpcError(status, rpc, _) => {
            if reply.status != Some(status) {
                return Err(format!("expected HTTP {status}, {}", got()));
            }
            let answer = corpus::rpc_answer(reply);
            if answer["error"]["code"] != rpc {
                return Err(format!("expected JSON-RPC error {rpc}, {}", got()));
            }
            answer["error"]["data"].clone()
        }
        Expect::ToolError(_) => {
            if reply.status != Some(200) {
                return Err(format!("expected HTTP 200, {}", got()));
            }
            let answer = corpus::rpc_answer(reply);
            if answer["result"]["isError"] != true {
                return Err(format!("expected a tool error, {}", got()));
            }
            answer["result"]["structuredContent"].clone()
        }
    };
    structured(&body, case.expect.code()).map_err(|e| format!("{e}: {}", got()))?;
    match case.extra {
        Some(extra) => extra(reply),
        None => Ok(()),
    }
}

/// The error body of docs/errors.md with this code.
fn structured(body: &Value, code: &str) -> Result<(), String> {
    let error = &body["error"];
    if body["status"] != "error" || error["code"] != code {
        return Err(format!("expected the {code} body"));
    }
    let recovery = error["recovery"].as_str().unwrap_or("");
    let known = [
        "fix_arguments",
        "ask_user",
        "retry",
        "await_approval",
        "stop",
    ];
    if !known.contains(&recovery) || !error["retryable"].is_boolean() {
        return Err("recovery or retryable missing".into());
    }
    if error["traceId"].as_str().is_none_or(str::is_empty) {
        return Err("traceId missing".into());
    }
    Ok(())
}

fn refusal_of(case: &Case, reply: &RawReply) -> Option<Seen> {
    let body = match case.expect {
        Expect::Closed | Expect::Served(_) => return None,
        Expect::Refused(..) | Expect::RefusedAndClosed(..) => reply.json(),
        Expect::RpcError(..) => corpus::rpc_answer(reply)["error"]["data"].clone(),
        Expect::ToolError(_) => corpus::rpc_answer(reply)["result"]["structuredContent"].clone(),
    };
    Some(Seen {
        name: case.name,
        trace_id: body["error"]["traceId"].as_str()?.to_string(),
        code: case.expect.code(),
    })
}

/// Every structured refusal has an audit record with its trace id and code.
fn check_audit(path: &std::path::Path, refused: &[Seen]) {
    let text = std::fs::read_to_string(path).expect("the audit log");
    let mut codes: HashMap<String, Vec<String>> = HashMap::new();
    for line in text.lines() {
        let record: Value = serde_json::from_str(line).expect("an audit line is JSON");
        if record.get("kind").is_some_and(|k| k != "call") {
            continue;
        }
        let trace = record["traceId"].as_str().unwrap_or("").to_string();
        let code = record["code"].as_str().unwrap_or("").to_string();
        codes.entry(trace).or_default().push(code);
    }
    let missing: Vec<String> = refused
        .iter()
        .filter(|s| {
            !codes
                .get(&s.trace_id)
                .is_some_and(|c| c.iter().any(|c| c == s.code))
        })
        .map(|s| format!("{} ({} {})", s.name, s.code, s.trace_id))
        .collect();
    assert!(
        missing.is_empty(),
        "refusals without an audit record: {missing:?}"
    );
}

/// (VmRSS, VmHWM) of this process in kB: the sidecar runs in it.
fn memory() -> (u64, u64) {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .unwrap_or(0)
    };
    (field("VmRSS:"), field("VmHWM:"))
}
