//! Shared state on Redis (`state.backend: redis`, docs/state.md): two sidecars in front
//! of one backend, sharing one real `redis-server` (or a three-master Redis Cluster),
//! hold rate limits, session budgets, loop detection and never-twice together, and keep
//! serving under the failure policy when Redis goes away.

mod common;

use common::redis::{self, Cluster, Server};
use common::*;
use futures_util::future::join_all;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;
use toolgate::config::StateBackend;

const CONTRACTS: &str = include_str!("fixtures/policies/limits-backend.yaml");

/// ops-bot's policy: read_logs rate-limited (burst 4), sessions of four calls with at
/// most two identical in a row, and the two non-idempotent tools.
fn policy() -> String {
    format!(
        "{CONTRACTS}---
apiVersion: toolgate.dev/v1alpha1
kind: AgentPolicy
metadata: {{name: ops-bot}}
spec:
  agents: [ops-bot]
  session: {{maxCalls: 4, maxRepeats: 2}}
  tools:
    - name: read_logs
      rateLimit: {{perMinute: 60, burst: 4}}
    - name: get_report
    - name: create_issue
    - name: bulk_create
    - name: charge
"
    )
}

/// A backend that counts what it creates; `/batch` answers after 300 ms.
async fn mk_backend() -> (Backend, Arc<AtomicUsize>) {
    let created = Arc::new(AtomicUsize::new(0));
    let counter = created.clone();
    let backend = Backend::start(Arc::new(move |seen: &Seen| {
        let json = vec![("content-type", "application/json".to_string())];
        let path = seen.uri.split('?').next().unwrap_or("");
        let delay = if path == "/batch" { 300 } else { 0 };
        match seen.method.as_str() {
            "POST" => {
                let n = counter.fetch_add(1, Ordering::SeqCst) + 1;
                (
                    201,
                    json,
                    format!(r#"{{"id":"OPS-{n}"}}"#),
                    Duration::from_millis(delay),
                )
            }
            _ => (200, json, r#"{"ok":true}"#.into(), Duration::ZERO),
        }
    }))
    .await;
    (backend, created)
}

/// A sidecar whose state is in the Redis at `url`.
async fn sidecar(backend: &Backend, policies: &str, url: &str, cluster: bool) -> Harness {
    let url = url.to_string();
    Harness::start(
        backend.addr,
        Options {
            policies: policies.to_string(),
            tweak: Box::new(move |s| {
                s.state.backend = StateBackend::Redis;
                s.state.redis.url = url;
                s.state.redis.cluster = cluster;
                s.state.redis.timeout_ms = 500;
            }),
            ..Options::default()
        },
    )
    .await
}

async fn pair(backend: &Backend, policies: &str, url: &str, cluster: bool) -> [Harness; 2] {
    [
        sidecar(backend, policies, url, cluster).await,
        sidecar(backend, policies, url, cluster).await,
    ]
}

const SESSION: &str = "x-toolgate-session";

async fn burst_is_shared(pods: &[Harness; 2]) {
    for i in 0..4 {
        let r = pods[i % 2]
            .call("GET", "/logs/orders", Some(OPS_TOKEN), &[], "")
            .await;
        assert_eq!(r.status, 200, "call {i}: {}", r.text);
    }
    for pod in pods {
        let r = pod
            .call("GET", "/logs/orders", Some(OPS_TOKEN), &[], "")
            .await;
        r.assert_refused("RATE_LIMITED", 429);
        let wait = r.json["error"]["retryAfterMs"].as_u64().unwrap();
        assert!(wait > 0 && wait <= 1000, "{wait}");
    }
}

async fn session_is_shared(pods: &[Harness; 2]) {
    let s = [(SESSION, "task-7")];
    let call = |pod: usize, id: u32| async move {
        let path = format!("/reports/{id}");
        pods[pod].call("GET", &path, Some(OPS_TOKEN), &s, "").await
    };
    assert_eq!(call(0, 1).await.status, 200);
    assert_eq!(call(1, 1).await.status, 200);
    // A third identical call in a row, on either pod, is a loop.
    call(0, 1).await.assert_refused("LOOP_DETECTED", 409);
    assert_eq!(call(1, 2).await.status, 200);
    // The budget of four calls is the session's, whichever pod took them.
    assert_eq!(call(0, 1).await.status, 200);
    call(1, 3).await.assert_refused("BUDGET_EXHAUSTED", 429);
}

async fn never_twice(pods: &[Harness; 2], created: &AtomicUsize) {
    let before = created.load(Ordering::SeqCst);
    let headers = [("idempotency-key", "batch-42")];
    let calls = (0..50).map(|i| {
        pods[i % 2].call(
            "POST",
            "/batch",
            Some(OPS_TOKEN),
            &headers,
            r#"{"items":[1,2,3]}"#,
        )
    });
    let replies = join_all(calls).await;
    assert_eq!(created.load(Ordering::SeqCst), before + 1, "run once");
    let first = &replies[0].text;
    for r in &replies {
        assert_eq!(r.status, 201, "{}", r.text);
        assert_eq!(&r.text, first, "every caller gets the one answer");
    }
    let replayed = replies
        .iter()
        .filter(|r| r.header("x-toolgate-replayed") == "true")
        .count();
    assert_eq!(replayed, 49);
    // Later, on either pod: replayed, still not run again.
    for pod in pods {
        let r = pod
            .call(
                "POST",
                "/batch",
                Some(OPS_TOKEN),
                &headers,
                r#"{"items":[1,2,3]}"#,
            )
            .await;
        assert_eq!((r.status, r.header("x-toolgate-replayed")), (201, "true"));
        assert_eq!(&r.text, first);
    }
    assert_eq!(created.load(Ordering::SeqCst), before + 1);
}

#[tokio::test]
async fn two_sidecars_share_rate_limits_sessions_and_never_twice() {
    if !redis::available() {
        return;
    }
    let server = Server::start(&[]).await;
    let (backend, created) = mk_backend().await;
    let pods = pair(&backend, &policy(), &server.url(), false).await;
    burst_is_shared(&pods).await;
    session_is_shared(&pods).await;
    never_twice(&pods, &created).await;
    let (_, metrics) = pods[0].get_admin("/metrics").await;
    assert!(metrics.contains("toolgate_state_up 1"), "{metrics}");
    assert!(metrics.contains("toolgate_state_duration_seconds_count{op=\"admit\"}"));
    let (_, config) = pods[0].get_admin("/config").await;
    assert!(config.contains("\"backend\": \"redis\""), "{config}");
}

#[tokio::test]
async fn a_redis_cluster_holds_the_same_guarantees() {
    if !redis::available() {
        return;
    }
    let cluster = Cluster::start().await;
    let (backend, created) = mk_backend().await;
    let pods = pair(&backend, &policy(), &cluster.url(), true).await;
    for pod in &pods {
        wait_until_connected(pod).await;
    }
    burst_is_shared(&pods).await;
    session_is_shared(&pods).await;
    never_twice(&pods, &created).await;
}

/// Polls until the sidecar's shared state answers (a cluster connects in the background).
async fn wait_until_connected(pod: &Harness) {
    for _ in 0..200 {
        // A call in a session is admitted through Redis: a round trip that sets `up`.
        let _ = pod
            .call(
                "GET",
                "/reports/0",
                Some(OPS_TOKEN),
                &[(SESSION, "probe")],
                "",
            )
            .await;
        let (_, config) = pod.get_admin("/config").await;
        if config.contains("\"up\": true") {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("the sidecar never connected to Redis");
}

fn audit_states(pod: &Harness) -> Vec<String> {
    let text = std::fs::read_to_string(pod.audit_file()).unwrap_or_default();
    audit_calls(&text)
        .iter()
        .map(|c| {
            format!(
                "{} {} {}",
                c["tool"].as_str().unwrap_or("-"),
                c["code"].as_str().unwrap_or("OK"),
                c["state"].as_str().unwrap_or("-")
            )
        })
        .collect()
}

#[tokio::test]
async fn redis_lost_mid_run_limits_fail_open_claims_fail_closed_then_recover() {
    if !redis::available() {
        return;
    }
    let mut server = Server::start(&[]).await;
    let (backend, created) = mk_backend().await;
    let pods = &pair(&backend, &policy(), &server.url(), false).await;
    let issue = |pod: usize, title: &'static str| async move {
        let body = format!(r#"{{"title":"{title}"}}"#);
        pods[pod]
            .call("POST", "/issues", Some(OPS_TOKEN), &[], &body)
            .await
    };
    assert_eq!(issue(0, "before").await.status, 201);
    let made = created.load(Ordering::SeqCst);

    server.kill();
    // Limits fail open: reads keep being served, and say so in the audit record.
    for i in 0..6 {
        let r = pods[i % 2]
            .call("GET", "/logs/orders", Some(OPS_TOKEN), &[], "")
            .await;
        assert_eq!(r.status, 200, "{}", r.text);
    }
    // A never-twice claim fails closed: nothing reaches the backend.
    for pod in 0..2 {
        let r = issue(pod, "during").await;
        r.assert_refused("STATE_UNAVAILABLE", 503);
        assert_eq!(r.json["error"]["retryable"], true);
        assert_eq!(r.json["error"]["recovery"], "retry");
    }
    assert_eq!(created.load(Ordering::SeqCst), made);
    let (status, _) = pods[0].get_admin("/readyz").await;
    assert_eq!(status, 200, "readiness never depends on Redis");
    let (_, metrics) = pods[0].get_admin("/metrics").await;
    assert!(metrics.contains("toolgate_state_up 0"), "{metrics}");
    assert!(metrics.contains("toolgate_state_errors_total{op=\"admit\"}"));

    // Back (empty, as after a crash): claims work again, and so do limits.
    server.restart().await;
    let mut recovered = false;
    for _ in 0..100 {
        let r = issue(0, "after").await;
        if r.status == 201 {
            recovered = true;
            break;
        }
        r.assert_refused("STATE_UNAVAILABLE", 503);
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(recovered, "the sidecar never reconnected");
    let r = issue(1, "after").await;
    assert_eq!(
        (r.status, r.header("x-toolgate-replayed")),
        (201, "true"),
        "the other pod replays: {}",
        r.text
    );
    assert_eq!(created.load(Ordering::SeqCst), made + 1);
    burst_is_shared(pods).await;

    let states = audit_states(&pods[0]);
    assert!(
        states.contains(&"read_logs OK failed_open".to_string()),
        "{states:?}"
    );
    assert!(states.contains(&"create_issue STATE_UNAVAILABLE -".to_string()));
}

#[tokio::test]
async fn redis_down_at_start_the_sidecar_serves_by_the_failure_policy() {
    if !redis::available() {
        return;
    }
    let (backend, created) = mk_backend().await;
    let url = format!("redis://{}/0", closed_port().await);
    let pod = sidecar(&backend, &policy(), &url, false).await;
    let (status, _) = pod.get_admin("/readyz").await;
    assert_eq!(status, 200);
    let r = pod
        .call("GET", "/logs/orders", Some(OPS_TOKEN), &[], "")
        .await;
    assert_eq!(r.status, 200, "{}", r.text);
    let r = pod
        .call("POST", "/issues", Some(OPS_TOKEN), &[], r#"{"title":"x"}"#)
        .await;
    r.assert_refused("STATE_UNAVAILABLE", 503);
    assert_eq!(created.load(Ordering::SeqCst), 0);
    // A cluster seed that never answers: the same.
    let pod = sidecar(&backend, &policy(), &url, true).await;
    let r = pod
        .call("POST", "/issues", Some(OPS_TOKEN), &[], r#"{"title":"x"}"#)
        .await;
    r.assert_refused("STATE_UNAVAILABLE", 503);
    assert_eq!(created.load(Ordering::SeqCst), 0);
}

/// create_issue with the idempotency key `k1`.
async fn issue_k1(pod: &Harness) -> Reply {
    let key = [("idempotency-key", "k1")];
    pod.call("POST", "/issues", Some(OPS_TOKEN), &key, r#"{"title":"x"}"#)
        .await
}

#[tokio::test]
async fn a_wrong_password_or_garbage_under_our_keys_never_crashes() {
    if !redis::available() {
        return;
    }
    let (backend, created) = mk_backend().await;
    let server = Server::start(&["--requirepass", "s3cret"]).await;
    let wrong = format!("redis://:nope@127.0.0.1:{}/0", server.port);
    let pod = sidecar(&backend, &policy(), &wrong, false).await;
    let r = pod
        .call("POST", "/issues", Some(OPS_TOKEN), &[], r#"{"title":"x"}"#)
        .await;
    r.assert_refused("STATE_UNAVAILABLE", 503);
    assert!(
        !r.text.contains("s3cret") && !r.text.contains("nope"),
        "{}",
        r.text
    );
    assert_eq!(created.load(Ordering::SeqCst), 0);

    // The right one from a file (a mounted Secret), with a trailing newline.
    let dir = tempfile::tempdir().unwrap();
    let secret = dir.path().join("password");
    std::fs::write(&secret, "s3cret\n").unwrap();
    let url = format!("redis://127.0.0.1:{}/0", server.port);
    let secret_path = secret.clone();
    let pod = Harness::start(
        backend.addr,
        Options {
            policies: policy(),
            tweak: Box::new(move |s| {
                s.state.backend = StateBackend::Redis;
                s.state.redis.url = url;
                s.state.redis.password_file = Some(secret_path);
                s.state.redis.timeout_ms = 500;
            }),
            ..Options::default()
        },
    )
    .await;
    let session = [(SESSION, "g1")];
    let r = pod
        .call("GET", "/reports/1", Some(OPS_TOKEN), &session, "")
        .await;
    assert_eq!(r.status, 200, "{}", r.text);

    // redis-cli with the password.
    let cli = |args: &[&str]| {
        let mut all = vec!["-a", "s3cret", "--no-auth-warning"];
        all.extend_from_slice(args);
        server.cli(&all)
    };
    // Whatever is found under our keys, of whatever type, reads as absent.
    let keys = cli(&["keys", "toolgate:*"]);
    assert!(keys.contains("toolgate:{ops-bot}:session:g1"), "{keys}");
    cli(&["set", "toolgate:{ops-bot}:session:g1", "garbage"]);
    for key in keys.lines() {
        if key.contains(":rate:") {
            cli(&["hset", key, "x", "y"]);
        }
    }
    let r = pod
        .call("GET", "/reports/1", Some(OPS_TOKEN), &session, "")
        .await;
    assert_eq!(r.status, 200, "{}", r.text);
    let r = pod
        .call("GET", "/logs/orders", Some(OPS_TOKEN), &[], "")
        .await;
    assert_eq!(r.status, 200, "{}", r.text);
    // A claim holding another version's value, or ours damaged: the call is not run
    // on it, and never crashes the sidecar.
    let r = issue_k1(&pod).await;
    assert_eq!(r.status, 201, "{}", r.text);
    let keys = cli(&["keys", "toolgate:*:once:*"]);
    let claim = keys.lines().next().expect("a claim key");
    cli(&["set", claim, "tg1|R|damaged"]);
    let r = issue_k1(&pod).await;
    assert_eq!(
        r.status, 201,
        "this pod's own table still replays: {}",
        r.text
    );
    // Another pod has only the damaged claim to go by: an error, and nothing run.
    let url = format!("redis://:s3cret@127.0.0.1:{}/0", server.port);
    let other = sidecar(&backend, &policy(), &url, false).await;
    let r = issue_k1(&other).await;
    r.assert_refused("STATE_UNAVAILABLE", 503);
    assert_eq!(created.load(Ordering::SeqCst), 1);
}

/// A refund, one per order whoever asks (`dedupeKey`), granted to ops-bot and stranger.
fn refund_policies() -> String {
    let grant = |agent: &str| {
        format!(
            "apiVersion: toolgate.dev/v1alpha1\nkind: AgentPolicy\nmetadata: {{name: {agent}}}\nspec:\n  agents: [{agent}]\n  tools: [{{name: refund}}]\n"
        )
    };
    format!(
        "apiVersion: toolgate.dev/v1alpha1
kind: ToolContract
metadata: {{name: refund}}
spec:
  tool: refund
  http: {{method: POST, path: /refunds}}
  idempotent: false
  dedupeKey: args.order_id
  input:
    type: object
    required: [order_id, amount]
    properties:
      order_id: {{type: string}}
      amount: {{type: integer}}
---
{}---
{}",
        grant("ops-bot"),
        grant("stranger")
    )
}

/// `pods[0]` and `pods[1]` may be one sidecar (memory) or two sharing Redis.
async fn one_action_one_caller(pods: [&Harness; 2], created: &AtomicUsize) {
    let before = created.load(Ordering::SeqCst);
    let s1 = [(SESSION, "s1")];
    let first = pods[0]
        .call(
            "POST",
            "/refunds",
            Some(OPS_TOKEN),
            &s1,
            r#"{"order_id":"A-1","amount":5}"#,
        )
        .await;
    assert_eq!(first.status, 201, "{}", first.text);
    // The same agent and session, other arguments, other pod: the first result, replayed.
    let again = pods[1]
        .call(
            "POST",
            "/refunds",
            Some(OPS_TOKEN),
            &s1,
            r#"{"order_id":"A-1","amount":7}"#,
        )
        .await;
    assert_eq!(
        (again.status, again.header("x-toolgate-replayed")),
        (201, "true")
    );
    assert_eq!(again.text, first.text);
    // Anyone else: refused, told which call ran it, nothing forwarded.
    for (pod, token, session) in [(1, STRANGER_TOKEN, "s1"), (0, OPS_TOKEN, "s2")] {
        let r = pods[pod]
            .call(
                "POST",
                "/refunds",
                Some(token),
                &[(SESSION, session)],
                r#"{"order_id":"A-1","amount":5}"#,
            )
            .await;
        r.assert_refused("DUPLICATE_CALL", 409);
        assert_eq!(r.json["error"]["retryable"], false);
        assert_eq!(r.json["error"]["recovery"], "stop");
        let first_trace = r.json["error"]["details"][0]["traceId"].as_str().unwrap();
        assert_eq!(first_trace.len(), 32, "{}", r.text);
        assert_ne!(first_trace, r.json["error"]["traceId"].as_str().unwrap());
    }
    // Another order is another action.
    let r = pods[1]
        .call(
            "POST",
            "/refunds",
            Some(STRANGER_TOKEN),
            &[],
            r#"{"order_id":"A-2","amount":5}"#,
        )
        .await;
    assert_eq!(r.status, 201, "{}", r.text);
    assert_eq!(created.load(Ordering::SeqCst), before + 2);
}

#[tokio::test]
async fn a_business_key_runs_once_per_action_in_memory() {
    let (backend, created) = mk_backend().await;
    let pod = Harness::start(
        backend.addr,
        Options {
            policies: refund_policies(),
            ..Options::default()
        },
    )
    .await;
    one_action_one_caller([&pod, &pod], &created).await;
}

#[tokio::test]
async fn a_business_key_runs_once_per_action_across_pods() {
    if !redis::available() {
        return;
    }
    let server = Server::start(&[]).await;
    let (backend, created) = mk_backend().await;
    let pods = pair(&backend, &refund_policies(), &server.url(), false).await;
    one_action_one_caller([&pods[0], &pods[1]], &created).await;
}

#[tokio::test]
async fn a_duplicate_of_a_call_whose_pod_died_is_never_run() {
    if !redis::available() {
        return;
    }
    let server = Server::start(&[]).await;
    let (backend, created) = mk_backend().await;
    let pod = sidecar(&backend, &policy(), &server.url(), false).await;
    let headers = [("idempotency-key", "dead-1")];
    let body = r#"{"amount":5}"#;
    let r = pod
        .call("POST", "/charges", Some(OPS_TOKEN), &headers, body)
        .await;
    assert_eq!(r.status, 201, "{}", r.text);
    // As a pod that died mid-call leaves it: the claim, never its result.
    let claim = server.cli(&["keys", "toolgate:*:once:*"]);
    let claim = claim.lines().next().expect("a claim");
    let value = server.cli(&["get", claim]);
    let fingerprint = &value[6..38];
    server.cli(&[
        "set",
        claim,
        &format!("tg1|P|{fingerprint}|deadpod:1"),
        "PX",
        "60000",
    ]);

    let other = sidecar(&backend, &policy(), &server.url(), false).await;
    let started = std::time::Instant::now();
    let r = other
        .call("POST", "/charges", Some(OPS_TOKEN), &headers, body)
        .await;
    r.assert_refused("BACKEND_TIMEOUT", 504);
    assert_eq!(r.json["error"]["retryable"], false);
    assert_eq!(r.json["error"]["recovery"], "stop");
    // Waited the contract's timeout (charge: 700 ms) for the result, then gave up.
    let waited = started.elapsed();
    assert!(waited >= Duration::from_millis(650), "{waited:?}");
    assert_eq!(created.load(Ordering::SeqCst), 1, "never run twice");
}

/// Admits `call` with its never-twice claim (a window of a minute).
async fn claimed(
    shared: &toolgate::state::Shared,
    call: &toolgate::limits::Call<'_>,
    limits: &toolgate::state::admit::Limits<'_>,
) -> toolgate::state::admit::Admission {
    let claim = shared.claim_for(call);
    let window = Duration::from_secs(60);
    shared
        .admit(call, limits, Some((&claim, window)))
        .await
        .unwrap()
}

/// The admission script's logic, called directly: GCRA cells and waits, the tool limit
/// before the agent's, shadow overrides, session counting, claims and joins.
#[tokio::test]
async fn the_admission_script_decides_as_the_ledger_does() {
    use toolgate::crd::{RateLimit, SessionLimits};
    use toolgate::limits::Call;
    use toolgate::policy::quota::Quota;
    use toolgate::state::admit::{Admission, Limits};
    use toolgate::state::record::Held;
    use toolgate::state::Shared;
    use toolgate::vocab::{Args, Code};

    if !redis::available() {
        return;
    }
    let server = Server::start(&[]).await;
    let settings = toolgate::config::Redis {
        url: server.url(),
        timeout_ms: 500,
        ..Default::default()
    };
    let shared = Shared::start(&settings, Default::default()).unwrap();
    let quota = |per_second, burst| {
        Quota::compile(
            "q",
            &RateLimit {
                per_second: Some(per_second),
                per_minute: None,
                burst: Some(burst),
            },
        )
        .unwrap()
    };
    let (tool_quota, agent_quota) = (quota(1, 2), quota(10, 3));
    let session = SessionLimits {
        max_calls: Some(3),
        max_repeats: Some(1),
        ..SessionLimits::default()
    };
    let args = Args::from(serde_json::json!({"n": 1}));
    let other = Args::from(serde_json::json!({"n": 2}));
    let limits = Limits {
        tool_quota: Some(&tool_quota),
        agent_quota: Some(&agent_quota),
        session: Some(&session),
        shadow: false,
        session_idle: Duration::from_secs(60),
    };
    let code = |a: Admission| match a {
        Admission::Admitted { overridden: None } => "ok".to_string(),
        Admission::Admitted {
            overridden: Some(r),
        } => format!("shadow {}", r.code),
        Admission::Refused(r) => r.code.to_string(),
        Admission::Joined { .. } => "joined".to_string(),
    };
    let call = |args| Call::new("bot", Some("s"), "t", args, None);
    let admit = |c, l| {
        let shared = &shared;
        async move { code(shared.admit(&c, &l, None).await.unwrap()) }
    };
    assert_eq!(admit(call(&args), limits).await, "ok");
    // The same call again: a loop (maxRepeats 1), not counted.
    assert_eq!(admit(call(&args), limits).await, "LOOP_DETECTED");
    // The tool's burst of 2 is spent (the loop's cell too): the agent's 3 are not.
    let r = shared.admit(&call(&other), &limits, None).await.unwrap();
    let Admission::Refused(r) = r else {
        panic!("{r:?}")
    };
    assert_eq!(r.code, Code::RateLimited);
    let wait = r.retry_after_ms.unwrap();
    assert!(wait > 0 && wait <= 1000, "{wait}");
    assert!(r.message.contains("for t"), "{}", r.message);
    // Without the tool limit: the agent's last cell, then its limit.
    let agent_only = Limits {
        tool_quota: None,
        ..limits
    };
    assert_eq!(admit(call(&other), agent_only).await, "ok");
    let r = admit(call(&args), agent_only).await;
    assert_eq!(r, "RATE_LIMITED");
    // A shadow policy is told what it would have refused, and the call is admitted;
    // the session's third call is counted.
    let shadow = Limits {
        shadow: true,
        ..agent_only
    };
    assert_eq!(admit(call(&args), shadow).await, "shadow RATE_LIMITED");
    let unlimited = Limits {
        tool_quota: None,
        agent_quota: None,
        ..limits
    };
    assert_eq!(admit(call(&other), unlimited).await, "BUDGET_EXHAUSTED");

    // Claims: the first takes it, an identical call joins it, another key is free.
    let idem = |key| Call::new("bot", None, "t", &args, Some(key));
    let first = idem("k1");
    let a = claimed(&shared, &first, &unlimited).await;
    assert!(matches!(a, Admission::Admitted { .. }), "{a:?}");
    let again = idem("k1");
    let a = claimed(&shared, &again, &unlimited).await;
    assert!(
        matches!(
            a,
            Admission::Joined {
                held: Held::Running { .. }
            }
        ),
        "{a:?}"
    );
    // The same key for other arguments is refused, as in memory.
    let reused = Call::new("bot", None, "t", &other, Some("k1"));
    let a = claimed(&shared, &reused, &unlimited).await;
    assert!(
        matches!(a, Admission::Refused(ref r) if r.code == Code::MalformedRequest),
        "{a:?}"
    );
}

#[tokio::test]
async fn a_slow_redis_or_a_tls_mismatch_is_unavailable_not_a_hang() {
    if !redis::available() {
        return;
    }
    // DEBUG SLEEP makes it slow on demand (Redis 7 turns DEBUG off by default).
    let server = Server::start(&["--enable-debug-command", "yes"]).await;
    let (backend, created) = mk_backend().await;
    let url = server.url();
    let pod = Harness::start(
        backend.addr,
        Options {
            policies: policy(),
            tweak: Box::new(move |s| {
                s.state.backend = StateBackend::Redis;
                s.state.redis.url = url;
                s.state.redis.timeout_ms = 100;
            }),
            ..Options::default()
        },
    )
    .await;
    wait_until_connected(&pod).await;
    // Redis busy for 2 s: every round trip runs past timeoutMs.
    let port = server.port;
    let sleeper = tokio::task::spawn_blocking(move || redis::cli(port, &["debug", "sleep", "2"]));
    tokio::time::sleep(Duration::from_millis(200)).await;
    let started = std::time::Instant::now();
    let r = pod
        .call("GET", "/logs/orders", Some(OPS_TOKEN), &[], "")
        .await;
    assert_eq!(r.status, 200, "limits fail open: {}", r.text);
    let r = pod
        .call(
            "POST",
            "/issues",
            Some(OPS_TOKEN),
            &[],
            r#"{"title":"slow"}"#,
        )
        .await;
    r.assert_refused("STATE_UNAVAILABLE", 503);
    assert!(
        started.elapsed() < Duration::from_millis(1500),
        "bounded by timeoutMs, not by Redis: {:?}",
        started.elapsed()
    );
    sleeper.await.unwrap();
    assert_eq!(created.load(Ordering::SeqCst), 0);

    // rediss:// against a server that doesn't speak TLS: unavailable, never forwarded.
    let url = format!("rediss://127.0.0.1:{}/0", server.port);
    let tls = sidecar(&backend, &policy(), &url, false).await;
    let r = tls
        .call(
            "POST",
            "/issues",
            Some(OPS_TOKEN),
            &[],
            r#"{"title":"tls"}"#,
        )
        .await;
    r.assert_refused("STATE_UNAVAILABLE", 503);
    assert_eq!(created.load(Ordering::SeqCst), 0);
}

/// `toolgate_state_up` an alert can trust: 1 with the memory backend (nothing to lose);
/// with Redis, it follows Redis on an idle sidecar too (the link's probe), so an outage
/// shows with no call to notice it, and a quiet pod whose Redis is fine is not down.
#[tokio::test]
async fn state_up_follows_redis_without_calls_and_is_1_in_memory() {
    let (backend, _) = mk_backend().await;
    let memory = Harness::start(backend.addr, Options::default()).await;
    let (_, metrics) = memory.get_admin("/metrics").await;
    assert!(metrics.contains("toolgate_state_up 1\n"), "{metrics}");
    memory.stop().await;
    if !redis::available() {
        return;
    }
    let mut server = Server::start(&[]).await;
    let pod = sidecar(&backend, &policy(), &server.url(), false).await;
    let wait_for = |want: &'static str| {
        let pod = &pod;
        async move {
            // The probe runs at start, then every 5 s.
            for _ in 0..150 {
                if state_up(pod).await.as_deref() == Some(want) {
                    return;
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            panic!("toolgate_state_up never became {want}");
        }
    };
    wait_for("1").await;
    server.kill();
    wait_for("0").await;
    server.restart().await;
    wait_for("1").await;
    let (_, metrics) = pod.get_admin("/metrics").await;
    assert!(
        metrics.contains("toolgate_state_errors_total{op=\"probe\"}"),
        "{metrics}"
    );
    pod.stop().await;
}

/// The value `toolgate_state_up` has on `pod`'s `/metrics`.
async fn state_up(pod: &Harness) -> Option<String> {
    let (_, metrics) = pod.get_admin("/metrics").await;
    metrics
        .lines()
        .find_map(|l| l.strip_prefix("toolgate_state_up "))
        .map(str::to_string)
}
