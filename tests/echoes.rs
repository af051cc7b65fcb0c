//! Errors never echo what they read (DESIGN §14, "Errors never echo what they read"): a
//! file that is not what its setting says is named with its position, never quoted; a
//! URL in an error or a log line loses its userinfo and query; a refusal never names an
//! internal host.

mod common;

use common::*;
use std::process::Command;
use std::time::Duration;
use toolgate::config::{Settings, StateBackend};
use toolgate::sidecar::Sidecar;

const SECRETS: [&str; 3] = ["hunter2", "s3cret", "root:x:0"];

/// What `/etc/passwd` or a Secret looks like to a YAML parser: one long string.
const PASSWD: &str =
    "root:x:0:0:root:/root:/bin/bash\nalice:x:1000:1000:hunter2:/home/alice:/bin/sh\n";

fn assert_quiet(what: &str, text: &str) {
    for secret in SECRETS {
        assert!(!text.contains(secret), "{what} echoes {secret:?}: {text}");
    }
}

fn base_settings(dir: &std::path::Path) -> Settings {
    let policies = dir.join("policies.yaml");
    std::fs::write(&policies, log_service_policies()).unwrap();
    let mut settings = Settings {
        listen: "127.0.0.1:0".parse().unwrap(),
        admin: "127.0.0.1:0".parse().unwrap(),
        ..Settings::default()
    };
    settings.policies.files = vec![policies];
    settings.audit.path = dir.join("audit.log").display().to_string();
    settings
}

/// Why the sidecar would not start with `tweak` applied.
async fn start_error(tweak: impl FnOnce(&mut Settings, &std::path::Path)) -> String {
    let dir = tempfile::tempdir().unwrap();
    let mut settings = base_settings(dir.path());
    tweak(&mut settings, dir.path());
    match Sidecar::start(settings).await {
        Ok(sidecar) => {
            sidecar.shutdown().await;
            panic!("the sidecar started")
        }
        Err(e) => format!("{e:#}"),
    }
}

