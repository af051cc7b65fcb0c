//! Spans exported to a real OTLP receiver, metrics scraped as Prometheus text, and
//! telemetry that can't slow calls down when the collector is gone.

#[path = "common/mcp_backend.rs"]
mod backend;
mod common;

use backend::McpBackend;
use common::collector::{attr, Collector};
use common::*;
use std::time::{Duration, Instant};

const TRACE: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const PARENT: &str = "00f067aa0ba902b7";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spans_of_allowed_and_refused_calls_reach_the_collector() {
    let (collector, endpoint, _server) = Collector::grpc().await;
    let backend = Backend::example().await;
    let h = Harness::start(
        backend.addr,
        Options {
            tweak: Box::new(move |s| {
                s.telemetry.otlp_endpoint = Some(endpoint);
                s.telemetry.service_name = "orders".into();
            }),
            ..Options::default()
        },
    )
    .await;
    let traceparent = format!("00-{TRACE}-{PARENT}-01");
    let r = h
        .call(
            "GET",
            "/logs/orders?window_minutes=30",
            Some(OPS_TOKEN),
            &[("traceparent", &traceparent)],
            "",
        )
        .await;
    assert_eq!(r.status, 200);
    let refused = h
        .call("POST", "/admin/reset", Some(OPS_TOKEN), &[], "{}")
        .await;
    refused.assert_refused("TOOL_NOT_ALLOWED", 403);

    let server = collector
        .wait_for(|s| s.kind == 2 && s.name == "GET /logs/{service}")
        .await;
    assert_eq!(
        hex::encode(&server.trace_id),
        TRACE,
        "the agent's trace continues"
    );
    assert_eq!(
        hex::encode(&server.parent_span_id),
        PARENT,
        "the agent's span is the parent"
    );
    assert_eq!(server.kind, 2, "a SERVER span");
    for (key, value) in [
        ("gen_ai.operation.name", "execute_tool"),
        ("gen_ai.tool.name", "read_logs"),
        ("gen_ai.tool.type", "extension"),
        ("http.request.method", "GET"),
        ("http.route", "/logs/{service}"),
        ("url.path", "/logs/REDACTED"),
        ("url.scheme", "http"),
        ("http.response.status_code", "200"),
        ("network.protocol.name", "http"),
        ("network.protocol.version", "1.1"),
        ("server.address", "127.0.0.1"),
        ("client.address", "127.0.0.1"),
        ("toolgate.agent.id", "ops-bot"),
        ("toolgate.decision", "allow"),
        ("toolgate.policy.version", "1"),
    ] {
        assert_eq!(attr(&server, key).as_deref(), Some(value), "{key}");
    }
    assert!(
        server.events.iter().any(|e| e.name == "allowed"),
        "stage outcomes are events"
    );
    for kv in &server.attributes {
        assert!(
            !format!("{:?}", kv.value).contains("orders"),
            "argument value leaked into {}",
            kv.key
        );
    }

    // The backend call is a CLIENT child span, and the backend saw it as its parent.
    let client = collector.wait_for(|s| s.kind == 3).await;
    assert_eq!(client.parent_span_id, server.span_id);
    let sent = backend.seen.lock().unwrap()[0].headers["traceparent"]
        .to_str()
        .unwrap()
        .to_string();
    assert_eq!(
        sent,
        format!("00-{TRACE}-{}-01", hex::encode(&client.span_id))
    );

    let denied = collector
        .wait_for(|s| s.kind == 2 && s.name == "POST /admin/reset")
        .await;
    assert_eq!(attr(&denied, "toolgate.decision").as_deref(), Some("deny"));
    assert_eq!(
        attr(&denied, "toolgate.code").as_deref(),
        Some("TOOL_NOT_ALLOWED")
    );
    assert_eq!(
        attr(&denied, "error.type").as_deref(),
        Some("TOOL_NOT_ALLOWED"),
        "a failed span says why"
    );
    assert_eq!(attr(&server, "error.type"), None);
    assert_eq!(
        hex::encode(&denied.trace_id),
        refused.json["error"]["traceId"].as_str().unwrap(),
        "the refusal names its trace"
    );
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spans_export_over_otlp_http() {
    let (collector, addr) = Collector::http().await;
    let backend = Backend::example().await;
    let h = Harness::start(
        backend.addr,
        Options {
            tweak: Box::new(move |s| {
                s.telemetry.otlp_endpoint = Some(format!("http://{addr}"));
                s.telemetry.otlp_protocol = toolgate::config::OtlpProtocol::Http;
            }),
            ..Options::default()
        },
    )
    .await;
    assert_eq!(
        h.call("GET", "/logs/orders", Some(OPS_TOKEN), &[], "")
            .await
            .status,
        200
    );
    collector
        .wait_for(|s| s.kind == 2 && s.name == "GET /logs/{service}")
        .await;
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_collector_costs_calls_nothing_and_drops_are_counted() {
    // A collector that accepts connections and never answers: the worst case.
    let blackhole = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let endpoint = format!("http://{}", blackhole.local_addr().unwrap());
    tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((stream, _)) = blackhole.accept().await {
            held.push(stream);
        }
    });
    let backend = Backend::example().await;
    let h = Harness::start(
        backend.addr,
        Options {
            tweak: Box::new(move |s| {
                s.telemetry.otlp_endpoint = Some(endpoint);
                s.telemetry.max_queued_spans = 10;
            }),
            ..Options::default()
        },
    )
    .await;
    let started = Instant::now();
    let mut slowest = Duration::ZERO;
    for _ in 0..100 {
        let t = Instant::now();
        assert_eq!(
            h.call("GET", "/logs/orders", Some(OPS_TOKEN), &[], "")
                .await
                .status,
            200
        );
        slowest = slowest.max(t.elapsed());
    }
    // An export blocked on this collector would take its 5 s timeout: no call waits for it.
    assert!(slowest < Duration::from_secs(1), "slowest call {slowest:?}");
    assert!(started.elapsed() < Duration::from_secs(10));
    let (_, metrics) = h.get_admin("/metrics").await;
    let dropped: u64 = metrics
        .lines()
        .find_map(|l| l.strip_prefix("toolgate_spans_dropped_total "))
        .and_then(|v| v.trim().parse().ok())
        .expect("toolgate_spans_dropped_total");
    assert!(
        dropped >= 80,
        "dropped {dropped} of 100 spans with room for 10:\n{metrics}"
    );
    h.stop().await;
}

