//! The OpenTelemetry semantic conventions over real sockets: the duration histograms on
//! `/metrics` and pushed over OTLP to a real receiver, trace sampling (what is exported,
//! what the backend is told), and the attributes of the backend call's client span.

#[path = "common/mcp_backend.rs"]
mod backend;
mod common;

use backend::McpBackend;
use common::collector::{attr, kv, Collector};
use common::*;
use opentelemetry_proto::tonic::metrics::v1::{metric::Data, HistogramDataPoint, Metric};
use opentelemetry_proto::tonic::trace::v1::Span;
use serde_json::{json, Value};
use std::time::Duration;
use toolgate::config::{MetricsExport, OtlpProtocol, Settings, Telemetry, TraceSampler};

const MCP_POLICIES: &str = include_str!("fixtures/policies/mcp-backend.yaml");
const TRACE: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const PARENT: &str = "00f067aa0ba902b7";
const HTTP_BUCKETS: [f64; 14] = [
    0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
];
const MCP_BUCKETS: [f64; 14] = [
    0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0,
];

// ---------------------------------------------------------------------------------------
// helpers

fn rpc(id: u32, method: &str, params: Value) -> String {
    json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}).to_string()
}

fn tool_call(id: u32, name: &str, args: Value) -> String {
    rpc(id, "tools/call", json!({"name": name, "arguments": args}))
}

async fn mcp(h: &Harness, body: &str) -> Reply {
    h.call(
        "POST",
        "/mcp",
        Some(OPS_TOKEN),
        &[("mcp-protocol-version", "2025-11-25")],
        body,
    )
    .await
}

/// The MCP refusal code of a tool result (`isError`) or a JSON-RPC error.
fn mcp_code(r: &Reply) -> String {
    let result = &r.json["result"]["structuredContent"]["error"]["code"];
    let error = &r.json["error"]["data"]["error"]["code"];
    result.as_str().or(error.as_str()).unwrap_or("").to_string()
}

/// The sample lines (no comments) of the `family` histogram: `_count`, `_sum`, `_bucket`.
fn samples<'a>(text: &'a str, family: &str) -> Vec<&'a str> {
    text.lines()
        .filter(|l| !l.starts_with('#') && l.starts_with(family))
        .collect()
}

/// The `_count` lines of a histogram family.
fn counts<'a>(text: &'a str, family: &str) -> Vec<&'a str> {
    let prefix = format!("{family}_count{{");
    text.lines().filter(|l| l.starts_with(&prefix)).collect()
}

/// The value of the sample line that starts with `series` (`name{labels}`).
fn value(text: &str, series: &str) -> Option<f64> {
    text.lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' '))
        .map(|v| v.trim().parse().unwrap())
}

fn assert_line(text: &str, line: &str) {
    assert!(
        text.lines().any(|l| l == line),
        "missing line\n  {line}\nin\n{}",
        text.lines()
            .filter(|l| l.contains("_duration_seconds_count"))
            .collect::<Vec<_>>()
            .join("\n")
    );
}

/// `00-<trace>-<span>-<flags>`, each part checked for its length and lower-case hex.
fn parse_traceparent(value: &str) -> (String, String, String) {
    let parts: Vec<&str> = value.split('-').collect();
    assert_eq!(parts.len(), 4, "traceparent {value:?}");
    assert_eq!(parts[0], "00", "traceparent {value:?}");
    for (part, len) in [(parts[1], 32), (parts[2], 16), (parts[3], 2)] {
        assert_eq!(part.len(), len, "traceparent {value:?}");
        assert!(
            part.chars()
                .all(|c| c.is_ascii_digit() || ('a'..='f').contains(&c)),
            "traceparent {value:?}"
        );
    }
    assert_ne!(parts[1], "0".repeat(32), "an invalid trace id: {value:?}");
    assert_ne!(parts[2], "0".repeat(16), "an invalid span id: {value:?}");
    (
        parts[1].to_string(),
        parts[2].to_string(),
        parts[3].to_string(),
    )
}

/// The `traceparent` each request the REST backend saw carried.
fn rest_traceparents(backend: &Backend) -> Vec<(String, String, String)> {
    backend
        .seen
        .lock()
        .unwrap()
        .iter()
        .map(|s| {
            parse_traceparent(
                s.headers
                    .get("traceparent")
                    .unwrap_or_else(|| panic!("no traceparent sent to the backend: {s:?}"))
                    .to_str()
                    .unwrap(),
            )
        })
        .collect()
}

fn points(metric: &Metric) -> &[HistogramDataPoint] {
    match &metric.data {
        Some(Data::Histogram(h)) => &h.data_points,
        other => panic!("{} is not a histogram: {other:?}", metric.name),
    }
}

/// The data point whose attributes are exactly `attributes`.
fn point<'a>(metric: &'a Metric, attributes: &[(&str, &str)]) -> Option<&'a HistogramDataPoint> {
    points(metric).iter().find(|p| {
        p.attributes.len() == attributes.len()
            && attributes
                .iter()
                .all(|(k, v)| kv(&p.attributes, k).as_deref() == Some(*v))
    })
}

fn has_point(metric: &Metric, attributes: &[(&str, &str)]) -> bool {
    point(metric, attributes).is_some()
}

fn describe_points(metric: &Metric) -> String {
    points(metric)
        .iter()
        .map(|p| {
            let attributes: Vec<String> = p
                .attributes
                .iter()
                .map(|a| format!("{}={}", a.key, kv(&p.attributes, &a.key).unwrap()))
                .collect();
            format!("  [{}] count={}", attributes.join(", "), p.count)
        })
        .collect::<Vec<_>>()
        .join("\n")
}

fn server_spans(collector: &Collector) -> Vec<Span> {
    collector
        .spans
        .lock()
        .unwrap()
        .iter()
        .filter(|s| s.kind == 2)
        .cloned()
        .collect()
}

fn client_spans(collector: &Collector) -> Vec<Span> {
    collector
        .spans
        .lock()
        .unwrap()
        .iter()
        .filter(|s| s.kind == 3)
        .cloned()
        .collect()
}

fn names(spans: &[Span]) -> Vec<String> {
    spans
        .iter()
        .map(|s| format!("{} ({})", s.name, hex::encode(&s.trace_id)))
        .collect()
}

/// A sidecar in front of the example REST backend exporting spans to a gRPC collector,
/// its telemetry settings changed by `tweak`.
async fn rest_exporting(
    tweak: impl FnOnce(&mut Telemetry) + 'static,
) -> (Collector, tokio::task::JoinHandle<()>, Backend, Harness) {
    let (collector, endpoint, server) = Collector::grpc().await;
    let backend = Backend::example().await;
    let h = Harness::start(
        backend.addr,
        Options {
            tweak: Box::new(move |s| {
                s.telemetry.otlp_endpoint = Some(endpoint);
                tweak(&mut s.telemetry);
            }),
            ..Options::default()
        },
    )
    .await;
    (collector, server, backend, h)
}

/// A sidecar in front of the in-test MCP backend, with its policies.
async fn mcp_harness(backend: &McpBackend) -> Harness {
    Harness::start(
        backend.addr,
        Options {
            policies: MCP_POLICIES.into(),
            ..Options::default()
        },
    )
    .await
}

/// No series of `families` has a label value holding any of `leaks` (agent ids,
/// argument values, names an agent made up).
fn assert_no_label_holds(text: &str, families: &[&str], leaks: &[&str]) {
    for family in families {
        for line in samples(text, family) {
            for leak in leaks {
                assert!(!line.contains(leak), "{leak:?} in a label: {line}");
            }
        }
    }
}

/// The same in front of the in-test MCP backend.
async fn mcp_exporting(
    tweak: impl FnOnce(&mut Telemetry) + 'static,
) -> (Collector, tokio::task::JoinHandle<()>, McpBackend, Harness) {
    let (collector, endpoint, server) = Collector::grpc().await;
    let backend = McpBackend::start().await;
    let h = Harness::start(
        backend.addr,
        Options {
            policies: MCP_POLICIES.into(),
            tweak: Box::new(move |s| {
                s.telemetry.otlp_endpoint = Some(endpoint);
                tweak(&mut s.telemetry);
            }),
            ..Options::default()
        },
    )
    .await;
    (collector, server, backend, h)
}

