//! Answers to requests that name no agent, over real sockets (DESIGN §14): an anonymous
//! flood is limited per client address and leaves one `suppressed` audit record a
//! second instead of one record per request; every 401 carries a `WWW-Authenticate`
//! challenge; admin answers are never cached.

mod common;

use common::*;
use serde_json::Value;
use std::process::Command;
use std::time::Duration;

/// The audit log's records, parsed.
fn records(h: &tempfile::TempDir) -> (String, Vec<Value>) {
    let text = std::fs::read_to_string(h.path().join("audit.log")).unwrap();
    let lines = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    (text, lines)
}

#[tokio::test]
async fn an_anonymous_flood_is_limited_per_address_and_leaves_one_record_a_second() {
    let backend = Backend::example().await;
    let h = Harness::start(backend.addr, Options::default()).await;
    let body = r#"{"project_key":"OPS","title":"x"}"#;
    let mut statuses = Vec::new();
    for _ in 0..400 {
        let r = h.call("POST", "/issues", None, &[], body).await;
        if r.status == 429 {
            r.assert_refused("RATE_LIMITED", 429);
            assert!(r.header("retry-after").parse::<u64>().unwrap() >= 1);
        } else {
            r.assert_refused("UNAUTHENTICATED", 401);
        }
        statuses.push(r.status);
    }
    // The burst (twice limits.unauthenticatedPerSecond, 20) is answered as it was; the
    // rest is rate limited.
    assert_eq!(statuses.iter().filter(|&&s| s == 401).count(), 40);
    assert_eq!(statuses.iter().filter(|&&s| s == 429).count(), 360);
    // Bad paths and malformed framing name no agent either; they share the allowance.
    let r = h.call("GET", "/logs/%2e%2e/etc", None, &[], "").await;
    r.assert_refused("RATE_LIMITED", 429);
    // An identified agent's refusals are never suppressed, from the same address.
    for _ in 0..60 {
        let r = h
            .call("POST", "/admin/reset", Some(OPS_TOKEN), &[], "{}")
            .await;
        r.assert_refused("TOOL_NOT_ALLOWED", 403);
    }
    // The allowance refills at its rate (the sidecar's limits clock).
    h.clock.advance(Duration::from_secs(1));
    let r = h.call("POST", "/issues", None, &[], body).await;
    r.assert_refused("UNAUTHENTICATED", 401);
    // Once a second the counts become records.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let dir = h.stop_keeping_files().await;
    let (text, lines) = records(&dir);
    let calls = audit_calls(&text);
    let anonymous = calls.iter().filter(|c| c["agent"].is_null()).count();
    assert_eq!(anonymous, 41, "one record per answer within the allowance");
    assert_eq!(calls.len(), 41 + 60);
    let suppressed: Vec<&Value> = lines.iter().filter(|l| l["kind"] == "suppressed").collect();
    assert!(
        !suppressed.is_empty() && suppressed.len() <= 3,
        "{suppressed:?}"
    );
    let counted: u64 = suppressed
        .iter()
        .map(|s| s["count"].as_u64().unwrap())
        .sum();
    assert_eq!(counted, 361);
    assert!(suppressed.iter().all(|s| s["clientAddress"] == "127.0.0.1"));
    audit_verify(&text);

    // The offline tools accept the new record kind.
    let log = dir.path().join("audit.log");
    let verified = Command::new(env!("CARGO_BIN_EXE_toolgate"))
        .args(["audit", "verify"])
        .arg(&log)
        .output()
        .unwrap();
    assert!(verified.status.success(), "{verified:?}");
    let replayed = Command::new(env!("CARGO_BIN_EXE_toolgate"))
        .args(["replay", "--format", "json", "--audit"])
        .arg(&log)
        .arg("--policies")
        .arg(dir.path().join("policies"))
        .output()
        .unwrap();
    assert!(replayed.status.success(), "{replayed:?}");
    let report: Value = serde_json::from_slice(&replayed.stdout).unwrap();
    assert_eq!(report["changed"], 0, "{report}");
}

#[tokio::test]
async fn every_401_carries_a_bearer_challenge() {
    let backend = Backend::example().await;
    let h = Harness::start(backend.addr, Options::default()).await;
    let none = h.call("GET", "/logs/orders", None, &[], "").await;
    let wrong = h.call("GET", "/logs/orders", Some("nope"), &[], "").await;
    let mcp = h
        .call(
            "POST",
            "/mcp",
            None,
            &[("accept", "application/json, text/event-stream")],
            r#"{"jsonrpc":"2.0","id":1,"method":"tools/list"}"#,
        )
        .await;
    for r in [&none, &mcp] {
        assert_eq!(r.status, 401, "{}", r.text);
        assert_eq!(r.header("www-authenticate"), "Bearer", "{r:?}");
    }
    // A token was presented and refused: RFC 6750 says so in the challenge.
    assert_eq!(wrong.status, 401, "{}", wrong.text);
    assert_eq!(
        wrong.header("www-authenticate"),
        r#"Bearer error="invalid_token""#
    );
    // The approval API, on the admin port.
    let uri = format!("{}/approvals", h.admin());
    let r = Reply::read(h.client.get(uri.parse().unwrap()).await.unwrap()).await;
    assert_eq!(r.status, 401, "{}", r.text);
    assert_eq!(r.header("www-authenticate"), "Bearer");
    h.stop().await;

    // With OAuth, the MCP endpoint's richer challenge stands (DESIGN §12).
    let h = Harness::start(
        backend.addr,
        Options {
            tweak: Box::new(|s| {
                s.identity.oauth = Some(toolgate::config::OAuth {
                    resource: "https://orders.example/mcp".into(),
                    authorization_servers: vec!["https://auth.example".into()],
                    scopes_supported: vec![],
                    required_scopes: vec![],
                })
            }),
            ..Options::default()
        },
    )
    .await;
    let mcp = h
        .call(
            "POST",
            "/mcp",
            None,
            &[("accept", "application/json, text/event-stream")],
            r#"{"jsonrpc":"2.0","id":1,"method":"tools/list"}"#,
        )
        .await;
    assert_eq!(mcp.status, 401);
    assert!(
        mcp.header("www-authenticate")
            .starts_with("Bearer resource_metadata="),
        "{mcp:?}"
    );
    // Every door of the agent port is the OAuth resource's: REST names the metadata too.
    let rest = h.call("GET", "/logs/orders", None, &[], "").await;
    assert_eq!(
        rest.header("www-authenticate"),
        mcp.header("www-authenticate"),
        "{rest:?}"
    );
    h.stop().await;
}

#[tokio::test]
async fn admin_answers_are_never_cached() {
    let backend = Backend::example().await;
    let h = Harness::start(backend.addr, Options::default()).await;
    for path in [
        "/config",
        "/readyz",
        "/healthz",
        "/metrics",
        "/approvals",
        "/approvals/apr-1",
        "/nowhere",
    ] {
        let uri = format!("{}{path}", h.admin());
        let r = Reply::read(h.client.get(uri.parse().unwrap()).await.unwrap()).await;
        assert_eq!(r.header("cache-control"), "no-store", "{path}: {r:?}");
    }
    h.stop().await;
}
