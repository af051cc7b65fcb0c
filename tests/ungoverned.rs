//! Nothing ungoverned (DESIGN §14): the classes an outside red-team pass broke through,
//! each closed as a class and shown over real sockets against backends that record
//! every request they receive — a call dressed as a notification, a toolgate header
//! spelled with `_`, a target in absolute form, a body declared as something other
//! than the JSON that was checked.

#[path = "common/mcp_backend.rs"]
mod backend;
mod common;

use backend::McpBackend;
use bytes::Bytes;
use common::*;
use http::{HeaderName, Request};
use http_body_util::Full;
use serde_json::json;
use std::time::Duration;
use toolgate::config::Underscores;

const MCP_POLICIES: &str = include_str!("fixtures/policies/mcp-backend.yaml");

async fn mcp_sidecar(backend: &McpBackend) -> Harness {
    Harness::start(
        backend.addr,
        Options {
            policies: MCP_POLICIES.into(),
            ..Options::default()
        },
    )
    .await
}

/// A request with exactly the headers given (no implicit `content-type`).
async fn send(
    h: &Harness,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> Reply {
    let mut request = Request::builder()
        .method(method)
        .uri(format!("{}{}", h.base, path));
    for (name, value) in headers {
        let name = HeaderName::from_bytes(name.as_bytes()).unwrap();
        request = request.header(name, *value);
    }
    let response = h
        .client
        .request(
            request
                .body(Full::new(Bytes::from(body.to_string())))
                .unwrap(),
        )
        .await
        .unwrap();
    Reply::read(response).await
}

const BEARER: &str = "Bearer ops-token-123";

/// A `tools/call` (or any method but a notification's) without an id is no
/// notification: refused alone and inside a batch, and nothing of it is forwarded.
/// A real notification still passes.
#[tokio::test]
async fn a_call_dressed_as_a_notification_never_reaches_the_backend() {
    let backend = McpBackend::start().await;
    let h = mcp_sidecar(&backend).await;
    let json = ("content-type", "application/json");
    let auth = ("authorization", BEARER);
    let disguised = [
        json!({"jsonrpc": "2.0", "method": "tools/call", "params": {"name": "create_issue", "arguments": {"project_key": "SEC", "title": "x"}}}),
        // A tool the agent was never granted, and one that does not exist.
        json!({"jsonrpc": "2.0", "method": "tools/call", "params": {"name": "echo", "arguments": {}}}),
        json!({"jsonrpc": "2.0", "method": "tools/call", "params": {"name": "secret_tool"}}),
        json!({"jsonrpc": "2.0", "method": "resources/read", "params": {"uri": "config://app"}}),
        json!({"jsonrpc": "2.0", "method": "Notifications/initialized"}),
        json!({"jsonrpc": "2.0", "method": "notification/cancelled"}),
    ];
    for message in &disguised {
        let r = send(&h, "POST", "/mcp", &[json, auth], &message.to_string()).await;
        assert_eq!(r.status, 400, "{message}: {}", r.text);
        assert_eq!(r.json["error"]["code"], -32600, "{}", r.text);
        assert_eq!(
            r.json["error"]["data"]["error"]["code"],
            "MALFORMED_REQUEST"
        );
        // Inside a batch, beside a message that would pass: the batch is refused whole.
        let batch = json!([{"jsonrpc": "2.0", "id": 1, "method": "ping"}, message]);
        let r = send(&h, "POST", "/mcp", &[json, auth], &batch.to_string()).await;
        assert_eq!(r.status, 400, "{batch}: {}", r.text);
        assert_eq!(r.json["error"]["code"], -32600, "{}", r.text);
    }
    assert!(
        backend.posts().is_empty(),
        "forwarded: {:?}",
        backend.posts()
    );
    // A notification is still a notification, alone and in a batch.
    let note = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
    let r = send(&h, "POST", "/mcp", &[json, auth], &note.to_string()).await;
    assert_eq!(r.status, 202, "{}", r.text);
    let r = send(
        &h,
        "POST",
        "/mcp",
        &[json, auth],
        &json!([note]).to_string(),
    )
    .await;
    assert_eq!(r.status, 202, "{}", r.text);
    assert_eq!(backend.posts().len(), 2, "{:?}", backend.posts());
    h.stop().await;
}

/// Spellings of toolgate's headers with `_` never reach a backend, whatever the setting;
/// other names with `_` are dropped by default, refused or passed as configured.
#[tokio::test]
async fn toolgate_headers_spelled_with_underscores_never_pass() {
    for setting in [Underscores::Drop, Underscores::Reject, Underscores::Allow] {
        let backend = Backend::example().await;
        let h = Harness::start(
            backend.addr,
            Options {
                tweak: Box::new(move |s| s.limits.headers_with_underscores = setting),
                ..Options::default()
            },
        )
        .await;
        let spoofs = [
            ("X_Toolgate_Agent", "admin"),
            ("x_toolgate_session", "someone-elses"),
            ("X-Toolgate_Tool", "delete_logs"),
            ("x_TOOLGATE-decision", "allow"),
        ];
        // Toolgate's own spellings are dropped under every setting, so this passes.
        let r = send(
            &h,
            "GET",
            "/logs/orders",
            &[&[("authorization", BEARER)][..], &spoofs].concat(),
            "",
        )
        .await;
        assert_eq!(r.status, 200, "{setting:?}: {}", r.text);
        let seen = backend.last();
        assert_eq!(seen.headers["x-toolgate-agent"], "ops-bot");
        assert!(seen.headers.get("x-toolgate-session").is_none());
        assert!(
            seen.headers.keys().all(|k| !k.as_str().contains('_')),
            "{setting:?}: {:?}",
            seen.headers
        );
        // Any other name with `_`.
        let r = send(
            &h,
            "GET",
            "/logs/orders",
            &[("authorization", BEARER), ("X_Api_Key", "k")],
            "",
        )
        .await;
        match setting {
            Underscores::Drop => {
                assert_eq!(r.status, 200, "{}", r.text);
                assert!(backend.last().headers.get("x_api_key").is_none());
            }
            Underscores::Reject => {
                r.assert_refused("MALFORMED_REQUEST", 400);
                assert!(r.json["error"]["message"]
                    .as_str()
                    .unwrap()
                    .contains("x_api_key"));
            }
            Underscores::Allow => {
                assert_eq!(r.status, 200, "{}", r.text);
                assert_eq!(backend.last().headers["x_api_key"], "k");
            }
        }
        h.stop().await;
    }
    // The MCP endpoint: a spoofed session header neither binds a session nor crosses.
    let backend = McpBackend::start().await;
    let h = mcp_sidecar(&backend).await;
    let ping = json!({"jsonrpc": "2.0", "id": 1, "method": "ping"}).to_string();
    let headers = [
        ("content-type", "application/json"),
        ("authorization", BEARER),
        ("X_Toolgate_Agent", "admin"),
        ("x_toolgate_session", "s-9"),
    ];
    let r = send(&h, "POST", "/mcp", &headers, &ping).await;
    assert_eq!(r.status, 200, "{}", r.text);
    let seen = backend.last();
    assert_eq!(seen.headers["x-toolgate-agent"], "ops-bot");
    assert!(seen.headers.get("x-toolgate-session").is_none());
    assert!(seen.headers.keys().all(|k| !k.as_str().contains('_')));
    h.stop().await;
}

/// The agent port is no forward proxy: a request in absolute form is refused, REST and
/// MCP, and never forwarded (the backend would have seen the other host).
#[tokio::test]
async fn a_target_in_absolute_form_is_refused() {
    let backend = Backend::example().await;
    let h = Harness::start(backend.addr, Options::default()).await;
    let addr: std::net::SocketAddr = h.base.trim_start_matches("http://").parse().unwrap();
    for target in [
        "http://admin.internal/issues",
        "http://127.0.0.1/issues",
        "https://admin.internal/mcp",
        "http://admin.internal:8080/logs/orders",
    ] {
        let body = r#"{"project_key":"OPS","title":"x"}"#;
        let request = format!(
            "POST {target} HTTP/1.1\r\nHost: admin.internal\r\nAuthorization: {BEARER}\r\n\
             Content-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        );
        let answer =
            common::raw_http::exchange(addr, request.as_bytes(), Duration::from_secs(5)).await;
        let common::raw_http::Exchange::Answered { status, body } = answer else {
            panic!("{target}: {answer:?}");
        };
        assert_eq!(status, 400, "{target}: {body}");
        assert!(body.contains("MALFORMED_REQUEST"), "{body}");
        assert!(body.contains("not a forward proxy"), "{body}");
    }
    assert_eq!(backend.count(), 0);
    h.stop().await;
}

/// A body is what it says it is: a JSON object sent as a form hides `&project_key=SEC&`
/// from a JSON check and shows it to a form parser. Anything but JSON is refused, REST
/// and MCP, and nothing reaches the backend.
#[tokio::test]
async fn a_body_that_is_not_declared_json_is_refused() {
    let backend = Backend::example().await;
    let h = Harness::start(backend.addr, Options::default()).await;
    let hidden = r#"{"project_key":"OPS","title":"x&project_key=SEC&amount=99999&"}"#;
    for content_type in [
        Some("application/x-www-form-urlencoded"),
        Some("multipart/form-data; boundary=b"),
        Some("text/plain"),
        Some("application/json; charset=utf-16"),
        Some("application/jsonp"),
        None,
    ] {
        let mut headers = vec![("authorization", BEARER)];
        headers.extend(content_type.map(|t| ("content-type", t)));
        let r = send(&h, "POST", "/issues", &headers, hidden).await;
        r.assert_refused("UNSUPPORTED_MEDIA_TYPE", 415);
        assert_eq!(r.json["error"]["recovery"], "fix_arguments", "{}", r.text);
        assert_eq!(r.json["error"]["retryable"], false);
    }
    let encoded = [
        ("authorization", BEARER),
        ("content-type", "application/json"),
        ("content-encoding", "gzip"),
    ];
    send(&h, "POST", "/issues", &encoded, hidden)
        .await
        .assert_refused("UNSUPPORTED_MEDIA_TYPE", 415);
    assert_eq!(backend.count(), 0, "nothing is forwarded");
    // JSON, declared in any of its spellings, passes; a body-less GET needs no type.
    for content_type in [
        "application/json",
        "Application/JSON; charset=UTF-8",
        "application/vnd.issue+json",
    ] {
        let r = send(
            &h,
            "POST",
            "/issues",
            &[("authorization", BEARER), ("content-type", content_type)],
            hidden,
        )
        .await;
        assert_eq!(r.status, 201, "{content_type}: {}", r.text);
    }
    let r = send(&h, "GET", "/logs/orders", &[("authorization", BEARER)], "").await;
    assert_eq!(r.status, 200, "{}", r.text);
    let file = h.audit_file();
    let _dir = h.stop_keeping_files().await;
    let audit = std::fs::read_to_string(file).unwrap();
    let refused = audit_calls(&audit)
        .into_iter()
        .filter(|r| r["code"] == "UNSUPPORTED_MEDIA_TYPE")
        .count();
    assert_eq!(refused, 7, "each refusal has its audit record");

    let backend = McpBackend::start().await;
    let h = mcp_sidecar(&backend).await;
    let call = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
        "params": {"name": "create_issue", "arguments": {"project_key": "OPS", "title": "x&project_key=SEC&"}}});
    let r = send(
        &h,
        "POST",
        "/mcp",
        &[
            ("authorization", BEARER),
            ("content-type", "application/x-www-form-urlencoded"),
        ],
        &call.to_string(),
    )
    .await;
    assert_eq!(r.status, 415, "{}", r.text);
    assert_eq!(
        r.json["error"]["data"]["error"]["code"],
        "UNSUPPORTED_MEDIA_TYPE"
    );
    assert!(backend.posts().is_empty());
    h.stop().await;
}

