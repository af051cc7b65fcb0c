//! The OpenTelemetry semantic conventions' duration histograms (DESIGN §13), beside the
//! `toolgate_*` metrics: dashboards built on the conventions (HTTP, MCP) show toolgate
//! with no query of their own.
//!
//! | Prometheus name | OTLP instrument | per |
//! |---|---|---|
//! | `http_server_request_duration_seconds` | `http.server.request.duration` | REST request |
//! | `mcp_server_operation_duration_seconds` | `mcp.server.operation.duration` | MCP message |
//! | `http_client_request_duration_seconds` | `http.client.request.duration` | REST backend call |
//! | `mcp_client_operation_duration_seconds` | `mcp.client.operation.duration` | MCP backend call |
//!
//! A request is measured as its span is named (`proxy::conventions`): an MCP message by
//! its method, anything else as HTTP. Labels are the conventions' attributes with dots
//! made underscores, every value bounded: methods from fixed lists, a route or tool name
//! from a contract, a status, a code. Never an agent id or an argument.
//!
//! The series of a tool's successful calls are looked up once and kept
//! ([`ToolSeries`]), as `toolgate_*`'s are, so the usual call neither allocates nor
//! hashes a label set; a failure or a status not seen first goes through the families.
//! With `telemetry.metricsExport: otlp` the same observations also go to the OTLP
//! instruments ([`Instruments`]), which the SDK aggregates and pushes.

use opentelemetry::metrics::{Histogram as OtelHistogram, Meter};
use opentelemetry::KeyValue;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;
use std::borrow::Cow;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

/// The buckets the HTTP conventions advise for `http.*.request.duration`.
const HTTP_BUCKETS: [f64; 14] = [
    0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
];
/// The buckets the MCP conventions advise for `mcp.*.operation.duration`.
const MCP_BUCKETS: [f64; 14] = [
    0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0,
];

/// A label value that is static in the usual case (a code, `tool_error`) and owned when
/// it is computed (a backend's error status).
pub type ErrorType = Option<Cow<'static, str>>;

/// What one request to toolgate was, as the server metrics see it.
pub enum Served<'a> {
    Http {
        method: &'static str,
        scheme: &'static str,
        route: Option<&'a str>,
        status: Option<u16>,
    },
    Mcp {
        method: &'static str,
        /// The tool of a `tools/call`.
        tool: Option<&'a str>,
    },
}

/// What one request toolgate sent to the backend was.
pub enum Sent<'a> {
    Http {
        method: &'static str,
        status: Option<u16>,
    },
    Mcp {
        tool: &'a str,
        /// The HTTP status the backend answered with (not a label of the MCP metric).
        status: Option<u16>,
    },
}

