//! Limits through a real sidecar to a real backend: rate limits, session budgets, loop
//! detection, duplicate suppression and retries (issue 5).
//!
//! Time that state depends on (refills, dedupe windows) runs on the harness's fake clock;
//! the only real waits are backend delays that a test is about (a slow first call).

mod common;

use common::*;
use futures_util::future::join_all;
use serde_json::json;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The contracts of [`mk_backend`]'s tools.
const LIMIT_CONTRACTS: &str = include_str!("fixtures/policies/limits-backend.yaml");

/// Every tool of [`LIMIT_CONTRACTS`], for policies that don't care about grants.
const ALL_TOOLS: &str = "
    - name: read_logs
    - name: get_report
    - name: create_issue
    - name: bulk_create
    - name: charge
    - name: stuck_charge
    - name: flaky_read
    - name: down_read
    - name: flaky_write";

/// A policy for `agent` with extra spec lines (rateLimit, session) and its tools.
fn mk_policy(agent: &str, spec: &str, tools: &str) -> String {
    format!(
        "apiVersion: toolgate.dev/v1alpha1\nkind: AgentPolicy\nmetadata: {{name: {agent}}}\nspec:\n  agents: [{agent}]\n{spec}  tools:{tools}\n"
    )
}

fn mk_options(policies: &[String]) -> Options {
    Options {
        policies: format!("{LIMIT_CONTRACTS}---\n{}", policies.join("---\n")),
        ..Options::default()
    }
}

