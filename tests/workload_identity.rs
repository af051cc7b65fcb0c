//! Workload identity (DESIGN §15): an agent pod's projected ServiceAccount token is its
//! credential, verified with the keys the API server publishes for its service-account
//! issuer. Against the stand-in API server (`common::fake_apiserver`), which serves the
//! issuer discovery document and keys only to the sidecar's own bearer token: a valid
//! token, rotation, an API server outage, wrong audience, wrong key, expired, another
//! issuer, both spellings of a ServiceAccount in a policy, and the reserved prefix.

mod common;

use common::fake_apiserver::{FakeApiServer, ISSUER_CONFIGURATION, ISSUER_KEYS};
use common::keys::*;
use common::*;
use serde_json::{json, Value};
use std::time::Duration;
use toolgate::identity::tokens::digest_hex;

const CLUSTER: &str = "https://kubernetes.default.svc.cluster.local";
/// The sidecar's own ServiceAccount token, as the kubeconfig carries it.
const SIDECAR_TOKEN: &str = "sidecar-sa-token";

/// ops-bot, named the short way, may read logs from its own Deployment's pods only; the
/// reporter, named the cluster's way, may read logs.
const POLICIES: &str = r#"
apiVersion: toolgate.dev/v1alpha1
kind: AgentPolicy
metadata: {name: ops-bot}
spec:
  agents: ["serviceaccount:agents/ops-bot"]
  tools:
    - name: read_logs
      rules:
        - name: from-its-own-pods
          expr: 'agent.claims["kubernetes.io"].pod.name.startsWith("ops-bot-")'
---
apiVersion: toolgate.dev/v1alpha1
kind: AgentPolicy
metadata: {name: reporter}
spec:
  agents: ["system:serviceaccount:reports:reporter"]
  tools: [{name: read_logs}]
"#;

/// What the kubelet puts in a projected token for `namespace/name`.
fn sa_claims(namespace: &str, name: &str, audience: &str) -> Value {
    json!({
        "iss": CLUSTER,
        "sub": format!("system:serviceaccount:{namespace}:{name}"),
        "aud": [audience],
        "iat": now(), "nbf": now(), "exp": now() + 600,
        "kubernetes.io": {
            "namespace": namespace,
            "pod": {"name": format!("{name}-7d9f8"), "uid": "0b6d6a5e-pod"},
            "serviceaccount": {"name": name, "uid": "5c1e9a2f-sa"},
        },
    })
}

struct Cluster {
    api: FakeApiServer,
    key: SigningKey,
    h: Harness,
    backend: Backend,
}

async fn mk_cluster(tokens: &str) -> Cluster {
    let api = FakeApiServer::start().await;
    let key = SigningKey::rsa("sa-1");
    api.serve_issuer(CLUSTER, &jwks(&[&key]), SIDECAR_TOKEN);
    let kubeconfig = api.kubeconfig_as("default", SIDECAR_TOKEN);
    let backend = Backend::example().await;
    let tokens = tokens.to_string();
    let h = Harness::start(
        backend.addr,
        Options {
            policies: format!("{CONTRACTS}---{POLICIES}"),
            tweak: Box::new(move |s| {
                s.identity.kubernetes.enabled = true;
                s.identity.kubernetes.audiences = vec!["toolgate".into()];
                s.identity.kubernetes.kubeconfig = Some(kubeconfig);
                if !tokens.is_empty() {
                    let path = s.identity.tokens.clone().unwrap();
                    std::fs::write(&path, &tokens).unwrap();
                } else {
                    s.identity.tokens = None;
                }
            }),
            ..Options::default()
        },
    )
    .await;
    Cluster {
        api,
        key,
        h,
        backend,
    }
}

impl Cluster {
    async fn call(&self, token: &str) -> Reply {
        self.h
            .call("GET", "/logs/orders", Some(token), &[], "")
            .await
    }
}