/// An agent's own mistakes are its own: a REST caller is identified before its route or
/// body is read, so an authenticated agent's unknown routes and malformed bodies are
/// answered and recorded one by one, never counted as an anonymous flood; a caller
/// without a credential learns nothing of the routes.
#[tokio::test]
async fn an_agents_mistakes_are_never_an_anonymous_flood() {
    let backend = Backend::example().await;
    let h = Harness::start(
        backend.addr,
        Options {
            tweak: Box::new(|s| s.limits.unauthenticated_per_second = 2),
            ..Options::default()
        },
    )
    .await;
    for _ in 0..10 {
        let r = h
            .call("GET", "/no/such/route", Some(OPS_TOKEN), &[], "")
            .await;
        r.assert_refused("UNKNOWN_TOOL", 404);
        let r = send(
            &h,
            "POST",
            "/issues",
            &[
                ("authorization", BEARER),
                ("content-type", "application/json"),
            ],
            "{not json",
        )
        .await;
        r.assert_refused("MALFORMED_REQUEST", 400);
    }
    let r = h.call("GET", "/no/such/route", None, &[], "").await;
    r.assert_refused("UNAUTHENTICATED", 401);
    let file = h.audit_file();
    let _dir = h.stop_keeping_files().await;
    let calls = audit_calls(&std::fs::read_to_string(file).unwrap());
    let own = calls.iter().filter(|c| c["agent"] == "ops-bot").count();
    assert_eq!(own, 20, "every refusal of ops-bot has its record");
    assert_eq!(backend.count(), 0);
}
