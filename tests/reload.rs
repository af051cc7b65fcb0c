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
