//! A tool that runs at most once streams live through toolgate, proved with the official
//! Python SDK on both ends (`tests/mcp/server.py`, `tests/mcp/client.py`).
//!
//! `deliberate` has a contract with `idempotent` unset (an MCP tool: not idempotent, so
//! never run twice) and answers `tools/call` with an event stream carrying, before its
//! result, progress notifications, log messages and two server-to-client requests
//! (`sampling/createMessage`, `elicitation/create`) that the tool waits on. Through
//! toolgate, for each of 200 calls in one session:
//! - every call completes with the right result (the sampled text and the elicited
//!   answer in it), none stalls: the client's answers to the server's requests reach
//!   the upstream while the call still runs;
//! - progress, log, sampling and elicitation all arrive before the result, in the order
//!   the server sent them, for every call;
//! - the upstream ran the tool exactly 200 times.
//!
//! And never-twice still holds while streaming: two identical `slow_count` calls at
//! once in one session run upstream once; the lead gets the live stream (its progress
//! before its result), the duplicate the same result as a replay
//! (`X-Toolgate-Replayed: true`). The same interactive scenario run against the server
//! directly, without toolgate, shows it passes on its own.

mod common;
#[path = "common/mcp.rs"]
mod peers;

use common::*;
use peers::{client_within, Peer};
use serde_json::{json, Value};
use std::time::Instant;

/// `deliberate` and `slow_count` with no `idempotent` (so false) and a few seconds'
/// timeout, both granted to ops-bot.
const POLICIES: &str = r#"
apiVersion: toolgate.dev/v1alpha1
kind: ToolContract
metadata: {name: deliberate}
spec:
  tool: deliberate
  timeoutMs: 5000
  input:
    type: object
    additionalProperties: false
    required: [topic]
    properties:
      topic: {type: string, minLength: 1}
---
apiVersion: toolgate.dev/v1alpha1
kind: ToolContract
metadata: {name: slow-count}
spec:
  tool: slow_count
  timeoutMs: 5000
  input:
    type: object
    additionalProperties: false
    required: [n]
    properties:
      n: {type: integer}
---
apiVersion: toolgate.dev/v1alpha1
kind: AgentPolicy
metadata: {name: ops-bot}
spec:
  agents: [ops-bot]
  tools: [{name: deliberate}, {name: slow_count}]
"#;

/// The kinds every `deliberate` call must see before its result, in the order the
/// server sends them (tests/mcp/server.py).
const DELIBERATE_ORDER: [&str; 8] = [
    "progress",
    "log",
    "progress",
    "sampling",
    "elicitation",
    "log",
    "progress",
    "result",
];

const SAMPLED_TEXT: &str = "a fixed opinion from the client's model";

async fn start(peer: &Peer) -> Harness {
    start_with(peer, POLICIES).await
}

async fn start_with(peer: &Peer, policies: &str) -> Harness {
    Harness::start(
        peer.addr,
        Options {
            policies: policies.to_string(),
            ..Options::default()
        },
    )
    .await
}

/// Runs `client.py ... call-interactive <args>` once (legacy handshake, protocol
/// 2025-11-25); its one JSON summary.
async fn interactive(url: &str, token: Option<&str>, args: &[&str]) -> Value {
    let scenario: Vec<&str> = std::iter::once("call-interactive")
        .chain(args.iter().copied())
        .collect();
    client_within(url, token, "legacy", "170", &scenario).await
}

/// `n` interactive `deliberate` calls, each with its own topic: all correct, none
/// stalled, every one saw the server's events in order before its result.
fn assert_deliberated(out: &Value, n: u64) {
    let summary = {
        let mut s = out.clone();
        s.as_object_mut().unwrap().remove("results");
        s
    };
    assert_eq!(out["protocolVersion"], "2025-11-25", "{summary}");
    assert_eq!(out["stalls"], 0, "calls stalled: {summary}");
    assert_eq!(out["timeouts"], 0, "calls timed out in toolgate: {summary}");
    assert_eq!(out["aborted"], false, "{summary}");
    assert_eq!(out["calls"], n, "{summary}");
    assert_eq!(out["errors"], json!([]), "{summary}");
    assert_eq!(
        out["ok"], n,
        "not every call got its right result: {summary}"
    );
    assert_eq!(
        out["order_violations"], 0,
        "events missing before, or arriving after, a result: {summary}"
    );
    assert_eq!(out["first_order"], json!(DELIBERATE_ORDER), "{summary}");
    // Every call, not only the first, saw exactly the server's sequence.
    let mut every_call = serde_json::Map::new();
    every_call.insert(DELIBERATE_ORDER.join(","), json!(n));
    assert_eq!(out["orders"], Value::Object(every_call), "{summary}");
    assert_eq!(out["stray"], json!([]), "{summary}");
    assert_eq!(
        out["first_result"],
        json!({"topic": "topic-0", "opinion": SAMPLED_TEXT, "model": "fixed-model-1",
               "approved": true, "note": "fine by me", "progress_sent": 3}),
        "{summary}"
    );
    assert_eq!(out["replayed"], 0, "{summary}");
    for response in out["tool_responses"].as_array().unwrap() {
        assert_eq!(response["content_type"], "text/event-stream", "{summary}");
    }
}

