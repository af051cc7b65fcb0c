//! Policy files edited while the sidecar runs: good edits are enforced within a second,
//! broken ones never replace the last good snapshot.

mod common;

use common::*;
use std::time::{Duration, Instant};

/// Polls `call` until it returns `want` (or 2 s pass); returns how long it took.
async fn until_status(h: &Harness, path: &str, want: u16) -> Duration {
    let started = Instant::now();
    while started.elapsed() < Duration::from_secs(2) {
        if h.call("GET", path, Some(OPS_TOKEN), &[], "").await.status == want {
            return started.elapsed();
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    panic!("{path} never answered {want}");
}

#[tokio::test]
async fn an_edit_is_enforced_within_a_second() {
    let backend = Backend::example().await;
    let h = Harness::start(backend.addr, Options::default()).await;
    assert_eq!(
        h.call("GET", "/logs/orders", Some(OPS_TOKEN), &[], "")
            .await
            .status,
        200
    );
    // Revoke read_logs from ops-bot.
    let edited = log_service_policies().replacen("    - name: read_logs\n", "", 1);
    std::fs::write(h.policy_file(), edited).unwrap();
    let took = until_status(&h, "/logs/orders", 403).await;
    assert!(took < Duration::from_secs(1), "took {took:?}");
    let (_, config) = h.get_admin("/config").await;
    assert!(config.contains("\"version\": 2"), "{config}");
    h.stop().await;
}

#[tokio::test]
async fn a_broken_file_keeps_the_last_good_snapshot() {
    let backend = Backend::example().await;
    let h = Harness::start(backend.addr, Options::default()).await;
    // A CEL syntax error in a rule, and separately a YAML syntax error: neither may apply.
    let bad_rule = log_service_policies().replacen(
        "    - name: read_logs\n",
        "    - name: read_logs\n      rules: [{name: broken, expr: 'args.window_minutes <= '}]\n",
        1,
    );
    for broken in [bad_rule, format!("{CONTRACTS}---\nkind: [unclosed")] {
        std::fs::write(h.policy_file(), broken).unwrap();
        tokio::time::sleep(Duration::from_millis(600)).await;
        let r = h
            .call("GET", "/logs/orders", Some(OPS_TOKEN), &[], "")
            .await;
        assert_eq!(
            r.status, 200,
            "the old snapshot must keep serving: {}",
            r.text
        );
    }
    let (_, metrics) = h.get_admin("/metrics").await;
    assert!(
        metrics.contains("toolgate_policy_reload_errors_total 2"),
        "{metrics}"
    );
    assert!(
        metrics.contains("toolgate_policy_synchronized 0"),
        "{metrics}"
    );
    let (_, config) = h.get_admin("/config").await;
    assert!(
        config.contains("policies.yaml"),
        "errors name the file: {config}"
    );
    // Fixing the file recovers.
    std::fs::write(h.policy_file(), log_service_policies()).unwrap();
    tokio::time::sleep(Duration::from_millis(600)).await;
    let (_, metrics) = h.get_admin("/metrics").await;
    assert!(
        metrics.contains("toolgate_policy_synchronized 1"),
        "{metrics}"
    );
    h.stop().await;
}

/// A token file edit that doesn't load (a revocation with a typo) keeps the previous
/// tokens, and says so on `/config` until a good edit lands: not only in a log line.
#[tokio::test]
async fn a_token_file_that_fails_to_reload_is_reported() {
    let backend = Backend::example().await;
    let h = Harness::start(backend.addr, Options::default()).await;
    let identity = || async {
        let (_, text) = h.get_admin("/config").await;
        serde_json::from_str::<serde_json::Value>(&text).unwrap()["identity"]["tokens"].clone()
    };
    assert_eq!(identity().await["synchronized"], true);
    let tokens = h.dir.path().join("tokens.yaml");
    std::fs::write(&tokens, "ops-bot: not-a-digest\n").unwrap();
    let mut reported = serde_json::Value::Null;
    for _ in 0..50 {
        reported = identity().await;
        if reported["synchronized"] == false {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    assert_eq!(reported["synchronized"], false, "{reported}");
    assert!(
        reported["error"].as_str().unwrap().contains("tokens.yaml"),
        "{reported}"
    );
    // The previous tokens still serve.
    let r = h
        .call("GET", "/logs/orders", Some(OPS_TOKEN), &[], "")
        .await;
    assert_eq!(r.status, 200, "{}", r.text);
    h.stop().await;
}