/// The audit log's call records, read once the sidecar has stopped.
async fn audit_records(h: Harness) -> Vec<Value> {
    let dir = h.stop_keeping_files().await;
    audit_calls(&std::fs::read_to_string(dir.path().join("audit.log")).unwrap())
}

// ---------------------------------------------------------------------------------------
// 1. /metrics

/// REST requests count in `http_server_request_duration_seconds` by method, scheme,
/// route, status and error type; the requests sent to the backend in
/// `http_client_request_duration_seconds` by its address and port.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rest_traffic_fills_the_http_convention_histograms() {
    let backend = Backend::example().await;
    let h = Harness::start(backend.addr, Options::default()).await;
    let port = backend.addr.port();
    for path in [
        "/logs/orders?window_minutes=30",
        "/logs/payments",
        "/logs/orders",
    ] {
        let r = h.call("GET", path, Some(OPS_TOKEN), &[], "").await;
        assert_eq!(r.status, 200, "{}", r.text);
    }
    h.call("POST", "/admin/reset", Some(OPS_TOKEN), &[], "{}")
        .await
        .assert_refused("TOOL_NOT_ALLOWED", 403);
    h.call("GET", "/reports/7", Some(OPS_TOKEN), &[], "")
        .await
        .assert_refused("BACKEND_ERROR", 502);
    h.call("GET", "/slow", Some(OPS_TOKEN), &[], "")
        .await
        .assert_refused("BACKEND_TIMEOUT", 504);
    h.call("GET", "/logs/orders", Some(RETIRED_TOKEN), &[], "")
        .await
        .assert_refused("AGENT_DISABLED", 403);
    // A path no contract names: no route, and the path is no label.
    h.call("GET", "/nope/secret-path-42", Some(OPS_TOKEN), &[], "")
        .await
        .assert_refused("UNKNOWN_TOOL", 404);
    let created = h
        .call(
            "POST",
            "/issues",
            Some(OPS_TOKEN),
            &[],
            r#"{"project_key": "OPS", "title": "disk full"}"#,
        )
        .await;
    assert_eq!(created.status, 201, "{}", created.text);

    let (status, text) = h.get_admin("/metrics").await;
    assert_eq!(status, 200);
    for line in [
        "# TYPE http_server_request_duration_seconds histogram",
        "# UNIT http_server_request_duration_seconds seconds",
        "# TYPE http_client_request_duration_seconds histogram",
        "# UNIT http_client_request_duration_seconds seconds",
    ] {
        assert!(text.lines().any(|l| l == line), "missing {line}");
    }
    let server = |method: &str, route: &str, status: &str, error: &str, n: u32| {
        format!(
            "http_server_request_duration_seconds_count{{http_request_method=\"{method}\",url_scheme=\"http\",http_route=\"{route}\",http_response_status_code=\"{status}\",error_type=\"{error}\"}} {n}"
        )
    };
    let expected_server = [
        server("GET", "/logs/{service}", "200", "", 3),
        server("POST", "/admin/reset", "403", "TOOL_NOT_ALLOWED", 1),
        server("GET", "/reports/{id}", "502", "BACKEND_ERROR", 1),
        server("GET", "/slow", "504", "BACKEND_TIMEOUT", 1),
        server("GET", "/logs/{service}", "403", "AGENT_DISABLED", 1),
        server("GET", "", "404", "UNKNOWN_TOOL", 1),
        server("POST", "/issues", "201", "", 1),
    ];
    for line in &expected_server {
        assert_line(&text, line);
    }
    assert_eq!(
        counts(&text, "http_server_request_duration_seconds").len(),
        expected_server.len(),
        "one series per distinct request: {:#?}",
        counts(&text, "http_server_request_duration_seconds")
    );

    let client = |method: &str, status: &str, error: &str, n: u32| {
        format!(
            "http_client_request_duration_seconds_count{{http_request_method=\"{method}\",server_address=\"127.0.0.1\",server_port=\"{port}\",http_response_status_code=\"{status}\",error_type=\"{error}\"}} {n}"
        )
    };
    let expected_client = [
        // The three reads (one series: the route is no label of the client metric).
        client("GET", "200", "", 3),
        // The backend's 500: the HTTP conventions' error.type is the status.
        client("GET", "500", "500", 1),
        // No answer within 300 ms: no status, the code as error.type.
        client("GET", "", "BACKEND_TIMEOUT", 1),
        client("POST", "201", "", 1),
    ];
    for line in &expected_client {
        assert_line(&text, line);
    }
    assert_eq!(
        counts(&text, "http_client_request_duration_seconds").len(),
        expected_client.len(),
        "refused calls reach no backend: {:#?}",
        counts(&text, "http_client_request_duration_seconds")
    );
    // The timed-out request took its 300 ms.
    let timed_out = format!(
        "http_client_request_duration_seconds_sum{{http_request_method=\"GET\",server_address=\"127.0.0.1\",server_port=\"{port}\",http_response_status_code=\"\",error_type=\"BACKEND_TIMEOUT\"}}"
    );
    let took = value(&text, &timed_out).expect("the timeout's _sum");
    assert!((0.28..1.4).contains(&took), "timeout took {took} s");
    // Every sample is in +Inf.
    let inf = format!(
        "http_client_request_duration_seconds_bucket{{le=\"+Inf\",http_request_method=\"GET\",server_address=\"127.0.0.1\",server_port=\"{port}\",http_response_status_code=\"200\",error_type=\"\"}}"
    );
    assert_eq!(value(&text, &inf), Some(3.0), "{inf}");
    // The old per-tool histogram counts only answered requests.
    assert_line(
        &text,
        r#"toolgate_upstream_duration_seconds_count{tool="get_report"} 1"#,
    );
    assert_eq!(
        value(
            &text,
            r#"toolgate_upstream_duration_seconds_count{tool="slow_export"}"#
        )
        .unwrap_or(0.0),
        0.0
    );
    assert!(
        counts(&text, "mcp_server_operation_duration_seconds").is_empty()
            && counts(&text, "mcp_client_operation_duration_seconds").is_empty(),
        "no MCP traffic, no MCP series"
    );
    assert_no_label_holds(
        &text,
        &[
            "http_server_request_duration_seconds",
            "http_client_request_duration_seconds",
        ],
        &[
            "ops-bot",
            "retired-bot",
            "orders",
            "payments",
            "OPS",
            "disk",
            "secret-path",
        ],
    );
    h.stop().await;
}

