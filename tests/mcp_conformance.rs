//! The MCP conformance suite's server scenarios, run against toolgate in front of a
//! server on the official TypeScript SDK (`tests/mcp/polling_server.mjs`): what the suite checks of a server must hold through the
//! gateway as it does without it (DESIGN §12). The suite can't send an agent's
//! credential, so a relay adds it (`common::auth_relay`).
//!
//! `server-sse-polling` (SEP-1699): the server closes a tool call's event stream mid-call
//! and answers on the stream the client resumes with `Last-Event-ID`. With contracts as
//! written — MCP tools are not idempotent by default, so the call runs at most once —
//! toolgate must end the lead's stream as the server did, not answer it with a failure.

mod common;
#[path = "common/mcp.rs"]
mod peers;

use common::*;
use serde_json::Value;
use std::process::Command;

fn policies(idempotent: bool) -> String {
    format!(
        "apiVersion: toolgate.dev/v1alpha1
kind: ToolContract
metadata: {{name: test-reconnection}}
spec:
  tool: test_reconnection
  {idempotent}
---
apiVersion: toolgate.dev/v1alpha1
kind: AgentPolicy
metadata: {{name: ops-bot}}
spec:
  agents: [ops-bot]
  tools: [{{name: test_reconnection}}]
",
        idempotent = if idempotent {
            "idempotent: true"
        } else {
            "# idempotent: false, MCP's default"
        }
    )
}

/// Runs one server scenario of the suite against `url`; its checks.
fn scenario(url: &str, name: &str) -> Vec<Value> {
    let (node, suite) = peers::conformance();
    let out = tempfile::tempdir().unwrap();
    let run = Command::new(node)
        .arg(suite)
        .args(["server", "--url", url, "--scenario", name, "--output-dir"])
        .arg(out.path())
        .output()
        .expect("the conformance suite runs");
    let printed = format!(
        "{}{}",
        String::from_utf8_lossy(&run.stdout),
        String::from_utf8_lossy(&run.stderr)
    );
    let checks = find_checks(out.path())
        .unwrap_or_else(|| panic!("no checks written by the suite:\n{printed}"));
    assert!(!checks.is_empty(), "{printed}");
    checks
}

/// The suite writes `checks.json` somewhere under its output folder.
fn find_checks(dir: &std::path::Path) -> Option<Vec<Value>> {
    for entry in std::fs::read_dir(dir).ok()?.flatten() {
        let path = entry.path();
        if path.is_dir() {
            if let Some(found) = find_checks(&path) {
                return Some(found);
            }
        } else if path.file_name().is_some_and(|n| n == "checks.json") {
            return serde_json::from_str(&std::fs::read_to_string(path).ok()?).ok();
        }
    }
    None
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sse_polling_passes_through_the_gateway_as_written() {
    for idempotent in [false, true] {
        let dir = tempfile::tempdir().unwrap();
        let peer = peers::Peer::polling_server(dir.path());
        let h = Harness::start(
            peer.addr,
            Options {
                policies: policies(idempotent),
                ..Options::default()
            },
        )
        .await;
        let sidecar: std::net::SocketAddr = h.base.trim_start_matches("http://").parse().unwrap();
        let relay = common::auth_relay::start(sidecar, OPS_TOKEN).await;
        let url = format!("http://{relay}/mcp");
        let checks = tokio::task::spawn_blocking(move || scenario(&url, "server-sse-polling"))
            .await
            .unwrap();
        let failed: Vec<&Value> = checks.iter().filter(|c| c["status"] == "FAILURE").collect();
        assert!(
            failed.is_empty(),
            "idempotent={idempotent}: {}",
            serde_json::to_string_pretty(&failed).unwrap()
        );
        let resumed = checks
            .iter()
            .find(|c| c["id"] == "server-sse-disconnect-resume")
            .unwrap_or_else(|| panic!("{checks:#?}"));
        assert_eq!(
            resumed["status"], "SUCCESS",
            "idempotent={idempotent}: {resumed}"
        );
        // The call ran once, and its record is the one an allowed call leaves.
        assert_eq!(peer.counts()["test_reconnection"], 1);
        let file = h.audit_file();
        let _kept = h.stop_keeping_files().await;
        let calls = audit_calls(&std::fs::read_to_string(file).unwrap());
        let call: Vec<_> = calls
            .iter()
            .filter(|c| c["tool"] == "test_reconnection")
            .collect();
        assert_eq!(call.len(), 1, "{calls:#?}");
        assert_eq!(call[0]["decision"], "allow");
        assert!(call[0]["code"].is_null(), "{:?}", call[0]);
    }
}
