//! The `toolgate` binary as a user runs it: check, audit verify, run + SIGTERM, demo.

mod common;

use common::*;
use std::process::{Command, Stdio};
use std::time::Duration;

fn toolgate() -> Command {
    Command::new(env!("CARGO_BIN_EXE_toolgate"))
}

#[test]
fn check_accepts_the_examples() {
    let out = toolgate()
        .args(["check", "examples/policies"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    assert!(text.contains("ok: 8 objects in 2 files"), "{text}");
}

#[test]
fn check_reports_file_object_and_field() {
    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("bad.yaml");
    std::fs::write(
        &bad,
        r#"
apiVersion: toolgate.dev/v1alpha1
kind: ToolContract
metadata: {name: t}
spec: {tool: t, http: {method: GET, path: /t}, input: {type: object}}
---
apiVersion: toolgate.dev/v1alpha1
kind: AgentPolicy
metadata: {name: p}
spec:
  agents: [a]
  tools:
    - name: t
      rules: [{name: r, expr: "argz.x == 1"}]
    - name: ghost
"#,
    )
    .unwrap();
    let out = toolgate().arg("check").arg(&bad).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{text}");
    assert!(
        text.contains(
            "bad.yaml: AgentPolicy/p: spec.tools[0].rules[0].expr: unknown variable \"argz\""
        ),
        "{text}"
    );
    let fixed = std::fs::read_to_string(&bad)
        .unwrap()
        .replace("argz", "args");
    std::fs::write(&bad, fixed).unwrap();
    let out = toolgate().arg("check").arg(&bad).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("spec.tools[1].name: no ToolContract defines tool ghost"),
        "{text}"
    );
    // A grant for a tool no linted contract defines is fine for a policy shared by
    // several workloads: a warning, an error only with --strict.
    assert!(text.contains("warning: "), "{text}");
    assert_eq!(out.status.code(), Some(0), "{text}");
    let out = toolgate()
        .args(["check", "--strict"])
        .arg(&bad)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{text}");
    assert!(text.contains("error: ") && text.contains("ghost"), "{text}");
}

/// The keyed chain end to end: a log written with `audit.keyFile` verifies only with the
/// key; edited and rebuilt without it, it fails; cut mid-record, it is reported as
/// truncated (exit 3), not as tampered.
#[tokio::test]
async fn keyed_audit_log_verifies_with_its_key_only() {
    let backend = Backend::example().await;
    let dir = tempfile::tempdir().unwrap();
    let key = dir.path().join("audit.key");
    std::fs::write(&key, "k3y-f0r-the-audit-chain-0123456789\n").unwrap();
    let key_for_settings = key.clone();
    let h = Harness::start(
        backend.addr,
        Options {
            tweak: Box::new(move |s| s.audit.key_file = Some(key_for_settings)),
            ..Options::default()
        },
    )
    .await;
    h.call("GET", "/logs/orders", Some(OPS_TOKEN), &[], "")
        .await;
    h.call("GET", "/logs/orders", Some(STRANGER_TOKEN), &[], "")
        .await;
    // The writer acknowledges in batches: wait until it has taken the start record, the
    // policy record and both calls.
    let mut last_seq = 0;
    for _ in 0..200 {
        let (_, config) = h.get_admin("/config").await;
        let config: serde_json::Value = serde_json::from_str(&config).unwrap();
        last_seq = config["audit"]["lastSeq"].as_u64().unwrap();
        if last_seq == 4 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(last_seq, 4, "start, policy and two calls acknowledged");
    let files = h.stop_keeping_files().await;
    let audit = files.path().join("audit.log");
    let verify = |extra: &[&str]| {
        let out = toolgate()
            .args(["audit", "verify"])
            .arg(&audit)
            .args(extra)
            .output()
            .unwrap();
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
        )
    };
    let key_arg = key.to_str().unwrap();
    let (code, text) = verify(&["--key-file", key_arg]);
    assert_eq!(code, Some(0), "{text}");
    assert!(text.contains("2 decisions"), "{text}");
    let (code, text) = verify(&["--key-file", key_arg, "--expect-seq", &last_seq.to_string()]);
    assert_eq!(code, Some(0), "{text}");
    let (code, text) = verify(&[]);
    assert_eq!(code, Some(1), "{text}");
    assert!(text.contains("pass --key-file"), "{text}");

    // The writer acknowledged more than the file holds: cut at a line boundary.
    let (code, text) = verify(&[
        "--key-file",
        key_arg,
        "--expect-seq",
        &(last_seq + 2).to_string(),
    ]);
    assert_eq!(code, Some(3), "{text}");
    assert!(text.contains("truncated"), "{text}");

    // Torn mid-record: truncated, not tampered.
    let whole = std::fs::read(&audit).unwrap();
    std::fs::write(&audit, &whole[..whole.len() - 10]).unwrap();
    let (code, text) = verify(&["--key-file", key_arg]);
    assert_eq!(code, Some(3), "{text}");
    assert!(text.contains("truncated at line"), "{text}");

    // Edited, and the chain after it rebuilt with plain SHA-256 (all one can do without
    // the key): it verifies without a key no more than with it.
    let text = String::from_utf8(whole).unwrap();
    let mut prev = "0".repeat(64);
    let mut forged = String::new();
    for line in text.lines() {
        let mut record: serde_json::Value = serde_json::from_str(line).unwrap();
        if record["decision"] == "deny" {
            record["decision"] = "allow".into();
        }
        let object = record.as_object_mut().unwrap();
        object.remove("hash");
        object.insert("prev".into(), prev.clone().into());
        let body = serde_json::to_string(&record).unwrap();
        let body = &body[..body.len() - 1];
        use sha2::Digest as _;
        let hash = hex::encode(sha2::Sha256::digest(format!("{prev}\n{body}")));
        forged.push_str(&format!("{body},\"hash\":\"{hash}\"}}\n"));
        prev = hash;
    }
    std::fs::write(&audit, forged).unwrap();
    let (code, text) = verify(&["--key-file", key_arg]);
    assert_eq!(code, Some(1), "{text}");
    assert!(text.contains("broken at line 1"), "{text}");
}

#[tokio::test]
async fn run_drains_in_flight_calls_on_sigterm_and_audit_verifies() {
    let backend = Backend::start(std::sync::Arc::new(|_: &Seen| {
        (
            200,
            vec![("content-type", "application/json".to_string())],
            r#"{"lines":[]}"#.to_string(),
            Duration::from_millis(700),
        )
    }))
    .await;
    let dir = tempfile::tempdir().unwrap();
    let root = env!("CARGO_MANIFEST_DIR");
    let audit = dir.path().join("audit.log");
    let settings = dir.path().join("toolgate.yaml");
    // Two free ports, held together so they can't be the same one.
    let (a, b) = (
        std::net::TcpListener::bind("127.0.0.1:0").unwrap(),
        std::net::TcpListener::bind("127.0.0.1:0").unwrap(),
    );
    let (port, admin) = (
        a.local_addr().unwrap().port(),
        b.local_addr().unwrap().port(),
    );
    drop((a, b));
    std::fs::write(
        &settings,
        format!(
            "listen: 127.0.0.1:{port}\nadmin: 127.0.0.1:{admin}\nupstream: http://{}\npolicies: {{files: [{root}/examples/policies]}}\nidentity: {{tokens: {root}/examples/tokens.yaml}}\naudit: {{path: {}}}\n",
            backend.addr,
            audit.display()
        ),
    )
    .unwrap();
    let mut child = toolgate()
        .args(["run", "--config"])
        .arg(&settings)
        .env("TOOLGATE_LIMITS_MAX_HEADERS", "50")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let client = hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
        .build_http::<http_body_util::Full<bytes::Bytes>>();
    // Wait for readiness.
    let ready = format!("http://127.0.0.1:{admin}/readyz");
    let mut up = false;
    for _ in 0..200 {
        if let Ok(r) = client.get(ready.parse().unwrap()).await {
            if r.status() == 200 {
                up = true;
                break;
            }
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(up, "toolgate run never became ready");
    let request = http::Request::post(format!("http://127.0.0.1:{port}/issues"))
        .header("authorization", "Bearer demo-ops-token")
        .header("content-type", "application/json")
        .body(http_body_util::Full::new(bytes::Bytes::from_static(
            br#"{"project_key":"OPS","title":"slow"}"#,
        )))
        .unwrap();
    let in_flight = tokio::spawn(client.request(request));
    tokio::time::sleep(Duration::from_millis(200)).await;
    let _ = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status();
    let response = in_flight
        .await
        .unwrap()
        .expect("the in-flight call completes during the drain");
    assert_eq!(response.status(), 200);
    let status = tokio::task::spawn_blocking(move || child.wait())
        .await
        .unwrap()
        .unwrap();
    assert!(status.success(), "exit status {status}");
    let out = toolgate()
        .args(["audit", "verify"])
        .arg(&audit)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    // Tamper: the same file with one record edited fails, naming the line.
    let text = std::fs::read_to_string(&audit)
        .unwrap()
        .replace("\"allow\"", "\"deny\"");
    std::fs::write(&audit, text).unwrap();
    let out = toolgate()
        .args(["audit", "verify"])
        .arg(&audit)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    // Line 1 is the start record, line 2 the policy record, line 3 the call.
    assert!(String::from_utf8_lossy(&out.stdout).contains("broken at line 3"));
}

#[test]
fn demo_prints_every_scenario_and_exits_zero() {
    let out = toolgate().arg("demo").output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for expected in [
        "INVALID_ARGUMENTS",
        "MISSING_ARGUMENT",
        "UNKNOWN_TOOL",
        "TOOL_NOT_ALLOWED",
        "BACKEND_ERROR",
        "OUT_OF_TASK_SCOPE",
        "POLICY_DENIED",
        "UNAUTHENTICATED",
        "replayed, not run again",
        "LOOP_DETECTED",
        "RATE_LIMITED",
        "APPROVAL_REQUIRED",
        "approver alice (finance-leads) approves",
        "CALL_ORDER_VIOLATION",
        "BUDGET_EXHAUSTED",
        "hash chain intact",
        "tools/list shows it lookup_order",
    ] {
        assert!(text.contains(expected), "missing {expected} in\n{text}");
    }
    // Over MCP: one call allowed, one refused as a tool result the model can read.
    let mcp: Vec<&str> = text
        .lines()
        .filter(|l| l.contains(" lookup_order ") && l.contains("MCP"))
        .collect();
    assert_eq!(mcp.len(), 2, "{text}");
    assert!(
        mcp[0].contains("allow") && mcp[0].contains("\"status\":\"shipped\""),
        "{text}"
    );
    assert!(
        mcp[1].contains("deny")
            && mcp[1].contains("INVALID_ARGUMENTS")
            && mcp[1].contains("(isError)"),
        "{text}"
    );
    assert!(
        !text.contains("db-7"),
        "backend internals leaked into the demo:\n{text}"
    );
    // Refused before its order was looked up; then held, approved, run once, replayed;
    // then another order's refund past the day's budget.
    let refunds: Vec<&str> = text
        .lines()
        .filter(|l| l.contains("issue_refund"))
        .collect();
    assert_eq!(refunds.len(), 5, "{text}");
    assert!(
        refunds[0].contains("CALL_ORDER_VIOLATION") && refunds[0].contains("[call_first]"),
        "{text}"
    );
    assert!(
        refunds[1].contains("202") && refunds[2].contains("201"),
        "{text}"
    );
    assert!(refunds[3].contains("replayed, not run again"), "{text}");
    assert!(
        refunds[4].contains("BUDGET_EXHAUSTED") && refunds[4].contains("429"),
        "{text}"
    );
}

/// Splits a printed command the way `sh` would for the demo's `curl` lines: words, and
/// '…' as one word.
fn shell_words(line: &str) -> Vec<String> {
    let mut words = Vec::new();
    let mut word = String::new();
    let mut quoted = false;
    let mut started = false;
    for c in line.chars() {
        match c {
            '\'' => {
                quoted = !quoted;
                started = true;
            }
            ' ' if !quoted => {
                if started {
                    words.push(std::mem::take(&mut word));
                }
                started = false;
            }
            c => {
                word.push(c);
                started = true;
            }
        }
    }
    if started {
        words.push(word);
    }
    words
}

/// `toolgate demo --serve` keeps the example backend and a sidecar up after the tour and
/// prints a `curl` for each kind of decision: each gets the answer its comment says,
/// then Ctrl-C stops it cleanly and the audit chain, tour and calls by hand, verifies.
#[tokio::test]
async fn demo_serve_answers_the_printed_calls_until_ctrl_c() {
    use std::io::BufRead;
    let mut child = toolgate()
        .args(["demo", "--serve"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(stdout).lines() {
            if tx.send(line.unwrap()).is_err() {
                return;
            }
        }
    });
    let mut printed = Vec::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    while !printed.iter().any(|l: &String| l.contains("/metrics")) {
        let line = tokio::time::timeout_at(deadline, rx.recv())
            .await
            .expect("the demo never printed its calls")
            .expect("the demo ended before serving");
        printed.push(line);
    }
    let client = hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
        .build_http::<http_body_util::Full<bytes::Bytes>>();
    let mut tried = 0;
    for pair in printed.windows(2) {
        let (Some(what), Some(command)) = (
            pair[0].trim().strip_prefix("# "),
            pair[1].trim().strip_prefix("curl "),
        ) else {
            continue;
        };
        if command.contains(';') {
            continue;
        }
        let words = shell_words(command);
        let mut request = http::Request::builder().method("GET");
        let mut body = String::new();
        let mut url = "";
        let mut i = 0;
        while i < words.len() {
            match words[i].as_str() {
                "-s" => {}
                "-w" => i += 1,
                "-X" => {
                    request = request.method(words[i + 1].as_str());
                    i += 1;
                }
                "-H" => {
                    let (k, v) = words[i + 1].split_once(": ").unwrap();
                    request = request.header(k, v);
                    i += 1;
                }
                "-d" => {
                    body = words[i + 1].clone();
                    request = request.method("POST");
                    i += 1;
                }
                other => url = other,
            }
            i += 1;
        }
        let response = client
            .request(
                request
                    .uri(url)
                    .body(http_body_util::Full::new(bytes::Bytes::from(body)))
                    .unwrap(),
            )
            .await
            .unwrap();
        let status = response.status().as_u16();
        let text = http_body_util::BodyExt::collect(response.into_body())
            .await
            .unwrap()
            .to_bytes();
        let text = String::from_utf8_lossy(&text);
        let mut expected = what.split([' ', ':']);
        assert_eq!(
            expected.next().unwrap(),
            status.to_string(),
            "{what}: {text}"
        );
        match expected.next().unwrap() {
            "allowed" => assert!(!text.contains("\"error\""), "{what}: {text}"),
            code => assert!(text.contains(code), "{what}: {text}"),
        }
        tried += 1;
    }
    assert!(tried >= 7, "{printed:?}");
    let _ = Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status();
    let mut rest = Vec::new();
    while let Some(line) = tokio::time::timeout_at(deadline, rx.recv()).await.unwrap() {
        rest.push(line);
    }
    let status = tokio::task::spawn_blocking(move || child.wait())
        .await
        .unwrap()
        .unwrap();
    assert!(status.success(), "exit status {status}");
    let log = rest
        .iter()
        .find_map(|l| {
            l.split_once("toolgate audit verify ")
                .map(|(_, p)| p.to_string())
        })
        .expect("the demo says where its audit log is");
    let out = toolgate().args(["audit", "verify", &log]).output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    let _ = std::fs::remove_dir_all(std::path::Path::new(&log).parent().unwrap());
}
