//! Several sources of agent identity at once (token file, client certificates, JWT
//! issuers): each speaks only for its own agents, ids that could pass for another's are
//! refused, the audit record and the span say which source vouched, and with
//! `identity.oauth` the required scopes hold on every door of the agent port.

mod common;

use bytes::Bytes;
use common::collector::{attr, Collector};
use common::keys::*;
use common::*;
use http_body_util::{BodyExt, Empty};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use serde_json::{json, Value};
use std::path::Path;
use std::sync::Arc;
use tokio::net::TcpStream;
use toolgate::identity::tokens::digest_hex;

const IDP: &str = "https://idp.example";
const PARTNER: &str = "https://partner.example";

/// Agent JWT issuers as a settings file lists them (built through serde, as `toolgate
/// run` reads them).
fn mk_issuers(list: Value) -> Vec<toolgate::config::JwtIssuer> {
    serde_json::from_value(list).expect("JWT issuers")
}

/// The log service's policies, plus one granting read_logs to each of `agents`.
fn mk_policies(agents: &[&str]) -> String {
    let mut text = log_service_policies();
    for (i, agent) in agents.iter().enumerate() {
        text.push_str(&format!(
            "---\napiVersion: toolgate.dev/v1alpha1\nkind: AgentPolicy\nmetadata: {{name: extra-{i}}}\nspec:\n  agents: [\"{agent}\"]\n  tools: [{{name: read_logs}}]\n"
        ));
    }
    text
}

/// A key and its JWKS file in `dir`.
fn mk_idp(dir: &Path, kid: &str) -> (SigningKey, std::path::PathBuf) {
    let key = SigningKey::ec(kid);
    let path = dir.join(format!("{kid}.json"));
    std::fs::write(&path, jwks(&[&key])).unwrap();
    (key, path)
}

fn mk_token(key: &SigningKey, iss: &str, aud: &str, sub: &str, extra: Value) -> String {
    let mut claims = json!({"iss": iss, "aud": aud, "sub": sub, "exp": now() + 300});
    claims
        .as_object_mut()
        .unwrap()
        .extend(extra.as_object().unwrap().clone());
    key.sign(&claims)
}

/// A token file with ops-bot, plus ids that try to pass for another source's agent or
/// hold a control character.
fn mk_tokens(dir: &Path) -> std::path::PathBuf {
    let path = dir.join("tokens.yaml");
    std::fs::write(
        &path,
        format!(
            "ops-bot: {}\n\"partner:ops-bot\": {}\n\"ops\\tbot\": {}\n\"ops\\u0085bot\": {}\n",
            digest_hex(OPS_TOKEN),
            digest_hex("borrowed-prefix"),
            digest_hex("tab-in-id"),
            digest_hex("c1-in-id"),
        ),
    )
    .unwrap();
    path
}