#[tokio::test]
async fn metrics_parse_as_prometheus_text_without_agent_labels() {
    let backend = Backend::example().await;
    let h = Harness::start(backend.addr, Options::default()).await;
    h.call("GET", "/logs/orders", Some(OPS_TOKEN), &[], "")
        .await;
    h.call("GET", "/logs/orders", Some(RETIRED_TOKEN), &[], "")
        .await;
    h.call("GET", "/nope", Some(OPS_TOKEN), &[], "").await;
    let (status, text) = h.get_admin("/metrics").await;
    assert_eq!(status, 200);
    let mut families = std::collections::BTreeSet::new();
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            families.insert(rest.split(' ').next().unwrap().to_string());
            continue;
        }
        if line.starts_with('#') || line.is_empty() {
            continue;
        }
        // name{labels} value
        let (series, value) = line
            .rsplit_once(' ')
            .unwrap_or_else(|| panic!("bad sample line {line:?}"));
        assert!(value.parse::<f64>().is_ok(), "bad value in {line:?}");
        assert!(
            !series.contains("ops-bot") && !series.contains("retired-bot"),
            "agent id as a label: {line}"
        );
    }
    for family in [
        "toolgate_calls",
        "toolgate_call_duration_seconds",
        "toolgate_upstream_duration_seconds",
        "toolgate_policy_version",
        "toolgate_policy_synchronized",
        "toolgate_policy_reload_errors",
        "toolgate_audit_records",
        "toolgate_spans_dropped",
    ] {
        assert!(
            families.contains(family),
            "missing {family} in {families:?}"
        );
    }
    assert!(
        text.contains(
            r#"toolgate_calls_total{tool="read_logs",decision="deny",code="AGENT_DISABLED"} 1"#
        ),
        "{text}"
    );
    assert!(
        text.contains(r#"toolgate_calls_total{tool="-",decision="deny",code="UNKNOWN_TOOL"} 1"#),
        "{text}"
    );
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backend_failure_marks_the_server_span_as_an_error() {
    let (collector, _server, _backend, h) = rest_exporting().await;
    h.call("GET", "/reports/7", Some(OPS_TOKEN), &[], "")
        .await
        .assert_refused("BACKEND_ERROR", 502);
    assert_eq!(
        h.call("GET", "/logs/orders", Some(OPS_TOKEN), &[], "")
            .await
            .status,
        200
    );
    let failed = collector
        .wait_for(|s| s.kind == 2 && s.name == "GET /reports/{id}")
        .await;
    assert_eq!(attr(&failed, "toolgate.decision").as_deref(), Some("allow"));
    assert_eq!(
        failed.status.as_ref().map(|s| s.code),
        Some(2),
        "STATUS_CODE_ERROR"
    );
    assert_eq!(
        attr(&failed, "error.type").as_deref(),
        Some("BACKEND_ERROR")
    );
    let fine = collector
        .wait_for(|s| s.kind == 2 && s.name == "GET /logs/{service}")
        .await;
    assert_ne!(fine.status.as_ref().map(|s| s.code), Some(2));
    h.stop().await;
}

/// A client span stands for a request really sent: a replayed duplicate, answered from
/// the first call, has none.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_requests_really_sent_have_client_spans() {
    let (collector, _server, backend, h) = rest_exporting().await;
    let body = r#"{"project_key": "OPS", "title": "disk full"}"#;
    let first = h.call("POST", "/issues", Some(OPS_TOKEN), &[], body).await;
    let again = h.call("POST", "/issues", Some(OPS_TOKEN), &[], body).await;
    assert_eq!(again.status, first.status, "{}", again.text);
    assert_eq!(again.header("x-toolgate-replayed"), "true");
    let server_spans = || {
        collector
            .spans
            .lock()
            .unwrap()
            .iter()
            .filter(|s| {
                s.kind == 2 && attr(s, "gen_ai.tool.name").as_deref() == Some("create_issue")
            })
            .count()
    };
    for _ in 0..100 {
        if server_spans() == 2 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(server_spans(), 2, "both calls have their server span");
    let client_spans = collector
        .spans
        .lock()
        .unwrap()
        .iter()
        .filter(|s| s.kind == 3)
        .count();
    assert_eq!(client_spans, 1, "one request reached the backend");
    assert_eq!(backend.seen.lock().unwrap().len(), 1);
    h.stop().await;
}

/// MCP spans are named by method and target, carry the JSON-RPC id as
/// `jsonrpc.request.id`, and GenAI attributes only when a tool is called.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mcp_spans_follow_the_mcp_conventions() {
    let (collector, _server, _backend, h) = mcp_exporting().await;
    let init = r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{}}"#;
    let call = r#"{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"read_logs","arguments":{}}}"#;
    let headers = [("mcp-protocol-version", "2025-11-25")];
    assert_eq!(
        h.call("POST", "/mcp", Some(OPS_TOKEN), &headers, init)
            .await
            .status,
        200
    );
    assert_eq!(
        h.call("POST", "/mcp", Some(OPS_TOKEN), &headers, call)
            .await
            .status,
        200
    );
    let tool = collector
        .wait_for(|s| s.kind == 2 && s.name == "tools/call read_logs")
        .await;
    for (key, value) in [
        ("mcp.method.name", "tools/call"),
        ("jsonrpc.request.id", "7"),
        ("mcp.protocol.version", "2025-11-25"),
        ("gen_ai.operation.name", "execute_tool"),
        ("gen_ai.tool.name", "read_logs"),
        ("http.response.status_code", "200"),
    ] {
        assert_eq!(attr(&tool, key).as_deref(), Some(value), "{key}");
    }
    assert_eq!(attr(&tool, "gen_ai.tool.call.id"), None);
    let handshake = collector
        .wait_for(|s| s.kind == 2 && s.name == "initialize")
        .await;
    assert_eq!(
        attr(&handshake, "mcp.method.name").as_deref(),
        Some("initialize")
    );
    assert_eq!(
        attr(&handshake, "gen_ai.operation.name"),
        None,
        "not a tool call"
    );
    assert_eq!(attr(&handshake, "gen_ai.tool.name"), None);
    h.stop().await;
}