/// Each MCP JSON-RPC message counts in `mcp_server_operation_duration_seconds` by method,
/// tool and error type (never as an HTTP request); each tools/call sent to the backend in
/// `mcp_client_operation_duration_seconds`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mcp_traffic_fills_the_mcp_convention_histograms() {
    let backend = McpBackend::start().await;
    let h = mcp_harness(&backend).await;
    let r = mcp(&h, &rpc(1, "initialize", json!({}))).await;
    assert_eq!(r.status, 200, "{}", r.text);
    let r = mcp(&h, &rpc(2, "tools/list", json!({}))).await;
    assert_eq!(r.status, 200, "{}", r.text);
    for id in [3, 4] {
        let r = mcp(&h, &tool_call(id, "read_logs", json!({}))).await;
        assert_eq!(r.status, 200, "{}", r.text);
        assert_eq!(mcp_code(&r), "", "{}", r.text);
    }
    let r = mcp(&h, &tool_call(5, "echo", json!({"text": "hush-1234"}))).await;
    assert_eq!(mcp_code(&r), "TOOL_NOT_ALLOWED", "{}", r.text);
    let r = mcp(
        &h,
        &tool_call(
            6,
            "create_issue",
            json!({"project_key": "SEC", "title": "x"}),
        ),
    )
    .await;
    assert_eq!(mcp_code(&r), "POLICY_DENIED", "{}", r.text);
    let r = mcp(&h, &tool_call(7, "made_up_tool_9f3", json!({}))).await;
    assert_eq!(mcp_code(&r), "UNKNOWN_TOOL", "{}", r.text);
    let r = mcp(&h, &tool_call(8, "broken", json!({}))).await;
    assert_eq!(mcp_code(&r), "BACKEND_ERROR", "{}", r.text);
    // A method the specification doesn't name: `_OTHER`, not the agent's string.
    // No policy grants it (spec.mcpMethods): refused.
    let r = mcp(&h, &rpc(9, "vendor/secret_method_77", json!({}))).await;
    assert_eq!(mcp_code(&r), "TOOL_NOT_ALLOWED", "{}", r.text);

    let (_, text) = h.get_admin("/metrics").await;
    for line in [
        "# TYPE mcp_server_operation_duration_seconds histogram",
        "# UNIT mcp_server_operation_duration_seconds seconds",
        "# TYPE mcp_client_operation_duration_seconds histogram",
        "# UNIT mcp_client_operation_duration_seconds seconds",
    ] {
        assert!(text.lines().any(|l| l == line), "missing {line}");
    }
    let server = |method: &str, tool: &str, error: &str, n: u32| {
        format!(
            "mcp_server_operation_duration_seconds_count{{mcp_method_name=\"{method}\",gen_ai_tool_name=\"{tool}\",error_type=\"{error}\"}} {n}"
        )
    };
    for line in [
        server("initialize", "", "", 1),
        server("tools/list", "", "", 1),
        server("tools/call", "read_logs", "", 2),
        server("tools/call", "echo", "TOOL_NOT_ALLOWED", 1),
        server("tools/call", "create_issue", "POLICY_DENIED", 1),
        server("tools/call", "", "UNKNOWN_TOOL", 1),
        server("tools/call", "broken", "BACKEND_ERROR", 1),
    ] {
        assert_line(&text, &line);
    }
    assert_line(&text, &server("_OTHER", "", "TOOL_NOT_ALLOWED", 1));
    assert_eq!(
        counts(&text, "mcp_server_operation_duration_seconds").len(),
        8,
        "{:#?}",
        counts(&text, "mcp_server_operation_duration_seconds")
    );
    let bucket = "mcp_server_operation_duration_seconds_bucket{le=\"300.0\",mcp_method_name=\"tools/call\",gen_ai_tool_name=\"read_logs\",error_type=\"\"}";
    assert_eq!(value(&text, bucket), Some(2.0), "MCP buckets: {bucket}");

    let client = |tool: &str, error: &str, n: u32| {
        format!(
            "mcp_client_operation_duration_seconds_count{{mcp_method_name=\"tools/call\",gen_ai_tool_name=\"{tool}\",error_type=\"{error}\"}} {n}"
        )
    };
    assert_line(&text, &client("read_logs", "", 2));
    assert_line(&text, &client("broken", "500", 1));
    assert_eq!(
        counts(&text, "mcp_client_operation_duration_seconds").len(),
        2,
        "only the tool calls sent: {:#?}",
        counts(&text, "mcp_client_operation_duration_seconds")
    );
    assert!(
        counts(&text, "http_server_request_duration_seconds").is_empty(),
        "an MCP message is measured as MCP, not HTTP: {:#?}",
        counts(&text, "http_server_request_duration_seconds")
    );
    assert!(
        counts(&text, "http_client_request_duration_seconds").is_empty(),
        "{:#?}",
        counts(&text, "http_client_request_duration_seconds")
    );
    assert_no_label_holds(
        &text,
        &[
            "mcp_server_operation_duration_seconds",
            "mcp_client_operation_duration_seconds",
        ],
        &[
            "ops-bot",
            "SEC",
            "hush-1234",
            "made_up_tool_9f3",
            "secret_method_77",
        ],
    );
    h.stop().await;
}

/// In a JSON-RPC batch (2025-03-26) every tools/call is an MCP operation of its own, on
/// the server and the client side.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tool_calls_in_a_batch_are_mcp_operations_each() {
    let backend = McpBackend::start().await;
    let h = mcp_harness(&backend).await;
    let batch = format!(
        "[{},{},{}]",
        tool_call(1, "read_logs", json!({})),
        tool_call(2, "read_logs", json!({})),
        tool_call(3, "echo", json!({})),
    );
    let r = h
        .call(
            "POST",
            "/mcp",
            Some(OPS_TOKEN),
            &[("mcp-protocol-version", "2025-03-26")],
            &batch,
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(r.json.as_array().map(Vec::len), Some(3), "{}", r.text);
    let (_, text) = h.get_admin("/metrics").await;
    assert_line(
        &text,
        "mcp_server_operation_duration_seconds_count{mcp_method_name=\"tools/call\",gen_ai_tool_name=\"read_logs\",error_type=\"\"} 2",
    );
    assert_line(
        &text,
        "mcp_server_operation_duration_seconds_count{mcp_method_name=\"tools/call\",gen_ai_tool_name=\"echo\",error_type=\"TOOL_NOT_ALLOWED\"} 1",
    );
    assert_line(
        &text,
        "mcp_client_operation_duration_seconds_count{mcp_method_name=\"tools/call\",gen_ai_tool_name=\"read_logs\",error_type=\"\"} 2",
    );
    assert_eq!(
        counts(&text, "mcp_client_operation_duration_seconds").len(),
        1
    );
    h.stop().await;
}

/// A tool's kept series are its labels' only while they match: after a reload moves the
/// tool to another route, its successful calls count under the new `http_route`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reloaded_route_labels_its_successful_requests() {
    let backend = Backend::example().await;
    let h = Harness::start(backend.addr, Options::default()).await;
    assert_eq!(
        h.call("GET", "/logs/orders", Some(OPS_TOKEN), &[], "")
            .await
            .status,
        200
    );
    let edited = log_service_policies().replacen(
        r#"path: "/logs/{service}""#,
        r#"path: "/v2/logs/{service}""#,
        1,
    );
    assert_ne!(edited, log_service_policies());
    std::fs::write(h.policy_file(), edited).unwrap();
    let mut moved = false;
    for _ in 0..100 {
        let r = h
            .call("GET", "/v2/logs/orders", Some(OPS_TOKEN), &[], "")
            .await;
        if r.status == 200 {
            moved = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    assert!(moved, "the reload never took");
    let (_, text) = h.get_admin("/metrics").await;
    let line = |route: &str| {
        format!(
            "http_server_request_duration_seconds_count{{http_request_method=\"GET\",url_scheme=\"http\",http_route=\"{route}\",http_response_status_code=\"200\",error_type=\"\"}} 1"
        )
    };
    assert_line(&text, &line("/logs/{service}"));
    assert_line(&text, &line("/v2/logs/{service}"));
    h.stop().await;
}

/// A streamed tools/call whose result is refused after the response head went out (here
/// a timeout) is one MCP operation, observed once with its final outcome, as its span is
/// one (tests/telemetry.rs, `a_streamed_call_span_shows_its_final_outcome`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_late_refused_stream_is_one_mcp_operation() {
    let backend = McpBackend::start().await;
    let h = mcp_harness(&backend).await;
    let r = mcp(&h, &tool_call(1, "slow_stream_short", json!({}))).await;
    assert_eq!(r.status, 200);
    assert!(r.text.contains("BACKEND_TIMEOUT"), "{}", r.text);
    tokio::time::sleep(Duration::from_millis(200)).await;
    let (_, text) = h.get_admin("/metrics").await;
    let observed: Vec<&str> = counts(&text, "mcp_server_operation_duration_seconds")
        .into_iter()
        .filter(|l| l.contains("slow_stream_short"))
        .collect();
    assert_eq!(
        observed,
        vec![
            "mcp_server_operation_duration_seconds_count{mcp_method_name=\"tools/call\",gen_ai_tool_name=\"slow_stream_short\",error_type=\"BACKEND_TIMEOUT\"} 1"
        ],
        "one request, one observation"
    );
    h.stop().await;
}

// ---------------------------------------------------------------------------------------
// 2. metricsExport: otlp