#[tokio::test]
async fn a_projected_service_account_token_names_the_agent() {
    let c = mk_cluster("").await;
    let r = c
        .call(&c.key.sign(&sa_claims("agents", "ops-bot", "toolgate")))
        .await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(
        c.backend.last().headers["x-toolgate-agent"],
        "system:serviceaccount:agents:ops-bot"
    );
    // Named the cluster's way in its policy, too.
    let r = c
        .call(&c.key.sign(&sa_claims("reports", "reporter", "toolgate")))
        .await;
    assert_eq!(r.status, 200, "{}", r.text);
    // A ServiceAccount no policy names is governed by none.
    c.call(&c.key.sign(&sa_claims("agents", "intruder", "toolgate")))
        .await
        .assert_refused("TOOL_NOT_ALLOWED", 403);
    // The token's claims reach the rules: ops-bot's grant holds in its own pods only.
    let mut shell = sa_claims("agents", "ops-bot", "toolgate");
    shell["kubernetes.io"]["pod"]["name"] = json!("debug-shell");
    let r = c.call(&c.key.sign(&shell)).await;
    r.assert_refused("POLICY_DENIED", 403);
    assert_eq!(r.json["error"]["rule"], "from-its-own-pods");
    // A token whose kubernetes.io claim disagrees with sub is no ServiceAccount's.
    let mut elsewhere = sa_claims("agents", "ops-bot", "toolgate");
    elsewhere["kubernetes.io"]["namespace"] = json!("default");
    c.call(&c.key.sign(&elsewhere))
        .await
        .assert_refused("UNAUTHENTICATED", 401);

    // The sidecar read the issuer with its own credentials, once.
    let discovery = c.api.requests_to(ISSUER_CONFIGURATION);
    assert_eq!(discovery.len(), 1);
    assert!(c
        .api
        .requests_to(ISSUER_KEYS)
        .iter()
        .chain(&discovery)
        .all(|r| r.token.as_deref() == Some(SIDECAR_TOKEN)));
    // One canonical id in the audit log, vouched for by `kubernetes`.
    let audit = std::fs::read_to_string(c.h.audit_file()).unwrap();
    let calls = audit_calls(&audit);
    assert_eq!(calls[0]["agent"], "system:serviceaccount:agents:ops-bot");
    assert_eq!(calls[0]["issuer"], "kubernetes");
    assert_eq!(calls[1]["agent"], "system:serviceaccount:reports:reporter");
    assert!(calls.iter().all(|c| !c["agent"]
        .as_str()
        .unwrap_or("")
        .starts_with("serviceaccount:")));
    c.h.stop().await;
}