/// A second issuer that signs `sub: ops-bot` is not ops-bot: its agents are its prefix
/// plus the claim. No source names another's agents, no id holds a control character,
/// and the audit record and the span name the source that vouched.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_issuer_speaks_only_for_its_own_agents() {
    let dir = tempfile::tempdir().unwrap();
    let (idp, idp_jwks) = mk_idp(dir.path(), "idp-1");
    let (partner, partner_jwks) = mk_idp(dir.path(), "partner-1");
    let tokens = mk_tokens(dir.path());
    let issuers = mk_issuers(json!([
        {"issuer": IDP, "audience": "toolgate", "jwks": idp_jwks, "agentPrefix": "idp:"},
        {"issuer": PARTNER, "audience": "toolgate", "jwks": partner_jwks, "agentPrefix": "partner:"},
    ]));
    let (collector, endpoint, _server) = Collector::grpc().await;
    let backend = Backend::example().await;
    let h = Harness::start(
        backend.addr,
        Options {
            policies: mk_policies(&["idp:ops-bot"]),
            tweak: Box::new(move |s| {
                s.identity.tokens = Some(tokens);
                s.identity.jwt = issuers;
                s.telemetry.otlp_endpoint = Some(endpoint);
            }),
            ..Options::default()
        },
    )
    .await;
    let h = &h;
    let get =
        |token: String| async move { h.call("GET", "/logs/orders", Some(&token), &[], "").await };
    let partner_says = |sub: &str| mk_token(&partner, PARTNER, "toolgate", sub, json!({}));

    // The token file's ops-bot, and the identity provider's.
    let r = get(OPS_TOKEN.into()).await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(backend.last().headers["x-toolgate-agent"], "ops-bot");
    let r = get(mk_token(&idp, IDP, "toolgate", "ops-bot", json!({}))).await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(backend.last().headers["x-toolgate-agent"], "idp:ops-bot");
    // The partner signing `sub: ops-bot` is partner:ops-bot, which may call nothing.
    get(partner_says("ops-bot"))
        .await
        .assert_refused("TOOL_NOT_ALLOWED", 403);
    // Nor can its claim climb out of its prefix, or hide a character.
    get(partner_says("../ops-bot"))
        .await
        .assert_refused("TOOL_NOT_ALLOWED", 403);
    for sub in [
        "ops-bot\n",
        "ops\u{7}bot",
        "ops\u{202e}tob-spo",
        "ops\u{200b}-bot",
    ] {
        let r = get(partner_says(sub)).await;
        r.assert_refused("UNAUTHENTICATED", 401);
        assert!(r.header("www-authenticate").starts_with("Bearer"));
    }
    // The token file can't name a prefixed agent, or one with a control character.
    for token in ["borrowed-prefix", "tab-in-id", "c1-in-id"] {
        get(token.into())
            .await
            .assert_refused("UNAUTHENTICATED", 401);
    }
    assert_eq!(backend.count(), 2);

    // Spans name the source that vouched for the id.
    for (agent, issuer) in [
        ("ops-bot", "tokens"),
        ("idp:ops-bot", IDP),
        ("partner:ops-bot", PARTNER),
    ] {
        let span = collector
            .wait_for(|s| s.kind == 2 && attr(s, "toolgate.agent.id").as_deref() == Some(agent))
            .await;
        assert_eq!(
            attr(&span, "toolgate.agent.issuer").as_deref(),
            Some(issuer),
            "{agent}"
        );
    }
    // And so does the audit record: `issuer` right after `agent`, none without an agent.
    let audit = std::fs::read_to_string(h.audit_file()).unwrap();
    audit_verify(&audit);
    let calls = audit_calls(&audit);
    let named: Vec<(Value, Value)> = calls
        .iter()
        .map(|c| (c["agent"].clone(), c["issuer"].clone()))
        .collect();
    assert_eq!(
        named[..3],
        [
            (json!("ops-bot"), json!("tokens")),
            (json!("idp:ops-bot"), json!(IDP)),
            (json!("partner:ops-bot"), json!(PARTNER)),
        ]
    );
    for call in calls.iter().filter(|c| c["code"] == "UNAUTHENTICATED") {
        assert!(
            call["agent"].is_null() && call.get("issuer").is_none(),
            "{call}"
        );
    }
    let line = audit
        .lines()
        .find(|l| l.contains("\"idp:ops-bot\""))
        .unwrap();
    assert!(
        line.contains(r#""agent":"idp:ops-bot","issuer":"https://idp.example","session""#),
        "{line}"
    );
}

