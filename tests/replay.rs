//! `toolgate replay` from a live sidecar's audit log to the report: the same policies
//! change nothing; a candidate that tightens one rule and removes one grant changes
//! exactly the calls they affect; bad input is refused with exit 2.

mod common;

use common::*;
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::Command;

const CONTRACTS: &str = "apiVersion: toolgate.dev/v1alpha1
kind: ToolContract
metadata: {name: read-logs}
spec:
  tool: read_logs
  http: {method: GET, path: \"/logs/{service}\"}
  captureArguments: true
  input:
    type: object
    required: [service]
    properties:
      service: {type: string, enum: [orders, payments]}
      window_minutes: {type: integer, minimum: 1, default: 15}
---
apiVersion: toolgate.dev/v1alpha1
kind: ToolContract
metadata: {name: create-issue}
spec:
  tool: create_issue
  http: {method: POST, path: /issues}
  captureArguments: true
  redact: [/title]
  input:
    type: object
    required: [project_key, title]
    properties:
      project_key: {type: string}
      title: {type: string}
---
apiVersion: toolgate.dev/v1alpha1
kind: ToolContract
metadata: {name: get-report}
spec:
  tool: get_report
  http: {method: GET, path: \"/reports/{id}\"}
";

/// ops-bot may read logs for up to a day, file issues outside SEC, get reports; stranger
/// may only read logs.
fn agents(issue_rule: &str, with_reports: bool) -> String {
    let reports = if with_reports {
        "    - name: get_report\n"
    } else {
        ""
    };
    format!(
        "apiVersion: toolgate.dev/v1alpha1
kind: AgentPolicy
metadata: {{name: ops-bot}}
spec:
  agents: [ops-bot]
  tools:
    - name: read_logs
      rules:
        - {{name: at-most-a-day, expr: \"args.window_minutes <= 1440 && agent.id == 'ops-bot'\"}}
    - name: create_issue
      rules:
        - {{name: no-security-issues, expr: \"{issue_rule}\"}}
{reports}---
apiVersion: toolgate.dev/v1alpha1
kind: AgentPolicy
metadata: {{name: stranger}}
spec:
  agents: [stranger]
  tools: [{{name: read_logs}}]
"
    )
}

const SAME_RULE: &str = "args.project_key != 'SEC'";

fn write_policies(dir: &Path, issue_rule: &str, with_reports: bool) -> PathBuf {
    std::fs::create_dir_all(dir).unwrap();
    std::fs::write(dir.join("contracts.yaml"), CONTRACTS).unwrap();
    std::fs::write(dir.join("agents.yaml"), agents(issue_rule, with_reports)).unwrap();
    dir.to_path_buf()
}

/// A scripted mix of allowed and refused calls; the sidecar's audit log, complete.
async fn recorded_log() -> (tempfile::TempDir, PathBuf) {
    let backend = Backend::example().await;
    let h = Harness::start(
        backend.addr,
        Options {
            policies: format!("{CONTRACTS}---\n{}", agents(SAME_RULE, true)),
            ..Options::default()
        },
    )
    .await;
    let issue = |key: &str| format!(r#"{{"project_key":"{key}","title":"disk full on db-7"}}"#);
    let calls = [
        (
            "GET",
            "/logs/orders?window_minutes=60",
            OPS_TOKEN,
            String::new(),
            200,
        ),
        (
            "GET",
            "/logs/orders?window_minutes=9999",
            OPS_TOKEN,
            String::new(),
            403,
        ),
        ("GET", "/logs/archive", OPS_TOKEN, String::new(), 422),
        ("POST", "/issues", OPS_TOKEN, issue("OPS"), 201),
        ("POST", "/issues", OPS_TOKEN, issue("SEC"), 403),
        ("GET", "/reports/7", OPS_TOKEN, String::new(), 502),
        ("POST", "/issues", STRANGER_TOKEN, issue("OPS"), 403),
        ("GET", "/logs/payments", STRANGER_TOKEN, String::new(), 200),
        ("GET", "/logs/orders", "not-a-token", String::new(), 401),
    ];
    for (method, path, token, body, status) in calls {
        let r = h.call(method, path, Some(token), &[], &body).await;
        assert_eq!(r.status, status, "{method} {path}: {}", r.text);
    }
    let dir = h.stop_keeping_files().await;
    let log = dir.path().join("audit.log");
    (dir, log)
}

fn replay(log: &Path, policies: &Path, extra: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_toolgate"))
        .arg("replay")
        .arg("--audit")
        .arg(log)
        .arg("--policies")
        .arg(policies)
        .args(extra)
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[tokio::test]
async fn the_same_policies_change_nothing_and_a_tightened_one_exactly_what_it_tightens() {
    let (dir, log) = recorded_log().await;
    let text = std::fs::read_to_string(&log).unwrap();
    // What capture kept: the arguments (redacted) and what the rules read.
    let allowed_read = audit_calls(&text)
        .into_iter()
        .find(|c| c["tool"] == "read_logs" && c["decision"] == "allow")
        .unwrap();
    assert_eq!(allowed_read["inputs"]["v"], 1);
    assert_eq!(allowed_read["inputs"]["agent"]["id"], "ops-bot");
    let refused_issue = audit_calls(&text)
        .into_iter()
        .find(|c| c["tool"] == "create_issue" && c["code"] == "POLICY_DENIED")
        .unwrap();
    assert_eq!(refused_issue["args"]["project_key"], "SEC");
    assert_ne!(
        refused_issue["args"]["title"], "disk full on db-7",
        "redacted"
    );

    let same = write_policies(&dir.path().join("same"), SAME_RULE, true);
    let (code, out, err) = replay(&log, &same, &["--format", "json"]);
    assert_eq!(code, 0, "{out}{err}");
    let report: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(report["changed"], 0, "{out}");
    assert_eq!(report["unchanged"], report["replayed"]);
    // The report's get_report call had no captured arguments: partial. The
    // unauthenticated call is skipped.
    assert_eq!(report["partial"], 1, "{out}");
    assert!(report["skipped"].as_u64().unwrap() >= 3, "{out}");

    let tightened = write_policies(
        &dir.path().join("tightened"),
        "args.project_key != 'SEC' && args.project_key != 'OPS'",
        false,
    );
    let (code, out, err) = replay(&log, &tightened, &["--format", "json"]);
    assert_eq!(code, 1, "{out}{err}");
    let report: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(report["changed"], 2, "{out}");
    let mut changes: Vec<(String, String, String, String)> = report["changes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            (
                c["tool"].as_str().unwrap().to_string(),
                c["before"]["decision"].as_str().unwrap().to_string(),
                c["after"]["code"].as_str().unwrap_or("-").to_string(),
                c["after"]["rule"].as_str().unwrap_or("-").to_string(),
            )
        })
        .collect();
    changes.sort();
    assert_eq!(
        changes,
        [
            (
                "create_issue".into(),
                "allow".into(),
                "POLICY_DENIED".into(),
                "no-security-issues".into()
            ),
            (
                "get_report".into(),
                "allow".into(),
                "TOOL_NOT_ALLOWED".into(),
                "-".into()
            ),
        ]
    );
    // Trace ids name the recorded calls.
    let traces: Vec<String> = audit_calls(&text)
        .iter()
        .map(|c| c["traceId"].as_str().unwrap().to_string())
        .collect();
    for change in report["changes"].as_array().unwrap() {
        assert!(traces.contains(&change["traceId"].as_str().unwrap().to_string()));
    }
    // Within --max-changed: exit 0. The table groups by tool.
    let (code, table, _) = replay(&log, &tightened, &["--max-changed", "2"]);
    assert_eq!(code, 0, "{table}");
    assert!(
        table.contains("create_issue") && table.contains("allow→deny"),
        "{table}"
    );
    assert!(table.contains("get_report"), "{table}");
}

#[tokio::test]
async fn bad_input_is_refused_or_counted_never_a_panic() {
    let (dir, log) = recorded_log().await;
    let policies = write_policies(&dir.path().join("p"), SAME_RULE, true);

    // A tampered log: exit 2, unless --allow-broken.
    let text = std::fs::read_to_string(&log).unwrap();
    let tampered = dir.path().join("tampered.log");
    std::fs::write(
        &tampered,
        text.replacen("\"decision\":\"deny\"", "\"decision\":\"allow\"", 1),
    )
    .unwrap();
    let (code, _, err) = replay(&tampered, &policies, &[]);
    assert_eq!(code, 2);
    assert!(err.contains("chain is broken"), "{err}");
    assert_eq!(replay(&tampered, &policies, &["--allow-broken"]).0, 1);
    // A torn last line: broken too.
    let torn = dir.path().join("torn.log");
    std::fs::write(&torn, &text[..text.len() - 10]).unwrap();
    assert_eq!(replay(&torn, &policies, &[]).0, 2);

    // Manifests that don't compile; no such file: exit 2.
    let broken = dir.path().join("broken");
    std::fs::create_dir_all(&broken).unwrap();
    std::fs::write(broken.join("p.yaml"), "kind: AgentPolicy\nspec: [").unwrap();
    assert_eq!(replay(&log, &broken, &[]).0, 2);
    assert_eq!(replay(&dir.path().join("nope.log"), &policies, &[]).0, 2);

    // An empty log: nothing to replay, nothing changed.
    let empty = dir.path().join("empty.log");
    std::fs::write(&empty, "").unwrap();
    let (code, out, _) = replay(&empty, &policies, &["--format", "json"]);
    assert_eq!(code, 0);
    assert_eq!(serde_json::from_str::<Value>(&out).unwrap()["replayed"], 0);

    // A log from another policy's tools: every call is an unknown tool now.
    let other = dir.path().join("other");
    std::fs::create_dir_all(&other).unwrap();
    std::fs::write(
        other.join("p.yaml"),
        "apiVersion: toolgate.dev/v1alpha1\nkind: ToolContract\nmetadata: {name: x}\nspec: {tool: something_else}\n",
    )
    .unwrap();
    let (code, out, _) = replay(&log, &other, &["--format", "json"]);
    assert_eq!(code, 1);
    let report: Value = serde_json::from_str(&out).unwrap();
    assert!(report["changes"]
        .as_array()
        .unwrap()
        .iter()
        .all(|c| c["after"]["code"] == "UNKNOWN_TOOL"));
    // Lines of a newer record version: partial, not misread.
    let newer = dir.path().join("newer.log");
    let lines: Vec<String> = text
        .lines()
        .map(|l| l.replace("\"inputs\":{\"v\":1", "\"inputs\":{\"v\":2"))
        .collect();
    std::fs::write(&newer, lines.join("\n") + "\n").unwrap();
    let (code, out, _) = replay(&newer, &policies, &["--format", "json", "--allow-broken"]);
    assert_eq!(code, 0, "{out}");
    let report: Value = serde_json::from_str(&out).unwrap();
    assert!(report["partial"].as_u64().unwrap() > 1, "{out}");
}
