//! The chain, the verifier and the writer, against real files.

use std::sync::Arc;

use super::key::AuditKey;
use super::privacy::Privacy;
use super::record::{chain, now, Entry, Published, Record, GENESIS};

fn args_digest(args: &serde_json::Value) -> String {
    Privacy::new(None, &[]).args_digest(args)
}
use super::verify::{verify, Breach, Verifier};
use super::AuditLog;
use crate::config::{Audit, OnFailure};
use crate::telemetry::metrics::Metrics;

fn mk_entry(n: u64) -> Entry {
    Entry {
        ts: now(),
        trace_id: format!("{n:032x}"),
        agent: Some("ops-bot".into()),
        issuer: Some("tokens".into()),
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
        state: None,
        approval: None,
        inputs: None,
        replayed: false,
        task: None,
    }
}

fn mk_keyed_log(n: u64, key: Option<&AuditKey>) -> Vec<String> {
    let mut prev = GENESIS.to_string();
    (1..=n)
        .map(|seq| {
            let (line, hash) = chain(&Record::Call(Box::new(mk_entry(seq))), seq, &prev, key);
            prev = hash;
            line
        })
        .collect()
}

fn mk_log(n: u64) -> Vec<String> {
    mk_keyed_log(n, None)
}

/// A log as the writer leaves it: every line ends in a newline.
fn text(lines: &[String]) -> String {
    lines.iter().map(|l| format!("{l}\n")).collect()
}

fn broken_line(lines: &[String]) -> usize {
    verify(&text(lines), None).unwrap_err().line
}

fn mk_settings(path: &str, on_failure: OnFailure) -> Audit {
    Audit {
        path: path.into(),
        on_failure,
        key_file: None,
        redact_headers: Vec::new(),
    }
}

fn start_log(settings: &Audit) -> AuditLog {
    AuditLog::start(settings, "sha256:test".into(), Arc::new(Metrics::new())).unwrap()
}

#[test]
fn intact_chain_verifies() {
    assert_eq!(verify(&text(&mk_log(5)), None).unwrap().calls, 5);
}

#[test]
fn edited_line_is_found() {
    let mut lines = mk_log(5);
    lines[2] = lines[2].replace("\"allow\"", "\"deny\"");
    assert_eq!(broken_line(&lines), 3);
}

#[test]
fn deleted_line_is_found() {
    let mut lines = mk_log(5);
    lines.remove(1);
    assert_eq!(broken_line(&lines), 2);
    let mut lines = mk_log(3);
    lines.remove(0);
    assert_eq!(broken_line(&lines), 1);
}

#[test]
fn reordered_lines_are_found() {
    let mut lines = mk_log(5);
    lines.swap(1, 3);
    assert_eq!(broken_line(&lines), 2);
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
    let settings = mk_settings(path.to_str().unwrap(), OnFailure::FailClosed);
    for round in 0..2 {
        let log = start_log(&settings);
        for n in 0..3 {
            log.record(mk_entry(round * 10 + n)).await;
        }
        log.flush().await;
        assert!(!log.refuses_calls());
        assert_eq!(log.status().last_seq, 4 * (round + 1));
    }
    let text = std::fs::read_to_string(&path).unwrap();
    let summary = verify(&text, None).unwrap();
    assert_eq!((summary.calls, summary.starts, summary.records), (6, 2, 8));
}

#[tokio::test]
async fn the_start_record_comes_first_and_names_the_binary_and_settings() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("audit.log");
    let log = start_log(&mk_settings(path.to_str().unwrap(), OnFailure::FailClosed));
    log.record_policy(7, "abc");
    log.record(mk_entry(1)).await;
    log.flush().await;
    let text = std::fs::read_to_string(&path).unwrap();
    let records: Vec<serde_json::Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(records[0]["kind"], "start");
    assert_eq!(records[0]["toolgate"], env!("CARGO_PKG_VERSION"));
    assert_eq!(records[0]["settingsDigest"], "sha256:test");
    assert_eq!(records[0]["chain"], "sha256");
    assert_eq!(records[1]["kind"], "policy");
    assert_eq!(records[1]["policyVersion"], 7);
    assert_eq!(records[1]["digest"], "abc");
    assert_eq!(records[2]["kind"], "call");
    assert_eq!(verify(&text, None).unwrap().policies, 1);
}

