//! `toolgate approvals` as an approver runs it: the real binary against a real sidecar's
//! admin listener, while a real agent call waits on the second gate and a real backend
//! counts what reaches it.

mod common;

use common::*;
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::Duration;
use toolgate::identity::tokens::digest_hex;

/// A refund tool whose grant holds refunds over 100 for finance-leads.
const POLICIES: &str = r#"
apiVersion: toolgate.dev/v1alpha1
kind: ToolContract
metadata: {name: refund}
spec:
  tool: refund
  http: {method: POST, path: /refunds}
  idempotent: false
  input:
    type: object
    additionalProperties: false
    required: [order_id, amount]
    properties:
      order_id: {type: string}
      amount: {type: integer}
      card: {type: string}
  redact: ["/card"]
---
apiVersion: toolgate.dev/v1alpha1
kind: AgentPolicy
metadata: {name: ops-bot}
spec:
  agents: [ops-bot]
  tools:
    - name: refund
      approval:
        when: "args.amount > 100"
        approvers: [finance-leads]
        ttlSeconds: 900
"#;

const ALICE_TOKEN: &str = "alice-approver-token";
const MALLORY_TOKEN: &str = "mallory-approver-token";

/// The approvers' token files and the sidecar's approvers file, in one folder.
struct Approvers {
    dir: tempfile::TempDir,
}

impl Approvers {
    fn new() -> Approvers {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join("approvers.yaml"),
            format!(
                "alice: {{sha256: {}, groups: [finance-leads]}}\nmallory: {{sha256: {}, groups: [other-group]}}\n",
                digest_hex(ALICE_TOKEN),
                digest_hex(MALLORY_TOKEN)
            ),
        )
        .unwrap();
        // Token files as people keep them: with a trailing newline.
        for (name, token) in [
            ("alice", ALICE_TOKEN),
            ("mallory", MALLORY_TOKEN),
            ("ops-bot", OPS_TOKEN),
        ] {
            std::fs::write(dir.path().join(name), format!("{token}\n")).unwrap();
        }
        Approvers { dir }
    }

    fn token(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }
}

async fn mk_sidecar(approvers: &Approvers) -> (Backend, Harness) {
    let backend = Backend::start(Arc::new(|_: &Seen| {
        let json = ("content-type", "application/json".to_string());
        (
            201,
            vec![json],
            r#"{"refunded":true}"#.into(),
            Duration::ZERO,
        )
    }))
    .await;
    let file = approvers.dir.path().join("approvers.yaml");
    let h = Harness::start(
        backend.addr,
        Options {
            policies: POLICIES.to_string(),
            tweak: Box::new(move |s| s.approvals.approvers.tokens = Some(file)),
            ..Default::default()
        },
    )
    .await;
    (backend, h)
}

/// What a run of the binary left behind.
#[derive(Debug)]
struct Run {
    code: Option<i32>,
    stdout: String,
    stderr: String,
}

