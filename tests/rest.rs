//! REST calls through a real sidecar to a real backend: every refusal code of the core,
//! header hygiene, argument merging and result shaping.

mod common;

use common::*;
use serde_json::json;

#[tokio::test]
async fn allowed_call_is_forwarded_shaped_and_stamped() {
    let backend = Backend::example().await;
    let h = Harness::start(backend.addr, Options::default()).await;
    let r = h
        .call(
            "GET",
            "/logs/orders?window_minutes=30",
            Some(OPS_TOKEN),
            &[],
            "",
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(r.header("x-toolgate-decision"), "allow");
    // Undeclared `host` dropped, client_ip redacted.
    assert_eq!(
        r.json,
        json!({"lines": [{"msg": "order 17 shipped", "client_ip": "[REDACTED]"}]})
    );
    let seen = backend.last();
    assert_eq!(seen.uri, "/logs/orders?window_minutes=30");
    assert_eq!(seen.headers["x-toolgate-agent"], "ops-bot");
    assert_eq!(seen.headers["x-toolgate-tool"], "read_logs");
    h.stop().await;
}

#[tokio::test]
async fn defaults_are_filled_into_a_json_body() {
    let backend = Backend::example().await;
    let h = Harness::start(backend.addr, Options::default()).await;
    let r = h
        .call(
            "POST",
            "/issues",
            Some(OPS_TOKEN),
            &[],
            r#"{"title": "disk full", "project_key": "OPS"}"#,
        )
        .await;
    assert_eq!(r.status, 201, "{}", r.text);
    let sent: serde_json::Value = serde_json::from_slice(&backend.last().body).unwrap();
    assert_eq!(
        sent,
        json!({"title": "disk full", "project_key": "OPS", "priority": "low"})
    );
    h.stop().await;
}

#[tokio::test]
async fn schema_errors_say_what_to_fix() {
    let backend = Backend::example().await;
    let h = Harness::start(backend.addr, Options::default()).await;
    let r = h
        .call(
            "GET",
            "/logs/orders?window_minutes=030",
            Some(OPS_TOKEN),
            &[],
            "",
        )
        .await;
    r.assert_refused("INVALID_ARGUMENTS", 422);
    assert_eq!(r.json["error"]["details"][0]["pointer"], "/window_minutes");
    assert_eq!(r.json["error"]["details"][0]["keyword"], "type");
    assert_eq!(r.json["error"]["recovery"], "fix_arguments");
    let r = h
        .call("GET", "/logs/billing", Some(OPS_TOKEN), &[], "")
        .await;
    r.assert_refused("INVALID_ARGUMENTS", 422);
    let r = h
        .call("POST", "/issues", Some(OPS_TOKEN), &[], r#"{"title": "x"}"#)
        .await;
    r.assert_refused("MISSING_ARGUMENT", 422);
    assert_eq!(r.json["error"]["details"][0]["pointer"], "/project_key");
    assert_eq!(r.json["error"]["recovery"], "ask_user");
    let r = h
        .call(
            "GET",
            "/logs/orders?service=payments",
            Some(OPS_TOKEN),
            &[],
            "",
        )
        .await;
    r.assert_refused("INVALID_ARGUMENTS", 422);
    assert_eq!(backend.count(), 0, "nothing invalid reaches the backend");
    h.stop().await;
}

#[tokio::test]
async fn identity_and_authorization_refusals() {
    let backend = Backend::example().await;
    let h = Harness::start(backend.addr, Options::default()).await;
    h.call("GET", "/logs/orders", None, &[], "")
        .await
        .assert_refused("UNAUTHENTICATED", 401);
    h.call("GET", "/logs/orders", Some("wrong"), &[], "")
        .await
        .assert_refused("UNAUTHENTICATED", 401);
    let r = h
        .call("GET", "/logs/orders", Some(RETIRED_TOKEN), &[], "")
        .await;
    r.assert_refused("AGENT_DISABLED", 403);
    assert_eq!(r.json["error"]["recovery"], "stop");
    h.call("POST", "/admin/reset", Some(OPS_TOKEN), &[], "{}")
        .await
        .assert_refused("TOOL_NOT_ALLOWED", 403);
    h.call("GET", "/logs/orders", Some(STRANGER_TOKEN), &[], "")
        .await
        .assert_refused("TOOL_NOT_ALLOWED", 403);
    let r = h.call("GET", "/etc/passwd", Some(OPS_TOKEN), &[], "").await;
    r.assert_refused("UNKNOWN_TOOL", 404);
    assert_eq!(r.header("x-toolgate-decision"), "deny");
    assert_eq!(backend.count(), 0);
    h.stop().await;
}

#[tokio::test]
async fn backend_failures_never_leak_internals() {
    let backend = Backend::example().await;
    let h = Harness::start(backend.addr, Options::default()).await;
    let r = h.call("GET", "/reports/7", Some(OPS_TOKEN), &[], "").await;
    r.assert_refused("BACKEND_ERROR", 502);
    for secret in ["Traceback", "psycopg2", "db-7", "SELECT"] {
        assert!(!r.text.contains(secret), "leaked {secret}: {}", r.text);
    }
    let r = h.call("GET", "/missing/7", Some(OPS_TOKEN), &[], "").await;
    r.assert_refused("BACKEND_REJECTED", 404);
    assert!(
        !r.text.contains("users") && !r.text.contains("db-7"),
        "{}",
        r.text
    );
    assert_eq!(r.json["error"]["recovery"], "ask_user");
    let r = h.call("GET", "/slow", Some(OPS_TOKEN), &[], "").await;
    r.assert_refused("BACKEND_TIMEOUT", 504);
    assert_eq!(
        r.json["error"]["retryable"], true,
        "GET tools are idempotent by default"
    );
    let r = h
        .call("GET", "/broken-output", Some(OPS_TOKEN), &[], "")
        .await;
    r.assert_refused("OUTPUT_CONTRACT_VIOLATION", 502);
    h.stop().await;
}

#[tokio::test]
async fn unreachable_backend_is_unavailable() {
    let h = Harness::start(closed_port().await, Options::default()).await;
    let r = h
        .call("GET", "/logs/orders", Some(OPS_TOKEN), &[], "")
        .await;
    r.assert_refused("BACKEND_UNAVAILABLE", 503);
    assert_eq!(r.json["error"]["retryable"], true);
    h.stop().await;
}

#[tokio::test]
async fn malformed_and_oversized_requests() {
    let backend = Backend::example().await;
    let h = Harness::start(
        backend.addr,
        Options {
            tweak: Box::new(|s| s.limits.max_body_bytes = 1024),
            ..Options::default()
        },
    )
    .await;
    h.call("POST", "/issues", Some(OPS_TOKEN), &[], "{not json")
        .await
        .assert_refused("MALFORMED_REQUEST", 400);
    h.call("POST", "/issues", Some(OPS_TOKEN), &[], "[1,2]")
        .await
        .assert_refused("MALFORMED_REQUEST", 400);
    let big = format!(r#"{{"project_key":"OPS","title":"{}"}}"#, "x".repeat(4096));
    h.call("POST", "/issues", Some(OPS_TOKEN), &[], &big)
        .await
        .assert_refused("PAYLOAD_TOO_LARGE", 413);
    let many: Vec<(String, String)> = (0..120)
        .map(|i| (format!("x-filler-{i}"), "1".to_string()))
        .collect();
    let many: Vec<(&str, &str)> = many.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    let r = h
        .call("GET", "/logs/orders", Some(OPS_TOKEN), &many, "")
        .await;
    assert_eq!(r.status, 431, "{}", r.text);
    assert_eq!(backend.count(), 0);
    h.stop().await;
}

#[tokio::test]
async fn spoofed_toolgate_headers_and_credentials_never_reach_the_backend() {
    let backend = Backend::example().await;
    let h = Harness::start(backend.addr, Options::default()).await;
    let spoof = [
        ("x-toolgate-agent", "admin-bot"),
        ("x-toolgate-tool", "admin_reset"),
        ("x-toolgate-decision", "allow"),
        ("x-toolgate-session", "s-42"),
    ];
    let r = h
        .call("GET", "/logs/orders", Some(OPS_TOKEN), &spoof, "")
        .await;
    assert_eq!(r.status, 200, "{}", r.text);
    let seen = backend.last();
    assert_eq!(seen.headers["x-toolgate-agent"], "ops-bot");
    assert_eq!(seen.headers["x-toolgate-tool"], "read_logs");
    assert_eq!(
        seen.headers["x-toolgate-session"], "s-42",
        "the session id is carried, not trusted as identity"
    );
    assert!(seen.headers.get("x-toolgate-decision").is_none());
    assert!(
        seen.headers.get("authorization").is_none(),
        "the agent's credential must not be passed on"
    );
    assert_eq!(seen.headers.get_all("x-toolgate-agent").iter().count(), 1);
    h.stop().await;
}

#[tokio::test]
async fn not_ready_until_a_snapshot_loads() {
    let backend = Backend::example().await;
    let h = Harness::start(
        backend.addr,
        Options {
            policies: "kind: [broken".into(),
            wait_ready: false,
            ..Options::default()
        },
    )
    .await;
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    let r = h
        .call("GET", "/logs/orders", Some(OPS_TOKEN), &[], "")
        .await;
    r.assert_refused("NOT_READY", 503);
    assert_eq!(r.json["error"]["retryable"], true);
    assert_eq!(h.get_admin("/readyz").await.0, 503);
    assert_eq!(h.get_admin("/healthz").await.0, 200);
    h.stop().await;
}

#[tokio::test]
async fn unwritable_audit_log_refuses_calls() {
    let backend = Backend::example().await;
    let h = Harness::start(
        backend.addr,
        Options {
            tweak: Box::new(|s| s.audit.path = "/nonexistent/toolgate/audit.log".into()),
            ..Options::default()
        },
    )
    .await;
    let r = h
        .call("GET", "/logs/orders", Some(OPS_TOKEN), &[], "")
        .await;
    r.assert_refused("AUDIT_UNAVAILABLE", 503);
    assert_eq!(backend.count(), 0, "an unrecorded call must not run");
    h.stop().await;
}

#[tokio::test]
async fn every_decision_is_audited_in_a_verifiable_chain() {
    let backend = Backend::example().await;
    let h = Harness::start(backend.addr, Options::default()).await;
    h.call("GET", "/logs/orders", Some(OPS_TOKEN), &[], "")
        .await;
    h.call("GET", "/logs/orders", None, &[], "").await;
    h.call("GET", "/nope", Some(OPS_TOKEN), &[], "").await;
    let dir = h.stop_keeping_files().await;
    let text = std::fs::read_to_string(dir.path().join("audit.log")).unwrap();
    assert_eq!(audit_verify(&text).calls, 3);
    let first = audit_calls(&text).remove(0);
    assert_eq!(first["decision"], "allow");
    assert_eq!(first["agent"], "ops-bot");
    assert_eq!(first["upstreamStatus"], 200);
    assert!(first["argsDigest"].as_str().unwrap().starts_with("sha256:"));
    assert!(
        !text.contains("orders"),
        "argument values are only digested"
    );
}

#[tokio::test]
async fn admin_endpoints_report_state() {
    let backend = Backend::example().await;
    let h = Harness::start(backend.addr, Options::default()).await;
    h.call("GET", "/logs/orders", Some(OPS_TOKEN), &[], "")
        .await;
    assert_eq!(h.get_admin("/readyz").await.0, 200);
    let (_, config) = h.get_admin("/config").await;
    let config: serde_json::Value = serde_json::from_str(&config).unwrap();
    assert_eq!(config["version"], 1);
    assert!(config["objects"]
        .as_array()
        .unwrap()
        .iter()
        .any(|o| o == "AgentPolicy/ops-bot"));
    let (_, metrics) = h.get_admin("/metrics").await;
    assert!(
        metrics.contains(r#"toolgate_calls_total{tool="read_logs",decision="allow",code="OK"} 1"#),
        "{metrics}"
    );
    assert!(metrics.contains("toolgate_policy_synchronized 1"));
    h.stop().await;
}

#[tokio::test]
async fn h2c_prior_knowledge_is_served() {
    let backend = Backend::example().await;
    let h = Harness::start(backend.addr, Options::default()).await;
    let client = hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
        .http2_only(true)
        .build_http::<http_body_util::Empty<bytes::Bytes>>();
    let request = http::Request::get(format!("{}/logs/orders", h.base))
        .header("authorization", format!("Bearer {OPS_TOKEN}"))
        .body(http_body_util::Empty::new())
        .unwrap();
    let response = client.request(request).await.expect("h2c request");
    assert_eq!(response.version(), http::Version::HTTP_2);
    assert_eq!(response.status(), 200);
    assert_eq!(backend.last().headers["x-toolgate-agent"], "ops-bot");
    h.stop().await;
}

#[tokio::test]
async fn captured_arguments_are_audited_with_redaction() {
    let capture = r#"
apiVersion: toolgate.dev/v1alpha1
kind: ToolContract
metadata: {name: create-issue}
spec:
  tool: create_issue
  http: {method: POST, path: /issues}
  captureArguments: true
  redact: [/reporter_email]
  input:
    type: object
    properties:
      title: {type: string}
      reporter_email: {type: string}
---
apiVersion: toolgate.dev/v1alpha1
kind: AgentPolicy
metadata: {name: ops-bot}
spec:
  agents: [ops-bot]
  tools: [{name: create_issue}]
"#;
    let backend = Backend::example().await;
    let h = Harness::start(
        backend.addr,
        Options {
            policies: capture.into(),
            ..Options::default()
        },
    )
    .await;
    let body = r#"{"title": "disk full", "reporter_email": "ana@example.com"}"#;
    assert_eq!(
        h.call("POST", "/issues", Some(OPS_TOKEN), &[], body)
            .await
            .status,
        201
    );
    // Refused calls keep their arguments as proposed, redacted alike: one refused by
    // the schema, one by the policy lookup (an agent no policy governs).
    let invalid = r#"{"title": 5, "reporter_email": "bo@example.com"}"#;
    h.call("POST", "/issues", Some(OPS_TOKEN), &[], invalid)
        .await
        .assert_refused("INVALID_ARGUMENTS", 422);
    let stranger = r#"{"title": "x", "reporter_email": "cy@example.com"}"#;
    h.call("POST", "/issues", Some(STRANGER_TOKEN), &[], stranger)
        .await
        .assert_refused("TOOL_NOT_ALLOWED", 403);
    let dir = h.stop_keeping_files().await;
    let text = std::fs::read_to_string(dir.path().join("audit.log")).unwrap();
    let records = audit_calls(&text);
    let args: Vec<&serde_json::Value> = records.iter().map(|r| &r["args"]).collect();
    assert_eq!(
        args,
        [
            &json!({"title": "disk full", "reporter_email": "[REDACTED]"}),
            &json!({"title": 5, "reporter_email": "[REDACTED]"}),
            &json!({"title": "x", "reporter_email": "[REDACTED]"}),
        ]
    );
    for email in ["ana@", "bo@", "cy@"] {
        assert!(!text.contains(email), "{email} in the audit log");
    }
    assert_eq!(audit_verify(&text).calls, 3);
}

/// Defect of issue 19: a sink that opens but can't be written (/dev/full: a full disk)
/// reported ready and let the first call, a non-idempotent POST, run unrecorded. The
/// writer's first act is now the `start` record: until the sink has taken a record,
/// calls are refused and `/readyz` says why.
#[tokio::test]
async fn an_audit_log_that_cannot_be_written_refuses_the_first_call() {
    let backend = Backend::example().await;
    let h = Harness::start(
        backend.addr,
        Options {
            tweak: Box::new(|s| s.audit.path = "/dev/full".into()),
            ..Options::default()
        },
    )
    .await;
    let (status, why) = h.get_admin("/readyz").await;
    assert_eq!(status, 503, "{why}");
    assert!(why.contains("audit log not writable"), "{why}");
    h.call(
        "POST",
        "/issues",
        Some(OPS_TOKEN),
        &[],
        r#"{"project_key": "OPS", "title": "refund"}"#,
    )
    .await
    .assert_refused("AUDIT_UNAVAILABLE", 503);
    for _ in 0..3 {
        h.call("GET", "/logs/orders", Some(OPS_TOKEN), &[], "")
            .await
            .assert_refused("AUDIT_UNAVAILABLE", 503);
    }
    assert_eq!(
        backend.count(),
        0,
        "no call runs while the audit log can't be written"
    );
    let (_, config) = h.get_admin("/config").await;
    let config: serde_json::Value = serde_json::from_str(&config).unwrap();
    assert_eq!(config["audit"]["writable"], false, "{config}");
    h.stop().await;
}

#[tokio::test]
async fn a_client_that_leaves_mid_call_still_gets_the_call_audited() {
    use tokio::io::AsyncWriteExt;
    let backend = Backend::example().await;
    let h = Harness::start(backend.addr, Options::default()).await;
    let addr = h.base.trim_start_matches("http://").to_string();
    let mut client = tokio::net::TcpStream::connect(&addr).await.unwrap();
    let head =
        format!("GET /slow HTTP/1.1\r\nhost: sidecar\r\nauthorization: Bearer {OPS_TOKEN}\r\n\r\n");
    client.write_all(head.as_bytes()).await.unwrap();
    // The backend holds the call (1.5 s, past the tool's 300 ms timeout); the agent
    // gives up and closes its connection while it runs.
    for _ in 0..100 {
        if backend.count() == 1 {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    assert_eq!(backend.count(), 1, "the call reached the backend");
    drop(client);
    // The call still runs to its end (the timeout) and leaves its record.
    tokio::time::sleep(std::time::Duration::from_millis(600)).await;
    let dir = h.stop_keeping_files().await;
    let text = std::fs::read_to_string(dir.path().join("audit.log")).unwrap();
    assert_eq!(audit_verify(&text).calls, 1, "{text}");
    let record = audit_calls(&text).remove(0);
    assert_eq!(record["tool"], "slow_export");
    assert_eq!(record["code"], "BACKEND_TIMEOUT");
}
