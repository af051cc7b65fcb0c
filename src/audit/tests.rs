use std::sync::Arc;

use super::record::{args_digest, chain, now, Entry, GENESIS};
use super::verify::verify;
use super::AuditLog;
use crate::config::OnFailure;
use crate::telemetry::metrics::Metrics;

fn mk_entry(n: u64) -> Entry {
    Entry {
        ts: now(),
        trace_id: format!("{n:032x}"),
        agent: Some("ops-bot".into()),
        session: None,
        tool: Some("read_logs".into()),
        args_digest: Some(args_digest(&serde_json::json!({"n": n}))),
        args: None,
        decision: "allow",
        code: None,
        rule: None,
        policy_version: Some(1),
        upstream_status: Some(200),
        latency_us: 42,
    }
}

fn mk_log(n: u64) -> Vec<String> {
    let mut prev = GENESIS.to_string();
    (1..=n)
        .map(|seq| {
            let (line, hash) = chain(&mk_entry(seq), seq, &prev);
            prev = hash;
            line
        })
        .collect()
}

#[test]
fn intact_chain_verifies() {
    assert_eq!(verify(&mk_log(5).join("\n")), Ok(5));
}

#[test]
fn edited_line_is_found() {
    let mut lines = mk_log(5);
    lines[2] = lines[2].replace("\"allow\"", "\"deny\"");
    assert_eq!(verify(&lines.join("\n")).unwrap_err().line, 3);
}

#[test]
fn deleted_line_is_found() {
    let mut lines = mk_log(5);
    lines.remove(1);
    assert_eq!(verify(&lines.join("\n")).unwrap_err().line, 2);
    let mut lines = mk_log(3);
    lines.remove(0);
    assert_eq!(verify(&lines.join("\n")).unwrap_err().line, 1);
}

#[test]
fn reordered_lines_are_found() {
    let mut lines = mk_log(5);
    lines.swap(1, 3);
    assert_eq!(verify(&lines.join("\n")).unwrap_err().line, 2);
}

#[test]
fn digest_ignores_key_order() {
    let a: serde_json::Value = serde_json::from_str(r#"{"a":1,"b":2}"#).unwrap();
    let b: serde_json::Value = serde_json::from_str(r#"{ "b": 2, "a": 1 }"#).unwrap();
    assert_eq!(args_digest(&a), args_digest(&b));
}

#[tokio::test]
async fn writer_continues_the_chain_across_restarts() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("audit.log");
    let path_text = path.to_str().unwrap();
    for round in 0..2 {
        let log = AuditLog::start(path_text, OnFailure::FailClosed, Arc::new(Metrics::new()));
        for n in 0..3 {
            log.record(mk_entry(round * 10 + n)).await;
        }
        log.flush().await;
        assert!(!log.refuses_calls());
    }
    let text = std::fs::read_to_string(&path).unwrap();
    assert_eq!(verify(&text), Ok(6));
}

#[tokio::test]
async fn unwritable_path_refuses_calls_only_when_fail_closed() {
    let closed = AuditLog::start(
        "/nonexistent/dir/audit.log",
        OnFailure::FailClosed,
        Arc::new(Metrics::new()),
    );
    assert!(closed.refuses_calls());
    let open = AuditLog::start(
        "/nonexistent/dir/audit.log",
        OnFailure::FailOpen,
        Arc::new(Metrics::new()),
    );
    assert!(!open.refuses_calls());
}