/// With the first source a JWT issuer, it may keep bare ids, but none that starts with
/// another issuer's prefix.
#[tokio::test]
async fn an_unprefixed_first_issuer_cannot_name_a_prefixed_agent() {
    let dir = tempfile::tempdir().unwrap();
    let (idp, idp_jwks) = mk_idp(dir.path(), "idp-1");
    let (_partner, partner_jwks) = mk_idp(dir.path(), "partner-1");
    let issuers = mk_issuers(json!([
        {"issuer": IDP, "audience": "toolgate", "jwks": idp_jwks},
        {"issuer": PARTNER, "audience": "toolgate", "jwks": partner_jwks, "agentPrefix": "partner:"},
    ]));
    let backend = Backend::example().await;
    let h = Harness::start(
        backend.addr,
        Options {
            policies: mk_policies(&["partner:ops-bot"]),
            tweak: Box::new(move |s| {
                s.identity.tokens = None;
                s.identity.jwt = issuers;
            }),
            ..Options::default()
        },
    )
    .await;
    let idp_says = |sub: &str| mk_token(&idp, IDP, "toolgate", sub, json!({}));
    let r = h
        .call("GET", "/logs/orders", Some(&idp_says("ops-bot")), &[], "")
        .await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(backend.last().headers["x-toolgate-agent"], "ops-bot");
    h.call(
        "GET",
        "/logs/orders",
        Some(&idp_says("partner:ops-bot")),
        &[],
        "",
    )
    .await
    .assert_refused("UNAUTHENTICATED", 401);
    assert_eq!(backend.count(), 1);
    h.stop().await;
}

/// A second issuer without a prefix is a settings error that says what to do: from a
/// settings file, from `toolgate run`, and from settings built in code.
#[tokio::test]
async fn a_second_issuer_without_a_prefix_does_not_start() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("toolgate.yaml");
    std::fs::write(
        &file,
        "listen: 127.0.0.1:0\nadmin: 127.0.0.1:0\nidentity:\n  tokens: /etc/toolgate/tokens.yaml\n  jwt: [{issuer: https://idp.example, audience: toolgate, jwks: /etc/toolgate/jwks.json}, {issuer: https://partner.example, audience: toolgate, jwks: /etc/toolgate/partner.json}]\n",
    )
    .unwrap();
    let err = toolgate::config::Settings::load(Some(&file), Vec::new())
        .unwrap_err()
        .to_string();
    assert!(err.contains("identity.jwt[1].agentPrefix"), "{err}");
    assert!(err.contains("the token file, 2 JWT issuers"), "{err}");
    assert!(err.contains("Set e.g. agentPrefix"), "{err}");

    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_toolgate"))
        .args(["run", "--config"])
        .arg(&file)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut exited = None;
    for _ in 0..200 {
        if let Some(status) = child.try_wait().unwrap() {
            exited = Some(status);
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    let Some(status) = exited else {
        let _ = child.kill();
        let _ = child.wait();
        panic!("toolgate run started with an issuer that could name any agent");
    };
    let mut stderr = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut stderr).unwrap();
    assert!(!status.success());
    assert!(stderr.contains("identity.jwt[1].agentPrefix"), "{stderr}");

    let (_, jwks_path) = mk_idp(dir.path(), "idp-1");
    let (_, partner_path) = mk_idp(dir.path(), "partner-1");
    let mut settings = toolgate::config::Settings {
        listen: "127.0.0.1:0".parse().unwrap(),
        admin: "127.0.0.1:0".parse().unwrap(),
        ..Default::default()
    };
    settings.policies.files = vec![dir.path().to_path_buf()];
    settings.audit.path = dir.path().join("audit.log").to_string_lossy().into_owned();
    settings.identity.tokens = Some(mk_tokens(dir.path()));
    settings.identity.jwt = mk_issuers(json!([
        {"issuer": IDP, "audience": "toolgate", "jwks": jwks_path},
        {"issuer": PARTNER, "audience": "toolgate", "jwks": partner_path},
    ]));
    let started = toolgate::sidecar::Sidecar::start(settings).await;
    let err = format!("{:#}", started.err().expect("refused"));
    assert!(err.contains("identity.jwt[1].agentPrefix"), "{err}");
}

