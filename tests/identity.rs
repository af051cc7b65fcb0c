//! Calls checked against who the caller is and what task was confirmed: task tokens,
//! agent JWTs, client certificates, shadow mode. Keys and certificates are made per test.

mod common;

use common::keys::*;
use common::*;
use serde_json::json;

const TASK_RULES: &str = r#"
apiVersion: toolgate.dev/v1alpha1
kind: AgentPolicy
metadata: {name: ops-bot}
spec:
  agents: [ops-bot]
  tools:
    - name: read_logs
      rules:
        - name: within-task-window
          expr: "args.window_minutes <= task.window_minutes && args.service == task.service"
          message: The window is wider than the confirmed task allows.
          recovery: ask_user
"#;

struct Orchestrator {
    rsa: SigningKey,
    ec: SigningKey,
    ed: SigningKey,
}

fn mk_orchestrator(dir: &std::path::Path) -> (Orchestrator, std::path::PathBuf) {
    let o = Orchestrator {
        rsa: SigningKey::rsa("o-rsa"),
        ec: SigningKey::ec("o-ec"),
        ed: SigningKey::ed("o-ed"),
    };
    let path = dir.join("task-jwks.json");
    std::fs::write(&path, jwks(&[&o.rsa, &o.ec, &o.ed])).unwrap();
    (o, path)
}

/// A task confirmed for ops-bot.
fn task_claims(window: u64, service: &str) -> serde_json::Value {
    json!({"iss": "orchestrator", "exp": now() + 300, "agent": "ops-bot", "window_minutes": window, "service": service})
}

#[tokio::test]
async fn task_token_binds_arguments_to_the_confirmed_task() {
    let keys_dir = tempfile::tempdir().unwrap();
    let (orchestrator, jwks_path) = mk_orchestrator(keys_dir.path());
    let backend = Backend::example().await;
    let h = Harness::start(
        backend.addr,
        Options {
            policies: format!("{CONTRACTS}---{TASK_RULES}"),
            tweak: Box::new(move |s| {
                s.identity.task_issuers = vec![toolgate::config::TaskIssuer {
                    issuer: "orchestrator".into(),
                    jwks: Some(jwks_path.into()),
                    discovery: false,
                    audience: None,
                    require_agent: true,
                }];
            }),
            ..Options::default()
        },
    )
    .await;
    // The user confirmed 30 minutes of the orders logs; RS256, ES256 and EdDSA all work.
    for key in [&orchestrator.rsa, &orchestrator.ec, &orchestrator.ed] {
        let task = key.sign(&task_claims(30, "orders"));
        let r = h
            .call(
                "GET",
                "/logs/orders?window_minutes=30",
                Some(OPS_TOKEN),
                &[("x-toolgate-task", &task)],
                "",
            )
            .await;
        assert_eq!(r.status, 200, "{:?}: {}", key.alg, r.text);
    }
    let task = orchestrator.rsa.sign(&task_claims(30, "orders"));
    // The model asks for 43,200 minutes: the interface allows it, the task does not.
    let r = h
        .call(
            "GET",
            "/logs/orders?window_minutes=43200",
            Some(OPS_TOKEN),
            &[("x-toolgate-task", &task)],
            "",
        )
        .await;
    r.assert_refused("OUT_OF_TASK_SCOPE", 403);
    assert_eq!(r.json["error"]["recovery"], "ask_user");
    assert_eq!(r.json["error"]["rule"], "within-task-window");
    assert_eq!(
        r.json["error"]["message"],
        "The window is wider than the confirmed task allows."
    );
    // Another service than the task's.
    let r = h
        .call(
            "GET",
            "/logs/payments?window_minutes=30",
            Some(OPS_TOKEN),
            &[("x-toolgate-task", &task)],
            "",
        )
        .await;
    r.assert_refused("OUT_OF_TASK_SCOPE", 403);
    // No task token, an expired one, a forged one, one bound to another agent.
    let expired = orchestrator.rsa.sign(&json!({"iss": "orchestrator", "exp": now() - 120, "window_minutes": 30, "service": "orders"}));
    let forged = SigningKey::ec("o-ec").sign(&task_claims(30, "orders"));
    let foreign = orchestrator.rsa.sign(&json!({"iss": "orchestrator", "exp": now() + 300, "agent": "other-bot", "window_minutes": 30, "service": "orders"}));
    for headers in [
        vec![],
        vec![("x-toolgate-task", expired.as_str())],
        vec![("x-toolgate-task", forged.as_str())],
        vec![("x-toolgate-task", foreign.as_str())],
    ] {
        let r = h
            .call(
                "GET",
                "/logs/orders?window_minutes=30",
                Some(OPS_TOKEN),
                &headers,
                "",
            )
            .await;
        r.assert_refused("OUT_OF_TASK_SCOPE", 403);
    }
    assert_eq!(backend.count(), 3);
    assert!(
        backend.last().headers.get("x-toolgate-task").is_none(),
        "the task token stays at the gateway"
    );
    h.stop().await;
}

