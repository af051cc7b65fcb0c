//! One backend failure, one answer: each way a backend can fail maps to one code and one
//! "did it run?" answer, the same for REST and MCP `tools/call` (`proxy::backend::failure`).
//!
//! The line is the response head: before it, a request that went out may have run
//! (reset, garbage, no head in time); after it, the call ran (reset mid-body, an answer
//! too large). Only a connection never made ran nothing. What "ran" means for the agent:
//! a call that is not idempotent is retryable only if it ran nothing, its refusal says
//! whether it may have run or ran, and an identical call that follows is answered from
//! the first (never sent again) unless the first ran nothing.
//!
//! Real sockets throughout: the misbehaving backend of `tests/common/fault_backend.rs`
//! behind a real sidecar.

mod common;

use common::fault_backend::{Fault, FaultBackend};
use common::*;
use serde_json::{json, Value};

const FAULT_POLICIES: &str = include_str!("fixtures/policies/fault-backend.yaml");

/// Whether the backend ran a failed call, as the agent can tell.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Ran {
    No,
    Maybe,
    Yes,
}

/// One failure and the one answer it gets: `(HTTP status of a REST refusal, code, ran)`.
struct Row {
    what: &'static str,
    fault: Fault,
    status: u16,
    code: &'static str,
    ran: Ran,
}

const ROWS: [Row; 6] = [
    Row {
        what: "connection refused",
        fault: Fault::Refuse,
        status: 503,
        code: "BACKEND_UNAVAILABLE",
        ran: Ran::No,
    },
    Row {
        what: "reset before the response head",
        fault: Fault::ResetHead,
        status: 503,
        code: "BACKEND_UNAVAILABLE",
        ran: Ran::Maybe,
    },
    Row {
        what: "reset mid-body",
        fault: Fault::ResetBody,
        status: 503,
        code: "BACKEND_UNAVAILABLE",
        ran: Ran::Yes,
    },
    Row {
        what: "no answer in time",
        fault: Fault::Hang,
        status: 504,
        code: "BACKEND_TIMEOUT",
        ran: Ran::Maybe,
    },
    Row {
        what: "garbage instead of HTTP",
        fault: Fault::Garbage,
        status: 503,
        code: "BACKEND_UNAVAILABLE",
        ran: Ran::Maybe,
    },
    // A healthy answer over a `limits.maxResponseBytes` of a few bytes (see `start`).
    Row {
        what: "an answer larger than toolgate reads",
        fault: Fault::Healthy,
        status: 502,
        code: "OUTPUT_CONTRACT_VIOLATION",
        ran: Ran::Yes,
    },
];

/// A sidecar in front of `backend`; `tiny` caps answers at 8 bytes, so every answer is
/// oversized.
async fn start(backend: &FaultBackend, tiny: bool) -> Harness {
    Harness::start(
        backend.addr,
        Options {
            policies: FAULT_POLICIES.into(),
            tweak: Box::new(move |s| {
                if tiny {
                    s.limits.max_response_bytes = 8;
                }
            }),
            ..Options::default()
        },
    )
    .await
}

/// The error object of a refusal, REST (the body) or MCP (the tool result's).
fn error_of(reply: &Reply, mcp: bool) -> Value {
    match mcp {
        false => reply.json["error"].clone(),
        true => reply.json["result"]["structuredContent"]["error"].clone(),
    }
}

/// Asserts the refusal `row` stands for; `once`: the tool is not idempotent.
fn assert_refused(row: &Row, reply: &Reply, mcp: bool, once: bool) {
    let what = format!("{} (mcp: {mcp}, once: {once}): {}", row.what, reply.text);
    match mcp {
        false => assert_eq!(reply.status, row.status, "{what}"),
        true => {
            assert_eq!(reply.status, 200, "{what}");
            assert_eq!(reply.json["result"]["isError"], true, "{what}");
        }
    }
    assert_eq!(reply.header("x-toolgate-code"), row.code, "{what}");
    let error = error_of(reply, mcp);
    assert_eq!(error["code"], row.code, "{what}");
    let transient = matches!(row.code, "BACKEND_UNAVAILABLE" | "BACKEND_TIMEOUT");
    // Retrying is offered where it can't run the call twice, and only for what may pass
    // next time.
    let retryable = transient && (!once || row.ran == Ran::No);
    assert_eq!(error["retryable"], retryable, "{what}");
    let recovery = if retryable { "retry" } else { "stop" };
    assert_eq!(error["recovery"], recovery, "{what}");
    let message = error["message"].as_str().unwrap_or_default();
    match (once, row.ran) {
        (false, _) | (true, Ran::No) => {
            assert!(!message.contains("the call ran"), "{what}");
            assert!(!message.contains("may"), "{what}");
        }
        // A duplicate joining a call still unanswered hears that it is still running.
        (true, Ran::Maybe) => assert!(
            message.contains("may") || message.contains("still running"),
            "{what}"
        ),
        (true, Ran::Yes) => assert!(message.contains("the call ran"), "{what}"),
    }
}