/// The conventions' histograms pushed over OTLP/gRPC: their names, unit, buckets and
/// dotted attributes, by the reader's interval.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_are_pushed_over_otlp_grpc() {
    let (collector, _server, backend, h) = rest_exporting(|t| {
        t.metrics_export = MetricsExport::Otlp;
        t.metrics_interval_ms = 200;
        t.service_name = "orders-gateway".into();
    })
    .await;
    let port = backend.addr.port().to_string();
    let r = h
        .call(
            "GET",
            "/logs/orders?window_minutes=30",
            Some(OPS_TOKEN),
            &[],
            "",
        )
        .await;
    assert_eq!(r.status, 200);
    h.call("POST", "/admin/reset", Some(OPS_TOKEN), &[], "{}")
        .await
        .assert_refused("TOOL_NOT_ALLOWED", 403);

    let ok = [
        ("http.request.method", "GET"),
        ("url.scheme", "http"),
        ("http.route", "/logs/{service}"),
        ("http.response.status_code", "200"),
    ];
    let refused = [
        ("http.request.method", "POST"),
        ("url.scheme", "http"),
        ("http.route", "/admin/reset"),
        ("http.response.status_code", "403"),
        ("error.type", "TOOL_NOT_ALLOWED"),
    ];
    let server = collector
        .wait_for_metric_where("http.server.request.duration", |m| {
            has_point(m, &ok) && has_point(m, &refused)
        })
        .await;
    assert_eq!(server.unit, "s");
    assert!(matches!(server.data, Some(Data::Histogram(_))));
    let fine = point(&server, &ok).unwrap();
    assert_eq!(fine.count, 1, "{}", describe_points(&server));
    assert_eq!(fine.explicit_bounds, HTTP_BUCKETS.to_vec());
    assert!(fine.sum.unwrap() > 0.0);
    assert_eq!(point(&server, &refused).unwrap().count, 1);
    assert_eq!(
        points(&server).len(),
        2,
        "two series: {}",
        describe_points(&server)
    );

    let client = collector
        .wait_for_metric("http.client.request.duration")
        .await;
    assert_eq!(client.unit, "s");
    let sent = [
        ("http.request.method", "GET"),
        ("server.address", "127.0.0.1"),
        ("server.port", port.as_str()),
        ("http.response.status_code", "200"),
    ];
    assert_eq!(
        point(&client, &sent)
            .unwrap_or_else(|| panic!("{}", describe_points(&client)))
            .count,
        1
    );
    assert_eq!(points(&client).len(), 1, "{}", describe_points(&client));

    let resources = collector.metric_resources.lock().unwrap().clone();
    assert!(!resources.is_empty());
    for resource in &resources {
        assert_eq!(
            kv(&resource.attributes, "service.name").as_deref(),
            Some("orders-gateway")
        );
    }
    for metric in collector.metrics.lock().unwrap().iter() {
        for p in points(metric) {
            for a in &p.attributes {
                let v = kv(&p.attributes, &a.key).unwrap();
                assert!(
                    !v.contains("ops-bot") && !v.contains("orders"),
                    "{}: {}={v}",
                    metric.name,
                    a.key
                );
            }
        }
    }
    // Pushed again and again (every 200 ms), cumulative: the count stays 1.
    let before = collector.metrics.lock().unwrap().len();
    tokio::time::sleep(Duration::from_millis(500)).await;
    let after = collector.metrics.lock().unwrap().clone();
    assert!(after.len() > before, "pushed periodically");
    let last = after
        .iter()
        .rev()
        .find(|m| m.name == "http.server.request.duration")
        .unwrap();
    assert_eq!(point(last, &ok).unwrap().count, 1);
    h.stop().await;
}

/// The MCP histograms over OTLP/HTTP (`/v1/metrics`), beside the spans (`/v1/traces`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mcp_metrics_are_pushed_over_otlp_http() {
    let (collector, addr) = Collector::http().await;
    let backend = McpBackend::start().await;
    let h = Harness::start(
        backend.addr,
        Options {
            policies: MCP_POLICIES.into(),
            tweak: Box::new(move |s| {
                s.telemetry.otlp_endpoint = Some(format!("http://{addr}"));
                s.telemetry.otlp_protocol = OtlpProtocol::Http;
                s.telemetry.metrics_export = MetricsExport::Otlp;
                s.telemetry.metrics_interval_ms = 200;
            }),
            ..Options::default()
        },
    )
    .await;
    assert_eq!(mcp(&h, &rpc(1, "initialize", json!({}))).await.status, 200);
    let r = mcp(&h, &tool_call(2, "read_logs", json!({}))).await;
    assert_eq!((r.status, mcp_code(&r)), (200, String::new()), "{}", r.text);
    let r = mcp(&h, &tool_call(3, "echo", json!({}))).await;
    assert_eq!(mcp_code(&r), "TOOL_NOT_ALLOWED");

    let call = [
        ("mcp.method.name", "tools/call"),
        ("gen_ai.tool.name", "read_logs"),
    ];
    let init = [("mcp.method.name", "initialize")];
    let denied = [
        ("mcp.method.name", "tools/call"),
        ("gen_ai.tool.name", "echo"),
        ("error.type", "TOOL_NOT_ALLOWED"),
    ];
    let server = collector
        .wait_for_metric_where("mcp.server.operation.duration", |m| {
            has_point(m, &call) && has_point(m, &init) && has_point(m, &denied)
        })
        .await;
    assert_eq!(server.unit, "s");
    let p = point(&server, &call).unwrap();
    assert_eq!(p.count, 1);
    assert_eq!(p.explicit_bounds, MCP_BUCKETS.to_vec());
    assert_eq!(points(&server).len(), 3, "{}", describe_points(&server));

    let client = collector
        .wait_for_metric_where("mcp.client.operation.duration", |m| has_point(m, &call))
        .await;
    assert_eq!(client.unit, "s");
    assert_eq!(point(&client, &call).unwrap().count, 1);
    assert_eq!(points(&client).len(), 1, "{}", describe_points(&client));
    assert!(
        !collector
            .metrics
            .lock()
            .unwrap()
            .iter()
            .any(|m| m.name == "http.server.request.duration"
                && points(m).iter().any(|p| p.count > 0)),
        "MCP messages are not HTTP server requests"
    );
    // The spans went to /v1/traces of the same receiver.
    collector
        .wait_for(|s| s.kind == 2 && s.name == "tools/call read_logs")
        .await;
    h.stop().await;
}

/// What the periodic reader holds is pushed when the sidecar stops, without waiting for
/// the (default, 60 s) interval.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_are_flushed_at_shutdown() {
    let (collector, _server, _backend, h) =
        rest_exporting(|t| t.metrics_export = MetricsExport::Otlp).await;
    assert_eq!(
        h.call("GET", "/logs/orders", Some(OPS_TOKEN), &[], "")
            .await
            .status,
        200
    );
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(
        collector.metrics.lock().unwrap().is_empty(),
        "nothing before the interval"
    );
    h.stop().await;
    let server = collector
        .wait_for_metric("http.server.request.duration")
        .await;
    let ok = [
        ("http.request.method", "GET"),
        ("url.scheme", "http"),
        ("http.route", "/logs/{service}"),
        ("http.response.status_code", "200"),
    ];
    assert_eq!(
        point(&server, &ok)
            .unwrap_or_else(|| panic!("{}", describe_points(&server)))
            .count,
        1
    );
}

// ---------------------------------------------------------------------------------------
// 3. sampling