/// The first issuer may keep bare ids beside the token file (one identity provider and a
/// few static tokens), but an id the token file names stays the token file's: the
/// provider signing `sub: ops-bot` is refused, its own agents pass.
#[tokio::test]
async fn a_bare_first_issuer_cannot_name_a_token_file_agent() {
    let dir = tempfile::tempdir().unwrap();
    let (idp, idp_jwks) = mk_idp(dir.path(), "idp-1");
    let issuers = mk_issuers(json!([{"issuer": IDP, "audience": "toolgate", "jwks": idp_jwks}]));
    let backend = Backend::example().await;
    let h = Harness::start(
        backend.addr,
        Options {
            policies: mk_policies(&["idp-bot"]),
            tweak: Box::new(move |s| s.identity.jwt = issuers),
            ..Options::default()
        },
    )
    .await;
    let idp_says = |sub: &str| mk_token(&idp, IDP, "toolgate", sub, json!({}));
    h.call("GET", "/logs/orders", Some(&idp_says("ops-bot")), &[], "")
        .await
        .assert_refused("UNAUTHENTICATED", 401);
    assert_eq!(backend.count(), 0);
    let r = h
        .call("GET", "/logs/orders", Some(&idp_says("idp-bot")), &[], "")
        .await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(backend.last().headers["x-toolgate-agent"], "idp-bot");
    // The token file's own credential still names ops-bot.
    let r = h
        .call("GET", "/logs/orders", Some(OPS_TOKEN), &[], "")
        .await;
    assert_eq!(r.status, 200, "{}", r.text);
    h.stop().await;
}

/// A prefix owns every id under it: with `agentPrefix: ops`, `ops-bot` is the issuer's
/// (`sub: -bot`), and the token file's entry for it is refused, never shared.
#[tokio::test]
async fn an_issuers_prefix_owns_the_ids_under_it() {
    let dir = tempfile::tempdir().unwrap();
    let (idp, idp_jwks) = mk_idp(dir.path(), "idp-1");
    let issuers = mk_issuers(json!([
        {"issuer": IDP, "audience": "toolgate", "jwks": idp_jwks, "agentPrefix": "ops"}
    ]));
    let backend = Backend::example().await;
    let h = Harness::start(
        backend.addr,
        Options {
            policies: mk_policies(&[]),
            tweak: Box::new(move |s| s.identity.jwt = issuers),
            ..Options::default()
        },
    )
    .await;
    h.call("GET", "/logs/orders", Some(OPS_TOKEN), &[], "")
        .await
        .assert_refused("UNAUTHENTICATED", 401);
    let idp_says = |sub: &str| mk_token(&idp, IDP, "toolgate", sub, json!({}));
    let r = h
        .call("GET", "/logs/orders", Some(&idp_says("-bot")), &[], "")
        .await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(backend.last().headers["x-toolgate-agent"], "ops-bot");
    assert_eq!(backend.count(), 1);
    h.stop().await;
}

