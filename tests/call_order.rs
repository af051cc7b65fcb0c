//! DESIGN §16 over real sockets: call order (`requires`), task-bound session limits
//! (`requireTask`, `maxSame`, limits keyed on the task token's task id) and spend
//! budgets (`cost`, `budget`), on REST and MCP, with the state in memory and in a real
//! `redis-server` shared by two sidecars.

#[path = "common/mcp_backend.rs"]
mod backend;
mod common;

use backend::McpBackend;
use common::keys::{jwks, now, SigningKey};
use common::*;
use serde_json::{json, Value};
use std::sync::Arc;
use std::time::Duration;
use toolgate::config::StateBackend;

/// The refund flow: look an order up, then refund it (at most 100 a day, in Berlin).
const REFUNDS: &str = r#"
apiVersion: toolgate.dev/v1alpha1
kind: ToolContract
metadata: {name: get-order}
spec:
  tool: get_order
  http: {method: GET, path: "/orders/{order_id}"}
  input: {type: object, required: [order_id], properties: {order_id: {type: string}}}
---
apiVersion: toolgate.dev/v1alpha1
kind: ToolContract
metadata: {name: refund}
spec:
  tool: refund
  http: {method: POST, path: /refunds}
  input:
    type: object
    additionalProperties: false
    required: [order_id, amount]
    properties: {order_id: {type: string}, amount: {type: integer, minimum: 1}}
  cost: args.amount
  captureArguments: true
---
apiVersion: toolgate.dev/v1alpha1
kind: ToolContract
metadata: {name: ping}
spec: {tool: ping, http: {method: GET, path: /ping}}
---
apiVersion: toolgate.dev/v1alpha1
kind: AgentPolicy
metadata: {name: ops-bot}
spec:
  agents: [ops-bot]
  session: {maxCalls: 12, maxSame: 3}
  tools:
    - name: get_order
    - name: ping
      budget: {perDay: 2}
    - name: refund
      requires:
        - tool: get_order
          match: "prior.args.order_id == args.order_id"
          within: session
          maxAgeSeconds: 1800
      budget: {perDay: 100, timezone: Europe/Berlin}
---
apiVersion: toolgate.dev/v1alpha1
kind: AgentPolicy
metadata: {name: stranger}
spec:
  agents: [stranger]
  session: {maxCalls: 3, requireTask: true}
  tools:
    - name: ping
"#;

/// The shop: orders A and B exist, anything else is 404; refunds succeed.
async fn shop() -> Backend {
    Backend::start(Arc::new(|seen: &Seen| {
        let json = ("content-type", "application/json".to_string());
        let path = seen.uri.split('?').next().unwrap_or("");
        match (seen.method.as_str(), path) {
            ("GET", "/orders/A") | ("GET", "/orders/B") => (
                200,
                vec![json],
                r#"{"status":"delivered"}"#.into(),
                Duration::ZERO,
            ),
            ("GET", p) if p.starts_with("/orders/") => (
                404,
                vec![json],
                r#"{"error":"no such order"}"#.into(),
                Duration::ZERO,
            ),
            _ => (200, vec![json], "{}".into(), Duration::ZERO),
        }
    }))
    .await
}

fn refunds_seen(backend: &Backend) -> usize {
    let seen = backend.seen.lock().unwrap();
    seen.iter()
        .filter(|s| s.uri.starts_with("/refunds"))
        .count()
}

async fn get_order(h: &Harness, id: &str, session: &str) -> Reply {
    let path = format!("/orders/{id}");
    h.call(
        "GET",
        &path,
        Some(OPS_TOKEN),
        &[("x-toolgate-session", session)],
        "",
    )
    .await
}

async fn refund(h: &Harness, id: &str, amount: u64, session: &str) -> Reply {
    let body = json!({"order_id": id, "amount": amount}).to_string();
    h.call(
        "POST",
        "/refunds",
        Some(OPS_TOKEN),
        &[("x-toolgate-session", session)],
        &body,
    )
    .await
}

fn assert_call_first(r: &Reply) {
    r.assert_refused("CALL_ORDER_VIOLATION", 409);
    assert_eq!(r.json["error"]["recovery"], "call_first", "{}", r.text);
    assert_eq!(r.json["error"]["retryable"], false);
    assert_eq!(
        r.json["error"]["details"],
        json!([{"requires": "get_order"}])
    );
}