/// parentbased_traceidratio at 0: calls with no `traceparent` are not sampled (no span;
/// the backend is told with the flags), a refusal's span is exported all the same, and an
/// agent's sampled or unsampled `traceparent` is followed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn parent_based_ratio_zero_exports_refusals_and_sampled_parents_only() {
    let (collector, _server, backend, h) = rest_exporting(|t| {
        t.sampler = TraceSampler::ParentbasedTraceidratio;
        t.sampler_ratio = 0.0;
    })
    .await;
    // (a) Three allowed calls, no traceparent: not sampled.
    for _ in 0..3 {
        let r = h
            .call("GET", "/logs/orders", Some(OPS_TOKEN), &[], "")
            .await;
        assert_eq!(r.status, 200);
    }
    let unsampled = rest_traceparents(&backend);
    assert_eq!(unsampled.len(), 3);
    for (trace, _, flags) in &unsampled {
        assert_eq!(flags, "00", "the sampled flag is off: {trace}");
    }
    assert!(
        unsampled[0].0 != unsampled[1].0 && unsampled[1].0 != unsampled[2].0,
        "each call its own trace: {unsampled:?}"
    );
    // (b) A refusal: its span is exported, named by its trace.
    let refused = h
        .call("POST", "/admin/reset", Some(OPS_TOKEN), &[], "{}")
        .await;
    refused.assert_refused("TOOL_NOT_ALLOWED", 403);
    let refused_trace = refused.json["error"]["traceId"]
        .as_str()
        .unwrap()
        .to_string();
    // A refusal under the agent's unsampled trace: exported, in that trace.
    let agent_unsampled = format!("00-{TRACE}-{PARENT}-00");
    h.call(
        "POST",
        "/admin/reset",
        Some(OPS_TOKEN),
        &[("traceparent", &agent_unsampled)],
        "{}",
    )
    .await
    .assert_refused("TOOL_NOT_ALLOWED", 403);
    // An allowed call under it: no span, and the backend stays in the agent's trace.
    let r = h
        .call(
            "GET",
            "/logs/payments",
            Some(OPS_TOKEN),
            &[("traceparent", &agent_unsampled)],
            "",
        )
        .await;
    assert_eq!(r.status, 200);
    let (trace, span, flags) = rest_traceparents(&backend).pop().unwrap();
    assert_eq!((trace.as_str(), flags.as_str()), (TRACE, "00"));
    assert_ne!(span, PARENT, "a span id of toolgate's");
    // (c) The agent's sampled trace: server and client spans, `-01` to the backend.
    let sampled_trace = "0af7651916cd43dd8448eb211c80319c";
    let agent_sampled = format!("00-{sampled_trace}-{PARENT}-01");
    let r = h
        .call(
            "GET",
            "/logs/orders",
            Some(OPS_TOKEN),
            &[("traceparent", &agent_sampled)],
            "",
        )
        .await;
    assert_eq!(r.status, 200);

    let denied = collector
        .wait_for(|s| s.kind == 2 && hex::encode(&s.trace_id) == refused_trace)
        .await;
    assert_eq!(denied.name, "POST /admin/reset");
    assert_eq!(
        attr(&denied, "error.type").as_deref(),
        Some("TOOL_NOT_ALLOWED")
    );
    assert_eq!(
        attr(&denied, "toolgate.code").as_deref(),
        Some("TOOL_NOT_ALLOWED")
    );
    assert_eq!(attr(&denied, "toolgate.decision").as_deref(), Some("deny"));
    assert_eq!(attr(&denied, "http.route").as_deref(), Some("/admin/reset"));
    assert_eq!(
        attr(&denied, "http.response.status_code").as_deref(),
        Some("403")
    );
    assert_eq!(
        attr(&denied, "toolgate.agent.id").as_deref(),
        Some("ops-bot")
    );
    assert_eq!(denied.status.as_ref().map(|s| s.code), Some(2));
    assert!(denied.parent_span_id.is_empty(), "a root span");
    let event = denied
        .events
        .iter()
        .find(|e| e.name == "refused")
        .expect("the refused event");
    assert_eq!(
        kv(&event.attributes, "toolgate.code").as_deref(),
        Some("TOOL_NOT_ALLOWED")
    );
    assert!(
        denied.start_time_unix_nano > 0
            && denied.start_time_unix_nano <= denied.end_time_unix_nano
            && denied.end_time_unix_nano - denied.start_time_unix_nano < 5_000_000_000,
        "started when the call did: {} .. {}",
        denied.start_time_unix_nano,
        denied.end_time_unix_nano
    );
    let in_agent_trace = collector
        .wait_for(|s| s.kind == 2 && hex::encode(&s.trace_id) == TRACE)
        .await;
    assert_eq!(in_agent_trace.name, "POST /admin/reset");
    assert_eq!(hex::encode(&in_agent_trace.parent_span_id), PARENT);
    assert_eq!(
        attr(&in_agent_trace, "error.type").as_deref(),
        Some("TOOL_NOT_ALLOWED")
    );
    let sampled_server = collector
        .wait_for(|s| s.kind == 2 && hex::encode(&s.trace_id) == sampled_trace)
        .await;
    assert_eq!(sampled_server.name, "GET /logs/{service}");
    assert_eq!(hex::encode(&sampled_server.parent_span_id), PARENT);
    let sampled_client = collector
        .wait_for(|s| s.kind == 3 && hex::encode(&s.trace_id) == sampled_trace)
        .await;
    assert_eq!(sampled_client.parent_span_id, sampled_server.span_id);
    let sent = backend.last().headers["traceparent"]
        .to_str()
        .unwrap()
        .to_string();
    assert_eq!(
        sent,
        format!(
            "00-{sampled_trace}-{}-01",
            hex::encode(&sampled_client.span_id)
        )
    );

    // Everything else had time to arrive (the batcher waits 200 ms): nothing did.
    tokio::time::sleep(Duration::from_millis(600)).await;
    let servers = server_spans(&collector);
    assert_eq!(
        servers.len(),
        3,
        "two refusals and the sampled call: {:?}",
        names(&servers)
    );
    let clients = client_spans(&collector);
    assert_eq!(
        clients.len(),
        1,
        "only the sampled call's: {:?}",
        names(&clients)
    );

    // The unsampled calls' audit records name the trace the backend was told.
    let records = audit_records(h).await;
    let reads: Vec<&Value> = records
        .iter()
        .filter(|r| r["tool"] == "read_logs")
        .collect();
    assert_eq!(reads.len(), 5, "{records:#?}");
    for (record, (trace, _, _)) in reads.iter().zip(&unsampled) {
        assert_eq!(record["traceId"].as_str(), Some(trace.as_str()));
    }
    assert!(records
        .iter()
        .any(|r| r["traceId"].as_str() == Some(refused_trace.as_str())
            && r["code"] == "TOOL_NOT_ALLOWED"));
}

/// With `sampleDenials: false` an unsampled refusal has no span either.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_sample_denials_an_unsampled_refusal_has_no_span() {
    let (collector, _server, backend, h) = rest_exporting(|t| {
        t.sampler = TraceSampler::ParentbasedAlwaysOff;
        t.sample_denials = false;
    })
    .await;
    let refused = h
        .call("POST", "/admin/reset", Some(OPS_TOKEN), &[], "{}")
        .await;
    refused.assert_refused("TOOL_NOT_ALLOWED", 403);
    let refused_trace = refused.json["error"]["traceId"]
        .as_str()
        .unwrap()
        .to_string();
    assert_eq!(refused_trace.len(), 32, "the refusal still names a trace");
    assert_eq!(
        h.call("GET", "/logs/orders", Some(OPS_TOKEN), &[], "")
            .await
            .status,
        200
    );
    let (_, _, flags) = rest_traceparents(&backend).pop().unwrap();
    assert_eq!(flags, "00");
    // A sampled parent still is: the anchor that shows the exporter works.
    let agent_sampled = format!("00-{TRACE}-{PARENT}-01");
    let r = h
        .call(
            "GET",
            "/logs/orders",
            Some(OPS_TOKEN),
            &[("traceparent", &agent_sampled)],
            "",
        )
        .await;
    assert_eq!(r.status, 200);
    collector
        .wait_for(|s| s.kind == 3 && hex::encode(&s.trace_id) == TRACE)
        .await;
    tokio::time::sleep(Duration::from_millis(600)).await;
    let servers = server_spans(&collector);
    assert_eq!(servers.len(), 1, "{:?}", names(&servers));
    assert_eq!(hex::encode(&servers[0].trace_id), TRACE);
    assert_eq!(client_spans(&collector).len(), 1);
    h.stop().await;
}

