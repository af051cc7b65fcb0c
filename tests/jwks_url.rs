//! JWKS by URL and by discovery (DESIGN §15): keys fetched from a real key server over
//! loopback sockets (HTTP, and HTTPS with a test CA), cached, refreshed when a token names
//! a key the set lacks (one fetch shared by concurrent calls, at most one per interval),
//! kept when the provider goes away or answers slowly, with garbage, an oversized body
//! or an error, and counted in `toolgate_jwks_refresh_total`.
//!
//! The first tests drive an issuer directly with short intervals; the last ones run the
//! sidecar (and the `toolgate` binary, for `SSL_CERT_FILE`) with the real 30 s interval.

mod common;

use common::key_server::{KeyServer, Mode, CONFIGURATION_PATH, JWKS_PATH};
use common::keys::*;
use common::*;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::CertificateDer;
use serde_json::{json, Value};
use std::sync::Arc;
use std::time::{Duration, Instant};
use toolgate::config::KeySource;
use toolgate::identity::fetch::HttpClient;
use toolgate::identity::jwks::{Issuer, JwtError};
use toolgate::identity::remote::{Fetcher, RefreshLabels, Refreshes, Timing};

const IDP: &str = "https://idp.example";

/// Intervals short enough for a test to pass them.
const QUICK: Timing = Timing {
    kid_interval: Duration::from_millis(300),
    wait: Duration::from_secs(2),
    fetch_timeout: Duration::from_secs(1),
    retry_first: Duration::from_secs(60),
    retry_max: Duration::from_secs(60),
};

fn claims(sub: &str) -> Value {
    json!({"iss": IDP, "aud": "toolgate", "sub": sub, "exp": now() + 300})
}

fn count(refreshes: &Refreshes, issuer: &str, result: &'static str) -> u64 {
    refreshes
        .get_or_create(&RefreshLabels {
            issuer: issuer.into(),
            result,
        })
        .get()
}

/// An issuer of `IDP` whose keys are at `source`.
fn mk_issuer(source: KeySource, fetcher: &Fetcher) -> Arc<Issuer> {
    Arc::new(Issuer::load(IDP, Some("toolgate"), &source, fetcher).unwrap())
}

fn mk_issuer_named(
    name: &str,
    source: &KeySource,
    fetcher: &Fetcher,
) -> Result<Arc<Issuer>, String> {
    Issuer::load(name, None, source, fetcher).map(Arc::new)
}

fn url_of(server: &KeyServer) -> KeySource {
    KeySource::Url(server.jwks_url().parse().unwrap())
}