const TENANT_RULES: &str = r#"
apiVersion: toolgate.dev/v1alpha1
kind: ToolContract
metadata: {name: list-invoices}
spec:
  tool: list_invoices
  http: {method: GET, path: "/invoices/{tenant}"}
  input: {type: object, required: [tenant], properties: {tenant: {type: string}}}
---
apiVersion: toolgate.dev/v1alpha1
kind: AgentPolicy
metadata: {name: billing-bot}
spec:
  agents: [billing-bot]
  tools:
    - name: list_invoices
      rules:
        - name: own-tenant-only
          expr: "args.tenant == agent.claims.tenant"
          message: Agents may only read their own tenant's invoices.
"#;

#[tokio::test]
async fn jwt_identity_binds_arguments_to_claims() {
    let keys_dir = tempfile::tempdir().unwrap();
    let idp = SigningKey::rsa("idp-1");
    let jwks_path = keys_dir.path().join("jwks.json");
    std::fs::write(&jwks_path, jwks(&[&idp])).unwrap();
    let backend = Backend::example().await;
    let h = Harness::start(
        backend.addr,
        Options {
            policies: TENANT_RULES.to_string(),
            tweak: Box::new(move |s| {
                // The identity provider is the only source of agent ids.
                s.identity.tokens = None;
                s.identity.jwt = vec![toolgate::config::JwtIssuer {
                    issuer: "https://idp.example".into(),
                    audience: "toolgate".into(),
                    jwks: Some(jwks_path.into()),
                    discovery: false,
                    agent_claim: "sub".into(),
                    agent_prefix: None,
                }];
            }),
            ..Options::default()
        },
    )
    .await;
    let claims = |tenant: &str| json!({"iss": "https://idp.example", "aud": "toolgate", "sub": "billing-bot", "tenant": tenant, "exp": now() + 300});
    let acme = idp.sign(&claims("acme"));
    let r = h.call("GET", "/invoices/acme", Some(&acme), &[], "").await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(backend.last().headers["x-toolgate-agent"], "billing-bot");
    // A token for another tenant can't read acme, whatever the arguments claim.
    let globex = idp.sign(&claims("globex"));
    let r = h
        .call("GET", "/invoices/acme", Some(&globex), &[], "")
        .await;
    r.assert_refused("POLICY_DENIED", 403);
    assert_eq!(r.json["error"]["rule"], "own-tenant-only");
    assert_eq!(r.json["error"]["recovery"], "stop");
    // Identity supplied in the arguments is just an argument: it never satisfies the rule.
    let spoof = r#"{"agent": {"claims": {"tenant": "acme"}}}"#;
    let r = h
        .call(
            "GET",
            "/invoices/acme?agent=x",
            Some(&globex),
            &[("content-type", "application/json")],
            spoof,
        )
        .await;
    assert_ne!(r.status, 200, "{}", r.text);
    // Expired, wrong audience, alg none, HS256 signed with the public key (key confusion),
    // and a valid signature from an unknown key.
    let expired = idp.sign(&json!({"iss": "https://idp.example", "aud": "toolgate", "sub": "billing-bot", "tenant": "acme", "exp": now() - 120}));
    let wrong_aud = idp.sign(&json!({"iss": "https://idp.example", "aud": "elsewhere", "sub": "billing-bot", "tenant": "acme", "exp": now() + 300}));
    let none = unsigned(&claims("acme"));
    let confused = hs256_with(idp.jwk.to_string().as_bytes(), &claims("acme"));
    let stranger = SigningKey::rsa("idp-1").sign(&claims("acme"));
    for token in [expired, wrong_aud, none, confused, stranger] {
        h.call("GET", "/invoices/acme", Some(&token), &[], "")
            .await
            .assert_refused("UNAUTHENTICATED", 401);
    }
    assert_eq!(backend.count(), 1);
    h.stop().await;
}