/// The refund flow on one sidecar, or across the two of `pair` (each call on the other).
async fn refund_flow(first: &Harness, second: &Harness, backend: &Backend) {
    // Nothing was looked up: refused, nothing sent.
    assert_call_first(&refund(second, "A", 10, "s1").await);
    // Another order looked up, or the order looked up and not found: still refused.
    assert_eq!(get_order(first, "B", "s1").await.status, 200);
    assert_call_first(&refund(second, "A", 10, "s1").await);
    assert_eq!(get_order(first, "Z", "s1").await.status, 404);
    assert_call_first(&refund(second, "Z", 10, "s1").await);
    assert_eq!(refunds_seen(backend), 0);
    // Looked up in this session: the refund of that order runs.
    assert_eq!(get_order(first, "A", "s1").await.status, 200);
    let r = refund(second, "A", 60, "s1").await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(refunds_seen(backend), 1);
    // Another session saw no lookup.
    assert_call_first(&refund(second, "A", 10, "s2").await);
    // The day's budget is 100: 60 spent, 50 more is refused until the Berlin midnight.
    let r = refund(second, "A", 50, "s1").await;
    r.assert_refused("BUDGET_EXHAUSTED", 429);
    let wait = r.json["error"]["retryAfterMs"].as_u64().unwrap();
    assert!(wait > 0 && wait <= 25 * 3600 * 1000, "{wait}");
    assert!(!r.header("retry-after").is_empty());
    assert!(
        r.json["error"]["message"].as_str().unwrap().contains("40"),
        "{}",
        r.text
    );
    // What is left can be spent, on either sidecar.
    let r = refund(first, "A", 40, "s1").await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(refunds_seen(backend), 2);
}

#[tokio::test]
async fn a_refund_needs_its_order_looked_up_first_rest_memory() {
    let backend = shop().await;
    let h = Harness::start(
        backend.addr,
        Options {
            policies: REFUNDS.into(),
            ..Options::default()
        },
    )
    .await;
    refund_flow(&h, &h, &backend).await;
    let dir = h.stop_keeping_files().await;
    let log = std::fs::read_to_string(dir.path().join("audit.log")).unwrap();
    let calls = audit_calls(&log);
    let codes: Vec<&str> = calls.iter().filter_map(|c| c["code"].as_str()).collect();
    assert!(codes.contains(&"CALL_ORDER_VIOLATION") && codes.contains(&"BUDGET_EXHAUSTED"));
}

#[tokio::test]
async fn a_cycle_is_a_loop_with_max_same() {
    let backend = shop().await;
    let h = Harness::start(
        backend.addr,
        Options {
            policies: REFUNDS.into(),
            ..Options::default()
        },
    )
    .await;
    // A, B, A, B, A, B: never the same call twice in a row, three times each.
    for _ in 0..3 {
        assert_eq!(get_order(&h, "A", "loop").await.status, 200);
        assert_eq!(get_order(&h, "B", "loop").await.status, 200);
    }
    let r = get_order(&h, "A", "loop").await;
    r.assert_refused("LOOP_DETECTED", 409);
    assert!(r.text.contains("maxSame"), "{}", r.text);
    assert_eq!(get_order(&h, "A", "another").await.status, 200);
    h.stop().await;
}

/// The shared-state pair: two sidecars on one Redis.
async fn redis_pair(backend: &Backend, url: &str) -> [Harness; 2] {
    let mut pair = Vec::new();
    for _ in 0..2 {
        let url = url.to_string();
        pair.push(
            Harness::start(
                backend.addr,
                Options {
                    policies: REFUNDS.into(),
                    tweak: Box::new(move |s| {
                        s.state.backend = StateBackend::Redis;
                        s.state.redis.url = url;
                        s.state.redis.timeout_ms = 500;
                    }),
                    ..Options::default()
                },
            )
            .await,
        );
    }
    pair.try_into().ok().unwrap()
}