/// A streamed call's span ends with its stream, so it shows the call's final outcome:
/// a timeout found after the response head went out is the span's error.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_streamed_call_span_shows_its_final_outcome() {
    let (collector, _server, _backend, h) = mcp_exporting().await;
    let call = |id: u32, tool: &str| {
        format!(
            r#"{{"jsonrpc":"2.0","id":{id},"method":"tools/call","params":{{"name":"{tool}","arguments":{{}}}}}}"#
        )
    };
    // Progress first, then the result 2 s later: past the contract's 300 ms.
    let r = h
        .call(
            "POST",
            "/mcp",
            Some(OPS_TOKEN),
            &[],
            &call(1, "slow_stream_short"),
        )
        .await;
    assert_eq!(r.status, 200);
    assert!(r.text.contains("BACKEND_TIMEOUT"), "{}", r.text);
    let late = collector
        .wait_for(|s| s.kind == 2 && s.name == "tools/call slow_stream_short")
        .await;
    assert_eq!(
        late.status.as_ref().map(|s| s.code),
        Some(2),
        "STATUS_CODE_ERROR"
    );
    assert_eq!(
        attr(&late, "error.type").as_deref(),
        Some("BACKEND_TIMEOUT")
    );
    assert_eq!(
        attr(&late, "toolgate.code").as_deref(),
        Some("BACKEND_TIMEOUT")
    );
    assert_eq!(attr(&late, "toolgate.decision").as_deref(), Some("allow"));
    // A stream that ends well: one span, no error.
    let r = h
        .call(
            "POST",
            "/mcp",
            Some(OPS_TOKEN),
            &[],
            &call(2, "stream_logs"),
        )
        .await;
    assert_eq!(r.status, 200);
    let fine = collector
        .wait_for(|s| s.kind == 2 && s.name == "tools/call stream_logs")
        .await;
    assert_ne!(fine.status.as_ref().map(|s| s.code), Some(2));
    assert_eq!(attr(&fine, "error.type"), None);
    let servers = collector
        .spans
        .lock()
        .unwrap()
        .iter()
        .filter(|s| s.kind == 2 && s.name.starts_with("tools/call"))
        .count();
    assert_eq!(
        servers, 2,
        "one span per call, not one more for the late refusal"
    );
    h.stop().await;
}