#[tokio::test]
async fn unwritable_path_refuses_calls_only_when_fail_closed() {
    let closed = start_log(&mk_settings(
        "/nonexistent/dir/audit.log",
        OnFailure::FailClosed,
    ));
    closed.flush().await;
    assert!(closed.refuses_calls());
    let why = closed.status().failure.unwrap();
    assert!(why.contains("cannot be written"), "{why}");
    let open = start_log(&mk_settings(
        "/nonexistent/dir/audit.log",
        OnFailure::FailOpen,
    ));
    open.flush().await;
    assert!(!open.refuses_calls());
}

/// Defect of issue 19: a sink that opens but can't be written (a full disk) let the
/// first call through. The sink must take the start record first.
#[tokio::test]
async fn a_sink_that_opens_but_cannot_be_written_refuses_from_the_start() {
    let log = start_log(&mk_settings("/dev/full", OnFailure::FailClosed));
    // Before the writer has tried anything, calls are already refused.
    assert!(log.refuses_calls());
    log.flush().await;
    assert!(log.refuses_calls());
    assert_eq!(log.status().last_seq, 0);
}

#[tokio::test]
async fn a_torn_last_line_is_cut_and_noted_in_the_next_start() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("audit.log");
    let settings = mk_settings(path.to_str().unwrap(), OnFailure::FailClosed);
    let log = start_log(&settings);
    log.record(mk_entry(1)).await;
    log.flush().await;
    // A crash mid-write leaves half a line.
    let whole = std::fs::read_to_string(&path).unwrap();
    let torn = "{\"ts\":\"2026-01-01T00:00:00Z\",\"seq\":3,\"kind\":\"ca";
    std::fs::write(&path, format!("{whole}{torn}")).unwrap();
    let broken = verify(&std::fs::read_to_string(&path).unwrap(), None).unwrap_err();
    assert_eq!((broken.line, broken.breach), (3, Breach::Truncated));
    let log = start_log(&settings);
    log.record(mk_entry(2)).await;
    log.flush().await;
    let text = std::fs::read_to_string(&path).unwrap();
    let summary = verify(&text, None).unwrap();
    assert_eq!((summary.calls, summary.starts), (2, 2));
    let start: serde_json::Value = serde_json::from_str(text.lines().nth(2).unwrap()).unwrap();
    assert_eq!(start["truncatedBytes"], torn.len());
}

#[test]
fn a_log_cut_at_a_line_boundary_is_truncated_when_the_last_seq_is_known() {
    let lines = mk_log(5);
    let cut = text(&lines[..3]);
    assert_eq!(verify(&cut, None).unwrap().last_seq, 3);
    let mut verifier = Verifier::new(None);
    for line in &lines[..3] {
        verifier.line(line.as_bytes(), true).unwrap();
    }
    let broken = verifier.finish(Some(5)).unwrap_err();
    assert_eq!(broken.breach, Breach::Truncated);
    assert!(
        broken.reason.contains("2 records were cut"),
        "{}",
        broken.reason
    );
    let edited = text(&lines).replace("\"allow\"", "\"deny\"");
    assert_eq!(verify(&edited, None).unwrap_err().breach, Breach::Tampered);
}

#[test]
fn a_keyed_chain_verifies_only_with_its_key() {
    let key = AuditKey::from_bytes(b"a-secret-of-32-bytes-for-the-log").unwrap();
    let other = AuditKey::from_bytes(b"another-secret-of-32-bytes-here!").unwrap();
    let lines = mk_keyed_log(4, Some(&key));
    assert_eq!(verify(&text(&lines), Some(&key)).unwrap().calls, 4);
    assert_eq!(verify(&text(&lines), Some(&other)).unwrap_err().line, 1);
    assert_eq!(verify(&text(&lines), None).unwrap_err().line, 1);
    // Whoever can write the log but lacks the key edits a line and rebuilds the chain
    // after it with plain SHA-256: it no longer verifies with the key.
    let mut prev = GENESIS.to_string();
    let rebuilt: Vec<String> = (1..=4)
        .map(|seq| {
            let mut entry = mk_entry(seq);
            if seq == 3 {
                entry.decision = "deny";
            }
            let (line, hash) = chain(&Record::Call(Box::new(entry)), seq, &prev, None);
            prev = hash;
            line
        })
        .collect();
    assert_eq!(verify(&text(&rebuilt), None).unwrap().calls, 4);
    let broken = verify(&text(&rebuilt), Some(&key)).unwrap_err();
    assert_eq!((broken.line, broken.breach), (1, Breach::Tampered));
}