/// Runs `toolgate approvals ARGS…` off the runtime's workers (the sidecar runs on them).
async fn approvals(args: &[&str], envs: &[(&str, &str)]) -> Run {
    let mut command = Command::new(env!("CARGO_BIN_EXE_toolgate"));
    command
        .arg("approvals")
        .args(args)
        .env_remove("TOOLGATE_ADMIN_URL")
        .env_remove("TOOLGATE_APPROVER_TOKEN_FILE");
    for (k, v) in envs {
        command.env(k, v);
    }
    let out = tokio::task::spawn_blocking(move || command.output().unwrap())
        .await
        .unwrap();
    Run {
        code: out.status.code(),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// `args` followed by `--admin URL --token-file FILE`.
async fn approvals_as(h: &Harness, token: &Path, args: &[&str]) -> Run {
    let admin = h.admin();
    let token = token.display().to_string();
    let mut all = args.to_vec();
    all.extend(["--admin", &admin, "--token-file", &token]);
    approvals(&all, &[]).await
}

async fn refund(h: &Harness, body: &str) -> Reply {
    h.call("POST", "/refunds", Some(OPS_TOKEN), &[], body).await
}

/// The id a held call's `APPROVAL_REQUIRED` names.
fn approval_id(reply: &Reply) -> String {
    reply.assert_refused("APPROVAL_REQUIRED", 202);
    reply.json["error"]["details"][0]["approvalId"]
        .as_str()
        .unwrap_or_else(|| panic!("no approvalId in {}", reply.text))
        .to_string()
}

#[tokio::test(flavor = "multi_thread")]
async fn an_approved_refund_runs_once_and_the_audit_log_names_the_approver() {
    let approvers = Approvers::new();
    let (backend, h) = mk_sidecar(&approvers).await;
    let call = r#"{"order_id":"A-1","amount":500,"card":"4111"}"#;
    let held = refund(&h, call).await;
    let id = approval_id(&held);
    assert_eq!(backend.count(), 0, "a held call reached the backend");

    let alice = approvers.token("alice");
    let listed = approvals_as(&h, &alice, &["list", "--status", "pending"]).await;
    assert_eq!(listed.code, Some(0), "{listed:?}");
    let row = listed.stdout.lines().find(|l| l.starts_with(&id));
    let row = row.unwrap_or_else(|| panic!("{id} not listed:\n{}", listed.stdout));
    for column in ["pending", "refund", "ops-bot", "args.amount > 100"] {
        assert!(row.contains(column), "{column} missing from {row}");
    }

    let json = approvals_as(&h, &alice, &["list", "--format", "json"]).await;
    assert_eq!(json.code, Some(0), "{json:?}");
    let listed: Value = serde_json::from_str(&json.stdout).unwrap();
    let listed = listed["approvals"].as_array().unwrap();
    assert_eq!(listed.len(), 1, "{listed:?}");
    assert_eq!(listed[0]["id"], id.as_str());
    // Listings carry no arguments; `show` prints them.
    assert!(listed[0].get("arguments").is_none(), "{listed:?}");

    let shown = approvals_as(&h, &alice, &["show", &id]).await;
    assert_eq!(shown.code, Some(0), "{shown:?}");
    assert!(
        shown.stdout.contains("args.amount > 100"),
        "{}",
        shown.stdout
    );
    assert!(
        shown.stdout.contains(r#""card": "[REDACTED]""#),
        "{}",
        shown.stdout
    );
    assert!(
        shown.stdout.contains(r#""order_id": "A-1""#),
        "{}",
        shown.stdout
    );
    assert!(!shown.stdout.contains("4111"), "{}", shown.stdout);

    // Mallory is an approver, but not one of finance-leads.
    let reason = ["--reason", "ok by finance"];
    let mallory = approvals_as(
        &h,
        &approvers.token("mallory"),
        &[&["approve", &id][..], &reason].concat(),
    )
    .await;
    assert_eq!(mallory.code, Some(1), "{mallory:?}");
    assert!(
        mallory
            .stderr
            .starts_with("error: TOOL_NOT_ALLOWED (403): "),
        "{mallory:?}"
    );
    let approved = approvals_as(&h, &alice, &[&["approve", &id][..], &reason].concat()).await;
    assert_eq!(approved.code, Some(0), "{approved:?}");
    assert_eq!(
        approved.stdout,
        format!("approved {id} (tool refund, agent ops-bot)\n")
    );

    let ran = refund(&h, call).await;
    assert_eq!(ran.status, 201, "{}", ran.text);
    assert_eq!(backend.count(), 1);
    assert_eq!(backend.last().method, "POST");
    // The approval is used up: the repeat replays the run or asks anew, never runs again.
    let again = refund(&h, call).await;
    assert!(
        again.header("x-toolgate-replayed") == "true" || again.code() == "APPROVAL_REQUIRED",
        "{} {:?}",
        again.text,
        again.headers
    );
    assert_eq!(backend.count(), 1, "the approved refund ran twice");

    let dir = h.stop_keeping_files().await;
    let log = std::fs::read_to_string(dir.path().join("audit.log")).unwrap();
    audit_verify(&log);
    let ran = audit_calls(&log)
        .into_iter()
        .find(|r| r["upstreamStatus"] == 201)
        .unwrap_or_else(|| panic!("no record of the run:\n{log}"));
    assert_eq!(ran["approval"]["id"], id.as_str());
    assert_eq!(ran["approval"]["approver"], "alice");
    assert_eq!(ran["approval"]["reason"], "ok by finance");
    let events: Vec<String> = log
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .filter(|r| r["kind"] == "approval" && r["approvalId"] == id.as_str())
        .map(|r| r["event"].as_str().unwrap_or("").to_string())
        .collect();
    assert_eq!(events, ["requested", "approved", "used"], "{log}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_denied_refund_is_refused_with_the_approvers_reason() {
    let approvers = Approvers::new();
    let (backend, h) = mk_sidecar(&approvers).await;
    let call = r#"{"order_id":"B-2","amount":900}"#;
    let id = approval_id(&refund(&h, call).await);
    // The variables stand in for the flags.
    let admin = h.admin();
    let alice = approvers.token("alice").display().to_string();
    let denied = approvals(
        &["deny", &id, "--reason", "not today"],
        &[
            ("TOOLGATE_ADMIN_URL", &admin),
            ("TOOLGATE_APPROVER_TOKEN_FILE", &alice),
        ],
    )
    .await;
    assert_eq!(denied.code, Some(0), "{denied:?}");
    assert_eq!(
        denied.stdout,
        format!("denied {id} (tool refund, agent ops-bot)\n")
    );

    let refused = refund(&h, call).await;
    refused.assert_refused("APPROVAL_DENIED", 403);
    let message = refused.json["error"]["message"].as_str().unwrap_or("");
    assert!(message.contains("not today"), "{}", refused.text);
    assert_eq!(backend.count(), 0);
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn refusals_exit_1_and_problems_on_our_side_exit_2() {
    let approvers = Approvers::new();
    let (_backend, h) = mk_sidecar(&approvers).await;
    let alice = approvers.token("alice");
    let id = approval_id(&refund(&h, r#"{"order_id":"C-3","amount":150}"#).await);

    let unknown = approvals_as(&h, &alice, &["approve", "apr-0000"]).await;
    assert_eq!(unknown.code, Some(1), "{unknown:?}");
    assert!(
        unknown.stderr.contains("(404): no approval apr-0000"),
        "{unknown:?}"
    );

    assert_eq!(
        approvals_as(&h, &alice, &["approve", &id]).await.code,
        Some(0)
    );
    let twice = approvals_as(&h, &alice, &["deny", &id]).await;
    assert_eq!(twice.code, Some(1), "{twice:?}");
    assert!(
        twice.stderr.contains("(409): ") && twice.stderr.contains("not pending"),
        "{twice:?}"
    );

    // An agent's credential is not an approver's.
    let agent = approvals_as(&h, &approvers.token("ops-bot"), &["list"]).await;
    assert_eq!(agent.code, Some(1), "{agent:?}");
    assert!(
        agent.stderr.starts_with("error: UNAUTHENTICATED (401): "),
        "{agent:?}"
    );

    let closed = format!("http://{}", closed_port().await);
    let alice_file = alice.display().to_string();
    let unreachable = approvals(
        &["list", "--admin", &closed, "--token-file", &alice_file],
        &[],
    )
    .await;
    assert_eq!(unreachable.code, Some(2), "{unreachable:?}");
    assert!(
        unreachable
            .stderr
            .contains("can't reach the admin listener"),
        "{unreachable:?}"
    );

    let missing = approvals_as(&h, &approvers.dir.path().join("nobody"), &["list"]).await;
    assert_eq!(missing.code, Some(2), "{missing:?}");
    assert!(
        missing.stderr.contains("can't read the token file"),
        "{missing:?}"
    );
    h.stop().await;
}

/// `list` follows `nextCursor` to the last page: a stand-in admin listener serves three.
#[tokio::test(flavor = "multi_thread")]
async fn list_follows_every_page_to_the_end() {
    let admin = Backend::start(Arc::new(|seen: &Seen| {
        let query = seen.uri.split_once('?').map_or("", |(_, q)| q);
        let cursor = query
            .split('&')
            .find_map(|pair| pair.strip_prefix("cursor="));
        let (ids, next) = match cursor {
            None => (["apr-a", "apr-b"], Value::from("2_apr-b")),
            Some("2_apr-b") => (["apr-c", "apr-d"], Value::from("1_apr-d")),
            _ => (["apr-e", "apr-f"], Value::Null),
        };
        let approvals: Vec<Value> = ids
            .iter()
            .map(|id| serde_json::json!({"id": id, "status": "pending", "tool": "refund"}))
            .collect();
        let body = serde_json::json!({"approvals": approvals, "nextCursor": next});
        (200, vec![], body.to_string(), Duration::ZERO)
    }))
    .await;
    let approvers = Approvers::new();
    let url = format!("http://{}", admin.addr);
    let token = approvers.token("alice").display().to_string();
    let args = ["list", "--format", "json", "--status", "pending"];
    let mut all = args.to_vec();
    all.extend(["--admin", &url, "--token-file", &token]);
    let run = approvals(&all, &[]).await;
    assert_eq!(run.code, Some(0), "{run:?}");
    let listed: Value = serde_json::from_str(&run.stdout).unwrap();
    let ids: Vec<&str> = listed["approvals"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, ["apr-a", "apr-b", "apr-c", "apr-d", "apr-e", "apr-f"]);
    let seen = admin.seen.lock().unwrap().clone();
    assert_eq!(seen.len(), 3);
    assert!(seen
        .iter()
        .all(|s| s.uri.contains("limit=1000") && s.uri.contains("status=pending")));
}