#[tokio::test]
async fn config_names_a_file_that_is_no_manifest_without_quoting_it() {
    let backend = Backend::example().await;
    let h = Harness::start(
        backend.addr,
        Options {
            wait_ready: false,
            tweak: Box::new(|s| {
                let secret = s.policies.files[0].parent().unwrap().join("passwd");
                std::fs::write(&secret, PASSWD).unwrap();
                let json = s.policies.files[0].parent().unwrap().join("creds.json");
                std::fs::write(
                    &json,
                    r#"{"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s3cret"}, "data": {"password": "hunter2"}}"#,
                )
                .unwrap();
                s.policies.files.extend([secret, json]);
            }),
            ..Options::default()
        },
    )
    .await;
    let mut config = String::new();
    for _ in 0..100 {
        config = h.get_admin("/config").await.1;
        if config.contains("passwd") && config.contains("creds.json") {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(
        config.contains("passwd") && config.contains("creds.json"),
        "/config names the files: {config}"
    );
    assert_quiet("/config", &config);
    h.stop().await;
}

#[tokio::test]
async fn files_of_the_wrong_kind_are_located_never_quoted() {
    let error = start_error(|s, dir| {
        let tokens = dir.join("tokens.yaml");
        std::fs::write(&tokens, PASSWD).unwrap();
        s.identity.tokens = Some(tokens);
    })
    .await;
    assert!(error.contains("tokens.yaml"), "{error}");
    assert_quiet("identity.tokens", &error);

    let error = start_error(|s, dir| {
        let jwks = dir.join("jwks.json");
        std::fs::write(&jwks, r#""root:x:0 hunter2""#).unwrap();
        s.identity.task_issuers =
            serde_json::from_value(serde_json::json!([{"issuer": "orchestrator", "jwks": jwks}]))
                .unwrap();
    })
    .await;
    assert!(error.contains("jwks.json"), "{error}");
    assert_quiet("a JWKS", &error);

    let error = start_error(|s, dir| {
        let approvers = dir.join("approvers.yaml");
        std::fs::write(&approvers, PASSWD).unwrap();
        s.approvals.approvers.tokens = Some(approvers);
    })
    .await;
    assert!(error.contains("approvers.yaml"), "{error}");
    assert_quiet("approvals.approvers.tokens", &error);

    let error = start_error(|s, dir| {
        let key = dir.join("tls.key");
        std::fs::write(&key, "-----BEGIN hunter2 KEY-----\nnot base64 s3cret\n").unwrap();
        s.tls = serde_json::from_value(serde_json::json!({"cert": key, "key": key})).unwrap();
    })
    .await;
    assert!(error.contains("tls.key"), "{error}");
    assert_quiet("tls", &error);

    // The settings file itself: a bad value is located by its field path.
    let err = Settings::parse(
        "toolgate.yaml",
        "limits: {maxHeaders: hunter2}\nstate: {redis: {timeoutMs: s3cret}}\n",
        Vec::new(),
    )
    .unwrap_err()
    .to_string();
    assert!(err.contains("limits.maxHeaders"), "{err}");
    assert_quiet("toolgate.yaml", &err);
}

#[tokio::test]
async fn urls_in_errors_lose_their_userinfo_and_query() {
    let error = start_error(|s, _| {
        s.approvals.notify_url =
            Some("https://bot:hunter2@hooks.example/pa ge?token=s3cret".into());
    })
    .await;
    assert!(error.contains("approvals.notifyUrl"), "{error}");
    assert_quiet("approvals.notifyUrl", &error);

    let error = start_error(|s, _| {
        s.telemetry.otlp_endpoint = Some("https://bot:hunter2@collector:4317/?token=s3cret".into());
    })
    .await;
    assert!(error.contains("telemetry.otlpEndpoint"), "{error}");
    assert_quiet("telemetry.otlpEndpoint", &error);

    let error = start_error(|s, _| {
        s.upstream = "ftp://bot:hunter2@backend:21/?token=s3cret".into();
    })
    .await;
    assert!(error.contains("upstream"), "{error}");
    assert_quiet("upstream", &error);
}

#[test]
fn a_malformed_notify_url_is_never_logged_whole() {
    let dir = tempfile::tempdir().unwrap();
    let settings = base_settings(dir.path());
    let file = dir.path().join("toolgate.yaml");
    std::fs::write(
        &file,
        format!(
            "listen: 127.0.0.1:0\nadmin: 127.0.0.1:0\npolicies: {{files: [{}]}}\naudit: {{path: {}}}\napprovals: {{notifyUrl: 'https://bot:hunter2@hooks.example/pa ge?token=s3cret'}}\n",
            settings.policies.files[0].display(),
            settings.audit.path
        ),
    )
    .unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_toolgate"))
        .args(["run", "--config"])
        .arg(&file)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let started = std::time::Instant::now();
    while child.try_wait().unwrap().is_none() && started.elapsed() < Duration::from_secs(10) {
        std::thread::sleep(Duration::from_millis(20));
    }
    let _ = child.kill();
    let out = child.wait_with_output().unwrap();
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{text}");
    assert!(text.contains("notifyUrl"), "{text}");
    assert_quiet("toolgate run's output", &text);
}

/// A "Redis" that accepts connections and never answers.
async fn silent_redis() -> std::net::SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((stream, _)) = listener.accept().await {
            held.push(stream);
        }
    });
    addr
}