#[tokio::test]
async fn call_order_and_budgets_hold_across_replicas_on_redis() {
    if !common::redis::available() {
        return;
    }
    let server = common::redis::Server::start(&[]).await;
    let backend = shop().await;
    let [a, b] = redis_pair(&backend, &server.url()).await;
    // Looked up on one replica, refunded on the other; the budget is one for both.
    refund_flow(&a, &b, &backend).await;
    // An idempotent call without a session is charged too, once for both replicas.
    for h in [&a, &b] {
        let r = h.call("GET", "/ping", Some(OPS_TOKEN), &[], "").await;
        assert_eq!(r.status, 200, "{}", r.text);
    }
    a.call("GET", "/ping", Some(OPS_TOKEN), &[], "")
        .await
        .assert_refused("BUDGET_EXHAUSTED", 429);
    // maxSame counts on both replicas together.
    for h in [&a, &b, &a] {
        assert_eq!(get_order(h, "B", "cycle").await.status, 200);
    }
    get_order(&b, "B", "cycle")
        .await
        .assert_refused("LOOP_DETECTED", 409);
    a.stop().await;
    b.stop().await;
}

/// Runs `test` with the state in memory, then on a real `redis-server` if this machine
/// has one (its URL).
async fn in_memory_and_on_redis<F, Fut>(test: F)
where
    F: Fn(Option<String>) -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    test(None).await;
    if common::redis::available() {
        let server = common::redis::Server::start(&[]).await;
        test(Some(server.url())).await;
    }
}

/// A spend budget pays for every call the backend got, and only for those: a refund it
/// answered with a 503 stays charged (a proxy in front of a backend that acted answers
/// 503 too), a ping it never got (nothing listened) is given back, so the day's budget
/// is whole when the backend comes back.
async fn budgets_are_given_back_when_nothing_ran(state: Option<String>) {
    let turned_away = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let count = turned_away.clone();
    let refunds = Backend::start(Arc::new(move |seen: &Seen| {
        let json = ("content-type", "application/json".to_string());
        if seen.uri.starts_with("/refunds")
            && count.fetch_add(1, std::sync::atomic::Ordering::SeqCst) < 1
        {
            return (503, vec![json], "{}".into(), Duration::ZERO);
        }
        (
            200,
            vec![json],
            r#"{"status":"delivered"}"#.into(),
            Duration::ZERO,
        )
    }))
    .await;
    // Nothing listens where the pings go until the end.
    let dead = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let down = dead.local_addr().unwrap();
    drop(dead);
    let start = |upstream| {
        let url = state.clone();
        Harness::start(
            upstream,
            Options {
                policies: REFUNDS.into(),
                tweak: Box::new(move |s| {
                    if let Some(url) = url {
                        s.state.backend = StateBackend::Redis;
                        s.state.redis.url = url;
                        s.state.redis.timeout_ms = 500;
                    }
                }),
                ..Options::default()
            },
        )
    };
    let h = start(refunds.addr).await;
    assert_eq!(get_order(&h, "A", "s").await.status, 200);
    // A refund of 61 (of 100 a day) answered 503: charged all the same.
    refund(&h, "A", 61, "s")
        .await
        .assert_refused("BACKEND_UNAVAILABLE", 503);
    refund(&h, "A", 40, "s")
        .await
        .assert_refused("BUDGET_EXHAUSTED", 429);
    let r = refund(&h, "A", 39, "s").await;
    assert_eq!(r.status, 200, "{}", r.text);
    h.stop().await;
    // Pings (2 a day) to a backend that isn't there, then to one that is.
    let p = start(down).await;
    for _ in 0..3 {
        let r = p.call("GET", "/ping", Some(OPS_TOKEN), &[], "").await;
        r.assert_refused("BACKEND_UNAVAILABLE", 503);
    }
    let up = Backend::start_on(down, refunds_handler()).await;
    for _ in 0..2 {
        let r = p.call("GET", "/ping", Some(OPS_TOKEN), &[], "").await;
        assert_eq!(r.status, 200, "{}", r.text);
    }
    p.call("GET", "/ping", Some(OPS_TOKEN), &[], "")
        .await
        .assert_refused("BUDGET_EXHAUSTED", 429);
    assert_eq!(up.seen.lock().unwrap().len(), 2);
    p.stop().await;
}

fn refunds_handler() -> Handler {
    Arc::new(|_: &Seen| {
        let json = ("content-type", "application/json".to_string());
        (200, vec![json], "{}".into(), Duration::ZERO)
    })
}

#[tokio::test]
async fn budgets_are_given_back_when_nothing_ran_in_memory_and_on_redis() {
    in_memory_and_on_redis(budgets_are_given_back_when_nothing_ran).await;
}

/// A sidecar that trusts `orchestrator`'s task tokens.
async fn with_tasks(upstream: std::net::SocketAddr, policies: &str, key: &SigningKey) -> Harness {
    with_tasks_on(upstream, policies, key, None).await
}