/// 200 interactive `deliberate` calls through toolgate under `policies`, each with its
/// own topic: all live, in order, none stalled, each run upstream once.
async fn two_hundred_calls_through(policies: &str) {
    const CALLS: u64 = 200;
    let dir = tempfile::tempdir().unwrap();
    let peer = Peer::python_server(&["--sse", "--interactive"], dir.path());
    let h = start_with(&peer, policies).await;
    let url = format!("{}/mcp", h.base);
    let began = Instant::now();
    let n = CALLS.to_string();
    // "{i}": each call its own topic, so none is a duplicate of another.
    let out = interactive(
        &url,
        Some(OPS_TOKEN),
        &[
            "deliberate",
            r#"{"topic":"topic-{i}"}"#,
            "--repeat",
            &n,
            "--call-timeout",
            "10",
        ],
    )
    .await;
    eprintln!(
        "through toolgate: {} calls in {} ms (client run {} ms), per call {}..{} ms",
        out["calls"],
        out["total_ms"],
        began.elapsed().as_millis(),
        out["min_ms"],
        out["max_ms"]
    );
    assert_deliberated(&out, CALLS);
    assert_eq!(
        peer.counts(),
        json!({"deliberate": CALLS}),
        "the upstream ran each call exactly once"
    );
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_hundred_interactive_calls_stream_live_through_toolgate() {
    two_hundred_calls_through(POLICIES).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_interactive_scenario_passes_against_the_server_directly() {
    const CALLS: u64 = 20;
    let dir = tempfile::tempdir().unwrap();
    let peer = Peer::python_server(&["--sse", "--interactive"], dir.path());
    let url = format!("http://{}/mcp", peer.addr);
    let n = CALLS.to_string();
    let out = interactive(
        &url,
        None,
        &["deliberate", r#"{"topic":"topic-{i}"}"#, "--repeat", &n],
    )
    .await;
    eprintln!(
        "directly: {} calls in {} ms, per call {}..{} ms",
        out["calls"], out["total_ms"], out["min_ms"], out["max_ms"]
    );
    assert_deliberated(&out, CALLS);
    assert_eq!(peer.counts(), json!({"deliberate": CALLS}));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_concurrent_duplicate_runs_once_and_gets_the_same_result() {
    let dir = tempfile::tempdir().unwrap();
    let peer = Peer::python_server(&["--sse", "--interactive"], dir.path());
    let h = start(&peer).await;
    let url = format!("{}/mcp", h.base);
    // Two identical calls at once in one session (the dedupe key is agent, session,
    // tool and arguments); slow_count runs 1 s, so the second arrives while the first runs.
    let out = interactive(
        &url,
        Some(OPS_TOKEN),
        &[
            "slow_count",
            r#"{"n":7}"#,
            "--concurrent",
            "2",
            "--expect",
            "",
        ],
    )
    .await;
    eprintln!("concurrent duplicate: {out}");
    assert_eq!(out["calls"], 2, "{out}");
    assert_eq!(out["ok"], 2, "{out}");
    assert_eq!(out["stalls"], 0, "{out}");
    assert_eq!(out["timeouts"], 0, "{out}");
    assert_eq!(out["order_violations"], 0, "{out}");
    // Both got the first (and only) run's result.
    assert_eq!(
        out["results"],
        json!([{"n": 7, "runs": 1}, {"n": 7, "runs": 1}]),
        "{out}"
    );
    assert_eq!(peer.counts(), json!({"slow_count": 1}), "ran upstream once");
    // The lead streamed live (its progress before its result); the duplicate got only
    // the result, as a replay.
    assert_eq!(
        out["orders"],
        json!({"progress,progress,result": 1, "result": 1}),
        "{out}"
    );
    assert_eq!(out["replayed"], 1, "{out}");
    let responses = out["tool_responses"].as_array().unwrap();
    assert_eq!(responses.len(), 2, "{out}");
    let lead = responses.iter().find(|r| r["replayed"] == false).unwrap();
    let duplicate = responses.iter().find(|r| r["replayed"] == true).unwrap();
    assert_eq!(lead["content_type"], "text/event-stream", "{out}");
    assert!(
        duplicate["content_type"]
            .as_str()
            .unwrap()
            .starts_with("application/json"),
        "{out}"
    );
    h.stop().await;
}

/// A read-only tool marked `idempotent: true` takes the other path (sent live, no
/// dedupe store): its server-to-client requests must not stall either.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn interactive_calls_stream_live_when_the_tool_is_idempotent() {
    let policies = POLICIES.replacen(
        "  tool: deliberate\n",
        "  tool: deliberate\n  idempotent: true\n",
        1,
    );
    assert_ne!(policies, POLICIES);
    two_hundred_calls_through(&policies).await;
}