/// A collector that shuts down gracefully between exports must not wait on the idle
/// export connection (the exporter's runtime keeps answering it), and the next export
/// connects to the collector started in its place, so spans keep arriving.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spans_reach_a_collector_restarted_between_exports() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let (first, server) = Collector::grpc_until(listener, async {
        let _ = stopped.await;
    });
    let backend = Backend::example().await;
    let h = Harness::start(
        backend.addr,
        Options {
            tweak: Box::new(move |s| s.telemetry.otlp_endpoint = Some(format!("http://{addr}"))),
            ..Options::default()
        },
    )
    .await;
    let call = || h.call("GET", "/logs/orders", Some(OPS_TOKEN), &[], "");
    assert_eq!(call().await.status, 200);
    first.wait_for(|s| s.kind == 2).await;

    stop.send(()).unwrap();
    tokio::time::timeout(Duration::from_secs(10), server)
        .await
        .expect("the first collector closes its connections")
        .unwrap();
    let listener = tokio::net::TcpListener::bind(addr).await.unwrap();
    let (second, _server) = Collector::grpc_until(listener, std::future::pending());
    assert_eq!(call().await.status, 200);
    second
        .wait_for(|s| s.kind == 2 && s.name == "GET /logs/{service}")
        .await;
    h.stop().await;
}

/// A sidecar in front of the in-test MCP backend, exporting to a collector.
async fn mcp_exporting() -> (Collector, tokio::task::JoinHandle<()>, McpBackend, Harness) {
    let (collector, endpoint, server) = Collector::grpc().await;
    let backend = McpBackend::start().await;
    let h = Harness::start(
        backend.addr,
        Options {
            policies: include_str!("fixtures/policies/mcp-backend.yaml").into(),
            tweak: Box::new(move |s| s.telemetry.otlp_endpoint = Some(endpoint)),
            ..Options::default()
        },
    )
    .await;
    (collector, server, backend, h)
}

/// A sidecar in front of the example REST backend, exporting to a collector.
async fn rest_exporting() -> (Collector, tokio::task::JoinHandle<()>, Backend, Harness) {
    let (collector, endpoint, server) = Collector::grpc().await;
    let backend = Backend::example().await;
    let h = Harness::start(
        backend.addr,
        Options {
            tweak: Box::new(move |s| s.telemetry.otlp_endpoint = Some(endpoint)),
            ..Options::default()
        },
    )
    .await;
    (collector, server, backend, h)
}

/// The value of the sample `series` (name and labels, exactly as exposed) on `/metrics`.
async fn sample(h: &Harness, series: &str) -> Option<f64> {
    let (_, text) = h.get_admin("/metrics").await;
    text.lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' '))
        .and_then(|v| v.trim().parse().ok())
}