/// [`with_tasks`], its state on the Redis at `redis` if given.
async fn with_tasks_on(
    upstream: std::net::SocketAddr,
    policies: &str,
    key: &SigningKey,
    redis: Option<&str>,
) -> Harness {
    let url = redis.map(str::to_string);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("task-jwks.json");
    std::fs::write(&path, jwks(&[key])).unwrap();
    let h = Harness::start(
        upstream,
        Options {
            policies: policies.into(),
            tweak: Box::new(move |s| {
                s.identity.task_issuers = vec![toolgate::config::TaskIssuer {
                    issuer: "orchestrator".into(),
                    jwks: Some(path.into()),
                    discovery: false,
                    audience: None,
                    require_agent: true,
                }];
                if let Some(url) = url {
                    s.state.backend = StateBackend::Redis;
                    s.state.redis.url = url;
                    s.state.redis.timeout_ms = 500;
                }
            }),
            ..Options::default()
        },
    )
    .await;
    // The key file is read at start.
    drop(dir);
    h
}

fn task(key: &SigningKey, agent: &str, claims: Value) -> String {
    let mut all = json!({"iss": "orchestrator", "exp": now() + 300, "agent": agent});
    all.as_object_mut()
        .unwrap()
        .extend(claims.as_object().unwrap().clone());
    key.sign(&all)
}

#[tokio::test]
async fn a_task_token_binds_session_limits_to_its_task() {
    let key = SigningKey::ec("o-ec");
    let backend = shop().await;
    let h = with_tasks(backend.addr, REFUNDS, &key).await;
    let t1 = task(&key, "ops-bot", json!({"jti": "T-1"}));
    let with = |session: &'static str, t: &str| {
        vec![("x-toolgate-session", session), ("x-toolgate-task", t)]
            .into_iter()
            .map(|(k, v)| (k, v.to_string()))
            .collect::<Vec<_>>()
    };
    let call = |path: &'static str, session: &'static str, t: String, body: Option<Value>| {
        let h = &h;
        let headers = with(session, &t);
        async move {
            let headers: Vec<(&str, &str)> =
                headers.iter().map(|(k, v)| (*k, v.as_str())).collect();
            match body {
                None => h.call("GET", path, Some(OPS_TOKEN), &headers, "").await,
                Some(b) => {
                    h.call("POST", path, Some(OPS_TOKEN), &headers, &b.to_string())
                        .await
                }
            }
        }
    };
    // Looked up under one session id, refunded under another: one task, so it holds.
    assert_eq!(call("/orders/A", "s-1", t1.clone(), None).await.status, 200);
    let r = call(
        "/refunds",
        "s-2",
        t1.clone(),
        Some(json!({"order_id": "A", "amount": 5})),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.text);
    // maxCalls (12) counts the task, whatever session ids the agent invents.
    for i in 2..12 {
        let session: &'static str = Box::leak(format!("s-{i}").into_boxed_str());
        let path: &'static str = Box::leak(format!("/orders/N{i}").into_boxed_str());
        let r = call(path, session, t1.clone(), None).await;
        assert_eq!(r.status, 404, "call {i}: {}", r.text);
    }
    call("/ping", "fresh", t1.clone(), None)
        .await
        .assert_refused("BUDGET_EXHAUSTED", 429);
    // Another task starts afresh; a task_id claim wins over jti.
    let t2 = task(&key, "ops-bot", json!({"jti": "T-1", "task_id": "T-2"}));
    assert_eq!(call("/ping", "fresh", t2, None).await.status, 200);
    // The audit record names the task.
    let dir = h.stop_keeping_files().await;
    let log = std::fs::read_to_string(dir.path().join("audit.log")).unwrap();
    assert!(
        audit_calls(&log).iter().any(|c| c["task"] == "T-2"),
        "{log}"
    );
}

#[tokio::test]
async fn require_task_refuses_calls_without_a_task_token() {
    let key = SigningKey::ec("o-ec");
    let backend = shop().await;
    let h = with_tasks(backend.addr, REFUNDS, &key).await;
    let r = h.call("GET", "/ping", Some(STRANGER_TOKEN), &[], "").await;
    r.assert_refused("OUT_OF_TASK_SCOPE", 403);
    assert!(r.text.contains("requireTask"), "{}", r.text);
    // Another agent's task is no task for this one.
    let foreign = task(&key, "ops-bot", json!({"jti": "T-9"}));
    h.call(
        "GET",
        "/ping",
        Some(STRANGER_TOKEN),
        &[("x-toolgate-task", &foreign)],
        "",
    )
    .await
    .assert_refused("OUT_OF_TASK_SCOPE", 403);
    let own = task(&key, "stranger", json!({"jti": "T-9"}));
    let r = h
        .call(
            "GET",
            "/ping",
            Some(STRANGER_TOKEN),
            &[("x-toolgate-task", &own)],
            "",
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.text);
    h.stop().await;
}