/// `traceidratio` at 1 samples every trace, even one the agent marked unsampled (it is
/// not parent-based): everything is exported and the backend sees `-01`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn trace_id_ratio_one_exports_everything() {
    let (collector, _server, backend, h) = rest_exporting(|t| {
        t.sampler = TraceSampler::Traceidratio;
        t.sampler_ratio = 1.0;
    })
    .await;
    assert_eq!(
        h.call("GET", "/logs/orders", Some(OPS_TOKEN), &[], "")
            .await
            .status,
        200
    );
    let agent_unsampled = format!("00-{TRACE}-{PARENT}-00");
    assert_eq!(
        h.call(
            "GET",
            "/logs/payments",
            Some(OPS_TOKEN),
            &[("traceparent", &agent_unsampled)],
            ""
        )
        .await
        .status,
        200
    );
    let refused = h
        .call("POST", "/admin/reset", Some(OPS_TOKEN), &[], "{}")
        .await;
    refused.assert_refused("TOOL_NOT_ALLOWED", 403);

    let sent = rest_traceparents(&backend);
    assert_eq!(sent.len(), 2);
    for (i, (trace, span, flags)) in sent.iter().enumerate() {
        assert_eq!(flags, "01", "call {i} sampled");
        let client = collector
            .wait_for(|s| s.kind == 3 && hex::encode(&s.span_id) == *span)
            .await;
        assert_eq!(hex::encode(&client.trace_id), *trace);
        let server = collector
            .wait_for(|s| s.kind == 2 && s.span_id == client.parent_span_id)
            .await;
        assert_eq!(hex::encode(&server.trace_id), *trace);
    }
    assert_eq!(sent[1].0, TRACE, "the agent's trace continues");
    let denied = collector
        .wait_for(|s| s.kind == 2 && s.name == "POST /admin/reset")
        .await;
    assert_eq!(
        hex::encode(&denied.trace_id),
        refused.json["error"]["traceId"].as_str().unwrap()
    );
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(server_spans(&collector).len(), 3);
    assert_eq!(client_spans(&collector).len(), 2);
    h.stop().await;
}

/// `always_off` with MCP: a tool call sends the backend an unsampled `traceparent` and
/// exports nothing; a refused tool call's span is exported with its error.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn always_off_over_mcp_exports_only_the_refused_tool_call() {
    let (collector, _server, backend, h) = mcp_exporting(|t| {
        t.sampler = TraceSampler::AlwaysOff;
    })
    .await;
    assert_eq!(mcp(&h, &rpc(1, "initialize", json!({}))).await.status, 200);
    let r = mcp(&h, &tool_call(2, "read_logs", json!({}))).await;
    assert_eq!((r.status, mcp_code(&r)), (200, String::new()), "{}", r.text);
    let call = backend
        .seen
        .lock()
        .unwrap()
        .iter()
        .rev()
        .find(|s| s.body["method"] == "tools/call")
        .cloned()
        .expect("the call reached the backend");
    let (backend_trace, _, flags) =
        parse_traceparent(call.headers["traceparent"].to_str().unwrap());
    assert_eq!(flags, "00");
    let r = mcp(&h, &tool_call(3, "echo", json!({}))).await;
    assert_eq!(mcp_code(&r), "TOOL_NOT_ALLOWED", "{}", r.text);
    let denied = collector
        .wait_for(|s| s.kind == 2 && s.name == "tools/call echo")
        .await;
    for (key, value) in [
        ("error.type", "TOOL_NOT_ALLOWED"),
        ("mcp.method.name", "tools/call"),
        ("gen_ai.tool.name", "echo"),
        ("jsonrpc.request.id", "3"),
        ("toolgate.decision", "deny"),
    ] {
        assert_eq!(attr(&denied, key).as_deref(), Some(value), "{key}");
    }
    assert!(denied.events.iter().any(|e| e.name == "refused"));
    tokio::time::sleep(Duration::from_millis(600)).await;
    let spans = collector.spans.lock().unwrap().clone();
    assert_eq!(spans.len(), 1, "{:?}", names(&spans));
    let records = audit_records(h).await;
    let read = records.iter().find(|r| r["tool"] == "read_logs").unwrap();
    assert_eq!(read["traceId"].as_str(), Some(backend_trace.as_str()));
    let echo = records.iter().find(|r| r["tool"] == "echo").unwrap();
    assert_eq!(
        echo["traceId"].as_str(),
        Some(hex::encode(&denied.trace_id).as_str())
    );
}

/// At a ratio of 0.5 the decision is the trace-id ratio rule applied to the very trace
/// id the backend is sent (and the audit records): sampled calls have their spans in
/// that trace, the others none.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_trace_id_ratio_decides_on_the_trace_id_it_propagates() {
    let (collector, _server, backend, h) = rest_exporting(|t| {
        t.sampler = TraceSampler::Traceidratio;
        t.sampler_ratio = 0.5;
    })
    .await;
    for _ in 0..24 {
        let r = h
            .call("GET", "/logs/orders", Some(OPS_TOKEN), &[], "")
            .await;
        assert_eq!(r.status, 200);
    }
    let sent = rest_traceparents(&backend);
    // The SDK's TraceIdRatioBased: the trace id's low 64 bits, halved, below ratio * 2^63.
    let rule = |trace: &str| {
        let low = u64::from_str_radix(&trace[16..], 16).unwrap();
        (low >> 1) < (0.5 * (1u64 << 63) as f64) as u64
    };
    let sampled: Vec<&String> = sent
        .iter()
        .filter(|(_, _, flags)| flags == "01")
        .map(|(trace, _, _)| trace)
        .collect();
    for (trace, _, flags) in &sent {
        assert_eq!(flags == "01", rule(trace), "{trace}-{flags}");
    }
    assert!(
        !sampled.is_empty() && sampled.len() < sent.len(),
        "24 calls at 0.5, {} sampled",
        sampled.len()
    );
    for trace in &sampled {
        collector
            .wait_for(|s| s.kind == 3 && hex::encode(&s.trace_id) == **trace)
            .await;
    }
    tokio::time::sleep(Duration::from_millis(400)).await;
    let mut exported: Vec<String> = server_spans(&collector)
        .iter()
        .map(|s| hex::encode(&s.trace_id))
        .collect();
    exported.sort();
    let mut expected: Vec<String> = sampled.iter().map(|t| t.to_string()).collect();
    expected.sort();
    assert_eq!(exported, expected, "spans exactly for the sampled traces");
    assert_eq!(client_spans(&collector).len(), sampled.len());
    let records = audit_records(h).await;
    let traces: Vec<&str> = records
        .iter()
        .map(|r| r["traceId"].as_str().unwrap())
        .collect();
    let backend_traces: Vec<&str> = sent.iter().map(|(t, _, _)| t.as_str()).collect();
    assert_eq!(traces, backend_traces);
}

// ---------------------------------------------------------------------------------------
// 4. client spans