/// Polls `/metrics` until `series` reaches `at_least`, for up to 10 s; its last value.
async fn wait_for_sample(h: &Harness, series: &str, at_least: f64) -> f64 {
    let mut last = 0.0;
    for _ in 0..200 {
        last = sample(h, series).await.unwrap_or(0.0);
        if last >= at_least {
            return last;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    last
}

/// The issue's walk: the collector's port closed, 6 calls, 10 s. Every span is lost, so
/// every span counts as dropped, and the failed exports count by signal.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_closed_collector_port_counts_failed_exports_and_dropped_spans() {
    let endpoint = format!("http://{}", closed_port().await);
    let backend = Backend::example().await;
    let h = Harness::start(
        backend.addr,
        Options {
            tweak: Box::new(move |s| s.telemetry.otlp_endpoint = Some(endpoint)),
            ..Options::default()
        },
    )
    .await;
    for _ in 0..6 {
        let r = h
            .call("GET", "/logs/orders", Some(OPS_TOKEN), &[], "")
            .await;
        assert_eq!(r.status, 200, "{}", r.text);
    }
    // Each call has its server span and its backend call's client span.
    let dropped = wait_for_sample(&h, "toolgate_spans_dropped_total", 12.0).await;
    assert_eq!(
        dropped, 12.0,
        "every span of the 6 calls is lost and counted"
    );
    let failures = r#"toolgate_telemetry_export_failures_total{signal="traces"}"#;
    assert!(sample(&h, failures).await.unwrap_or(0.0) >= 1.0);
    h.stop().await;
}

/// A collector that is up but answers every export with an error: spans and pushed
/// metrics both count their failures, each under its signal.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_collector_answering_errors_counts_failures_by_signal() {
    let (addr, seen) = common::collector::refusing_http(400).await;
    let backend = Backend::example().await;
    let h = Harness::start(
        backend.addr,
        Options {
            tweak: Box::new(move |s| {
                s.telemetry.otlp_endpoint = Some(format!("http://{addr}"));
                s.telemetry.otlp_protocol = toolgate::config::OtlpProtocol::Http;
                s.telemetry.metrics_export = toolgate::config::MetricsExport::Otlp;
                s.telemetry.metrics_interval_ms = 200;
            }),
            ..Options::default()
        },
    )
    .await;
    for _ in 0..3 {
        h.call("GET", "/logs/orders", Some(OPS_TOKEN), &[], "")
            .await;
    }
    for signal in ["traces", "metrics"] {
        let series = format!(r#"toolgate_telemetry_export_failures_total{{signal="{signal}"}}"#);
        let failed = wait_for_sample(&h, &series, 1.0).await;
        assert!(failed >= 1.0, "{signal}: {failed}");
    }
    assert_eq!(
        wait_for_sample(&h, "toolgate_spans_dropped_total", 6.0).await,
        6.0,
        "3 calls' server and client spans"
    );
    let seen = seen.lock().unwrap().clone();
    assert!(
        seen.contains_key("/v1/traces") && seen.contains_key("/v1/metrics"),
        "{seen:?}"
    );
    h.stop().await;
}

/// `toolgate_calls_total` counts tool calls: MCP's handshake and listing are counted by
/// method in the conventions' histogram, never as `tool="-"`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mcp_handshake_and_listing_are_not_tool_calls() {
    let backend = McpBackend::start().await;
    let h = Harness::start(
        backend.addr,
        Options {
            policies: include_str!("fixtures/policies/mcp-backend.yaml").into(),
            ..Options::default()
        },
    )
    .await;
    let headers = [("mcp-protocol-version", "2025-11-25")];
    for body in [
        r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{}}"#,
        r#"{"jsonrpc":"2.0","id":2,"method":"tools/list","params":{}}"#,
        r#"{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"read_logs","arguments":{}}}"#,
        r#"{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"name":"no_such_tool","arguments":{}}}"#,
    ] {
        h.call("POST", "/mcp", Some(OPS_TOKEN), &headers, body)
            .await;
    }
    // Refused before it said what it was: counted, as the refusal it is.
    h.call(
        "POST",
        "/mcp",
        None,
        &headers,
        r#"{"jsonrpc":"2.0","id":5,"method":"initialize"}"#,
    )
    .await;
    let (_, text) = h.get_admin("/metrics").await;
    // The exposition's order is a hash map's: compared as a set.
    let calls: std::collections::BTreeSet<&str> = text
        .lines()
        .filter(|l| l.starts_with("toolgate_calls_total{"))
        .collect();
    assert_eq!(
        calls,
        std::collections::BTreeSet::from([
            r#"toolgate_calls_total{tool="read_logs",decision="allow",code="OK"} 1"#,
            r#"toolgate_calls_total{tool="-",decision="deny",code="UNKNOWN_TOOL"} 1"#,
            r#"toolgate_calls_total{tool="-",decision="deny",code="UNAUTHENTICATED"} 1"#,
        ]),
        "{text}"
    );
    for method in ["initialize", "tools/list"] {
        let counted = format!(
            r#"mcp_server_operation_duration_seconds_count{{mcp_method_name="{method}",gen_ai_tool_name="",error_type=""}} 1"#
        );
        assert!(text.contains(&counted), "missing {counted} in\n{text}");
    }
    h.stop().await;
}