const SHADOW: &str = r#"
apiVersion: toolgate.dev/v1alpha1
kind: AgentPolicy
metadata: {name: ops-bot}
spec:
  agents: [ops-bot]
  mode: shadow
  tools:
    - name: read_logs
      rules: [{name: short-windows, expr: "args.window_minutes <= 60"}]
---
apiVersion: toolgate.dev/v1alpha1
kind: AgentPolicy
metadata: {name: retired-bot}
spec:
  agents: [retired-bot]
  mode: shadow
  enabled: false
  tools: [{name: read_logs}]
"#;

#[tokio::test]
async fn shadow_mode_records_but_forwards_only_when_the_sidecar_allows_it() {
    for allow_shadow in [true, false] {
        let backend = Backend::example().await;
        let h = Harness::start(
            backend.addr,
            Options {
                policies: format!("{CONTRACTS}---{SHADOW}"),
                tweak: Box::new(move |s| s.policies.allow_shadow = allow_shadow),
                ..Options::default()
            },
        )
        .await;
        let r = h
            .call(
                "GET",
                "/logs/orders?window_minutes=600",
                Some(OPS_TOKEN),
                &[],
                "",
            )
            .await;
        if allow_shadow {
            assert_eq!(r.status, 200, "{}", r.text);
            assert_eq!(r.header("x-toolgate-decision"), "shadow-deny");
            assert_eq!(r.header("x-toolgate-code"), "POLICY_DENIED");
            assert_eq!(backend.count(), 1);
        } else {
            r.assert_refused("POLICY_DENIED", 403);
            assert_eq!(
                backend.count(),
                0,
                "a policy alone can't switch enforcement off"
            );
        }
        // The kill switch stops everything, shadow or not.
        h.call("GET", "/logs/orders", Some(RETIRED_TOKEN), &[], "")
            .await
            .assert_refused("AGENT_DISABLED", 403);
        let dir = h.stop_keeping_files().await;
        let audit = std::fs::read_to_string(dir.path().join("audit.log")).unwrap();
        let first = audit_calls(&audit).remove(0);
        assert_eq!(
            first["decision"],
            if allow_shadow { "shadow-deny" } else { "deny" }
        );
        assert_eq!(first["rule"], "short-windows");
    }
}

/// ops-bot and stranger may both read logs within a confirmed task.
const BOUND_TASK_RULES: &str = r#"
apiVersion: toolgate.dev/v1alpha1
kind: AgentPolicy
metadata: {name: ops-bot}
spec:
  agents: [ops-bot]
  tools:
    - name: read_logs
      rules:
        - name: within-task
          expr: "args.service == task.service"
---
apiVersion: toolgate.dev/v1alpha1
kind: AgentPolicy
metadata: {name: stranger}
spec:
  agents: [stranger]
  tools:
    - name: read_logs
      rules:
        - name: within-task
          expr: "args.service == task.service"
"#;

/// Task issuers as a settings file lists them (built through serde, as `toolgate run`
/// reads them).
fn mk_task_issuers(list: serde_json::Value) -> Vec<toolgate::config::TaskIssuer> {
    serde_json::from_value(list).expect("task issuers")
}

/// A task token from `key` (issuer `iss`) for the orders logs, with `agent` as its
/// `agent` claim (`Value::Null`: no claim at all).
fn mk_task(key: &SigningKey, iss: &str, agent: serde_json::Value) -> String {
    let mut claims = json!({"iss": iss, "exp": now() + 300, "service": "orders"});
    if !agent.is_null() {
        claims["agent"] = agent;
    }
    key.sign(&claims)
}

async fn read_in_task(h: &Harness, token: &str, task: &str) -> Reply {
    h.call(
        "GET",
        "/logs/orders",
        Some(token),
        &[("x-toolgate-task", task)],
        "",
    )
    .await
}