/// A REST backend call's client span: the HTTP conventions' attributes, `url.full` with
/// every path parameter and query value redacted, `error.type` on a 5xx or no answer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rest_client_spans_carry_the_http_client_attributes() {
    let (collector, _server, backend, h) = rest_exporting(|_| {}).await;
    let port = backend.addr.port();
    let r = h
        .call(
            "GET",
            "/logs/orders?window_minutes=30",
            Some(OPS_TOKEN),
            &[],
            "",
        )
        .await;
    assert_eq!(r.status, 200);
    assert!(
        backend.last().uri.contains("window_minutes=30"),
        "{}",
        backend.last().uri
    );
    let read = collector
        .wait_for(|s| s.kind == 3 && s.name == "GET /logs/{service}")
        .await;
    let port_text = port.to_string();
    let url = format!("http://127.0.0.1:{port}/logs/REDACTED?window_minutes=REDACTED");
    for (key, value) in [
        ("http.request.method", "GET"),
        ("server.address", "127.0.0.1"),
        ("server.port", port_text.as_str()),
        ("url.full", url.as_str()),
        ("url.template", "/logs/{service}"),
        ("http.response.status_code", "200"),
    ] {
        assert_eq!(attr(&read, key).as_deref(), Some(value), "{key}");
    }
    assert_eq!(attr(&read, "error.type"), None);
    assert_eq!(attr(&read, "mcp.method.name"), None);
    assert_ne!(read.status.as_ref().map(|s| s.code), Some(2));
    for a in &read.attributes {
        let v = attr(&read, &a.key).unwrap();
        assert!(
            !v.contains("orders") && !v.contains("=30"),
            "argument in {}: {v}",
            a.key
        );
    }

    h.call("GET", "/reports/7", Some(OPS_TOKEN), &[], "")
        .await
        .assert_refused("BACKEND_ERROR", 502);
    let failed = collector
        .wait_for(|s| s.kind == 3 && s.name == "GET /reports/{id}")
        .await;
    assert_eq!(
        attr(&failed, "url.full"),
        Some(format!("http://127.0.0.1:{port}/reports/REDACTED"))
    );
    assert_eq!(
        attr(&failed, "http.response.status_code").as_deref(),
        Some("500")
    );
    assert_eq!(attr(&failed, "error.type").as_deref(), Some("500"));
    assert_eq!(failed.status.as_ref().map(|s| s.code), Some(2));

    h.call("GET", "/slow", Some(OPS_TOKEN), &[], "")
        .await
        .assert_refused("BACKEND_TIMEOUT", 504);
    let slow = collector
        .wait_for(|s| s.kind == 3 && s.name == "GET /slow")
        .await;
    assert_eq!(
        attr(&slow, "error.type").as_deref(),
        Some("BACKEND_TIMEOUT")
    );
    assert_eq!(attr(&slow, "http.response.status_code"), None);
    assert_eq!(slow.status.as_ref().map(|s| s.code), Some(2));

    let body = r#"{"project_key": "OPS", "title": "disk full"}"#;
    assert_eq!(
        h.call("POST", "/issues", Some(OPS_TOKEN), &[], body)
            .await
            .status,
        201
    );
    let created = collector
        .wait_for(|s| s.kind == 3 && s.name == "POST /issues")
        .await;
    assert_eq!(
        attr(&created, "url.full"),
        Some(format!("http://127.0.0.1:{port}/issues"))
    );
    assert_eq!(
        attr(&created, "http.request.method").as_deref(),
        Some("POST")
    );
    assert_eq!(
        attr(&created, "http.response.status_code").as_deref(),
        Some("201")
    );
    h.stop().await;
}

/// An MCP backend call's client span: the MCP conventions' method and tool beside the
/// HTTP ones; the agent's query values redacted from `url.full`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mcp_client_spans_carry_the_mcp_attributes() {
    let (collector, _server, backend, h) = mcp_exporting(|_| {}).await;
    let port = backend.addr.port();
    let r = h
        .call(
            "POST",
            "/mcp?tenant=acme-4711",
            Some(OPS_TOKEN),
            &[],
            &tool_call(1, "read_logs", json!({"service": "orders"})),
        )
        .await;
    assert_eq!((r.status, mcp_code(&r)), (200, String::new()), "{}", r.text);
    let client = collector
        .wait_for(|s| s.kind == 3 && s.name == "tools/call read_logs")
        .await;
    let port_text = port.to_string();
    let url = format!("http://127.0.0.1:{port}/mcp?tenant=REDACTED");
    for (key, value) in [
        ("mcp.method.name", "tools/call"),
        ("gen_ai.tool.name", "read_logs"),
        ("gen_ai.operation.name", "execute_tool"),
        ("http.request.method", "POST"),
        ("server.address", "127.0.0.1"),
        ("server.port", port_text.as_str()),
        ("url.full", url.as_str()),
        ("http.response.status_code", "200"),
        ("jsonrpc.request.id", "1"),
    ] {
        assert_eq!(attr(&client, key).as_deref(), Some(value), "{key}");
    }
    assert_eq!(attr(&client, "url.template"), None, "no route for MCP");
    assert_eq!(attr(&client, "error.type"), None);
    let server = collector
        .wait_for(|s| s.kind == 2 && s.name == "tools/call read_logs")
        .await;
    assert_eq!(client.parent_span_id, server.span_id);
    assert_eq!(client.trace_id, server.trace_id);

    let r = mcp(&h, &tool_call(2, "broken", json!({}))).await;
    assert_eq!(mcp_code(&r), "BACKEND_ERROR", "{}", r.text);
    let broken = collector
        .wait_for(|s| s.kind == 3 && s.name == "tools/call broken")
        .await;
    assert_eq!(attr(&broken, "error.type").as_deref(), Some("500"));
    assert_eq!(attr(&broken, "gen_ai.tool.name").as_deref(), Some("broken"));
    assert_eq!(broken.status.as_ref().map(|s| s.code), Some(2));
    h.stop().await;
}

/// A tool's own error (`isError: true`) marks its call's span `tool_error` whatever the
/// answer's shape: passed through unread as one JSON body, or as an event stream.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tool_error_marks_the_span_whatever_the_answer_shape() {
    let (collector, _server, _backend, h) = mcp_exporting(|_| {}).await;
    for (id, tool) in [(1, "fails_softly"), (2, "fails_softly_sse")] {
        let r = mcp(&h, &tool_call(id, tool, json!({}))).await;
        assert_eq!(r.status, 200, "{}", r.text);
        assert!(r.text.contains("\"isError\":true"), "{}", r.text);
        let name = format!("tools/call {tool}");
        let span = collector.wait_for(|s| s.kind == 2 && s.name == name).await;
        assert_eq!(
            attr(&span, "error.type").as_deref(),
            Some("tool_error"),
            "{tool}"
        );
        assert_eq!(span.status.as_ref().map(|s| s.code), Some(2), "{tool}");
        let rpc_id = id.to_string();
        assert_eq!(
            attr(&span, "jsonrpc.request.id").as_deref(),
            Some(rpc_id.as_str())
        );
    }
    // A successful unshaped answer passes through and its span stays OK.
    let r = mcp(&h, &tool_call(3, "read_logs", json!({}))).await;
    assert_eq!(r.status, 200, "{}", r.text);
    let ok = collector
        .wait_for(|s| s.kind == 2 && s.name == "tools/call read_logs")
        .await;
    assert_eq!(attr(&ok, "error.type"), None);
    h.stop().await;
}

// ---------------------------------------------------------------------------------------
// 5. settings