/// MCP: `read_logs` needs an issue opened for its service first, in the same task.
const MCP_ORDER: &str = r#"
apiVersion: toolgate.dev/v1alpha1
kind: ToolContract
metadata: {name: read-logs}
spec: {tool: read_logs, input: {type: object, properties: {service: {type: string}}}}
---
apiVersion: toolgate.dev/v1alpha1
kind: ToolContract
metadata: {name: create-issue}
spec:
  tool: create_issue
  input: {type: object, properties: {project: {type: string}}}
  cost: 7
---
apiVersion: toolgate.dev/v1alpha1
kind: ToolContract
metadata: {name: fails-softly}
spec: {tool: fails_softly}
---
apiVersion: toolgate.dev/v1alpha1
kind: ToolContract
metadata: {name: echo}
spec: {tool: echo}
---
apiVersion: toolgate.dev/v1alpha1
kind: ToolContract
metadata: {name: unknown-to-server}
spec: {tool: unknown_to_server}
---
apiVersion: toolgate.dev/v1alpha1
kind: ToolContract
metadata: {name: ping}
spec: {tool: ping}
---
apiVersion: toolgate.dev/v1alpha1
kind: AgentPolicy
metadata: {name: ops-bot}
spec:
  agents: [ops-bot]
  budget: {perDay: 20}
  tools:
    - name: create_issue
    - name: fails_softly
    - name: read_logs
      requires:
        - {tool: create_issue, match: "prior.args.project == args.service", within: task}
    - name: echo
      requires: [{tool: fails_softly}]
    - name: unknown_to_server
    - name: ping
      requires: [{tool: unknown_to_server}]
"#;

fn rpc(id: u64, name: &str, args: Value) -> String {
    json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {"name": name, "arguments": args}})
        .to_string()
}

fn tool_code(r: &Reply) -> String {
    assert_eq!(r.status, 200, "{}", r.text);
    r.json["result"]["structuredContent"]["error"]["code"]
        .as_str()
        .unwrap_or("")
        .to_string()
}

async fn mcp_flow(h: &Harness, backend: &McpBackend, key: &SigningKey) {
    let t = task(key, "ops-bot", json!({"jti": "T-mcp"}));
    let post = |body: String, t: Option<String>| async move {
        let headers: Vec<(&str, &str)> = match &t {
            Some(t) => vec![("x-toolgate-task", t.as_str())],
            None => vec![],
        };
        h.call("POST", "/mcp", Some(OPS_TOKEN), &headers, &body)
            .await
    };
    let read = || rpc(2, "read_logs", json!({"service": "orders"}));
    // `within: task` and no task token: out of task scope.
    assert_eq!(tool_code(&post(read(), None).await), "OUT_OF_TASK_SCOPE");
    let r = post(read(), Some(t.clone())).await;
    assert_eq!(tool_code(&r), "CALL_ORDER_VIOLATION");
    let error = &r.json["result"]["structuredContent"]["error"];
    assert_eq!(error["recovery"], "call_first");
    assert_eq!(error["details"][0]["requires"], "create_issue");
    // An issue for another project does not count; one for orders does.
    let issue = |p: &str| rpc(3, "create_issue", json!({"project": p}));
    let ran = |r: Reply| {
        assert_eq!(r.status, 200, "{}", r.text);
        assert!(r.json["result"].get("isError").is_none(), "{}", r.text);
    };
    ran(post(issue("payments"), Some(t.clone())).await);
    assert_eq!(
        tool_code(&post(read(), Some(t.clone())).await),
        "CALL_ORDER_VIOLATION"
    );
    ran(post(issue("orders"), Some(t.clone())).await);
    let r = post(read(), Some(t.clone())).await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert!(r.json["result"].get("isError").is_none(), "{}", r.text);
    // A call the tool itself failed (`isError: true`) is no prior call.
    let r = post(rpc(4, "fails_softly", json!({})), Some(t.clone())).await;
    assert_eq!(r.json["result"]["isError"], true, "{}", r.text);
    assert_eq!(
        tool_code(&post(rpc(5, "echo", json!({})), Some(t.clone())).await),
        "CALL_ORDER_VIOLATION"
    );
    // Nor is one the server refused with a JSON-RPC error (the test backend knows no
    // `unknown_to_server`).
    let r = post(rpc(6, "unknown_to_server", json!({})), Some(t.clone())).await;
    assert_eq!(r.json["error"]["code"], -32602, "{}", r.text);
    assert_eq!(
        tool_code(&post(rpc(7, "ping", json!({})), Some(t.clone())).await),
        "CALL_ORDER_VIOLATION"
    );
    // The policy's budget is 20 a day and an issue costs 7: the third one is refused.
    let r = post(issue("billing"), Some(t.clone())).await;
    assert_eq!(tool_code(&r), "BUDGET_EXHAUSTED", "{}", r.text);
    let retry = r.json["result"]["structuredContent"]["error"]["retryAfterMs"].as_u64();
    assert!(retry.is_some_and(|ms| ms > 0), "{}", r.text);
    let sent = backend.calls();
    assert_eq!(
        sent.iter().filter(|c| *c == "create_issue").count(),
        2,
        "{sent:?}"
    );
    assert!(!sent.contains(&"echo".to_string()));
    assert!(!sent.contains(&"ping".to_string()));
}