/// A task token serves exactly the agents its `agent` claim names (a string or an array
/// of strings): any other agent presenting it, and a token that names no agent or whose
/// claim holds anything but strings, is no task.
#[tokio::test]
async fn task_tokens_serve_only_the_agents_they_name() {
    let keys_dir = tempfile::tempdir().unwrap();
    let orchestrator = SigningKey::ec("o-ec");
    let jwks_path = keys_dir.path().join("task-jwks.json");
    std::fs::write(&jwks_path, jwks(&[&orchestrator])).unwrap();
    let backend = Backend::example().await;
    let issuers = mk_task_issuers(json!([{"issuer": "orchestrator", "jwks": jwks_path}]));
    let h = Harness::start(
        backend.addr,
        Options {
            policies: format!("{CONTRACTS}---{BOUND_TASK_RULES}"),
            tweak: Box::new(move |s| s.identity.task_issuers = issuers),
            ..Options::default()
        },
    )
    .await;
    let task = |agent: serde_json::Value| mk_task(&orchestrator, "orchestrator", agent);
    let cases = [
        (OPS_TOKEN, json!("ops-bot"), 200),
        (STRANGER_TOKEN, json!("ops-bot"), 403),
        (OPS_TOKEN, json!(["other-bot", "ops-bot"]), 200),
        (STRANGER_TOKEN, json!(["other-bot", "ops-bot"]), 403),
        (OPS_TOKEN, json!(["other-bot"]), 403),
        (OPS_TOKEN, json!([]), 403),
        (OPS_TOKEN, json!("OPS-BOT"), 403),
        (OPS_TOKEN, json!(["ops-bot "]), 403),
        // Junk in the claim binds to no one, even beside the caller's id.
        (OPS_TOKEN, json!(["ops-bot", 7]), 403),
        (OPS_TOKEN, json!(["ops-bot", ["ops-bot"]]), 403),
        (OPS_TOKEN, json!({"id": "ops-bot"}), 403),
        (OPS_TOKEN, json!(true), 403),
        // No agent claim: the token is anyone's, so it is no one's.
        (OPS_TOKEN, serde_json::Value::Null, 403),
        (STRANGER_TOKEN, serde_json::Value::Null, 403),
    ];
    let mut allowed = 0;
    for (token, agent, want) in cases {
        let r = read_in_task(&h, token, &task(agent.clone())).await;
        if want == 200 {
            assert_eq!(r.status, 200, "{token} {agent}: {}", r.text);
            allowed += 1;
        } else {
            r.assert_refused("OUT_OF_TASK_SCOPE", 403);
        }
    }
    // An explicit `"agent": null` is a claim of the wrong shape, not an absent one.
    let null_agent = orchestrator.sign(
        &json!({"iss": "orchestrator", "exp": now() + 300, "service": "orders", "agent": null}),
    );
    read_in_task(&h, OPS_TOKEN, &null_agent)
        .await
        .assert_refused("OUT_OF_TASK_SCOPE", 403);
    // Verified once (and cached) for its agent, the token still serves no other.
    let ops_task = task(json!("ops-bot"));
    assert_eq!(read_in_task(&h, OPS_TOKEN, &ops_task).await.status, 200);
    read_in_task(&h, STRANGER_TOKEN, &ops_task)
        .await
        .assert_refused("OUT_OF_TASK_SCOPE", 403);
    // A task for both serves both.
    let shared = task(json!(["stranger", "ops-bot"]));
    for token in [OPS_TOKEN, STRANGER_TOKEN, OPS_TOKEN] {
        let r = read_in_task(&h, token, &shared).await;
        assert_eq!(r.status, 200, "{token}: {}", r.text);
    }
    assert_eq!(
        backend.count(),
        allowed + 4,
        "refused calls never reach the backend"
    );
    h.stop().await;
}