impl Sent<'_> {
    /// Whether the backend answered at all.
    pub fn answered(&self) -> bool {
        match self {
            Sent::Http { status, .. } | Sent::Mcp { status, .. } => status.is_some(),
        }
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct HttpServerLabels {
    http_request_method: &'static str,
    url_scheme: &'static str,
    http_route: Option<String>,
    http_response_status_code: Option<u16>,
    error_type: ErrorType,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct McpLabels {
    mcp_method_name: &'static str,
    gen_ai_tool_name: Option<String>,
    error_type: ErrorType,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct HttpClientLabels {
    http_request_method: &'static str,
    server_address: Arc<str>,
    server_port: u16,
    http_response_status_code: Option<u16>,
    error_type: ErrorType,
}

type Histograms<L> = Family<L, Histogram, fn() -> Histogram>;

fn http_histogram() -> Histogram {
    Histogram::new(HTTP_BUCKETS)
}

fn mcp_histogram() -> Histogram {
    Histogram::new(MCP_BUCKETS)
}

/// The OTLP instruments, made once `telemetry.metricsExport: otlp` starts.
#[derive(Debug)]
struct Instruments {
    http_server: OtelHistogram<f64>,
    mcp_server: OtelHistogram<f64>,
    http_client: OtelHistogram<f64>,
    mcp_client: OtelHistogram<f64>,
}

/// A successful call's kept series: the labels they were made for, and the histogram.
/// Set by the tool's first successful call; a call whose labels differ (another status,
/// or a route or method a policy reload changed) is counted through the family.
#[derive(Debug, Default)]
pub struct ToolSeries {
    rest_server: OnceLock<(HttpServerLabels, Histogram)>,
    mcp_server: OnceLock<Histogram>,
    rest_client: OnceLock<(&'static str, u16, Histogram)>,
    mcp_client: OnceLock<Histogram>,
}

#[derive(Debug)]
pub struct ConventionMetrics {
    http_server: Histograms<HttpServerLabels>,
    mcp_server: Histograms<McpLabels>,
    http_client: Histograms<HttpClientLabels>,
    mcp_client: Histograms<McpLabels>,
    /// The backend's host and port, the client metrics' `server_address` / `server_port`.
    backend: OnceLock<(Arc<str>, u16)>,
    otlp: OnceLock<Instruments>,
}

impl ConventionMetrics {
    pub fn register(registry: &mut Registry) -> ConventionMetrics {
        let metrics = ConventionMetrics {
            http_server: Family::new_with_constructor(http_histogram),
            mcp_server: Family::new_with_constructor(mcp_histogram),
            http_client: Family::new_with_constructor(http_histogram),
            mcp_client: Family::new_with_constructor(mcp_histogram),
            backend: OnceLock::new(),
            otlp: OnceLock::new(),
        };
        // prometheus-client appends the unit (`_seconds`) to the name.
        registry.register_with_unit(
            "http_server_request_duration",
            "Duration of HTTP server requests (OpenTelemetry http.server.request.duration)",
            prometheus_client::registry::Unit::Seconds,
            metrics.http_server.clone(),
        );
        registry.register_with_unit(
            "mcp_server_operation_duration",
            "Duration of MCP requests as the server sees them (OpenTelemetry mcp.server.operation.duration)",
            prometheus_client::registry::Unit::Seconds,
            metrics.mcp_server.clone(),
        );
        registry.register_with_unit(
            "http_client_request_duration",
            "Duration of HTTP requests to the backend (OpenTelemetry http.client.request.duration)",
            prometheus_client::registry::Unit::Seconds,
            metrics.http_client.clone(),
        );
        registry.register_with_unit(
            "mcp_client_operation_duration",
            "Duration of MCP requests to the backend (OpenTelemetry mcp.client.operation.duration)",
            prometheus_client::registry::Unit::Seconds,
            metrics.mcp_client.clone(),
        );
        metrics
    }

    /// The backend the client metrics name, set once at start.
    pub fn set_backend(&self, host: &str, port: u16) {
        let _ = self.backend.set((host.into(), port));
    }

    /// Also records every observation on OTLP instruments of `meter`.
    pub fn export_to(&self, meter: &Meter) {
        let histogram = |name: &'static str, description: &'static str, buckets: &[f64]| {
            meter
                .f64_histogram(name)
                .with_unit("s")
                .with_description(description)
                .with_boundaries(buckets.to_vec())
                .build()
        };
        let _ = self.otlp.set(Instruments {
            http_server: histogram(
                "http.server.request.duration",
                "Duration of HTTP server requests.",
                &HTTP_BUCKETS,
            ),
            mcp_server: histogram(
                "mcp.server.operation.duration",
                "MCP request duration as observed on the receiver from the time it was received until the result or ack is sent.",
                &MCP_BUCKETS,
            ),
            http_client: histogram(
                "http.client.request.duration",
                "Duration of HTTP client requests.",
                &HTTP_BUCKETS,
            ),
            mcp_client: histogram(
                "mcp.client.operation.duration",
                "The duration of the MCP request or notification as observed on the sender from the time it was sent until the response or ack is received.",
                &MCP_BUCKETS,
            ),
        });
    }

    /// One request served, `kept` the series of its tool (when it called one).
    pub fn served(
        &self,
        served: &Served<'_>,
        error_type: ErrorType,
        elapsed: Duration,
        kept: Option<&ToolSeries>,
    ) {
        let seconds = elapsed.as_secs_f64();
        if let Some(otlp) = self.otlp.get() {
            let instrument = match served {
                Served::Http { .. } => &otlp.http_server,
                Served::Mcp { .. } => &otlp.mcp_server,
            };
            instrument.record(seconds, &served.attributes(&error_type));
        }
        match *served {
            Served::Http {
                method,
                scheme,
                route,
                status,
            } => {
                let labels = || HttpServerLabels {
                    http_request_method: method,
                    url_scheme: scheme,
                    http_route: route.map(str::to_string),
                    http_response_status_code: status,
                    error_type: error_type.clone(),
                };
                match (kept, status, &error_type) {
                    (Some(kept), Some(status), None) => {
                        let (kept_labels, histogram) = kept.rest_server.get_or_init(|| {
                            let labels = labels();
                            let histogram = self.http_server.get_or_create_owned(&labels);
                            (labels, histogram)
                        });
                        // Compared without building the labels: no allocation.
                        let same = kept_labels.http_response_status_code == Some(status)
                            && kept_labels.url_scheme == scheme
                            && kept_labels.http_request_method == method
                            && kept_labels.http_route.as_deref() == route;
                        if same {
                            histogram.observe(seconds);
                        } else {
                            self.http_server.get_or_create(&labels()).observe(seconds);
                        }
                    }
                    _ => self.http_server.get_or_create(&labels()).observe(seconds),
                }
            }
            Served::Mcp { method, tool } => {
                let labels = || McpLabels {
                    mcp_method_name: method,
                    gen_ai_tool_name: tool.map(str::to_string),
                    error_type: error_type.clone(),
                };
                match (kept, &error_type) {
                    (Some(kept), None) if tool.is_some() => kept
                        .mcp_server
                        .get_or_init(|| self.mcp_server.get_or_create_owned(&labels()))
                        .observe(seconds),
                    _ => self.mcp_server.get_or_create(&labels()).observe(seconds),
                }
            }
        }
    }

    /// One request sent to the backend, `kept` the series of its tool.
    pub fn sent(
        &self,
        sent: &Sent<'_>,
        error_type: ErrorType,
        elapsed: Duration,
        kept: &ToolSeries,
    ) {
        let seconds = elapsed.as_secs_f64();
        let (address, port) = match self.backend.get() {
            Some((address, port)) => (Some(address), *port),
            None => (None, 0),
        };
        // Cloned only to build a label set, not for a kept series' call.
        let owned_address = || address.cloned().unwrap_or_else(|| Arc::from(""));
        if let Some(otlp) = self.otlp.get() {
            let instrument = match sent {
                Sent::Http { .. } => &otlp.http_client,
                Sent::Mcp { .. } => &otlp.mcp_client,
            };
            let address = address.map_or("", |a| &**a);
            instrument.record(seconds, &sent.attributes(address, port, &error_type));
        }
        match *sent {
            Sent::Http { method, status } => {
                let labels = || HttpClientLabels {
                    http_request_method: method,
                    server_address: owned_address(),
                    server_port: port,
                    http_response_status_code: status,
                    error_type: error_type.clone(),
                };
                match (status, &error_type) {
                    (Some(status), None) => {
                        let (kept_method, kept_status, histogram) =
                            kept.rest_client.get_or_init(|| {
                                let histogram = self.http_client.get_or_create_owned(&labels());
                                (method, status, histogram)
                            });
                        if *kept_status == status && *kept_method == method {
                            histogram.observe(seconds);
                        } else {
                            self.http_client.get_or_create(&labels()).observe(seconds);
                        }
                    }
                    _ => self.http_client.get_or_create(&labels()).observe(seconds),
                }
            }
            Sent::Mcp { tool, .. } => {
                let labels = || McpLabels {
                    mcp_method_name: "tools/call",
                    gen_ai_tool_name: Some(tool.to_string()),
                    error_type: error_type.clone(),
                };
                match &error_type {
                    None => kept
                        .mcp_client
                        .get_or_init(|| self.mcp_client.get_or_create_owned(&labels()))
                        .observe(seconds),
                    Some(_) => self.mcp_client.get_or_create(&labels()).observe(seconds),
                }
            }
        }
    }
}

impl Sent<'_> {
    /// The OTLP attributes, named as the conventions name them.
    fn attributes(&self, address: &str, port: u16, error_type: &ErrorType) -> Vec<KeyValue> {
        let mut out = Vec::with_capacity(5);
        match *self {
            Sent::Http { method, status } => {
                out.push(KeyValue::new("http.request.method", method));
                out.push(KeyValue::new("server.address", address.to_string()));
                out.push(KeyValue::new("server.port", i64::from(port)));
                if let Some(status) = status {
                    out.push(KeyValue::new(
                        "http.response.status_code",
                        i64::from(status),
                    ));
                }
            }
            Sent::Mcp { tool, .. } => {
                out.push(KeyValue::new("mcp.method.name", "tools/call"));
                out.push(KeyValue::new("gen_ai.tool.name", tool.to_string()));
            }
        }
        if let Some(error_type) = error_type {
            out.push(KeyValue::new("error.type", error_type.to_string()));
        }
        out
    }
}

impl Served<'_> {
    /// The OTLP attributes, named as the conventions name them.
    fn attributes(&self, error_type: &ErrorType) -> Vec<KeyValue> {
        let mut out = Vec::with_capacity(5);
        match *self {
            Served::Http {
                method,
                scheme,
                route,
                status,
            } => {
                out.push(KeyValue::new("http.request.method", method));
                out.push(KeyValue::new("url.scheme", scheme));
                if let Some(route) = route {
                    out.push(KeyValue::new("http.route", route.to_string()));
                }
                if let Some(status) = status {
                    out.push(KeyValue::new(
                        "http.response.status_code",
                        i64::from(status),
                    ));
                }
            }
            Served::Mcp { method, tool } => {
                out.push(KeyValue::new("mcp.method.name", method));
                if let Some(tool) = tool {
                    out.push(KeyValue::new("gen_ai.tool.name", tool.to_string()));
                }
            }
        }
        if let Some(error_type) = error_type {
            out.push(KeyValue::new("error.type", error_type.to_string()));
        }
        out
    }
}