#[tokio::test]
async fn call_order_and_budgets_over_mcp_memory() {
    let key = SigningKey::ec("o-ec");
    let backend = McpBackend::start().await;
    let h = with_tasks(backend.addr, MCP_ORDER, &key).await;
    mcp_flow(&h, &backend, &key).await;
    h.stop().await;
}

#[tokio::test]
async fn call_order_and_budgets_over_mcp_redis() {
    if !common::redis::available() {
        return;
    }
    let server = common::redis::Server::start(&[]).await;
    let key = SigningKey::ec("o-ec");
    let backend = McpBackend::start().await;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("task-jwks.json");
    std::fs::write(&path, jwks(&[&key])).unwrap();
    let url = server.url();
    let h = Harness::start(
        backend.addr,
        Options {
            policies: MCP_ORDER.into(),
            tweak: Box::new(move |s| {
                s.identity.task_issuers = vec![toolgate::config::TaskIssuer {
                    issuer: "orchestrator".into(),
                    jwks: Some(path.into()),
                    discovery: false,
                    audience: None,
                    require_agent: true,
                }];
                s.state.backend = StateBackend::Redis;
                s.state.redis.url = url;
                s.state.redis.timeout_ms = 500;
            }),
            ..Options::default()
        },
    )
    .await;
    mcp_flow(&h, &backend, &key).await;
    h.stop().await;
}

/// A rule counting calls (`session.calls`) counts what the call's limits key on: with a
/// task token, the task, whatever session ids the agent invents.
const COUNTED: &str = r#"
apiVersion: toolgate.dev/v1alpha1
kind: ToolContract
metadata: {name: ping}
spec: {tool: ping, http: {method: GET, path: /ping}}
---
apiVersion: toolgate.dev/v1alpha1
kind: AgentPolicy
metadata: {name: ops-bot}
spec:
  agents: [ops-bot]
  session: {maxCalls: 50}
  tools:
    - name: ping
      rules:
        - {name: two-per-task, expr: "session.calls < 2"}
"#;

async fn session_calls_count_the_task(redis: Option<String>) {
    let key = SigningKey::ec("o-ec");
    let backend = shop().await;
    let h = with_tasks_on(backend.addr, COUNTED, &key, redis.as_deref()).await;
    let t = task(&key, "ops-bot", json!({"task_id": "T-count"}));
    let ping = |session: &'static str| {
        let t = t.clone();
        let h = &h;
        async move {
            let headers = [
                ("x-toolgate-task", t.as_str()),
                ("x-toolgate-session", session),
            ];
            h.call("GET", "/ping", Some(OPS_TOKEN), &headers, "").await
        }
    };
    assert_eq!(ping("s-1").await.status, 200);
    assert_eq!(ping("s-2").await.status, 200);
    let r = ping("s-3").await;
    r.assert_refused("POLICY_DENIED", 403);
    assert_eq!(r.json["error"]["rule"], "two-per-task", "{}", r.text);
    // Without a task token, a session counts its own calls.
    let r = h
        .call(
            "GET",
            "/ping",
            Some(OPS_TOKEN),
            &[("x-toolgate-session", "s-9")],
            "",
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.text);
    h.stop().await;
}