/// `requireAgent: false` lets one issuer's tokens without an `agent` claim serve any
/// agent; a claim that is there still binds, and other issuers keep the rule.
#[tokio::test]
async fn an_issuer_may_waive_the_agent_claim_for_its_own_tokens() {
    let keys_dir = tempfile::tempdir().unwrap();
    let orchestrator = SigningKey::ec("o-ec");
    let scheduler = SigningKey::ec("s-ec");
    let (o_jwks, s_jwks) = (
        keys_dir.path().join("o.json"),
        keys_dir.path().join("s.json"),
    );
    std::fs::write(&o_jwks, jwks(&[&orchestrator])).unwrap();
    std::fs::write(&s_jwks, jwks(&[&scheduler])).unwrap();
    let backend = Backend::example().await;
    let issuers = mk_task_issuers(json!([
        {"issuer": "orchestrator", "jwks": o_jwks},
        {"issuer": "batch-scheduler", "jwks": s_jwks, "requireAgent": false},
    ]));
    assert!(issuers[0].require_agent, "the default");
    let h = Harness::start(
        backend.addr,
        Options {
            policies: format!("{CONTRACTS}---{BOUND_TASK_RULES}"),
            tweak: Box::new(move |s| s.identity.task_issuers = issuers),
            ..Options::default()
        },
    )
    .await;
    let unbound = mk_task(&scheduler, "batch-scheduler", serde_json::Value::Null);
    for token in [OPS_TOKEN, STRANGER_TOKEN] {
        let r = read_in_task(&h, token, &unbound).await;
        assert_eq!(r.status, 200, "{token}: {}", r.text);
    }
    for task in [
        mk_task(&scheduler, "batch-scheduler", json!("other-bot")),
        mk_task(&scheduler, "batch-scheduler", json!(["ops-bot", 1])),
        mk_task(&orchestrator, "orchestrator", serde_json::Value::Null),
    ] {
        read_in_task(&h, OPS_TOKEN, &task)
            .await
            .assert_refused("OUT_OF_TASK_SCOPE", 403);
    }
    assert_eq!(backend.count(), 2);
    h.stop().await;
}

/// The admin listener, like the agent port, refuses a request with two `Authorization`
/// headers: the approval API would otherwise take the first, and something in front of
/// or behind it the last.
#[tokio::test]
async fn two_authorization_headers_are_refused_on_both_listeners() {
    const ALICE: &str = "alice-approver-token";
    let files = tempfile::tempdir().unwrap();
    let approvers = files.path().join("approvers.yaml");
    std::fs::write(
        &approvers,
        format!(
            "alice: {{sha256: {}, groups: [finance-leads]}}\n",
            toolgate::identity::tokens::digest_hex(ALICE)
        ),
    )
    .unwrap();
    let backend = Backend::example().await;
    let h = Harness::start(
        backend.addr,
        Options {
            tweak: Box::new(move |s| s.approvals.approvers.tokens = Some(approvers)),
            ..Options::default()
        },
    )
    .await;
    let admin = |path: &str, values: &[&str]| {
        let mut request = http::Request::get(format!("{}{path}", h.admin()));
        for value in values {
            request = request.header("authorization", *value);
        }
        let request = request
            .body(http_body_util::Full::new(bytes::Bytes::new()))
            .unwrap();
        let client = h.client.clone();
        async move { Reply::read(client.request(request).await.unwrap()).await }
    };
    let alice = format!("Bearer {ALICE}");
    assert_eq!(admin("/approvals", &[&alice]).await.status, 200);
    let lower = format!("bearer {ALICE}");
    assert_eq!(admin("/approvals", &[&lower]).await.status, 200);
    for values in [
        [alice.as_str(), alice.as_str()],
        [alice.as_str(), "Bearer junk"],
        ["Bearer junk", alice.as_str()],
        [alice.as_str(), "Basic YWxpY2U6eA=="],
    ] {
        for path in ["/approvals", "/approvals/apr-1", "/metrics", "/config"] {
            let r = admin(path, &values).await;
            assert_eq!(r.status, 401, "{path} {values:?}: {}", r.text);
            assert_eq!(r.code(), "UNAUTHENTICATED", "{path}: {}", r.text);
            assert_eq!(r.header("www-authenticate"), "Bearer", "{path}");
        }
    }
    // The agent port: two credentials, even the same one twice, name no one.
    let ops = format!("Bearer {OPS_TOKEN}");
    let r = h
        .call(
            "GET",
            "/logs/orders",
            Some(OPS_TOKEN),
            &[("authorization", &ops)],
            "",
        )
        .await;
    r.assert_refused("UNAUTHENTICATED", 401);
    assert!(r.json["error"]["message"]
        .as_str()
        .unwrap()
        .contains("one Authorization header"));
    assert!(
        r.header("www-authenticate").starts_with("Bearer"),
        "{:?}",
        r.headers
    );
    assert_eq!(backend.count(), 0);
    h.stop().await;
}