#[tokio::test]
async fn a_keyed_writer_names_its_key_and_a_keyless_verify_says_so() {
    let dir = tempfile::tempdir().unwrap();
    let key_path = dir.path().join("key");
    std::fs::write(&key_path, "0123456789abcdef0123456789abcdef\n").unwrap();
    let path = dir.path().join("audit.log");
    let mut settings = mk_settings(path.to_str().unwrap(), OnFailure::FailClosed);
    settings.key_file = Some(key_path.clone());
    let log = start_log(&settings);
    log.record(mk_entry(1)).await;
    log.record_policy(1, "d");
    log.flush().await;
    let text = std::fs::read_to_string(&path).unwrap();
    let key = AuditKey::load(&key_path).unwrap();
    assert_eq!(verify(&text, Some(&key)).unwrap().records, 3);
    let start: serde_json::Value = serde_json::from_str(text.lines().next().unwrap()).unwrap();
    assert_eq!(start["chain"], "hmac-sha256");
    assert_eq!(start["keyId"], key.id());
    let broken = verify(&text, None).unwrap_err();
    assert!(
        broken.reason.contains("pass --key-file"),
        "{}",
        broken.reason
    );
}

#[test]
fn policy_records_chain_like_calls() {
    let published = Record::Policy(Published {
        ts: now(),
        policy_version: 3,
        digest: "ff".into(),
    });
    let (first, hash) = chain(&published, 1, GENESIS, None);
    let (second, _) = chain(&Record::Call(Box::new(mk_entry(2))), 2, &hash, None);
    let summary = verify(&text(&[first, second]), None).unwrap();
    assert_eq!((summary.policies, summary.calls), (1, 1));
}

/// `audit verify`'s counts add up: approval records (and kinds a newer writer adds) are
/// counted, not left out of every total but `records`.
#[test]
fn the_counts_by_kind_add_up_to_the_records() {
    use super::record::ApprovalEvent;
    let approval = |event| {
        Record::Approval(ApprovalEvent {
            ts: now(),
            event,
            approval_id: "ap-1".into(),
            tool: "refund".into(),
            agent: "ops-bot".into(),
            session: None,
            approver: None,
            reason: None,
            trace_id: None,
        })
    };
    let published = Record::Policy(Published {
        ts: now(),
        policy_version: 1,
        digest: "ff".into(),
    });
    let records = [
        published,
        approval("requested"),
        Record::Call(Box::new(mk_entry(3))),
        approval("approved"),
        approval("used"),
    ];
    let mut lines = Vec::new();
    let mut prev = GENESIS.to_string();
    for (i, record) in records.iter().enumerate() {
        let (line, hash) = chain(record, i as u64 + 1, &prev, None);
        lines.push(line);
        prev = hash;
    }
    // A kind from a newer writer, sealed like the rest.
    let body = format!("{{\"seq\":6,\"kind\":\"audit-rotated\",\"prev\":\"{prev}\"");
    let hash = super::key::link_hash(None, &prev, &body);
    lines.push(format!("{body},\"hash\":\"{hash}\"}}"));
    let summary = verify(&text(&lines), None).unwrap();
    assert_eq!(
        (
            summary.calls,
            summary.policies,
            summary.approvals,
            summary.other
        ),
        (1, 1, 3, 1)
    );
    let kinds =
        summary.calls + summary.starts + summary.policies + summary.approvals + summary.other;
    assert_eq!(kinds, summary.records);
    assert_eq!(
        summary.by_kind(),
        "1 decisions, 0 starts, 1 policy versions, 3 approval records, 1 of other kinds"
    );
}