#[tokio::test]
async fn rotation_outage_and_the_tokens_that_never_pass() {
    let c = mk_cluster("").await;
    let ops = |key: &SigningKey| key.sign(&sa_claims("agents", "ops-bot", "toolgate"));
    assert_eq!(c.call(&ops(&c.key)).await.status, 200);
    let keys_read = c.api.requests_to(ISSUER_KEYS).len();

    // The API server rotates its signing key: the first token of the new key refreshes.
    let rotated = SigningKey::rsa("sa-2");
    c.api.rotate_issuer_keys(&jwks(&[&c.key, &rotated]));
    let r = c.call(&ops(&rotated)).await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(c.api.requests_to(ISSUER_KEYS).len(), keys_read + 1);

    // Refused, each without asking the API server again: the wrong audience (the pod's
    // API token), a key the cluster never had (same kid), an expired token, a token of
    // another issuer, and a token of an unknown kid within the refresh interval.
    let mut api_token = sa_claims("agents", "ops-bot", "https://kubernetes.default.svc");
    api_token["aud"] = json!(["https://kubernetes.default.svc", "k3s"]);
    let mut expired = sa_claims("agents", "ops-bot", "toolgate");
    expired["exp"] = json!(now() - 120);
    let mut foreign = sa_claims("agents", "ops-bot", "toolgate");
    foreign["iss"] = json!("https://other-cluster.example");
    for (what, token) in [
        ("wrong audience", rotated.sign(&api_token)),
        (
            "wrong key",
            SigningKey::rsa("sa-2").sign(&sa_claims("agents", "ops-bot", "toolgate")),
        ),
        ("expired", rotated.sign(&expired)),
        ("another issuer", rotated.sign(&foreign)),
        (
            "unknown kid",
            SigningKey::ec("sa-3").sign(&sa_claims("agents", "ops-bot", "toolgate")),
        ),
    ] {
        let r = c.call(&token).await;
        assert_eq!(r.status, 401, "{what}: {}", r.text);
    }
    assert_eq!(c.api.requests_to(ISSUER_KEYS).len(), keys_read + 1);

    // The API server goes away: the keys in hand keep serving new tokens.
    c.api.set_down(true);
    let mut other_pod = sa_claims("agents", "ops-bot", "toolgate");
    other_pod["kubernetes.io"]["pod"]["name"] = json!("ops-bot-other");
    let r = c.call(&rotated.sign(&other_pod)).await;
    assert_eq!(r.status, 200, "{}", r.text);
    let (_, metrics) = c.h.get_admin("/metrics").await;
    assert!(
        metrics.contains(r#"toolgate_jwks_refresh_total{issuer="kubernetes",result="ok"} 2"#),
        "{metrics}"
    );
    c.h.stop().await;
}

#[tokio::test]
async fn no_other_source_may_name_a_service_account() {
    // The token file names a ServiceAccount's id: that id is workload identity's alone.
    let tokens = format!(
        "ops-bot: {}\n\"system:serviceaccount:agents:ops-bot\": {}\n",
        digest_hex(OPS_TOKEN),
        digest_hex("borrowed-sa")
    );
    let c = mk_cluster(&tokens).await;
    c.call("borrowed-sa")
        .await
        .assert_refused("UNAUTHENTICATED", 401);
    // The token file and the cluster serve side by side.
    c.call(OPS_TOKEN)
        .await
        .assert_refused("TOOL_NOT_ALLOWED", 403);
    let r = c
        .call(&c.key.sign(&sa_claims("agents", "ops-bot", "toolgate")))
        .await;
    assert_eq!(r.status, 200, "{}", r.text);
    c.h.stop().await;
}

#[tokio::test]
async fn a_sidecar_without_discovery_rights_or_api_server_starts_and_recovers() {
    let api = FakeApiServer::start().await;
    let key = SigningKey::rsa("sa-1");
    api.serve_issuer(CLUSTER, &jwks(&[&key]), SIDECAR_TOKEN);
    // A kubeconfig with another token: the API server answers 401, nothing is learnt.
    let unauthorized = api.kubeconfig_as("default", "not-the-sidecar");
    let backend = Backend::example().await;
    let started = std::time::Instant::now();
    let h = Harness::start(
        backend.addr,
        Options {
            policies: format!("{CONTRACTS}---{POLICIES}"),
            tweak: Box::new(move |s| {
                s.identity.kubernetes.enabled = true;
                s.identity.kubernetes.kubeconfig = Some(unauthorized);
            }),
            ..Options::default()
        },
    )
    .await;
    assert!(started.elapsed() < Duration::from_secs(10));
    let (_, metrics) = h.get_admin("/metrics").await;
    assert!(
        metrics.contains(r#"toolgate_jwks_refresh_total{issuer="kubernetes",result="error"} 1"#),
        "{metrics}"
    );
    h.stop().await;

    // Down at start, up later: the first token that needs the keys fetches them.
    api.set_down(true);
    let kubeconfig = api.kubeconfig_as("default", SIDECAR_TOKEN);
    let h = Harness::start(
        backend.addr,
        Options {
            policies: format!("{CONTRACTS}---{POLICIES}"),
            tweak: Box::new(move |s| {
                s.identity.kubernetes.enabled = true;
                s.identity.kubernetes.kubeconfig = Some(kubeconfig);
            }),
            ..Options::default()
        },
    )
    .await;
    api.set_down(false);
    let token = key.sign(&sa_claims("agents", "ops-bot", "toolgate"));
    let r = h.call("GET", "/logs/orders", Some(&token), &[], "").await;
    assert_eq!(r.status, 200, "{}", r.text);
    h.stop().await;
}

#[test]
fn a_policy_naming_a_malformed_service_account_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("policy.yaml");
    std::fs::write(
        &file,
        format!(
            "{CONTRACTS}---\napiVersion: toolgate.dev/v1alpha1\nkind: AgentPolicy\nmetadata: {{name: typo}}\nspec:\n  agents: [\"serviceaccount:agents:ops-bot\"]\n  tools: [{{name: read_logs}}]\n"
        ),
    )
    .unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_toolgate"))
        .arg("check")
        .arg(&file)
        .output()
        .unwrap();
    let text =
        String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{text}");
    assert!(text.contains("spec.agents[0]"), "{text}");
    assert!(text.contains("serviceaccount:<namespace>/<name>"), "{text}");
}

/// docs/install.md's agent pod is one Kubernetes accepts, and its token is requested for
/// the audience injected sidecars accept by default.
#[test]
fn the_documented_agent_pod_requests_a_token_the_sidecar_accepts() {
    let doc =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/install.md")).unwrap();
    let section = doc
        .split("### The agent's identity")
        .nth(1)
        .expect("docs/install.md has the section");
    let yaml = section
        .split("```yaml\n")
        .nth(1)
        .and_then(|rest| rest.split("```").next())
        .unwrap();
    common::kube_tools::validate(yaml, "docs/install.md agent pod");
    let objects: Vec<Value> = serde_yaml::Deserializer::from_str(yaml)
        .map(|d| serde::Deserialize::deserialize(d).unwrap())
        .collect();
    let pod = &objects[1]["spec"]["template"]["spec"];
    let token = &pod["volumes"][0]["projected"]["sources"][0]["serviceAccountToken"];
    let defaults = toolgate::inject::settings::InjectSettings::default();
    assert!(defaults.sidecar.workload_identity.enabled);
    assert_eq!(
        token["audience"].as_str(),
        defaults
            .sidecar
            .workload_identity
            .audiences
            .first()
            .map(String::as_str)
    );
    assert_eq!(pod["serviceAccountName"], objects[0]["metadata"]["name"]);
    // The policy example names that ServiceAccount.
    let agent = format!(
        "serviceaccount:{}/{}",
        objects[0]["metadata"]["namespace"].as_str().unwrap(),
        objects[0]["metadata"]["name"].as_str().unwrap()
    );
    assert!(doc.contains(&format!("agents: [\"{agent}\"]")), "{agent}");
}

/// The first JWT issuer may keep bare ids beside workload identity, but not ids of the
/// ServiceAccount form, in either spelling; each token goes to its own source.
#[tokio::test]
async fn a_bare_jwt_issuer_beside_the_cluster_cannot_name_a_service_account() {
    let api = FakeApiServer::start().await;
    let sa_key = SigningKey::rsa("sa-1");
    api.serve_issuer(CLUSTER, &jwks(&[&sa_key]), SIDECAR_TOKEN);
    let kubeconfig = api.kubeconfig_as("default", SIDECAR_TOKEN);
    let dir = tempfile::tempdir().unwrap();
    let idp = SigningKey::ec("idp-1");
    let idp_jwks = dir.path().join("idp.json");
    std::fs::write(&idp_jwks, jwks(&[&idp])).unwrap();
    let backend = Backend::example().await;
    let h = Harness::start(
        backend.addr,
        Options {
            policies: format!(
                "{CONTRACTS}---{POLICIES}---\napiVersion: toolgate.dev/v1alpha1\nkind: AgentPolicy\nmetadata: {{name: idp-bot}}\nspec:\n  agents: [idp-bot]\n  tools: [{{name: read_logs}}]\n"
            ),
            tweak: Box::new(move |s| {
                s.identity.tokens = None;
                s.identity.kubernetes.enabled = true;
                s.identity.kubernetes.kubeconfig = Some(kubeconfig);
                s.identity.jwt = serde_json::from_value(json!([
                    {"issuer": "https://idp.example", "audience": "toolgate", "jwks": idp_jwks}
                ]))
                .unwrap();
            }),
            ..Options::default()
        },
    )
    .await;
    let idp_says = |sub: &str| {
        idp.sign(&json!({"iss": "https://idp.example", "aud": "toolgate", "sub": sub, "exp": now() + 300}))
    };
    let call = |token: String| {
        let h = &h;
        async move { h.call("GET", "/logs/orders", Some(&token), &[], "").await }
    };
    let r = call(idp_says("idp-bot")).await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(backend.last().headers["x-toolgate-agent"], "idp-bot");
    let r = call(sa_key.sign(&sa_claims("reports", "reporter", "toolgate"))).await;
    assert_eq!(r.status, 200, "{}", r.text);
    for borrowed in [
        "system:serviceaccount:reports:reporter",
        "serviceaccount:reports/reporter",
    ] {
        call(idp_says(borrowed))
            .await
            .assert_refused("UNAUTHENTICATED", 401);
    }
    h.stop().await;
}
