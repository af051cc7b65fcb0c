//! Human approval through a real sidecar (docs/approvals.md): a grant's `approval` holds a
//! call (202, nothing forwarded) until an approver decides it on the admin API; the
//! approved call then runs once. Denials, expiry, approver identity and groups, the
//! approval bound to its call, notifications, MCP, and approvals shared through Redis.

mod common;
#[path = "common/mcp.rs"]
mod peers;

use common::redis::{self, Server};
use common::*;
use http::Request;
use http_body_util::Full;
use serde_json::{json, Value};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use toolgate::config::StateBackend;
use toolgate::identity::tokens::digest_hex;

const ALICE: &str = "alice-approver-token";
const MALLORY: &str = "mallory-approver-token";

/// A refund held for approval above 100, decided by finance-leads, for ops-bot and
/// stranger; `ttl` in seconds.
fn policies(ttl: u64) -> String {
    let grant = |agent: &str| {
        format!(
            "apiVersion: toolgate.dev/v1alpha1
kind: AgentPolicy
metadata: {{name: {agent}}}
spec:
  agents: [{agent}]
  tools:
    - name: refund
      approval: {{when: 'args.amount > 100', approvers: [finance-leads], ttlSeconds: {ttl}}}
"
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
  redact: [/card]
  input:
    type: object
    required: [order_id, amount]
    properties:
      order_id: {{type: string}}
      amount: {{type: integer}}
      card: {{type: string}}
---
{}---
{}",
        grant("ops-bot"),
        grant("stranger")
    )
}

async fn mk_backend() -> (Backend, Arc<AtomicUsize>) {
    let ran = Arc::new(AtomicUsize::new(0));
    let counter = ran.clone();
    let backend = Backend::start(Arc::new(move |_: &Seen| {
        let n = counter.fetch_add(1, Ordering::SeqCst) + 1;
        (
            201,
            vec![("content-type", "application/json".to_string())],
            format!(r#"{{"refund":"R-{n}"}}"#),
            Duration::ZERO,
        )
    }))
    .await;
    (backend, ran)
}

/// A sidecar with alice (finance-leads) and mallory (support) as approvers.
async fn sidecar(
    backend: &Backend,
    ttl: u64,
    tweak: impl FnOnce(&mut toolgate::config::Settings) + 'static,
) -> Harness {
    sidecar_for(backend.addr, policies(ttl), tweak).await
}

async fn sidecar_for(
    upstream: std::net::SocketAddr,
    policies: String,
    tweak: impl FnOnce(&mut toolgate::config::Settings) + 'static,
) -> Harness {
    let dir = tempfile::tempdir().unwrap().keep();
    let approvers = dir.join("approvers.yaml");
    std::fs::write(
        &approvers,
        format!(
            "alice: {{sha256: {}, groups: [finance-leads]}}\nmallory: {{sha256: {}, groups: [support]}}\n",
            digest_hex(ALICE),
            digest_hex(MALLORY)
        ),
    )
    .unwrap();
    Harness::start(
        upstream,
        Options {
            policies,
            tweak: Box::new(move |s| {
                s.approvals.approvers.tokens = Some(approvers);
                tweak(s);
            }),
            ..Options::default()
        },
    )
    .await
}

async fn refund(h: &Harness, token: &str, session: &str, body: &str) -> Reply {
    h.call(
        "POST",
        "/refunds",
        Some(token),
        &[("x-toolgate-session", session)],
        body,
    )
    .await
}

/// One request to the approval API.
async fn api(h: &Harness, method: &str, path: &str, token: Option<&str>, body: &str) -> Reply {
    let mut request = Request::builder()
        .method(method)
        .uri(format!("{}{path}", h.admin()));
    if let Some(token) = token {
        request = request.header("authorization", format!("Bearer {token}"));
    }
    let response = h
        .client
        .request(request.body(Full::new(body.to_string().into())).unwrap())
        .await
        .unwrap();
    Reply::read(response).await
}

/// alice's view of approval `id`.
async fn show(h: &Harness, id: &str) -> Reply {
    api(h, "GET", &format!("/approvals/{id}"), Some(ALICE), "").await
}

/// alice approves or denies approval `id`, with no reason.
async fn decide(h: &Harness, id: &str, verb: &str) -> Reply {
    let path = format!("/approvals/{id}/{verb}");
    api(h, "POST", &path, Some(ALICE), "").await
}

fn approval_id(r: &Reply) -> String {
    r.assert_refused("APPROVAL_REQUIRED", 202);
    let detail = &r.json["error"]["details"][0];
    assert_eq!(detail["status"], "pending", "{}", r.text);
    assert!(detail["expiresAt"].as_str().unwrap().ends_with('Z'));
    assert_eq!(r.json["error"]["retryable"], true);
    assert_eq!(r.json["error"]["recovery"], "await_approval");
    detail["approvalId"].as_str().unwrap().to_string()
}

#[tokio::test]
async fn a_held_call_runs_once_after_approval_and_the_audit_log_names_the_approver() {
    let (backend, ran) = mk_backend().await;
    let h = sidecar(&backend, 900, |_| {}).await;
    let body = r#"{"order_id":"A-1","amount":500,"card":"4111-1111"}"#;
    let r = refund(&h, OPS_TOKEN, "s1", body).await;
    let id = approval_id(&r);
    assert_eq!(ran.load(Ordering::SeqCst), 0, "nothing is forwarded");
    // Repeats while pending: the same approval.
    assert_eq!(approval_id(&refund(&h, OPS_TOKEN, "s1", body).await), id);
    // A small refund needs none.
    let small = refund(&h, OPS_TOKEN, "s1", r#"{"order_id":"A-2","amount":5}"#).await;
    assert_eq!(small.status, 201, "{}", small.text);

    // The approver sees it, redacted, with the condition that asked for it.
    let listed = api(&h, "GET", "/approvals?status=pending", Some(ALICE), "").await;
    assert_eq!(listed.status, 200, "{}", listed.text);
    let item = &listed.json["approvals"][0];
    assert_eq!(item["id"], id.as_str());
    assert_eq!(item["condition"], "args.amount > 100");
    assert_eq!(item["agent"], "ops-bot");
    assert_eq!(item["session"], "s1");
    // A listing never carries arguments; the approval itself shows them, redacted.
    assert!(item.get("arguments").is_none(), "{}", listed.text);
    assert!(listed.json["nextCursor"].is_null(), "{}", listed.text);
    let shown = show(&h, &id).await;
    assert_eq!(shown.json["status"], "pending");
    assert_eq!(shown.json["arguments"]["amount"], 500);
    assert_ne!(
        shown.json["arguments"]["card"], "4111-1111",
        "{}",
        shown.text
    );

    let approved = api(
        &h,
        "POST",
        &format!("/approvals/{id}/approve"),
        Some(ALICE),
        r#"{"reason":"checked with the customer"}"#,
    )
    .await;
    assert_eq!(approved.status, 200, "{}", approved.text);
    assert_eq!(approved.json["status"], "approved");
    assert_eq!(approved.json["decidedBy"], "alice");

    let r = refund(&h, OPS_TOKEN, "s1", body).await;
    assert_eq!(r.status, 201, "{}", r.text);
    assert_eq!(ran.load(Ordering::SeqCst), 2);
    // Not a free pass: the next identical call is replayed, never run again.
    let again = refund(&h, OPS_TOKEN, "s1", body).await;
    assert_eq!(
        again.header("x-toolgate-replayed"),
        "true",
        "{}",
        again.text
    );
    assert_eq!(ran.load(Ordering::SeqCst), 2);
    let shown = show(&h, &id).await;
    assert_eq!(shown.json["status"], "used");

    audit_names_the_approver(h).await;
}

/// Stops the sidecar and checks its audit log: every transition of the approval, and the
/// call record naming it.
async fn audit_names_the_approver(h: Harness) {
    {
        let dir = h.stop_keeping_files().await;
        let text = std::fs::read_to_string(dir.path().join("audit.log")).unwrap();
        let lines: Vec<Value> = text
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        let events: Vec<&str> = lines
            .iter()
            .filter(|l| l["kind"] == "approval")
            .map(|l| l["event"].as_str().unwrap())
            .collect();
        assert_eq!(events, ["requested", "approved", "used"], "{text}");
        let approved_call = lines
            .iter()
            .find(|l| {
                l["kind"] == "call" && l["upstreamStatus"] == 201 && l["approval"].is_object()
            })
            .expect("the executed call names its approval");
        assert_eq!(approved_call["approval"]["approver"], "alice");
        assert_eq!(
            approved_call["approval"]["reason"],
            "checked with the customer"
        );
        assert_eq!(audit_verify(&text).records as usize, lines.len());
    }
}

#[tokio::test]
async fn denied_expired_and_other_calls_never_run_unapproved() {
    let (backend, ran) = mk_backend().await;
    let h = sidecar(&backend, 2, |_| {}).await;
    let body = r#"{"order_id":"B-1","amount":300}"#;
    let id = approval_id(&refund(&h, OPS_TOKEN, "s1", body).await);

    // Another agent, another session, other arguments: other approvals.
    let other_agent = approval_id(&refund(&h, STRANGER_TOKEN, "s1", body).await);
    let other_session = approval_id(&refund(&h, OPS_TOKEN, "s2", body).await);
    let other_args =
        approval_id(&refund(&h, OPS_TOKEN, "s1", r#"{"order_id":"B-1","amount":301}"#).await);
    let ids = [&id, &other_agent, &other_session, &other_args];
    for (i, a) in ids.iter().enumerate() {
        assert!(ids[i + 1..].iter().all(|b| a != b), "{ids:?}");
    }

    // Deny: the call gets the approver's reason, and keeps getting it.
    let denied = api(
        &h,
        "POST",
        &format!("/approvals/{id}/deny"),
        Some(ALICE),
        r#"{"reason":"duplicate of ticket 88"}"#,
    )
    .await;
    assert_eq!(denied.json["status"], "denied", "{}", denied.text);
    for _ in 0..2 {
        let r = refund(&h, OPS_TOKEN, "s1", body).await;
        r.assert_refused("APPROVAL_DENIED", 403);
        assert_eq!(r.json["error"]["retryable"], false);
        assert_eq!(r.json["error"]["recovery"], "ask_user");
        assert!(r.text.contains("duplicate of ticket 88"), "{}", r.text);
    }
    // Approving another's approval does not let this call run.
    decide(&h, &other_agent, "approve").await;
    refund(&h, OPS_TOKEN, "s1", body)
        .await
        .assert_refused("APPROVAL_DENIED", 403);

    // Expiry (ttl 2 s): an approved call not run in time needs a new approval.
    decide(&h, &other_session, "approve").await;
    tokio::time::sleep(Duration::from_millis(2100)).await;
    let fresh = approval_id(&refund(&h, OPS_TOKEN, "s2", body).await);
    assert_ne!(fresh, other_session);
    let shown = show(&h, &other_session).await;
    assert_eq!(shown.json["status"], "expired");
    // A denial expires too: the same call asks anew.
    let after_denial = approval_id(&refund(&h, OPS_TOKEN, "s1", body).await);
    assert_ne!(after_denial, id);
    assert_eq!(ran.load(Ordering::SeqCst), 0);
    // The approved one that ran out of time left an `expired` record; the denial, whose
    // answer was final, did not.
    let dir = h.stop_keeping_files().await;
    let audit = std::fs::read_to_string(dir.path().join("audit.log")).unwrap();
    let expired: Vec<Value> = audit
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .filter(|l| l["kind"] == "approval" && l["event"] == "expired")
        .collect();
    assert_eq!(expired.len(), 1, "{audit}");
    assert_eq!(expired[0]["approvalId"], other_session.as_str());
}

#[tokio::test]
async fn the_approval_api_refuses_what_it_must() {
    let (backend, ran) = mk_backend().await;
    let h = sidecar(&backend, 900, |_| {}).await;
    let body = r#"{"order_id":"C-1","amount":999}"#;
    let id = approval_id(&refund(&h, OPS_TOKEN, "s1", body).await);
    let approve = format!("/approvals/{id}/approve");

    // No credential, an agent's, a wrong one: 401.
    for token in [None, Some(OPS_TOKEN), Some("nope")] {
        let r = api(&h, "POST", &approve, token, "").await;
        assert_eq!((r.status, r.code()), (401, "UNAUTHENTICATED"), "{}", r.text);
        assert!(r.json["error"]["traceId"].is_string());
    }
    // An approver outside the grant's groups: 403, and they don't see it listed.
    let r = api(&h, "POST", &approve, Some(MALLORY), "").await;
    assert_eq!(r.status, 403, "{}", r.text);
    assert_eq!(
        api(&h, "GET", &format!("/approvals/{id}"), Some(MALLORY), "")
            .await
            .status,
        403
    );
    let listed = api(&h, "GET", "/approvals", Some(MALLORY), "").await;
    assert_eq!(listed.json["approvals"], json!([]));
    // Unknown id 404; a bad body or a huge reason 400; a bad status filter 400.
    assert_eq!(
        api(&h, "POST", "/approvals/apr-nope/approve", Some(ALICE), "")
            .await
            .status,
        404
    );
    assert_eq!(
        api(&h, "POST", &approve, Some(ALICE), "{not json")
            .await
            .status,
        400
    );
    let huge = json!({"reason": "x".repeat(5000)}).to_string();
    assert_eq!(
        api(&h, "POST", &approve, Some(ALICE), &huge).await.status,
        400
    );
    let too_big = json!({"reason": "x".repeat(40_000)}).to_string();
    assert_eq!(
        api(&h, "POST", &approve, Some(ALICE), &too_big)
            .await
            .status,
        413
    );
    assert_eq!(
        api(&h, "GET", "/approvals?status=maybe", Some(ALICE), "")
            .await
            .status,
        400
    );
    // Still pending after all that; decided once, not twice.
    assert_eq!(api(&h, "POST", &approve, Some(ALICE), "").await.status, 200);
    let again = decide(&h, &id, "deny").await;
    assert_eq!(again.status, 409, "{}", again.text);
    assert_eq!(ran.load(Ordering::SeqCst), 0);
}

/// Records what a notification receiver got.
async fn receiver(status: u16, delay: Duration) -> (Backend, Arc<Mutex<Vec<Value>>>) {
    let got = Arc::new(Mutex::new(Vec::new()));
    let seen = got.clone();
    let backend = Backend::start(Arc::new(move |s: &Seen| {
        seen.lock()
            .unwrap()
            .push(serde_json::from_slice(&s.body).unwrap_or(Value::Null));
        (status, vec![], String::new(), delay)
    }))
    .await;
    (backend, got)
}

#[tokio::test]
async fn each_new_pending_approval_is_notified_and_a_dead_receiver_blocks_nothing() {
    let (backend, _) = mk_backend().await;
    let (hook, got) = receiver(200, Duration::ZERO).await;
    let url = format!("http://{}/hooks/approvals", hook.addr);
    let h = sidecar(&backend, 900, move |s| s.approvals.notify_url = Some(url)).await;
    let body = r#"{"order_id":"D-1","amount":500,"card":"4111"}"#;
    let id = approval_id(&refund(&h, OPS_TOKEN, "s1", body).await);
    approval_id(&refund(&h, OPS_TOKEN, "s1", body).await);
    for _ in 0..100 {
        if !got.lock().unwrap().is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    tokio::time::sleep(Duration::from_millis(100)).await;
    let got = got.lock().unwrap().clone();
    assert_eq!(got.len(), 1, "one notification per new approval: {got:?}");
    assert_eq!(got[0]["approval"]["id"], id.as_str());
    assert_eq!(got[0]["approval"]["status"], "pending");
    assert_eq!(got[0]["approval"]["arguments"]["amount"], 500);
    assert_ne!(got[0]["approval"]["arguments"]["card"], "4111");

    // Large arguments stay out of the notification (the API shows them): a slow
    // receiver's queue can't hold megabytes per approval.
    let large = big_refund("D-2", 100_000);
    let big_id = approval_id(&refund(&h, OPS_TOKEN, "s1", &large).await);
    let mut notified = None;
    for _ in 0..100 {
        notified = hook.seen.lock().unwrap().get(1).map(|s| s.body.clone());
        if notified.is_some() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let notified: Value = serde_json::from_slice(&notified.expect("notified")).unwrap();
    assert_eq!(notified["approval"]["id"], big_id.as_str());
    assert!(notified["approval"]["arguments"].is_null(), "{notified}");
    assert!(notified.to_string().len() < 4096);
    assert_eq!(show(&h, &big_id).await.json["arguments"]["order_id"], "D-2");

    // A receiver that hangs, and one that refuses: the call is answered at once.
    let (hang, _) = receiver(200, Duration::from_secs(60)).await;
    for url in [
        format!("http://{}/", hang.addr),
        format!("http://{}/", closed_port().await),
    ] {
        let h = sidecar(&backend, 900, move |s| s.approvals.notify_url = Some(url)).await;
        let started = std::time::Instant::now();
        approval_id(&refund(&h, OPS_TOKEN, "s1", body).await);
        assert!(
            started.elapsed() < Duration::from_secs(2),
            "{:?}",
            started.elapsed()
        );
    }
}

#[tokio::test]
async fn with_redis_any_pod_decides_and_any_pod_runs_it_once() {
    if !redis::available() {
        return;
    }
    let server = Server::start(&[]).await;
    let (backend, ran) = mk_backend().await;
    let mut pods = Vec::new();
    for _ in 0..2 {
        let url = server.url();
        pods.push(
            sidecar(&backend, 900, move |s| {
                s.state.backend = StateBackend::Redis;
                s.state.redis.url = url;
                s.state.redis.timeout_ms = 500;
            })
            .await,
        );
    }
    let body = r#"{"order_id":"E-1","amount":700}"#;
    let id = approval_id(&refund(&pods[0], OPS_TOKEN, "s1", body).await);
    assert_eq!(
        approval_id(&refund(&pods[1], OPS_TOKEN, "s1", body).await),
        id
    );
    let listed = api(
        &pods[1],
        "GET",
        "/approvals?status=pending",
        Some(ALICE),
        "",
    )
    .await;
    assert_eq!(
        listed.json["approvals"][0]["id"],
        id.as_str(),
        "{}",
        listed.text
    );
    let r = decide(&pods[1], &id, "approve").await;
    assert_eq!(r.status, 200, "{}", r.text);
    // Both pods race to run it: one does, once.
    let (a, b) = tokio::join!(
        refund(&pods[0], OPS_TOKEN, "s1", body),
        refund(&pods[1], OPS_TOKEN, "s1", body)
    );
    assert_eq!(ran.load(Ordering::SeqCst), 1, "{} / {}", a.text, b.text);
    assert!(
        a.status == 201 || b.status == 201,
        "{} / {}",
        a.text,
        b.text
    );
    // The other finds the approval used, and is held anew under a fresh one.
    let loser = if a.status == 201 { &b } else { &a };
    assert_eq!(loser.status, 202, "{}", loser.text);
    assert_ne!(approval_id(loser), id, "a used approval is never reused");
    let shown = show(&pods[0], &id).await;
    assert_eq!(shown.json["status"], "used");
    assert_eq!(decide(&pods[0], &id, "deny").await.status, 409);
}

/// Over MCP, with the official Python SDK as client and server: the hold is a tool
/// result with `isError: true` and the error body, the approved call runs once.
#[tokio::test]
async fn an_mcp_client_sees_the_hold_as_a_tool_error_and_the_approved_call_runs_once() {
    let dir = tempfile::tempdir().unwrap();
    let peer = peers::Peer::python_server(&[], dir.path());
    let policies = "apiVersion: toolgate.dev/v1alpha1
kind: ToolContract
metadata: {name: create-issue}
spec:
  tool: create_issue
  input:
    type: object
    required: [project_key, title]
    properties:
      project_key: {type: string}
      title: {type: string}
---
apiVersion: toolgate.dev/v1alpha1
kind: AgentPolicy
metadata: {name: ops-bot}
spec:
  agents: [ops-bot]
  tools:
    - name: create_issue
      approval: {when: \"args.project_key == 'OPS'\", approvers: [finance-leads]}
";
    let h = sidecar_for(peer.addr, policies.to_string(), |_| {}).await;
    let url = format!("{}/mcp", h.base);
    // The modern handshake has no MCP session: every run is the same caller.
    let call = || {
        peers::client(
            &url,
            Some(OPS_TOKEN),
            "modern",
            &[
                "call",
                "create_issue",
                r#"{"project_key":"OPS","title":"refund R-9"}"#,
            ],
        )
    };
    let held = call().await;
    assert_eq!(held["isError"], true, "{held}");
    let error = &held["structuredContent"]["error"];
    assert_eq!(error["code"], "APPROVAL_REQUIRED", "{held}");
    assert_eq!(error["recovery"], "await_approval");
    let id = error["details"][0]["approvalId"]
        .as_str()
        .unwrap()
        .to_string();
    assert_eq!(peer.counts()["create_issue"].as_u64().unwrap_or(0), 0);

    let r = decide(&h, &id, "approve").await;
    assert_eq!(r.status, 200, "{}", r.text);
    let ran = call().await;
    assert_eq!(ran["isError"], false, "{ran}");
    assert_eq!(peer.counts()["create_issue"], 1);
    // The next identical call does not run it again.
    let again = call().await;
    assert_eq!(peer.counts()["create_issue"], 1, "{again}");
}

/// The MCP contract of the official SDK server's `create_issue`, held for approval for
/// project OPS: not idempotent, so an approved call's repeats replay its answer.
const MCP_APPROVAL: &str = "apiVersion: toolgate.dev/v1alpha1
kind: ToolContract
metadata: {name: create-issue}
spec:
  tool: create_issue
  input:
    type: object
    required: [project_key, title]
    properties:
      project_key: {type: string}
      title: {type: string}
---
apiVersion: toolgate.dev/v1alpha1
kind: AgentPolicy
metadata: {name: ops-bot}
spec:
  agents: [ops-bot]
  tools:
    - name: create_issue
      approval: {when: \"args.project_key == 'OPS'\", approvers: [finance-leads]}
";

/// One raw `tools/call` of create_issue with `params` extended by `extra` (round fields).
async fn mcp_call(h: &Harness, id: u64, extra: Value) -> Reply {
    let mut params =
        json!({"name": "create_issue", "arguments": {"project_key": "OPS", "title": "refund R-9"}});
    params
        .as_object_mut()
        .unwrap()
        .extend(extra.as_object().unwrap().clone());
    let body = json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": params});
    h.call(
        "POST",
        "/mcp",
        Some(OPS_TOKEN),
        &[
            ("accept", "application/json, text/event-stream"),
            ("mcp-protocol-version", "2025-11-25"),
        ],
        &body.to_string(),
    )
    .await
}

/// The approval id an MCP answer holds the call under.
fn held_under(r: &Reply) -> String {
    assert_eq!(r.status, 200, "{}", r.text);
    let error = &r.json["result"]["structuredContent"]["error"];
    assert_eq!(error["code"], "APPROVAL_REQUIRED", "{}", r.text);
    error["details"][0]["approvalId"]
        .as_str()
        .unwrap()
        .to_string()
}

/// One approval, one execution: after the approved call ran, the same call sent again
/// with the round fields of a multi-round call (`inputResponses`, `requestState`) is a
/// new call that needs approval of its own, never a free re-run; the identical call
/// replays. Against the official SDK server, with memory and with Redis state.
#[tokio::test]
async fn an_approved_call_runs_once_whatever_round_fields_follow() {
    let redis = redis::available().then_some(Server::start(&[]));
    let redis = match redis {
        Some(server) => Some(server.await),
        None => None,
    };
    let mut states = vec![None];
    states.extend(redis.as_ref().map(|s| Some(s.url())));
    for state in states {
        let dir = tempfile::tempdir().unwrap();
        let peer = peers::Peer::python_server(&["--json-response", "--stateless"], dir.path());
        let shared = state.is_some();
        let h = sidecar_for(peer.addr, MCP_APPROVAL.to_string(), move |s| {
            if let Some(url) = state {
                s.state.backend = StateBackend::Redis;
                s.state.redis.url = url;
                s.state.redis.timeout_ms = 500;
            }
        })
        .await;
        let ran = || peer.counts()["create_issue"].as_u64().unwrap_or(0);
        let first = held_under(&mcp_call(&h, 1, json!({})).await);
        assert_eq!(decide(&h, &first, "approve").await.status, 200);
        let r = mcp_call(&h, 2, json!({})).await;
        assert_eq!(r.json["result"]["isError"], false, "{}", r.text);
        assert_eq!(ran(), 1);
        // Later rounds and their variants: each a call of its own, each held.
        let mut seen = vec![first.clone()];
        for (i, round) in [
            json!({"inputResponses": {}}),
            json!({"inputResponses": {"confirm": {"action": "accept"}}}),
            json!({"requestState": "opaque-1"}),
            json!({"requestState": "opaque-1", "inputResponses": {}}),
        ]
        .into_iter()
        .enumerate()
        {
            let again = mcp_call(&h, 10 + i as u64, round.clone()).await;
            let id = held_under(&again);
            assert!(
                !seen.contains(&id),
                "shared={shared} {round}: {}",
                again.text
            );
            seen.push(id);
            // The same round again: its own pending approval, not a run.
            assert_eq!(
                held_under(&mcp_call(&h, 20 + i as u64, round).await),
                seen[seen.len() - 1]
            );
        }
        assert_eq!(ran(), 1, "shared={shared}: no round ran without approval");
        // The identical call replays the one execution.
        let r = mcp_call(&h, 3, json!({})).await;
        assert_eq!(r.json["result"]["isError"], false, "{}", r.text);
        assert_eq!(r.header("x-toolgate-replayed"), "true", "{}", r.text);
        assert_eq!(ran(), 1);
        let file = h.audit_file();
        let _dir = h.stop_keeping_files().await;
        let audit = std::fs::read_to_string(file).unwrap();
        // The one execution is the one record that names the approval.
        let calls = audit_calls(&audit);
        let approved: Vec<_> = calls
            .iter()
            .filter(|c| c.get("approval").is_some())
            .collect();
        assert_eq!(approved.len(), 1, "shared={shared}: {audit}");
        assert_eq!(approved[0]["approval"]["id"], first.as_str());
    }
}

/// The same over REST: a changed field, another session or agent, an `Idempotency-Key`
/// each make a new call that needs its own approval; key order and whitespace don't.
#[tokio::test]
async fn an_approval_is_matched_only_by_the_call_it_was_made_for() {
    let (backend, ran) = mk_backend().await;
    let h = sidecar(&backend, 900, |_| {}).await;
    let body = r#"{"order_id":"V-1","amount":500}"#;
    let id = approval_id(&refund(&h, OPS_TOKEN, "s1", body).await);
    assert_eq!(decide(&h, &id, "approve").await.status, 200);
    assert_eq!(refund(&h, OPS_TOKEN, "s1", body).await.status, 201);
    assert_eq!(ran.load(Ordering::SeqCst), 1);
    // The same call, spelled differently: a replay of the one run.
    let same = refund(
        &h,
        OPS_TOKEN,
        "s1",
        "{ \"amount\": 500, \"order_id\": \"V-1\" }",
    )
    .await;
    assert_eq!(same.status, 201, "{}", same.text);
    assert_eq!(same.header("x-toolgate-replayed"), "true");
    let mut ids = vec![id];
    for variant in [
        refund(&h, OPS_TOKEN, "s1", r#"{"order_id":"V-1","amount":501}"#).await,
        refund(
            &h,
            OPS_TOKEN,
            "s1",
            r#"{"order_id":"V-1","amount":500,"card":"x"}"#,
        )
        .await,
        refund(&h, OPS_TOKEN, "s2", body).await,
        refund(&h, STRANGER_TOKEN, "s1", body).await,
        h.call(
            "POST",
            "/refunds",
            Some(OPS_TOKEN),
            &[("x-toolgate-session", "s1"), ("idempotency-key", "k-1")],
            body,
        )
        .await,
    ] {
        let id = approval_id(&variant);
        assert!(!ids.contains(&id), "{}", variant.text);
        ids.push(id);
    }
    assert_eq!(ran.load(Ordering::SeqCst), 1, "no variant ran");
    h.stop().await;
}

// --- Held approvals are bounded in bytes, and listed a page at a time without their
// arguments (DESIGN §14). ---

/// A sidecar on `state` (memory, or the Redis at the URL) with small bounds:
/// `max_bytes` of arguments, `max_count` approvals.
async fn bounded(
    backend: &Backend,
    redis: Option<String>,
    max_count: u64,
    max_bytes: u64,
) -> Harness {
    sidecar(backend, 900, move |s| {
        s.approvals.max_pending = max_count;
        s.approvals.max_pending_bytes = max_bytes;
        if let Some(url) = redis {
            s.state.backend = StateBackend::Redis;
            s.state.redis.url = url;
            s.state.redis.timeout_ms = 500;
        }
    })
    .await
}

/// A refund held for approval whose arguments are about `bytes` long.
fn big_refund(order: &str, bytes: usize) -> String {
    json!({"order_id": order, "amount": 500, "note": "n".repeat(bytes)}).to_string()
}

async fn bytes_bound_holds(redis: Option<String>) {
    let (backend, ran) = mk_backend().await;
    let h = bounded(&backend, redis, 100, 200_000).await;
    let mut held = Vec::new();
    for order in ["F-1", "F-2", "F-3"] {
        held.push(approval_id(
            &refund(&h, OPS_TOKEN, "s1", &big_refund(order, 60_000)).await,
        ));
    }
    // A fourth would pass 200,000 bytes: refused, retryable, and nothing is dropped.
    let refused = refund(&h, OPS_TOKEN, "s1", &big_refund("F-4", 60_000)).await;
    refused.assert_refused("STATE_UNAVAILABLE", 503);
    assert_eq!(refused.json["error"]["retryable"], true);
    assert!(refused.text.contains("maxPendingBytes"), "{}", refused.text);
    for id in &held {
        assert_eq!(show(&h, id).await.json["status"], "pending");
    }
    // The same call again is the same approval, not a new one.
    let again = refund(&h, OPS_TOKEN, "s1", &big_refund("F-1", 60_000)).await;
    assert_eq!(approval_id(&again), held[0]);
    // A small one still fits; then, once one is approved and used, a big one fits again.
    approval_id(&refund(&h, OPS_TOKEN, "s1", &big_refund("F-5", 100)).await);
    decide(&h, &held[0], "approve").await;
    let r = refund(&h, OPS_TOKEN, "s1", &big_refund("F-1", 60_000)).await;
    assert_eq!(r.status, 201, "{}", r.text);
    approval_id(&refund(&h, OPS_TOKEN, "s1", &big_refund("F-4", 60_000)).await);
    assert_eq!(ran.load(Ordering::SeqCst), 1);
    h.stop().await;
}

#[tokio::test]
async fn held_approvals_are_bounded_in_bytes_and_live_ones_are_kept() {
    bytes_bound_holds(None).await;
}

#[tokio::test]
async fn held_approvals_are_bounded_in_bytes_across_pods_with_redis() {
    if !redis::available() {
        return;
    }
    let server = Server::start(&[]).await;
    bytes_bound_holds(Some(server.url())).await;
    // The count bound holds for the Deployment too.
    let (backend, _) = mk_backend().await;
    let h = bounded(&backend, Some(server.url()), 2, 1 << 20).await;
    let r = refund(&h, OPS_TOKEN, "s9", &big_refund("G-1", 10)).await;
    r.assert_refused("STATE_UNAVAILABLE", 503);
    assert!(r.text.contains("maxPending"), "{}", r.text);
    h.stop().await;
}

/// Every page of `GET /approvals?limit=…` (plus `extra`) as `who`, followed to the end:
/// the ids listed, in order, and the pages' sizes.
async fn walk(h: &Harness, who: &str, limit: usize, extra: &str) -> (Vec<String>, Vec<usize>) {
    let (mut ids, mut sizes) = (Vec::new(), Vec::new());
    let mut cursor = String::new();
    loop {
        let path = format!("/approvals?limit={limit}{extra}{cursor}");
        let page = api(h, "GET", &path, Some(who), "").await;
        assert_eq!(page.status, 200, "{}", page.text);
        let items = page.json["approvals"].as_array().unwrap();
        for item in items {
            assert!(item.get("arguments").is_none(), "{item}");
            ids.push(item["id"].as_str().unwrap().to_string());
        }
        sizes.push(items.len());
        match page.json["nextCursor"].as_str() {
            Some(next) => cursor = format!("&cursor={next}"),
            None => return (ids, sizes),
        }
        assert!(sizes.len() < 100, "the pages never end");
    }
}

async fn listings_page(redis: Option<String>) {
    let (backend, _) = mk_backend().await;
    let h = bounded(&backend, redis, 10_000, 64 << 20).await;
    let mut created = Vec::new();
    for i in 0..230 {
        let body = big_refund(&format!("P-{i}"), 1000);
        created.push(approval_id(&refund(&h, OPS_TOKEN, "s1", &body).await));
    }
    decide(&h, &created[7], "deny").await;
    let (ids, sizes) = walk(&h, ALICE, 100, "").await;
    assert_eq!(sizes[..3], [100, 100, 30], "{sizes:?}");
    // Every approval once (those of one millisecond in id order, newest first).
    let listed: std::collections::BTreeSet<&String> = ids.iter().collect();
    assert_eq!(listed.len(), ids.len(), "an approval listed twice");
    assert!(
        listed == created.iter().collect(),
        "listed and created differ"
    );
    // The default page is 100; the status filter pages too.
    let first = api(&h, "GET", "/approvals", Some(ALICE), "").await;
    assert_eq!(first.json["approvals"].as_array().unwrap().len(), 100);
    let (pending, _) = walk(&h, ALICE, 50, "&status=pending").await;
    assert_eq!(pending.len(), 229);
    let (denied, _) = walk(&h, ALICE, 1000, "&status=denied").await;
    assert_eq!(denied, [created[7].clone()]);
    // An approver outside the groups pages through nothing.
    let (none, _) = walk(&h, MALLORY, 100, "").await;
    assert!(none.is_empty());
    for bad in [
        "?limit=0",
        "?limit=1001",
        "?limit=ten",
        "?cursor=nope",
        "?cursor=1_a%2Fb",
    ] {
        let r = api(&h, "GET", &format!("/approvals{bad}"), Some(ALICE), "").await;
        assert_eq!(
            (r.status, r.code()),
            (400, "MALFORMED_REQUEST"),
            "{bad}: {}",
            r.text
        );
    }
    h.stop().await;
}

#[tokio::test]
async fn listings_page_through_approvals_without_their_arguments() {
    listings_page(None).await;
}

#[tokio::test]
async fn listings_page_through_shared_approvals_without_their_arguments() {
    if !redis::available() {
        return;
    }
    let server = Server::start(&[]).await;
    listings_page(Some(server.url())).await;
}