/// The backend: counts what it receives, numbers what it creates, fails where asked to.
async fn mk_backend() -> Backend {
    let created = Arc::new(AtomicUsize::new(0));
    let flaky = Arc::new(AtomicUsize::new(0));
    Backend::start(Arc::new(move |seen: &Seen| {
        let json = || vec![("content-type", "application/json".to_string())];
        let path = seen.uri.split('?').next().unwrap_or("").to_string();
        let ms = Duration::from_millis;
        let created_json = |ms_delay: u64| {
            let n = created.fetch_add(1, Ordering::SeqCst) + 1;
            (201, json(), format!(r#"{{"id":"OPS-{n}"}}"#), ms(ms_delay))
        };
        match (seen.method.as_str(), path.as_str()) {
            ("POST", "/issues") => created_json(0),
            ("POST", "/batch") => created_json(300),
            ("POST", "/charges") => created_json(1000),
            ("POST", "/stuck") => created_json(2000),
            ("GET", "/flaky") if flaky.fetch_add(1, Ordering::SeqCst) == 0 => {
                (503, vec![], "warming up".into(), ms(150))
            }
            ("GET", "/down") => (503, vec![], "down".into(), ms(100)),
            ("POST", "/flaky-write") => (503, vec![], "down".into(), Duration::ZERO),
            _ => (200, json(), r#"{"ok":true}"#.into(), Duration::ZERO),
        }
    }))
    .await
}

fn count(backend: &Backend, path: &str) -> usize {
    backend
        .seen
        .lock()
        .unwrap()
        .iter()
        .filter(|s| s.uri.split('?').next() == Some(path))
        .count()
}

fn session(id: &str) -> [(&'static str, &str); 1] {
    [("x-toolgate-session", id)]
}

async fn wait_for_version(h: &Harness, version: u64) {
    let control = &h.sidecar.as_ref().unwrap().control;
    for _ in 0..250 {
        if control.snapshot().is_some_and(|s| s.version >= version) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!(
        "policy version {version} never published: {:?}",
        control.errors()
    );
}

#[tokio::test]
async fn bursts_past_the_agent_and_the_tool_limit_are_rate_limited() {
    let backend = mk_backend().await;
    let policy = mk_policy(
        "ops-bot",
        "  rateLimit: {perMinute: 60, burst: 4}\n",
        "
    - name: read_logs
      rateLimit: {perSecond: 1, burst: 2}
    - name: get_report",
    );
    let h = Harness::start(backend.addr, mk_options(&[policy])).await;
    for _ in 0..2 {
        let r = h
            .call("GET", "/logs/orders", Some(OPS_TOKEN), &[], "")
            .await;
        assert_eq!(r.status, 200, "{}", r.text);
    }
    let r = h
        .call("GET", "/logs/orders", Some(OPS_TOKEN), &[], "")
        .await;
    r.assert_refused("RATE_LIMITED", 429);
    assert_eq!(r.json["error"]["retryable"], true);
    assert_eq!(r.json["error"]["recovery"], "retry");
    let wait = r.json["error"]["retryAfterMs"].as_u64().unwrap();
    assert!(wait > 0 && wait <= 1000, "{wait}");
    assert_eq!(r.header("retry-after"), "1");
    assert!(r.text.contains("for read_logs"), "{}", r.text);

    // The tool limit refused without spending the agent's cells: two are left.
    for id in [1, 2] {
        let r = h
            .call("GET", &format!("/reports/{id}"), Some(OPS_TOKEN), &[], "")
            .await;
        assert_eq!(r.status, 200, "{}", r.text);
    }
    let r = h.call("GET", "/reports/3", Some(OPS_TOKEN), &[], "").await;
    r.assert_refused("RATE_LIMITED", 429);
    assert!(
        !r.text.contains("for get_report"),
        "the agent's limit: {}",
        r.text
    );
    assert_eq!(backend.count(), 4, "refused calls never reach the backend");

    // Refills follow the (fake) clock.
    h.clock.advance(Duration::from_secs(60));
    let r = h
        .call("GET", "/logs/orders", Some(OPS_TOKEN), &[], "")
        .await;
    assert_eq!(r.status, 200, "{}", r.text);
    h.stop().await;
}

#[tokio::test]
async fn limiter_state_survives_a_reload_unless_its_quota_changes() {
    let backend = mk_backend().await;
    let with = |rate: &str, extra: &str| {
        mk_policy(
            "ops-bot",
            "",
            &format!("\n    - name: read_logs\n      rateLimit: {rate}{extra}"),
        )
    };
    let h = Harness::start(
        backend.addr,
        mk_options(&[with("{perMinute: 1, burst: 1}", "")]),
    )
    .await;
    let call = || h.call("GET", "/logs/orders", Some(OPS_TOKEN), &[], "");
    assert_eq!(call().await.status, 200);
    call().await.assert_refused("RATE_LIMITED", 429);

    let reload = |policy: String| {
        std::fs::write(h.policy_file(), format!("{LIMIT_CONTRACTS}---\n{policy}")).unwrap()
    };
    reload(with("{perMinute: 1, burst: 1}", "\n    - name: get_report"));
    wait_for_version(&h, 2).await;
    call().await.assert_refused("RATE_LIMITED", 429);

    reload(with("{perMinute: 1, burst: 2}", ""));
    wait_for_version(&h, 3).await;
    assert_eq!(call().await.status, 200, "a changed quota starts afresh");
    h.stop().await;
}

#[tokio::test]
async fn a_session_past_max_calls_is_out_of_budget() {
    let backend = mk_backend().await;
    let limits = "  session: {maxCalls: 3}\n";
    let h = Harness::start(
        backend.addr,
        mk_options(&[
            mk_policy("ops-bot", limits, ALL_TOOLS),
            mk_policy("stranger", limits, ALL_TOOLS),
        ]),
    )
    .await;
    let s1 = session("s-1");
    for path in ["/logs/orders", "/logs/payments", "/reports/1"] {
        let r = h.call("GET", path, Some(OPS_TOKEN), &s1, "").await;
        assert_eq!(r.status, 200, "{}", r.text);
    }
    let r = h.call("GET", "/reports/2", Some(OPS_TOKEN), &s1, "").await;
    r.assert_refused("BUDGET_EXHAUSTED", 429);
    assert_eq!(r.json["error"]["retryable"], false);
    assert_eq!(r.json["error"]["recovery"], "stop");
    assert_eq!(
        r.header("retry-after"),
        "",
        "waiting doesn't refill a budget"
    );
    let mcp = [("mcp-session-id", "s-1")];
    h.call("GET", "/reports/2", Some(OPS_TOKEN), &mcp, "")
        .await
        .assert_refused("BUDGET_EXHAUSTED", 429);

    // Sessions are keyed by agent and session id: another agent's "s-1" is its own.
    let r = h
        .call("GET", "/reports/2", Some(STRANGER_TOKEN), &s1, "")
        .await;
    assert_eq!(r.status, 200, "{}", r.text);
    let r = h
        .call("GET", "/reports/2", Some(OPS_TOKEN), &session("s-2"), "")
        .await;
    assert_eq!(r.status, 200, "{}", r.text);
    // Without a session id, session limits don't apply.
    for _ in 0..5 {
        let r = h.call("GET", "/reports/9", Some(OPS_TOKEN), &[], "").await;
        assert_eq!(r.status, 200, "{}", r.text);
    }
    assert_eq!(backend.count(), 3 + 2 + 5);
    h.stop().await;
}

#[tokio::test]
async fn four_identical_calls_in_a_row_are_a_loop() {
    let backend = mk_backend().await;
    let policy = mk_policy("ops-bot", "  session: {maxRepeats: 3}\n", ALL_TOOLS);
    let h = Harness::start(backend.addr, mk_options(&[policy])).await;
    let s = session("s-1");
    // The same call three ways: defaults filled and key order don't make it another call.
    for path in [
        "/logs/orders",
        "/logs/orders?window_minutes=15",
        "/logs/orders",
    ] {
        let r = h.call("GET", path, Some(OPS_TOKEN), &s, "").await;
        assert_eq!(r.status, 200, "{}", r.text);
    }
    for _ in 0..2 {
        let r = h.call("GET", "/logs/orders", Some(OPS_TOKEN), &s, "").await;
        r.assert_refused("LOOP_DETECTED", 409);
        assert_eq!(r.json["error"]["recovery"], "stop");
    }
    assert_eq!(backend.count(), 3);
    // A different call breaks the streak.
    let r = h
        .call("GET", "/logs/payments", Some(OPS_TOKEN), &s, "")
        .await;
    assert_eq!(r.status, 200, "{}", r.text);
    let r = h.call("GET", "/logs/orders", Some(OPS_TOKEN), &s, "").await;
    assert_eq!(r.status, 200, "{}", r.text);
    // Another session has its own streak.
    let r = h
        .call("GET", "/logs/orders", Some(OPS_TOKEN), &session("s-2"), "")
        .await;
    assert_eq!(r.status, 200, "{}", r.text);
    h.stop().await;
}

#[tokio::test]
async fn fifty_concurrent_identical_calls_reach_the_backend_once() {
    let backend = mk_backend().await;
    let policy = mk_policy("ops-bot", "", ALL_TOOLS);
    let h = Harness::start(backend.addr, mk_options(&[policy])).await;
    let s = session("s-1");
    let calls = (0..50).map(|_| {
        h.call(
            "POST",
            "/batch",
            Some(OPS_TOKEN),
            &s,
            r#"{"name": "nightly", "size": 3}"#,
        )
    });
    let replies = join_all(calls).await;
    assert_eq!(count(&backend, "/batch"), 1);
    for r in &replies {
        assert_eq!(r.status, 201, "{}", r.text);
        assert_eq!(r.json, json!({"id": "OPS-1"}));
        assert_eq!(r.header("x-toolgate-decision"), "allow");
    }
    let replayed = replies
        .iter()
        .filter(|r| r.header("x-toolgate-replayed") == "true")
        .count();
    assert_eq!(replayed, 49, "every duplicate says it is a replay");
    h.stop().await;
}

#[tokio::test]
async fn a_retry_after_a_gateway_timeout_is_never_sent_again() {
    let backend = mk_backend().await;
    let policy = mk_policy("ops-bot", "", ALL_TOOLS);
    let h = Harness::start(backend.addr, mk_options(&[policy])).await;
    let body = r#"{"amount": 100, "currency": "EUR"}"#;
    // timeoutMs 700, the backend takes 1000 ms.
    let r = h.call("POST", "/charges", Some(OPS_TOKEN), &[], body).await;
    r.assert_refused("BACKEND_TIMEOUT", 504);
    assert_eq!(r.json["error"]["retryable"], false);
    assert_eq!(r.json["error"]["recovery"], "stop");
    // The agent retries at once: it joins the call still running and gets its answer.
    let r = h.call("POST", "/charges", Some(OPS_TOKEN), &[], body).await;
    assert_eq!(r.status, 201, "{}", r.text);
    assert_eq!(r.header("x-toolgate-replayed"), "true");
    let again = h.call("POST", "/charges", Some(OPS_TOKEN), &[], body).await;
    assert_eq!(again.json, r.json);
    assert_eq!(count(&backend, "/charges"), 1);

    // timeoutMs 300, the backend takes 2000 ms: the retry waits its own timeout, then is
    // told the outcome is unknown, and is not sent either.
    let r = h.call("POST", "/stuck", Some(OPS_TOKEN), &[], "{}").await;
    r.assert_refused("BACKEND_TIMEOUT", 504);
    let r = h.call("POST", "/stuck", Some(OPS_TOKEN), &[], "{}").await;
    r.assert_refused("BACKEND_TIMEOUT", 504);
    assert_eq!(r.json["error"]["retryable"], false);
    assert_eq!(count(&backend, "/stuck"), 1);
    h.stop().await;
}

#[tokio::test]
async fn duplicates_cost_no_budget_and_expire_with_the_window() {
    let backend = mk_backend().await;
    let policy = mk_policy(
        "ops-bot",
        "  session: {maxCalls: 2, maxRepeats: 1}\n",
        ALL_TOOLS,
    );
    let h = Harness::start(backend.addr, mk_options(&[policy])).await;
    let s = session("s-1");
    let issue = |title: &str| format!(r#"{{"title": "{title}"}}"#);
    let first = h
        .call("POST", "/issues", Some(OPS_TOKEN), &s, &issue("disk full"))
        .await;
    assert_eq!(first.status, 201, "{}", first.text);
    assert_eq!(first.header("x-toolgate-replayed"), "");
    for _ in 0..3 {
        // Same call, other key order and whitespace: a replay, not a loop, not budget.
        let r = h
            .call(
                "POST",
                "/issues",
                Some(OPS_TOKEN),
                &s,
                r#"{ "priority":"low",  "title":"disk full" }"#,
            )
            .await;
        assert_eq!(r.status, 201, "{}", r.text);
        assert_eq!(r.json, first.json);
        assert_eq!(r.header("x-toolgate-replayed"), "true");
    }
    let r = h
        .call("POST", "/issues", Some(OPS_TOKEN), &s, &issue("cpu hot"))
        .await;
    assert_eq!(r.status, 201, "the second call of the budget: {}", r.text);
    h.call("POST", "/issues", Some(OPS_TOKEN), &s, &issue("third"))
        .await
        .assert_refused("BUDGET_EXHAUSTED", 429);
    assert_eq!(count(&backend, "/issues"), 2);

    // After dedupeWindowSeconds (default 600) the same call is a new call. (Without a
    // session here: in s-1 it would now be a repeat, with maxRepeats 1.)
    let call = || h.call("POST", "/issues", Some(OPS_TOKEN), &[], r#"{"title": "x"}"#);
    let a = call().await;
    h.clock.advance(Duration::from_secs(599));
    assert_eq!(call().await.json, a.json, "still inside the window");
    h.clock.advance(Duration::from_secs(1));
    let b = call().await;
    assert_eq!(b.status, 201);
    assert_eq!(b.header("x-toolgate-replayed"), "");
    assert_ne!(b.json, a.json);
    assert_eq!(count(&backend, "/issues"), 4);
    h.stop().await;
}

#[tokio::test]
async fn idempotency_keys_name_the_call() {
    let backend = mk_backend().await;
    let policy = mk_policy("ops-bot", "", ALL_TOOLS);
    let h = Harness::start(backend.addr, mk_options(&[policy])).await;
    let sidecar = &h;
    let keyed = |key: &'static str, title: &'static str| async move {
        let body = format!(r#"{{"title": "{title}"}}"#);
        sidecar
            .call(
                "POST",
                "/issues",
                Some(OPS_TOKEN),
                &[("idempotency-key", key)],
                &body,
            )
            .await
    };
    let first = keyed("k-1", "a").await;
    assert_eq!(first.status, 201);
    let again = keyed("k-1", "a").await;
    assert_eq!(again.json, first.json);
    assert_eq!(again.header("x-toolgate-replayed"), "true");
    let r = keyed("k-1", "b").await;
    r.assert_refused("MALFORMED_REQUEST", 400);
    assert!(r.text.contains("Idempotency-Key"), "{}", r.text);
    // A new key is a new call, even with the same arguments.
    let other = keyed("k-2", "a").await;
    assert_eq!(other.status, 201);
    assert_ne!(other.json, first.json);
    assert_eq!(count(&backend, "/issues"), 2);
    // The backend sees the key too, for its own deduplication.
    assert_eq!(backend.last().headers["idempotency-key"], "k-2");
    h.stop().await;
}

#[tokio::test]
async fn duplicates_still_spend_rate_limit_cells() {
    let backend = mk_backend().await;
    let policy = mk_policy(
        "ops-bot",
        "",
        "\n    - name: create_issue\n      rateLimit: {perMinute: 1, burst: 2}",
    );
    let h = Harness::start(backend.addr, mk_options(&[policy])).await;
    let call = || h.call("POST", "/issues", Some(OPS_TOKEN), &[], r#"{"title": "a"}"#);
    assert_eq!(call().await.status, 201);
    assert_eq!(call().await.header("x-toolgate-replayed"), "true");
    call().await.assert_refused("RATE_LIMITED", 429);
    assert_eq!(count(&backend, "/issues"), 1);
    h.stop().await;
}

#[tokio::test]
async fn idempotent_calls_are_retried_on_503_and_others_never() {
    let backend = mk_backend().await;
    let policy = mk_policy("ops-bot", "", ALL_TOOLS);
    let h = Harness::start(backend.addr, mk_options(&[policy])).await;
    // The first answer is a slow 503; the retry succeeds inside timeoutMs.
    let r = h.call("GET", "/flaky", Some(OPS_TOKEN), &[], "").await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(count(&backend, "/flaky"), 2);

    // Always 503: retries stop when the next attempt can't start inside timeoutMs.
    let started = Instant::now();
    let r = h.call("GET", "/down", Some(OPS_TOKEN), &[], "").await;
    r.assert_refused("BACKEND_UNAVAILABLE", 503);
    let attempts = count(&backend, "/down");
    assert!((2..=4).contains(&attempts), "{attempts} attempts");
    assert!(started.elapsed() < Duration::from_millis(1500));

    // Not idempotent: one attempt. A 503 means it did not run, so the agent may retry.
    let r = h
        .call("POST", "/flaky-write", Some(OPS_TOKEN), &[], "{}")
        .await;
    r.assert_refused("BACKEND_UNAVAILABLE", 503);
    assert_eq!(r.json["error"]["retryable"], true);
    assert_eq!(count(&backend, "/flaky-write"), 1);
    let r = h
        .call("POST", "/flaky-write", Some(OPS_TOKEN), &[], "{}")
        .await;
    r.assert_refused("BACKEND_UNAVAILABLE", 503);
    assert_eq!(r.header("x-toolgate-replayed"), "");
    assert_eq!(count(&backend, "/flaky-write"), 2);
    h.stop().await;
}

#[tokio::test]
async fn rules_read_the_session() {
    let backend = mk_backend().await;
    let policy = mk_policy(
        "ops-bot",
        "",
        r#"
    - name: get_report
      rules:
        - {name: two-reports-per-session, expr: "session.calls < 2"}
    - name: read_logs
      rules:
        - {name: needs-a-session, expr: "session.id != null"}"#,
    );
    let h = Harness::start(backend.addr, mk_options(&[policy])).await;
    let s = session("s-1");
    for id in [1, 2] {
        let r = h
            .call("GET", &format!("/reports/{id}"), Some(OPS_TOKEN), &s, "")
            .await;
        assert_eq!(r.status, 200, "{}", r.text);
    }
    let r = h.call("GET", "/reports/3", Some(OPS_TOKEN), &s, "").await;
    r.assert_refused("POLICY_DENIED", 403);
    assert_eq!(r.json["error"]["rule"], "two-reports-per-session");
    let r = h
        .call("GET", "/logs/orders", Some(OPS_TOKEN), &[], "")
        .await;
    r.assert_refused("POLICY_DENIED", 403);
    assert_eq!(r.json["error"]["rule"], "needs-a-session");
    let r = h.call("GET", "/logs/orders", Some(OPS_TOKEN), &s, "").await;
    assert_eq!(r.status, 200, "{}", r.text);
    h.stop().await;
}

#[tokio::test]
async fn shadow_policies_record_limit_refusals_but_forward() {
    let backend = mk_backend().await;
    let policy = mk_policy(
        "ops-bot",
        "  mode: shadow\n  session: {maxCalls: 1}\n  rateLimit: {perMinute: 1, burst: 2}\n",
        ALL_TOOLS,
    );
    let h = Harness::start(
        backend.addr,
        Options {
            tweak: Box::new(|s| s.policies.allow_shadow = true),
            ..mk_options(&[policy])
        },
    )
    .await;
    let s = session("s-1");
    let r = h.call("GET", "/reports/1", Some(OPS_TOKEN), &s, "").await;
    assert_eq!(r.header("x-toolgate-decision"), "allow");
    let r = h.call("GET", "/reports/2", Some(OPS_TOKEN), &s, "").await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(r.header("x-toolgate-decision"), "shadow-deny");
    assert_eq!(r.header("x-toolgate-code"), "BUDGET_EXHAUSTED");
    let r = h.call("GET", "/reports/3", Some(OPS_TOKEN), &s, "").await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(r.header("x-toolgate-code"), "RATE_LIMITED");
    assert_eq!(backend.count(), 3);
    h.stop().await;
}
