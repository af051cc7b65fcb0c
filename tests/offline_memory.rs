//! The offline tools are bounded too (DESIGN §14): `toolgate replay` and `toolgate audit
//! verify` hold at most a small multiple of the longest line in memory. Each runs as a
//! child process on a log with one long line, and its peak resident memory (VmHWM) is
//! read from /proc while it runs.

use sha2::{Digest, Sha256};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const GENESIS: &str = "0000000000000000000000000000000000000000000000000000000000000000";
const MB: u64 = 1 << 20;

/// A one-record log whose chain verifies: a call of `read_logs` with `args` as given.
fn write_log(path: &Path, args: &str) -> u64 {
    let body = format!(
        r#"{{"seq":1,"kind":"call","traceId":"t1","agent":"ops-bot","tool":"read_logs","decision":"allow","code":null,"rule":null,"args":{args},"inputs":{{"v":1,"task":{{"window_minutes":15,"service":"orders"}}}},"prev":"{GENESIS}""#
    );
    let mut hash = Sha256::new();
    hash.update(GENESIS.as_bytes());
    hash.update(b"\n");
    hash.update(body.as_bytes());
    let line = format!("{body},\"hash\":\"{}\"}}\n", hex::encode(hash.finalize()));
    std::fs::write(path, &line).unwrap();
    line.len() as u64
}

/// Runs toolgate with `args`; its exit code, its output, and its peak resident bytes.
fn peak_of(args: &[&str]) -> (i32, String, u64) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_toolgate"))
        .args(args)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let status = format!("/proc/{}/status", child.id());
    let mut peak = 0;
    let started = Instant::now();
    while child.try_wait().unwrap().is_none() {
        // VmHWM only grows: the last reading before the exit is the peak, give or take
        // the final few milliseconds.
        if let Ok(text) = std::fs::read_to_string(&status) {
            if let Some(kb) = text
                .lines()
                .find_map(|l| l.strip_prefix("VmHWM:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
            {
                peak = peak.max(kb * 1024);
            }
        }
        if started.elapsed() > Duration::from_secs(120) {
            let _ = child.kill();
        }
        std::thread::sleep(Duration::from_millis(2));
    }
    let out = child.wait_with_output().unwrap();
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    (out.status.code().unwrap_or(-1), text, peak)
}

/// What the binary takes before it reads any log: the floor under every measurement.
fn baseline() -> u64 {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("audit.log");
    write_log(&log, r#"{"service":"orders","window_minutes":5}"#);
    let (code, text, peak) = peak_of(&[
        "replay",
        "--audit",
        log.to_str().unwrap(),
        "--policies",
        "examples/policies",
    ]);
    assert_eq!(code, 0, "{text}");
    peak
}

#[test]
fn replay_and_verify_hold_a_small_multiple_of_the_longest_line() {
    let floor = baseline();
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("audit.log");
    // 8 MB of `0,`: as a JSON tree, 4 million values of 32 bytes and more each (the old
    // build took ~280 MB for it, 2.1 GB for 60 MB).
    let zeros = vec!["0"; 4 << 20].join(",");
    let line = write_log(
        &log,
        &format!(r#"{{"service":"orders","window_minutes":[{zeros}]}}"#),
    );
    let bound = floor + 6 * line;
    let path = log.to_str().unwrap();
    let (code, text, peak) =
        peak_of(&["replay", "--audit", path, "--policies", "examples/policies"]);
    assert!(code == 0 || code == 1, "{text}");
    assert!(text.contains("replayed 1"), "{text}");
    assert!(
        peak < bound,
        "replay of a {} MB line peaked at {} MB (floor {} MB, bound {} MB)",
        line / MB,
        peak / MB,
        floor / MB,
        bound / MB
    );
    let (code, text, peak) = peak_of(&["audit", "verify", path]);
    assert_eq!(code, 0, "{text}");
    assert!(
        peak < bound,
        "verify of a {} MB line peaked at {} MB (bound {} MB)",
        line / MB,
        peak / MB,
        bound / MB
    );
}

#[test]
fn a_long_line_that_fits_is_still_re_decided_on_its_arguments() {
    let floor = baseline();
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("audit.log");
    // One long string: its tree is about its text's size, so it is re-decided in full —
    // and `service` is not one the contract allows, so the decision changes.
    let long = "x".repeat(8 << 20);
    let line = write_log(&log, &format!(r#"{{"service":"{long}"}}"#));
    let path = log.to_str().unwrap();
    let (code, text, peak) =
        peak_of(&["replay", "--audit", path, "--policies", "examples/policies"]);
    assert_eq!(code, 1, "{text}");
    assert!(
        text.contains("changed 1") && text.contains("partial 0"),
        "{text}"
    );
    assert!(peak < floor + 6 * line, "peaked at {} MB", peak / MB);
}