/// A REST call to `path` (the body makes a non-idempotent call's identity).
async fn rest(h: &Harness, method: &str, path: &str, body: &str) -> Reply {
    h.call(method, path, Some(OPS_TOKEN), &[], body).await
}

/// An MCP `tools/call` of `tool` with `args`.
async fn mcp(h: &Harness, id: u64, tool: &str, args: Value) -> Reply {
    let body = json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
                      "params": {"name": tool, "arguments": args}});
    h.call("POST", "/mcp", Some(OPS_TOKEN), &[], &body.to_string())
        .await
}

/// The rows whose failure the backend plays; the oversized row needs the tiny cap.
fn rows(tiny: bool) -> impl Iterator<Item = &'static Row> {
    ROWS.iter()
        .filter(move |r| (r.fault == Fault::Healthy) == tiny)
}

/// A non-idempotent call that failed is answered again, identically, to an identical
/// call: from the first call's outcome unless it ran nothing (then it is sent again).
async fn assert_repeat(
    row: &Row,
    backend: &FaultBackend,
    path: &str,
    first: &Reply,
    again: impl std::future::Future<Output = Reply>,
    mcp: bool,
) {
    let before = backend.hits(row.fault, path);
    let again = again.await;
    let sent = backend.hits(row.fault, path) - before;
    assert_refused(row, &again, mcp, true);
    assert_eq!(
        error_of(&again, mcp)["code"],
        error_of(first, mcp)["code"],
        "{}",
        row.what
    );
    if row.ran != Ran::No {
        assert_eq!(
            sent, 0,
            "{} (mcp: {mcp}): a call that ran is not sent again",
            row.what
        );
    }
}

async fn rest_rows(tiny: bool) {
    let backend = FaultBackend::start().await;
    let h = start(&backend, tiny).await;
    for (n, row) in rows(tiny).enumerate() {
        backend.set(row.fault).await;
        let r = rest(&h, "GET", "/fetch/1", "").await;
        assert_refused(row, &r, false, false);

        let body = format!(r#"{{"n":{n}}}"#);
        let first = rest(&h, "POST", "/submit", &body).await;
        assert_refused(row, &first, false, true);
        let again = rest(&h, "POST", "/submit", &body);
        assert_repeat(row, &backend, "/submit", &first, again, false).await;
        backend.set(Fault::Healthy).await;
    }
    h.stop().await;
}

async fn mcp_rows(tiny: bool) {
    let backend = FaultBackend::start().await;
    let h = start(&backend, tiny).await;
    for (n, row) in rows(tiny).enumerate() {
        backend.set(row.fault).await;
        let id = 10 * n as u64;
        let r = mcp(&h, id + 1, "mcp_read", json!({})).await;
        assert_refused(row, &r, true, false);

        let first = mcp(&h, id + 2, "mcp_write", json!({"n": n})).await;
        assert_refused(row, &first, true, true);
        let again = mcp(&h, id + 3, "mcp_write", json!({"n": n}));
        assert_repeat(row, &backend, "/mcp", &first, again, true).await;
        backend.set(Fault::Healthy).await;
    }
    h.stop().await;
}

#[tokio::test]
async fn rest_backend_failures_map_to_one_code_and_one_ran_answer() {
    rest_rows(false).await;
}

#[tokio::test]
async fn rest_an_oversized_answer_ran_and_breaks_the_contract() {
    rest_rows(true).await;
}

#[tokio::test]
async fn mcp_backend_failures_map_to_the_same_code_and_ran_answer() {
    mcp_rows(false).await;
}

#[tokio::test]
async fn mcp_an_oversized_answer_ran_and_breaks_the_contract() {
    mcp_rows(true).await;
}