#[tokio::test]
async fn fetched_keys_rotate_and_survive_every_kind_of_outage() {
    let (k1, k2, k3) = (
        SigningKey::ec("k1"),
        SigningKey::ec("k2"),
        SigningKey::ec("k3"),
    );
    let server = KeyServer::start(&[&k1]).await;
    let refreshes = Refreshes::default();
    let fetcher = Fetcher::new(refreshes.clone()).with_timing(QUICK);
    let issuer = mk_issuer(url_of(&server), &fetcher);
    assert!(issuer.first_fetch(Duration::from_secs(5)).await);

    // Known keys: verified with no fetch, however many calls.
    for _ in 0..20 {
        issuer
            .verify_fresh(&k1.sign(&claims("ops-bot")))
            .await
            .unwrap();
    }
    assert_eq!(server.hits(JWKS_PATH), 1);

    // Rotation: the first token of the new key refreshes the set.
    server.set_keys(&[&k2]);
    let claims_k2 = issuer
        .verify_fresh(&k2.sign(&claims("ops-bot")))
        .await
        .unwrap();
    assert_eq!(claims_k2["sub"], "ops-bot");
    assert_eq!(server.hits(JWKS_PATH), 2);
    // Another unknown kid within the interval is refused at once, with no fetch.
    let started = Instant::now();
    let refused = issuer.verify_fresh(&k3.sign(&claims("ops-bot"))).await;
    assert_eq!(refused.unwrap_err(), JwtError::UnknownKey);
    assert!(
        started.elapsed() < Duration::from_millis(200),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(server.hits(JWKS_PATH), 2);

    // The provider goes away, answers garbage, too much, or an error: each refresh fails,
    // is counted, and the last good keys keep serving.
    let k2_token = k2.sign(&claims("ops-bot"));
    for mode in [
        Mode::Down,
        Mode::Garbage,
        Mode::Huge(2 << 20),
        Mode::Status(500),
    ] {
        server.set_mode(mode.clone());
        tokio::time::sleep(QUICK.kid_interval).await;
        let errors = count(&refreshes, IDP, "error");
        let unknown = SigningKey::ec("k9").sign(&claims("ops-bot"));
        assert_eq!(
            issuer.verify_fresh(&unknown).await.unwrap_err(),
            JwtError::UnknownKey
        );
        assert_eq!(count(&refreshes, IDP, "error"), errors + 1, "{mode:?}");
        issuer
            .verify(&k2_token)
            .unwrap_or_else(|e| panic!("{mode:?}: {e}"));
    }
    // A JWKS with no usable key is no better than garbage.
    server.set_mode(Mode::Serve);
    server.set_body(r#"{"keys": [{"kty": "oct", "k": "c2VjcmV0"}]}"#);
    tokio::time::sleep(QUICK.kid_interval).await;
    assert!(issuer.verify_fresh(&k3.sign(&claims("a"))).await.is_err());
    issuer.verify(&k2_token).unwrap();

    // Back: an encryption key and a key of an unknown type are skipped, not fatal.
    let mut set: Value = serde_json::from_str(&jwks(&[&k2, &k3])).unwrap();
    let keys = set["keys"].as_array_mut().unwrap();
    keys.push(json!({"kty": "RSA", "use": "enc", "kid": "enc-1", "n": "AQAB", "e": "AQAB"}));
    keys.push(json!({"kty": "future", "kid": "f-1"}));
    server.set_body(&set.to_string());
    tokio::time::sleep(QUICK.kid_interval).await;
    issuer
        .verify_fresh(&k3.sign(&claims("ops-bot")))
        .await
        .unwrap();
    assert_eq!(count(&refreshes, IDP, "ok"), 3);
    assert_eq!(count(&refreshes, IDP, "error"), 5);
}

#[tokio::test]
async fn concurrent_calls_share_one_fetch() {
    let (k1, k2) = (SigningKey::ec("k1"), SigningKey::ec("k2"));
    let server = KeyServer::start(&[&k1]).await;
    let fetcher = Fetcher::new(Refreshes::default()).with_timing(QUICK);
    let issuer = mk_issuer(url_of(&server), &fetcher);
    assert!(issuer.first_fetch(Duration::from_secs(5)).await);
    server.set_keys(&[&k1, &k2]);
    server.set_mode(Mode::Slow(Duration::from_millis(300)));
    let calls: Vec<_> = (0..20)
        .map(|i| {
            let (issuer, token) = (issuer.clone(), k2.sign(&claims(&format!("bot-{i}"))));
            tokio::spawn(async move { issuer.verify_fresh(&token).await })
        })
        .collect();
    for call in calls {
        call.await.unwrap().unwrap();
    }
    assert_eq!(server.hits(JWKS_PATH), 2, "one fetch for twenty calls");
}

#[tokio::test]
async fn a_slow_provider_holds_a_call_no_longer_than_the_bound() {
    let (k1, k2) = (SigningKey::ec("k1"), SigningKey::ec("k2"));
    let server = KeyServer::start(&[&k1]).await;
    let timing = Timing {
        wait: Duration::from_millis(300),
        fetch_timeout: Duration::from_secs(5),
        ..QUICK
    };
    let refreshes = Refreshes::default();
    let fetcher = Fetcher::new(refreshes.clone()).with_timing(timing);
    let issuer = mk_issuer(url_of(&server), &fetcher);
    assert!(issuer.first_fetch(Duration::from_secs(5)).await);
    server.set_keys(&[&k1, &k2]);
    server.set_mode(Mode::Slow(Duration::from_millis(1500)));
    let token = k2.sign(&claims("ops-bot"));
    let started = Instant::now();
    assert_eq!(
        issuer.verify_fresh(&token).await.unwrap_err(),
        JwtError::UnknownKey
    );
    let waited = started.elapsed();
    assert!(
        waited >= timing.wait && waited < Duration::from_millis(900),
        "{waited:?}"
    );
    // The fetch goes on without the call; once in, the key verifies with no new fetch.
    tokio::time::sleep(Duration::from_millis(1600)).await;
    issuer.verify(&token).unwrap();
    assert_eq!(server.hits(JWKS_PATH), 2);
    assert_eq!(count(&refreshes, IDP, "ok"), 2);

    // Slower than the fetch bound: given up, counted, keys kept.
    let bounded = Fetcher::new(refreshes.clone()).with_timing(Timing {
        fetch_timeout: Duration::from_millis(500),
        ..timing
    });
    let other =
        Arc::new(Issuer::load("https://slow.example", None, &url_of(&server), &bounded).unwrap());
    let started = Instant::now();
    assert!(!other.first_fetch(Duration::from_secs(5)).await);
    assert!(started.elapsed() < Duration::from_millis(1200));
    assert_eq!(count(&refreshes, "https://slow.example", "error"), 1);
}

#[tokio::test]
async fn discovery_finds_the_keys_of_the_named_issuer_only() {
    let (k1, k2) = (SigningKey::ec("k1"), SigningKey::ec("k2"));
    let server = KeyServer::start(&[&k1]).await;
    let refreshes = Refreshes::default();
    let fetcher = Fetcher::new(refreshes.clone()).with_timing(QUICK);
    let base = server.base();
    let source = toolgate::config::jwks::key_source(&base, None, true).unwrap();
    let issuer = Arc::new(Issuer::load(&base, Some("toolgate"), &source, &fetcher).unwrap());
    assert!(issuer.first_fetch(Duration::from_secs(5)).await);
    let mine = |key: &SigningKey| {
        key.sign(&json!({"iss": base, "aud": "toolgate", "sub": "ops-bot", "exp": now() + 60}))
    };
    issuer.verify_fresh(&mine(&k1)).await.unwrap();
    assert_eq!(
        (server.hits(CONFIGURATION_PATH), server.hits(JWKS_PATH)),
        (1, 1)
    );
    // A rotation is found through the configuration again.
    server.set_keys(&[&k2]);
    issuer.verify_fresh(&mine(&k2)).await.unwrap();
    assert_eq!(
        (server.hits(CONFIGURATION_PATH), server.hits(JWKS_PATH)),
        (2, 2)
    );

    // A configuration for another issuer, or one pointing its keys at a plain-HTTP host,
    // hands over nothing.
    for (issuer_named, jwks_uri) in [
        ("https://evil.example", None),
        (base.as_str(), Some("http://idp.example/jwks")),
    ] {
        server.set_issuer(issuer_named);
        if let Some(uri) = jwks_uri {
            server.set_jwks_uri(uri);
        }
        let jwks_hits = server.hits(JWKS_PATH);
        let errors = count(&refreshes, &base, "error");
        let fresh = Arc::new(Issuer::load(&base, Some("toolgate"), &source, &fetcher).unwrap());
        assert!(!fresh.first_fetch(Duration::from_secs(5)).await);
        assert!(fresh.verify(&mine(&k2)).is_err());
        assert_eq!(count(&refreshes, &base, "error"), errors + 1);
        assert_eq!(server.hits(JWKS_PATH), jwks_hits);
    }
}

#[tokio::test]
async fn https_keys_are_checked_against_the_trusted_cas() {
    let key = SigningKey::ec("k1");
    let pki = Pki::new("test-idp-ca");
    let server = KeyServer::start_tls(&[&key], &pki).await;
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(pki.ca_pem.as_bytes()) {
        roots.add(cert.unwrap()).unwrap();
    }
    let refreshes = Refreshes::default();
    let trusted = Fetcher::with_http(HttpClient::with_roots(roots), refreshes.clone());
    let issuer = mk_issuer(url_of(&server), &trusted);
    assert!(issuer.first_fetch(Duration::from_secs(5)).await);
    issuer
        .verify_fresh(&key.sign(&claims("ops-bot")))
        .await
        .unwrap();

    // Another CA, or the system's, doesn't vouch for the server: nothing is fetched.
    let other = Pki::new("another-ca");
    let mut wrong = rustls::RootCertStore::empty();
    wrong
        .add(CertificateDer::from_pem_slice(other.ca_pem.as_bytes()).unwrap())
        .unwrap();
    let wrong = Fetcher::with_http(HttpClient::with_roots(wrong), refreshes.clone());
    let untrusted = mk_issuer_named("https://idp2.example", &url_of(&server), &wrong);
    assert!(!untrusted.unwrap().first_fetch(Duration::from_secs(5)).await);
    assert_eq!(count(&refreshes, "https://idp2.example", "error"), 1);
    // With no system CA at all, the issuer isn't even loaded.
    if let Ok(system) = mk_issuer_named(
        "https://idp3.example",
        &url_of(&server),
        &Fetcher::new(refreshes.clone()),
    ) {
        assert!(!system.first_fetch(Duration::from_secs(5)).await);
    }
    assert_eq!(server.hits(JWKS_PATH), 1, "no TLS session, no request");
}

/// The log service with ops-bot's grants, from an identity provider whose keys are at
/// `jwks` (a URL, as `toolgate.yaml` would say it).
fn with_url_issuer(jwks: String) -> Options {
    Options {
        tweak: Box::new(move |s| {
            s.identity.tokens = None;
            s.identity.jwt = serde_json::from_value(json!([
                {"issuer": IDP, "audience": "toolgate", "jwks": jwks}
            ]))
            .unwrap();
        }),
        ..Options::default()
    }
}

#[tokio::test]
async fn a_sidecar_takes_agent_keys_from_a_url() {
    let (k1, k2, k3) = (
        SigningKey::ec("k1"),
        SigningKey::ec("k2"),
        SigningKey::ec("k3"),
    );
    let server = KeyServer::start(&[&k1]).await;
    server.set_cache_control(Some("public, max-age=3600"));
    let backend = Backend::example().await;
    let h = Harness::start(backend.addr, with_url_issuer(server.jwks_url())).await;
    let call = |token: String| {
        let h = &h;
        async move { h.call("GET", "/logs/orders", Some(&token), &[], "").await }
    };
    let r = call(k1.sign(&claims("ops-bot"))).await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(backend.last().headers["x-toolgate-agent"], "ops-bot");
    // Rotated: the new key's first token is accepted, after one refresh.
    server.set_keys(&[&k2]);
    let r = call(k2.sign(&claims("ops-bot"))).await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(server.hits(JWKS_PATH), 2);
    // A made-up kid right after: refused at once, the provider not asked again.
    call(k3.sign(&claims("ops-bot")))
        .await
        .assert_refused("UNAUTHENTICATED", 401);
    assert_eq!(server.hits(JWKS_PATH), 2);
    // The provider goes away: the keys in hand keep serving.
    server.set_mode(Mode::Down);
    let r = call(k2.sign(&claims("ops-bot"))).await;
    assert_eq!(r.status, 200, "{}", r.text);
    let (_, metrics) = h.get_admin("/metrics").await;
    assert!(
        metrics
            .contains(r#"toolgate_jwks_refresh_total{issuer="https://idp.example",result="ok"} 2"#),
        "{metrics}"
    );
    h.stop().await;
}

#[tokio::test]
async fn a_sidecar_starts_while_the_provider_is_away() {
    let key = SigningKey::ec("k1");
    let server = KeyServer::start(&[&key]).await;
    server.set_mode(Mode::Down);
    let backend = Backend::example().await;
    let started = Instant::now();
    let h = Harness::start(backend.addr, with_url_issuer(server.jwks_url())).await;
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "{:?}",
        started.elapsed()
    );
    let (_, metrics) = h.get_admin("/metrics").await;
    assert!(
        metrics.contains(
            r#"toolgate_jwks_refresh_total{issuer="https://idp.example",result="error"} 1"#
        ),
        "{metrics}"
    );
    let token = key.sign(&claims("ops-bot"));
    // Back: the first token that needs the keys fetches them.
    server.set_mode(Mode::Serve);
    let r = h.call("GET", "/logs/orders", Some(&token), &[], "").await;
    assert_eq!(r.status, 200, "{}", r.text);
    h.stop().await;
}

const TASK_RULES: &str = r#"
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
"#;

#[tokio::test]
async fn a_task_token_signed_with_a_rotated_key_counts_on_first_use() {
    let (t1, t2) = (SigningKey::ec("t1"), SigningKey::ec("t2"));
    let server = KeyServer::start(&[&t1]).await;
    let jwks_url = server.jwks_url();
    let backend = Backend::example().await;
    let h = Harness::start(
        backend.addr,
        Options {
            policies: format!("{CONTRACTS}---{TASK_RULES}"),
            tweak: Box::new(move |s| {
                s.identity.task_issuers = serde_json::from_value(json!([
                    {"issuer": "orchestrator", "jwks": jwks_url}
                ]))
                .unwrap();
            }),
            ..Options::default()
        },
    )
    .await;
    let task = |key: &SigningKey| {
        key.sign(&json!({"iss": "orchestrator", "exp": now() + 300, "agent": "ops-bot", "service": "orders"}))
    };
    for key in [&t1, &t2] {
        server.set_keys(&[key]);
        let r = h
            .call(
                "GET",
                "/logs/orders",
                Some(OPS_TOKEN),
                &[("x-toolgate-task", &task(key))],
                "",
            )
            .await;
        assert_eq!(r.status, 200, "{}: {}", key.kid, r.text);
    }
    assert_eq!(server.hits(JWKS_PATH), 2);
    h.stop().await;
}

#[test]
fn settings_fetch_only_over_https_or_to_loopback() {
    for (jwks, ok) in [
        ("https://idp.example/jwks", true),
        ("http://127.0.0.1:8080/jwks", true),
        ("http://[::1]:8080/jwks", true),
        ("http://idp.example/jwks", false),
        ("http://169.254.169.254/jwks", false),
    ] {
        let text = format!("identity:\n  jwt: [{{issuer: a, audience: t, jwks: '{jwks}'}}]\n");
        let parsed = toolgate::config::Settings::parse("toolgate.yaml", &text, Vec::new());
        assert_eq!(parsed.is_ok(), ok, "{jwks}");
        if let Err(err) = parsed {
            let err = err.to_string();
            assert!(err.contains("identity.jwt[0].jwks"), "{err}");
            assert!(err.contains("loopback"), "{err}");
        }
    }
}

/// `toolgate run`, as a process, trusts a CA that SSL_CERT_FILE names.
#[tokio::test]
async fn the_binary_trusts_the_cas_of_ssl_cert_file() {
    let key = SigningKey::ec("k1");
    let pki = Pki::new("private-idp-ca");
    let server = KeyServer::start_tls(&[&key], &pki).await;
    let backend = Backend::example().await;
    let dir = tempfile::tempdir().unwrap();
    let ca = dir.path().join("ca.pem");
    std::fs::write(&ca, &pki.ca_pem).unwrap();
    std::fs::write(dir.path().join("policies.yaml"), log_service_policies()).unwrap();
    let (port, admin) = (closed_port().await.port(), closed_port().await.port());
    let settings = dir.path().join("toolgate.yaml");
    std::fs::write(
        &settings,
        format!(
            "listen: 127.0.0.1:{port}\nadmin: 127.0.0.1:{admin}\nupstream: http://{}\n\
             policies: {{files: ['{}']}}\naudit: {{path: 'off'}}\n\
             identity:\n  jwt: [{{issuer: '{IDP}', audience: toolgate, jwks: '{}'}}]\n",
            backend.addr,
            dir.path().join("policies.yaml").display(),
            server.jwks_url()
        ),
    )
    .unwrap();
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_toolgate"))
        .args(["run", "--config"])
        .arg(&settings)
        .env("SSL_CERT_FILE", &ca)
        .env_remove("SSL_CERT_DIR")
        .env("TOOLGATE_LOG", "warn")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let client = hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
        .build_http::<http_body_util::Full<bytes::Bytes>>();
    let token = key.sign(&claims("ops-bot"));
    let mut status = 0;
    for _ in 0..100 {
        let request = http::Request::get(format!("http://127.0.0.1:{port}/logs/orders"))
            .header("authorization", format!("Bearer {token}"))
            .body(Default::default())
            .unwrap();
        if let Ok(response) = client.request(request).await {
            status = response.status().as_u16();
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let _ = child.kill();
    let _ = child.wait();
    assert_eq!(status, 200);
    assert_eq!(server.hits(JWKS_PATH), 1);
}

/// Approvers' keys by URL too: the approval API accepts an approver's token signed with a
/// key the provider just rotated in, and refuses one it never published.
#[tokio::test]
async fn approvers_keys_come_from_a_url_and_rotate() {
    let (a1, a2) = (SigningKey::ec("a1"), SigningKey::ec("a2"));
    let server = KeyServer::start(&[&a1]).await;
    let jwks_url = server.jwks_url();
    let backend = Backend::example().await;
    let h = Harness::start(
        backend.addr,
        Options {
            tweak: Box::new(move |s| {
                s.approvals.approvers.jwt = serde_json::from_value(json!([
                    {"issuer": "https://people.example", "audience": "toolgate-approvals", "jwks": jwks_url}
                ]))
                .unwrap();
            }),
            ..Options::default()
        },
    )
    .await;
    let list = |key: &SigningKey| {
        let token = key.sign(&json!({"iss": "https://people.example", "aud": "toolgate-approvals",
                                     "sub": "alice", "groups": ["finance-leads"], "exp": now() + 300}));
        let (client, url) = (h.client.clone(), format!("{}/approvals", h.admin()));
        async move {
            let request = http::Request::get(url)
                .header("authorization", format!("Bearer {token}"))
                .body(Default::default())
                .unwrap();
            client.request(request).await.unwrap().status().as_u16()
        }
    };
    assert_eq!(list(&a1).await, 200);
    server.set_keys(&[&a1, &a2]);
    assert_eq!(list(&a2).await, 200);
    assert_eq!(list(&SigningKey::ec("a3")).await, 401);
    assert_eq!(server.hits(JWKS_PATH), 2);
    h.stop().await;
}