#[tokio::test]
async fn session_calls_count_the_task_in_memory_and_on_redis() {
    in_memory_and_on_redis(session_calls_count_the_task).await;
}

/// Tools answering with an event stream that stays open after the result: what the
/// dependent calls need must be remembered by the time the agent reads the result, not
/// when the stream ends.
const LINGERING: &str = r#"
apiVersion: toolgate.dev/v1alpha1
kind: ToolContract
metadata: {name: lingers}
spec: {tool: lingers}
---
apiVersion: toolgate.dev/v1alpha1
kind: ToolContract
metadata: {name: lingers-idempotent}
spec: {tool: lingers_idempotent, idempotent: true}
---
apiVersion: toolgate.dev/v1alpha1
kind: ToolContract
metadata: {name: read-logs}
spec: {tool: read_logs}
---
apiVersion: toolgate.dev/v1alpha1
kind: ToolContract
metadata: {name: ping}
spec: {tool: ping}
---
apiVersion: toolgate.dev/v1alpha1
kind: ToolContract
metadata: {name: cuts-json}
spec: {tool: cuts_json, idempotent: true}
---
apiVersion: toolgate.dev/v1alpha1
kind: ToolContract
metadata: {name: echo}
spec: {tool: echo}
---
apiVersion: toolgate.dev/v1alpha1
kind: ToolContract
metadata: {name: sse-empty}
spec: {tool: sse_empty, idempotent: true}
---
apiVersion: toolgate.dev/v1alpha1
kind: ToolContract
metadata: {name: after-empty}
spec: {tool: after_empty}
---
apiVersion: toolgate.dev/v1alpha1
kind: AgentPolicy
metadata: {name: ops-bot}
spec:
  agents: [ops-bot]
  tools:
    - name: lingers
    - name: lingers_idempotent
    - name: read_logs
      requires: [{tool: lingers, within: task}]
    - name: ping
      requires: [{tool: lingers_idempotent, within: task}]
    - name: cuts_json
    - name: echo
      requires: [{tool: cuts_json, within: task}]
    - name: sse_empty
    - name: after_empty
      requires: [{tool: sse_empty, within: task}]
"#;

/// Calls `tool` on `h`'s MCP endpoint and reads its answer only up to the result event,
/// leaving the stream open; the connection is handed back to keep it so.
async fn call_until_result(h: &Harness, tool: &str, task: &str) -> tokio::net::TcpStream {
    use tokio::io::AsyncReadExt;
    let mut stream = raw_call(h, &rpc(1, tool, json!({})), task).await;
    let mut seen = Vec::new();
    let read = async {
        let mut buf = [0u8; 4096];
        while !String::from_utf8_lossy(&seen).contains("\"result\"") {
            let n = stream.read(&mut buf).await.unwrap();
            assert!(n > 0, "the stream ended before its result");
            seen.extend_from_slice(&buf[..n]);
        }
    };
    tokio::time::timeout(Duration::from_secs(2), read)
        .await
        .expect("the result arrives before the stream ends");
    stream
}

/// Sends `body` to `h`'s MCP endpoint over a connection of its own, handed back unread.
async fn raw_call(h: &Harness, body: &str, task: &str) -> tokio::net::TcpStream {
    use tokio::io::AsyncWriteExt;
    let addr = h.base.trim_start_matches("http://").to_string();
    let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    let bearer = format!("Bearer {OPS_TOKEN}");
    let headers = [
        ("authorization", bearer.as_str()),
        ("content-type", "application/json"),
        ("accept", "application/json, text/event-stream"),
        ("x-toolgate-task", task),
    ];
    let request = common::raw::request("POST", "/mcp", &headers, body.as_bytes());
    stream.write_all(&request).await.unwrap();
    stream
}