/// With `identity.oauth`, a token without a required scope is refused on a REST path as
/// it is on `/mcp`: the same 403 and challenge, nothing forwarded.
#[tokio::test]
async fn a_token_without_the_scope_is_refused_on_every_door() {
    const RESOURCE: &str = "https://orders.example.com/mcp";
    const METADATA: &str = "https://orders.example.com/.well-known/oauth-protected-resource/mcp";
    let dir = tempfile::tempdir().unwrap();
    let (auth, jwks_path) = mk_idp(dir.path(), "as-1");
    let issuers = mk_issuers(json!([
        {"issuer": "https://auth.example.com", "audience": RESOURCE, "jwks": jwks_path}
    ]));
    let backend = Backend::example().await;
    let h = Harness::start(
        backend.addr,
        Options {
            tweak: Box::new(move |s| {
                s.identity.tokens = None;
                s.identity.jwt = issuers;
                s.identity.oauth = Some(toolgate::config::OAuth {
                    resource: RESOURCE.into(),
                    authorization_servers: vec!["https://auth.example.com".into()],
                    scopes_supported: vec!["tools".into()],
                    required_scopes: vec!["tools".into()],
                });
            }),
            ..Options::default()
        },
    )
    .await;
    let token = |extra: Value| {
        mk_token(
            &auth,
            "https://auth.example.com",
            RESOURCE,
            "ops-bot",
            extra,
        )
    };
    let ping = r#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#;
    let mcp_headers = [("accept", "application/json, text/event-stream")];
    for unscoped in [
        json!({"scope": "profile"}),
        json!({}),
        json!({"scp": ["profile"]}),
    ] {
        let t = token(unscoped.clone());
        for (method, path, body) in [
            ("GET", "/logs/orders", ""),
            ("POST", "/issues", r#"{"project_key": "OPS", "title": "t"}"#),
            ("POST", "/mcp", ping),
        ] {
            let r = h.call(method, path, Some(&t), &mcp_headers, body).await;
            assert_eq!(r.status, 403, "{unscoped} {path}: {}", r.text);
            let challenge = r.header("www-authenticate");
            assert!(
                challenge.contains(r#"error="insufficient_scope""#),
                "{challenge}"
            );
            assert!(challenge.contains(r#"scope="tools""#), "{challenge}");
            assert!(challenge.contains(METADATA), "{challenge}");
            if path != "/mcp" {
                r.assert_refused("UNAUTHENTICATED", 403);
            }
        }
    }
    // No token or a bad one: the 401 of the MCP endpoint, on REST too.
    let r = h.call("GET", "/logs/orders", None, &[], "").await;
    r.assert_refused("UNAUTHENTICATED", 401);
    assert_eq!(
        r.header("www-authenticate"),
        format!(r#"Bearer resource_metadata="{METADATA}""#)
    );
    let r = h
        .call("GET", "/logs/orders", Some("not-a-token"), &[], "")
        .await;
    r.assert_refused("UNAUTHENTICATED", 401);
    assert!(r
        .header("www-authenticate")
        .ends_with(r#"error="invalid_token""#));
    assert_eq!(backend.count(), 0, "nothing was forwarded");
    // With the scope (as `scope` or `scp`), REST runs.
    for scoped in [json!({"scope": "profile tools"}), json!({"scp": ["tools"]})] {
        let r = h
            .call("GET", "/logs/orders", Some(&token(scoped)), &[], "")
            .await;
        assert_eq!(r.status, 200, "{}", r.text);
    }
    assert_eq!(backend.count(), 2);
    h.stop().await;
}

/// A credential that carries no scope — a static token, a client certificate — is
/// refused wherever scopes are required, on REST as on MCP.
#[tokio::test]
async fn credentials_without_scopes_are_refused_where_scopes_are_required() {
    const RESOURCE: &str = "https://orders.example.com/mcp";
    const SPIFFE: &str = "spiffe://example.org/ns/agents/sa/ops-bot";
    let dir = tempfile::tempdir().unwrap();
    let (auth, jwks_path) = mk_idp(dir.path(), "as-1");
    let pki = Pki::new("test-ca");
    let server = pki.issue(&["localhost"], &[], false);
    let client = pki.issue(&[], &[SPIFFE], true);
    let tab = pki.issue(&[], &["spiffe://example.org/ns/agents/sa/ops\tbot"], true);
    let (cert, key, ca) = (
        dir.path().join("tls.crt"),
        dir.path().join("tls.key"),
        dir.path().join("ca.crt"),
    );
    std::fs::write(&cert, &server.0).unwrap();
    std::fs::write(&key, &server.1).unwrap();
    std::fs::write(&ca, &pki.ca_pem).unwrap();
    let issuers = mk_issuers(json!([
        {"issuer": "https://auth.example.com", "audience": RESOURCE, "jwks": jwks_path, "agentPrefix": "as:"}
    ]));
    let backend = Backend::example().await;
    let h = Harness::start(
        backend.addr,
        Options {
            policies: mk_policies(&[SPIFFE, "as:ops-bot"]),
            tweak: Box::new(move |s| {
                s.identity.jwt = issuers;
                s.tls = Some(toolgate::config::Tls {
                    cert,
                    key,
                    client_ca: Some(ca),
                    agent_san: Default::default(),
                });
                s.identity.oauth = Some(toolgate::config::OAuth {
                    resource: RESOURCE.into(),
                    authorization_servers: vec!["https://auth.example.com".into()],
                    scopes_supported: vec!["tools".into()],
                    required_scopes: vec!["tools".into()],
                });
            }),
            ..Options::default()
        },
    )
    .await;
    let addr = h.sidecar.as_ref().unwrap().agent_addr;
    // A client certificate alone, on REST and on MCP.
    for path in ["/logs/orders", "/mcp"] {
        let (status, challenge, body) = tls_get(addr, &pki.ca_pem, &client, path, vec![]).await;
        assert_eq!(status, 403, "{path}: {body}");
        assert!(
            challenge.contains(r#"error="insufficient_scope""#),
            "{challenge}"
        );
    }
    // A static token (the certificate still names the agent first), and the scoped
    // token as a second credential: two credentials name no one.
    let scoped = mk_token(
        &auth,
        "https://auth.example.com",
        RESOURCE,
        "ops-bot",
        json!({"scope": "tools"}),
    );
    let (status, _, body) = tls_get(
        addr,
        &pki.ca_pem,
        &client,
        "/logs/orders",
        vec![format!("Bearer {OPS_TOKEN}")],
    )
    .await;
    assert_eq!(status, 403, "{body}");
    let twice = vec![format!("Bearer {scoped}"), format!("Bearer {scoped}")];
    let (status, _, body) = tls_get(addr, &pki.ca_pem, &client, "/logs/orders", twice).await;
    assert_eq!(status, 401, "{body}");
    // A certificate whose id holds a control character names no one.
    let (status, challenge, body) = tls_get(addr, &pki.ca_pem, &tab, "/logs/orders", vec![]).await;
    assert_eq!(status, 401, "{body}");
    assert!(challenge.starts_with("Bearer"), "{challenge}");
    assert_eq!(backend.count(), 0, "nothing was forwarded");
    h.stop().await;
}

/// One HTTPS GET with a client certificate and `Authorization` values; the status, the
/// `WWW-Authenticate` header and the body.
async fn tls_get(
    addr: std::net::SocketAddr,
    ca_pem: &str,
    (cert, key): &(String, String),
    path: &str,
    authorization: Vec<String>,
) -> (u16, String, String) {
    let mut roots = rustls::RootCertStore::empty();
    for ca in CertificateDer::pem_slice_iter(ca_pem.as_bytes()) {
        roots.add(ca.unwrap()).unwrap();
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_client_auth_cert(
            CertificateDer::pem_slice_iter(cert.as_bytes())
                .map(Result::unwrap)
                .collect(),
            PrivateKeyDer::from_pem_slice(key.as_bytes()).unwrap(),
        )
        .unwrap();
    let tcp = TcpStream::connect(addr).await.unwrap();
    let tls = tokio_rustls::TlsConnector::from(Arc::new(config))
        .connect(ServerName::try_from("localhost").unwrap(), tcp)
        .await
        .unwrap();
    let (mut sender, conn) =
        hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(tls))
            .await
            .unwrap();
    tokio::spawn(conn);
    let mut request = http::Request::get(path)
        .header("host", "localhost")
        .header("accept", "application/json, text/event-stream");
    for value in authorization {
        request = request.header("authorization", value);
    }
    let response = sender
        .send_request(request.body(Empty::<Bytes>::new()).unwrap())
        .await
        .unwrap();
    let status = response.status().as_u16();
    let challenge = response
        .headers()
        .get("www-authenticate")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_string();
    let body = response.into_body().collect().await.unwrap().to_bytes();
    (
        status,
        challenge,
        String::from_utf8_lossy(&body).into_owned(),
    )
}