fn vars(list: &[(&str, &str)]) -> Vec<(String, String)> {
    list.iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

fn invalid_field(result: Result<Settings, toolgate::config::SettingsError>) -> String {
    match result {
        Err(toolgate::config::SettingsError::Invalid { field, .. }) => field,
        other => panic!("expected an invalid setting, got {other:?}"),
    }
}

#[test]
fn telemetry_defaults_are_the_documented_ones() {
    let s = Settings::parse("t", "", vars(&[])).unwrap();
    assert_eq!(s.telemetry.sampler, TraceSampler::AlwaysOn);
    assert_eq!(s.telemetry.sampler_ratio, 1.0);
    assert!(s.telemetry.sample_denials);
    assert_eq!(s.telemetry.metrics_export, MetricsExport::None);
    assert_eq!(s.telemetry.metrics_interval_ms, 60_000);
}

#[test]
fn otel_traces_sampler_applies_where_the_file_sets_none() {
    let s = Settings::parse(
        "t",
        "",
        vars(&[
            ("OTEL_TRACES_SAMPLER", "parentbased_traceidratio"),
            ("OTEL_TRACES_SAMPLER_ARG", "0.25"),
        ]),
    )
    .unwrap();
    assert_eq!(s.telemetry.sampler, TraceSampler::ParentbasedTraceidratio);
    assert_eq!(s.telemetry.sampler_ratio, 0.25);

    // The file wins over OTEL_*.
    let file = "telemetry: {sampler: always_on, samplerRatio: 0.5}\n";
    let s = Settings::parse(
        "t",
        file,
        vars(&[
            ("OTEL_TRACES_SAMPLER", "always_off"),
            ("OTEL_TRACES_SAMPLER_ARG", "0.1"),
        ]),
    )
    .unwrap();
    assert_eq!(s.telemetry.sampler, TraceSampler::AlwaysOn);
    assert_eq!(s.telemetry.sampler_ratio, 0.5);

    // TOOLGATE_* wins over the file (and over OTEL_*).
    let s = Settings::parse(
        "t",
        file,
        vars(&[
            ("OTEL_TRACES_SAMPLER", "always_off"),
            ("TOOLGATE_TELEMETRY_SAMPLER", "traceidratio"),
            ("TOOLGATE_TELEMETRY_SAMPLER_RATIO", "0.75"),
            ("TOOLGATE_TELEMETRY_SAMPLE_DENIALS", "false"),
            ("TOOLGATE_TELEMETRY_METRICS_INTERVAL_MS", "1500"),
        ]),
    )
    .unwrap();
    assert_eq!(s.telemetry.sampler, TraceSampler::Traceidratio);
    assert_eq!(s.telemetry.sampler_ratio, 0.75);
    assert!(!s.telemetry.sample_denials);
    assert_eq!(s.telemetry.metrics_interval_ms, 1500);

    // A sampler toolgate doesn't run, or a ratio out of range, is ignored (as the
    // specification has an SDK do), not fatal.
    let s = Settings::parse(
        "t",
        "",
        vars(&[
            ("OTEL_TRACES_SAMPLER", "jaeger_remote"),
            ("OTEL_TRACES_SAMPLER_ARG", "7"),
        ]),
    )
    .unwrap();
    assert_eq!(s.telemetry.sampler, TraceSampler::AlwaysOn);
    assert_eq!(s.telemetry.sampler_ratio, 1.0);
    // Names are case-insensitive, surrounding blanks ignored.
    let s = Settings::parse(
        "t",
        "",
        vars(&[("OTEL_TRACES_SAMPLER", " ParentBased_Always_Off ")]),
    )
    .unwrap();
    assert_eq!(s.telemetry.sampler, TraceSampler::ParentbasedAlwaysOff);
}

#[test]
fn bad_sampling_and_export_settings_are_refused() {
    assert_eq!(
        invalid_field(Settings::parse(
            "t",
            "telemetry: {samplerRatio: 1.5}\n",
            vars(&[])
        )),
        "telemetry.samplerRatio"
    );
    assert_eq!(
        invalid_field(Settings::parse(
            "t",
            "telemetry: {samplerRatio: -0.1}\n",
            vars(&[])
        )),
        "telemetry.samplerRatio"
    );
    assert_eq!(
        invalid_field(Settings::parse(
            "t",
            "",
            vars(&[("TOOLGATE_TELEMETRY_SAMPLER_RATIO", "2")])
        )),
        "telemetry.samplerRatio"
    );
    assert_eq!(
        invalid_field(Settings::parse(
            "t",
            "telemetry: {metricsExport: otlp}\n",
            vars(&[])
        )),
        "telemetry.metricsExport"
    );
    assert_eq!(
        invalid_field(Settings::parse(
            "t",
            "telemetry: {otlpEndpoint: 'http://c:4317', metricsExport: otlp, metricsIntervalMs: 0}\n",
            vars(&[])
        )),
        "telemetry.metricsIntervalMs"
    );
    assert!(Settings::parse("t", "telemetry: {sampler: sometimes}\n", vars(&[])).is_err());
    assert!(Settings::parse(
        "t",
        "",
        vars(&[("TOOLGATE_TELEMETRY_SAMPLER", "sometimes")])
    )
    .is_err());
    assert!(Settings::parse(
        "t",
        "",
        vars(&[("TOOLGATE_TELEMETRY_SAMPLER_RATIO", "half")])
    )
    .is_err());
    let s = Settings::parse(
        "t",
        "telemetry: {otlpEndpoint: 'http://c:4317', metricsExport: otlp, metricsIntervalMs: 200}\n",
        vars(&[]),
    )
    .unwrap();
    assert_eq!(s.telemetry.metrics_export, MetricsExport::Otlp);
    assert_eq!(s.telemetry.metrics_interval_ms, 200);
}

/// A 4xx answer fails the client request, as the HTTP conventions have a client see it:
/// its span is ERROR with the status as `error.type`, and so is its metric's series.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_4xx_answer_is_a_failed_client_request() {
    let (collector, _server, backend, h) = rest_exporting(|_| {}).await;
    let port = backend.addr.port();
    let r = h.call("GET", "/missing/7", Some(OPS_TOKEN), &[], "").await;
    assert_eq!(r.status, 404, "{}", r.text);
    let missing = collector
        .wait_for(|s| s.kind == 3 && s.name == "GET /missing/{id}")
        .await;
    assert_eq!(
        attr(&missing, "http.response.status_code").as_deref(),
        Some("404")
    );
    assert_eq!(attr(&missing, "error.type").as_deref(), Some("404"));
    assert_eq!(missing.status.as_ref().map(|s| s.code), Some(2));
    let (_, text) = h.get_admin("/metrics").await;
    assert_line(
        &text,
        &format!(
            "http_client_request_duration_seconds_count{{http_request_method=\"GET\",server_address=\"127.0.0.1\",server_port=\"{port}\",http_response_status_code=\"404\",error_type=\"404\"}} 1"
        ),
    );
    h.stop().await;
}

/// A non-idempotent call's answer is buffered and settled for its duplicates; a 503
/// settles as a failure, yet it was an answer: the client metric and span keep its
/// status, as the idempotent path's do.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_buffered_503_keeps_its_status() {
    let (collector, endpoint, _server) = Collector::grpc().await;
    let backend = Backend::start(std::sync::Arc::new(|_: &Seen| {
        (503, vec![], String::new(), Duration::ZERO)
    }))
    .await;
    let port = backend.addr.port();
    let h = Harness::start(
        backend.addr,
        Options {
            tweak: Box::new(move |s| s.telemetry.otlp_endpoint = Some(endpoint)),
            ..Options::default()
        },
    )
    .await;
    let body = r#"{"project_key": "OPS", "title": "disk full"}"#;
    let r = h.call("POST", "/issues", Some(OPS_TOKEN), &[], body).await;
    r.assert_refused("BACKEND_UNAVAILABLE", 503);
    let sent = collector
        .wait_for(|s| s.kind == 3 && s.name == "POST /issues")
        .await;
    assert_eq!(
        attr(&sent, "http.response.status_code").as_deref(),
        Some("503")
    );
    assert_eq!(attr(&sent, "error.type").as_deref(), Some("503"));
    let (_, text) = h.get_admin("/metrics").await;
    assert_line(
        &text,
        &format!(
            "http_client_request_duration_seconds_count{{http_request_method=\"POST\",server_address=\"127.0.0.1\",server_port=\"{port}\",http_response_status_code=\"503\",error_type=\"503\"}} 1"
        ),
    );
    // An answer, timed in toolgate's own upstream histogram too.
    assert_line(
        &text,
        "toolgate_upstream_duration_seconds_count{tool=\"create_issue\"} 1",
    );
    h.stop().await;
}

/// `sampleDenials` exports every failed call's span, not only refusals: an unsampled call
/// the backend failed has its server span, with its code, and no client span.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unsampled_backend_failure_is_exported() {
    let (collector, _server, _backend, h) = rest_exporting(|t| {
        t.sampler = TraceSampler::ParentbasedTraceidratio;
        t.sampler_ratio = 0.0;
    })
    .await;
    let r = h.call("GET", "/reports/7", Some(OPS_TOKEN), &[], "").await;
    r.assert_refused("BACKEND_ERROR", 502);
    let trace = r.json["error"]["traceId"].as_str().unwrap().to_string();
    let failed = collector
        .wait_for(|s| s.kind == 2 && s.name == "GET /reports/{id}")
        .await;
    assert_eq!(hex::encode(&failed.trace_id), trace);
    assert_eq!(
        attr(&failed, "error.type").as_deref(),
        Some("BACKEND_ERROR")
    );
    assert_eq!(attr(&failed, "toolgate.decision").as_deref(), Some("allow"));
    tokio::time::sleep(Duration::from_millis(600)).await;
    assert!(
        client_spans(&collector).is_empty(),
        "no client span was built for an unsampled send"
    );
    h.stop().await;
}