async fn a_streamed_prior_counts_once_its_result_is_read(redis: Option<String>) {
    let key = SigningKey::ec("o-ec");
    let backend = McpBackend::start().await;
    let h = with_tasks_on(backend.addr, LINGERING, &key, redis.as_deref()).await;
    let t = task(&key, "ops-bot", json!({"jti": "T-linger"}));
    let headers = [("x-toolgate-task", t.as_str())];
    // At most once (the lead relays its stream), then idempotent (re-emitted).
    for (prior, next) in [("lingers", "read_logs"), ("lingers_idempotent", "ping")] {
        let open = call_until_result(&h, prior, &t).await;
        let r = h
            .call(
                "POST",
                "/mcp",
                Some(OPS_TOKEN),
                &headers,
                &rpc(2, next, json!({})),
            )
            .await;
        assert_eq!(r.status, 200, "{}", r.text);
        let code = &r.json["result"]["structuredContent"]["error"]["code"];
        assert_ne!(
            code, "CALL_ORDER_VIOLATION",
            "{next} after {prior}: {}",
            r.text
        );
        drop(open);
    }
    // A JSON answer streamed through that breaks mid-body is no success to remember.
    let cut = rpc(3, "cuts_json", json!({}));
    let mut stream = raw_call(&h, &cut, &t).await;
    let mut answer = Vec::new();
    let read = tokio::io::AsyncReadExt::read_to_end(&mut stream, &mut answer);
    let _ = tokio::time::timeout(Duration::from_secs(5), read).await;
    let r = h
        .call(
            "POST",
            "/mcp",
            Some(OPS_TOKEN),
            &headers,
            &rpc(4, "echo", json!({})),
        )
        .await;
    assert_eq!(
        r.json["result"]["structuredContent"]["error"]["code"], "CALL_ORDER_VIOLATION",
        "{}",
        r.text
    );
    // Nor is an event stream that ended without a result.
    let empty = rpc(5, "sse_empty", json!({}));
    h.call("POST", "/mcp", Some(OPS_TOKEN), &headers, &empty)
        .await;
    let after = rpc(6, "after_empty", json!({}));
    let r = h
        .call("POST", "/mcp", Some(OPS_TOKEN), &headers, &after)
        .await;
    assert_eq!(
        r.json["result"]["structuredContent"]["error"]["code"], "CALL_ORDER_VIOLATION",
        "{}",
        r.text
    );
    h.stop().await;
}

#[tokio::test]
async fn a_streamed_prior_counts_once_its_result_is_read_in_memory_and_on_redis() {
    in_memory_and_on_redis(a_streamed_prior_counts_once_its_result_is_read).await;
}

#[test]
fn toolgate_check_knows_every_new_field() {
    let dir = tempfile::tempdir().unwrap();
    let good = dir.path().join("good.yaml");
    std::fs::write(&good, REFUNDS).unwrap();
    let check = |path: &std::path::Path| {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_toolgate"))
            .args(["check", "--strict"])
            .arg(path)
            .output()
            .unwrap();
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
        )
    };
    let (ok, text) = check(&good);
    assert!(ok, "{text}");
    let bad = dir.path().join("bad.yaml");
    let broken = REFUNDS
        .replace(
            "prior.args.order_id == args.order_id",
            "prior.args.order_id ==",
        )
        .replace("timezone: Europe/Berlin", "timezone: Europe/Atlantis")
        .replace("maxSame: 3", "maxSame: 0")
        .replace("cost: args.amount", "cost: -4")
        .replace("- tool: get_order", "- tool: get_invoice");
    std::fs::write(&bad, broken).unwrap();
    let (ok, text) = check(&bad);
    assert!(!ok, "{text}");
    for field in ["spec.cost", "spec.session.maxSame"] {
        assert!(text.contains(field), "{field} in {text}");
    }
    // Errors of one object stop at its first; the policy's come one by one.
    let only = |from: &str, to: &str| {
        let path = dir.path().join("one.yaml");
        std::fs::write(&path, REFUNDS.replace(from, to)).unwrap();
        check(&path)
    };
    let (ok, text) = only(
        "prior.args.order_id == args.order_id",
        "prior.args.order_id ==",
    );
    assert!(
        !ok && text.contains("spec.tools[2].requires[0].match"),
        "{text}"
    );
    let (ok, text) = only("timezone: Europe/Berlin", "timezone: Europe/Atlantis");
    assert!(!ok && text.contains("Europe/Atlantis"), "{text}");
    let (ok, text) = only("perDay: 100", "perDay: -100");
    assert!(
        !ok && text.contains("spec.tools[2].budget.perDay"),
        "{text}"
    );
    let (ok, text) = only("- tool: get_order", "- tool: get_invoice");
    assert!(
        !ok && text.contains("spec.tools[2].requires[0].tool"),
        "{text}"
    );
}