#[tokio::test]
async fn state_unavailable_never_names_the_redis_host() {
    let backend = Backend::example().await;
    let silent = silent_redis().await;
    let closed = closed_port().await;
    for (url, cluster) in [
        (format!("redis://:hunter2@{silent}/0"), false),
        (format!("redis://{closed}/0"), true),
        (format!("redis://{closed}/0"), false),
    ] {
        let target = url.clone();
        let h = Harness::start(
            backend.addr,
            Options {
                tweak: Box::new(move |s| {
                    s.state.backend = StateBackend::Redis;
                    s.state.redis.url = target;
                    s.state.redis.cluster = cluster;
                    s.state.redis.timeout_ms = 200;
                }),
                ..Options::default()
            },
        )
        .await;
        let r = h
            .call(
                "POST",
                "/issues",
                Some(OPS_TOKEN),
                &[],
                r#"{"project_key":"OPS","title":"x"}"#,
            )
            .await;
        r.assert_refused("STATE_UNAVAILABLE", 503);
        for internal in [
            "127.0.0.1".to_string(),
            silent.port().to_string(),
            closed.port().to_string(),
        ] {
            assert!(
                !r.text.contains(&internal),
                "{url}: names {internal}: {}",
                r.text
            );
        }
        assert_quiet("STATE_UNAVAILABLE", &r.text);
        h.stop().await;
    }
}

/// An MCP server's error page for a message toolgate passes (initialize, ping, a
/// listing, a notification) is no answer for the agent: the refusal its status maps to
/// goes back, without the page or the server's headers (a stack trace, an internal
/// host, a cookie); a JSON-RPC error in a 4xx is the server's protocol answer and passes.
#[tokio::test]
async fn a_passed_messages_error_page_stays_with_the_backend() {
    let backend = Backend::start(std::sync::Arc::new(|seen: &Seen| {
        let body = String::from_utf8_lossy(&seen.body).into_owned();
        if body.contains("\"id\":2") {
            let error =
                r#"{"jsonrpc":"2.0","id":2,"error":{"code":-32602,"message":"bad cursor"}}"#;
            let json = ("content-type", "application/json".to_string());
            return (400, vec![json], error.into(), Duration::ZERO);
        }
        if body.contains("\"id\":3") {
            let realm = (
                "www-authenticate",
                "Basic realm=\"db-7.internal\"".to_string(),
            );
            return (401, vec![realm], String::new(), Duration::ZERO);
        }
        let cookie = ("set-cookie", "backend_session=s3cret".to_string());
        let page = "Traceback: psycopg2 at db-7.internal:5432 SELECT hunter2";
        (500, vec![cookie], page.into(), Duration::ZERO)
    }))
    .await;
    let policies = include_str!("fixtures/policies/mcp-backend.yaml");
    let h = Harness::start(
        backend.addr,
        Options {
            policies: policies.into(),
            ..Options::default()
        },
    )
    .await;
    let accept = ("accept", "application/json, text/event-stream");
    for body in [
        r#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#,
        r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}"#,
    ] {
        let r = h
            .call("POST", "/mcp", Some(OPS_TOKEN), &[accept], body)
            .await;
        assert_quiet("a passed message's answer", &r.text);
        assert!(!r.text.contains("db-7"), "{}", r.text);
        assert!(
            r.header("set-cookie").is_empty(),
            "{}",
            r.header("set-cookie")
        );
        assert_eq!(
            r.json["error"]["data"]["error"]["code"], "BACKEND_ERROR",
            "{}",
            r.text
        );
    }
    // The server's 401 is not the agent's credential failing: 502, no challenge of its.
    let ping = r#"{"jsonrpc":"2.0","id":3,"method":"ping"}"#;
    let r = h
        .call("POST", "/mcp", Some(OPS_TOKEN), &[accept], ping)
        .await;
    assert_eq!(r.status, 502, "{}", r.text);
    assert!(
        !r.header("www-authenticate").contains("db-7"),
        "{}",
        r.header("www-authenticate")
    );
    let listing = r#"{"jsonrpc":"2.0","id":2,"method":"ping"}"#;
    let r = h
        .call("POST", "/mcp", Some(OPS_TOKEN), &[accept], listing)
        .await;
    assert_eq!(r.status, 400, "{}", r.text);
    assert_eq!(r.json["error"]["message"], "bad cursor", "{}", r.text);
    h.stop().await;
}
