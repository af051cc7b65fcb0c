//! Prometheus metrics (docs/observability.md), served on the admin `/metrics`.
//!
//! Labels are bounded by construction: `tool` is a contract's tool name or `-` for calls
//! that matched none (an agent can't mint label values), `decision` and `code` come from
//! fixed enums. No agent id or argument is ever a label.
//!
//! A family lookup hashes an owned label set under a lock, and every call made three
//! (count, duration, upstream duration). The handles of a tool's allowed calls, the
//! case on every hot path, are looked up once and kept, so a call costs one map read by
//! `&str` and no allocation; refusals, rare by comparison, go through the families.
//!
//! `toolgate_runtime_alive_tasks` is read from the Tokio runtime when `/metrics` is
//! scraped, so it costs calls nothing; a soak run watches it for leaked tasks.
//!
//! The health gauges mean what an alert on `== 0` needs them to mean: `toolgate_state_up`
//! is 1 with the memory backend (it can't be lost), `toolgate_audit_writable` is 1 with
//! `audit.path: off`, and the age of the oldest pending approval is computed at scrape
//! time, so it grows while nobody decides.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{PoisonError, RwLock};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use super::convention_metrics::{self, ConventionMetrics, ErrorType, Sent, Served};

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct CallLabels {
    pub tool: String,
    pub decision: &'static str,
    pub code: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct DurationLabels {
    pub tool: String,
    pub decision: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ApprovalLabels {
    pub tool: String,
    pub outcome: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct StateLabels {
    pub op: &'static str,
}

/// Why the server closed a connection (`proxy::server::close`).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct CloseLabels {
    pub reason: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ToolLabels {
    pub tool: String,
}

/// An OpenTelemetry signal an export carries: `traces` or `metrics`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct SignalLabels {
    pub signal: &'static str,
}

type Histograms<L> = Family<L, Histogram, fn() -> Histogram>;

fn latency_histogram() -> Histogram {
    // 50 µs … ~1.6 s: the gateway's own cost sits at the low end, backends at the high.
    Histogram::new(exponential_buckets(0.00005, 2.0, 16))
}

/// The series an allowed call of one tool updates: clones of the families' own handles,
/// so they count in the same series.
#[derive(Debug)]
struct ToolSeries {
    allowed: Counter,
    allowed_duration: Histogram,
    upstream_duration: Histogram,
    conventions: convention_metrics::ToolSeries,
}

/// A shared-state operation's duration and error count: clones of the families' handles.
#[derive(Debug, Clone)]
pub struct StateSeries {
    pub duration: Histogram,
    pub errors: Counter,
}

impl StateSeries {
    pub fn record(&self, elapsed: Duration, ok: bool) {
        self.duration.observe(elapsed.as_secs_f64());
        if !ok {
            self.errors.inc();
        }
    }
}

/// The `decision` label of an allowed call (`Decision::Allow`), the one `ToolSeries` counts.
const ALLOW: &str = "allow";
/// The `code` label of a call that ended without a code.
pub const OK: &str = "OK";

#[derive(Debug)]
pub struct Metrics {
    registry: Registry,
    /// Bounded like the families: one entry per tool name a contract declares, plus `-`.
    tools: RwLock<HashMap<Box<str>, ToolSeries>>,
    pub calls: Family<CallLabels, Counter>,
    pub call_duration: Histograms<DurationLabels>,
    pub upstream_duration: Histograms<ToolLabels>,
    pub policy_version: Gauge,
    pub policy_synchronized: Gauge,
    pub policy_reload_errors: Counter,
    pub audit_records: Counter,
    pub spans_dropped: Counter,
    /// OTLP export requests that failed (after their retries), by signal.
    pub telemetry_export_failures: Family<SignalLabels, Counter>,
    /// 1 while the audit sink takes records (always with `audit.path: off`).
    pub audit_writable: Gauge,
    /// 1 while the shared state answers: with `state.backend: redis`, whether its last
    /// round trip (a call's or the link's probe) got an answer; with `memory`, always.
    pub state_up: Gauge,
    pub state_errors: Family<StateLabels, Counter>,
    pub state_duration: Histograms<StateLabels>,
    /// Approval transitions by tool and outcome (requested, approved, denied, expired, used).
    pub approvals: Family<ApprovalLabels, Counter>,
    /// Connections the server closed, by reason (write timeout, header timeout, …).
    pub connections_closed: Family<CloseLabels, Counter>,
    /// Fetches of issuers' keys by issuer and result (`identity::remote`).
    pub jwks_refreshes: crate::identity::remote::Refreshes,
    /// Approvals waiting for a person, as the store last counted them.
    pub approvals_pending: Gauge,
    /// When the oldest of them was requested (ms since the epoch; 0: none waits).
    /// `encode` turns it into an age.
    pub approvals_oldest_pending_ms: AtomicU64,
    approvals_oldest_pending_age: Gauge<f64, AtomicU64>,
    /// Set from the runtime by `encode`, never by a call.
    runtime_alive_tasks: Gauge,
    /// The semantic conventions' duration histograms.
    pub conventions: ConventionMetrics,
    /// 1 for a contract's tool whose backend listing drifted from it, 0 once one agrees;
    /// one series per contract tool a listing showed (`proxy::mcp::tools_list::tool_drift`).
    pub tool_drift: Family<ToolLabels, Gauge>,
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics::new()
    }
}

impl Metrics {
    pub fn new() -> Metrics {
        let mut registry = Registry::default();
        let calls = Family::<CallLabels, Counter>::default();
        let call_duration: Histograms<DurationLabels> =
            Family::new_with_constructor(latency_histogram);
        let upstream_duration: Histograms<ToolLabels> =
            Family::new_with_constructor(latency_histogram);
        let policy_version = Gauge::default();
        let policy_synchronized = Gauge::default();
        let policy_reload_errors = Counter::default();
        let audit_records = Counter::default();
        let spans_dropped = Counter::default();
        let runtime_alive_tasks = Gauge::default();
        let telemetry_export_failures = Family::<SignalLabels, Counter>::default();
        let audit_writable = Gauge::default();
        // Nothing to lose with the memory backend; the Redis link sets 0 until it answers.
        let state_up = Gauge::default();
        state_up.set(1);
        let approvals = Family::<ApprovalLabels, Counter>::default();
        let approvals_pending = Gauge::default();
        let approvals_oldest_pending_age = Gauge::<f64, AtomicU64>::default();
        let state_errors = Family::<StateLabels, Counter>::default();
        let connections_closed = Family::<CloseLabels, Counter>::default();
        let state_duration: Histograms<StateLabels> =
            Family::new_with_constructor(latency_histogram);
        // The client appends `_total` to counters, so they are registered without it.
        registry.register(
            "toolgate_calls",
            "Tool calls by tool, decision and code",
            calls.clone(),
        );
        registry.register(
            "toolgate_call_duration_seconds",
            "Time from request to response, gateway and backend together",
            call_duration.clone(),
        );
        registry.register(
            "toolgate_upstream_duration_seconds",
            "Time the backend took to answer",
            upstream_duration.clone(),
        );
        registry.register(
            "toolgate_policy_version",
            "Version of the enforced policy snapshot",
            policy_version.clone(),
        );
        registry.register(
            "toolgate_policy_synchronized",
            "1 when the enforced snapshot reflects every source, 0 after a failed reload or a lost source",
            policy_synchronized.clone(),
        );
        registry.register(
            "toolgate_policy_reload_errors",
            "Policy changes rejected because they failed to parse or compile",
            policy_reload_errors.clone(),
        );
        registry.register(
            "toolgate_audit_records",
            "Audit records written",
            audit_records.clone(),
        );
        registry.register(
            "toolgate_spans_dropped",
            "Spans dropped: the export queue was full, or their export failed",
            spans_dropped.clone(),
        );
        registry.register(
            "toolgate_telemetry_export_failures",
            "OTLP export requests that failed after their retries, by signal (traces, metrics)",
            telemetry_export_failures.clone(),
        );
        registry.register(
            "toolgate_audit_writable",
            "1 while the audit sink takes records, 0 before the first one and after a failed write until one succeeds",
            audit_writable.clone(),
        );
        registry.register(
            "toolgate_runtime_alive_tasks",
            "Tasks alive in the Tokio runtime that serves /metrics, read when scraped",
            runtime_alive_tasks.clone(),
        );
        registry.register(
            "toolgate_state_up",
            "1 while the shared state answers (always with state.backend: memory), 0 while Redis doesn't",
            state_up.clone(),
        );
        registry.register(
            "toolgate_state_errors",
            "Shared-state round trips that failed or timed out, by operation",
            state_errors.clone(),
        );
        registry.register(
            "toolgate_state_duration_seconds",
            "Time of one shared-state round trip, by operation",
            state_duration.clone(),
        );
        registry.register(
            "toolgate_approvals",
            "Human approvals by tool and outcome: requested, approved, denied, expired, used",
            approvals.clone(),
        );
        registry.register(
            "toolgate_connections_closed",
            "Connections the server closed, by reason: write_timeout (the client did not read its answers), header_timeout, idle_timeout, ambiguous_framing, malformed_request, unread_body",
            connections_closed.clone(),
        );
        let jwks_refreshes = crate::identity::remote::Refreshes::default();
        registry.register(
            "toolgate_jwks_refresh",
            "Fetches of an issuer's keys (JWKS URL, discovery, Kubernetes API server), by issuer and result: ok or error",
            jwks_refreshes.clone(),
        );
        registry.register(
            "toolgate_approvals_pending",
            "Approvals waiting for a person's decision (with state.backend: redis, the whole Deployment's)",
            approvals_pending.clone(),
        );
        registry.register(
            "toolgate_approvals_oldest_pending_age_seconds",
            "How long the oldest pending approval has waited, 0 when none waits",
            approvals_oldest_pending_age.clone(),
        );
        let tool_drift = Family::<ToolLabels, Gauge>::default();
        registry.register(
            "toolgate_tool_drift",
            "1 while the backend's tools/list shows a tool with another description or input schema than its contract, 0 once they agree",
            tool_drift.clone(),
        );
        let conventions = ConventionMetrics::register(&mut registry);
        Metrics {
            tool_drift,
            jwks_refreshes,
            registry,
            conventions,
            tools: RwLock::default(),
            calls,
            call_duration,
            upstream_duration,
            policy_version,
            policy_synchronized,
            policy_reload_errors,
            audit_records,
            spans_dropped,
            telemetry_export_failures,
            audit_writable,
            state_up,
            state_errors,
            state_duration,
            approvals,
            connections_closed,
            approvals_pending,
            approvals_oldest_pending_ms: AtomicU64::new(0),
            approvals_oldest_pending_age,
            runtime_alive_tasks,
        }
    }

    pub fn record_call(
        &self,
        tool: &str,
        decision: &'static str,
        code: &'static str,
        elapsed: Duration,
    ) {
        if decision == ALLOW && code == OK {
            return self.with_tool(tool, |series| {
                series.allowed.inc();
                series.allowed_duration.observe(elapsed.as_secs_f64());
            });
        }
        self.calls
            .get_or_create(&CallLabels {
                tool: tool.to_string(),
                decision,
                code,
            })
            .inc();
        self.call_duration
            .get_or_create(&DurationLabels {
                tool: tool.to_string(),
                decision,
            })
            .observe(elapsed.as_secs_f64());
    }

    /// The series one shared-state operation updates, resolved once and kept by the
    /// caller: a round trip then costs no family lookup (`op` is one of a fixed set).
    pub fn state_series(&self, op: &'static str) -> StateSeries {
        let labels = StateLabels { op };
        StateSeries {
            duration: self.state_duration.get_or_create(&labels).clone(),
            errors: self.state_errors.get_or_create(&labels).clone(),
        }
    }

    /// One request toolgate served, in the conventions' histograms (`tool`: the one it
    /// called, whose kept series are used).
    pub fn record_served(
        &self,
        served: &Served<'_>,
        error_type: ErrorType,
        elapsed: Duration,
        tool: Option<&str>,
    ) {
        match tool {
            Some(tool) => self.with_tool(tool, |series| {
                self.conventions
                    .served(served, error_type, elapsed, Some(&series.conventions))
            }),
            None => self.conventions.served(served, error_type, elapsed, None),
        }
    }

    /// One request sent to the backend for `tool`: `toolgate_upstream_duration_seconds`
    /// when it was answered, and the conventions' client histogram either way.
    pub fn record_upstream(
        &self,
        tool: &str,
        sent: &Sent<'_>,
        error_type: ErrorType,
        elapsed: Duration,
    ) {
        self.with_tool(tool, |series| {
            if sent.answered() {
                series.upstream_duration.observe(elapsed.as_secs_f64());
            }
            self.conventions
                .sent(sent, error_type, elapsed, &series.conventions)
        });
    }

    /// Runs `f` on the tool's kept series, resolving them from the families the first
    /// time the tool is seen.
    fn with_tool(&self, tool: &str, f: impl FnOnce(&ToolSeries)) {
        if let Some(series) = self
            .tools
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .get(tool)
        {
            return f(series);
        }
        let series = ToolSeries {
            allowed: self
                .calls
                .get_or_create(&CallLabels {
                    tool: tool.to_string(),
                    decision: ALLOW,
                    code: OK,
                })
                .clone(),
            allowed_duration: self
                .call_duration
                .get_or_create(&DurationLabels {
                    tool: tool.to_string(),
                    decision: ALLOW,
                })
                .clone(),
            upstream_duration: self
                .upstream_duration
                .get_or_create(&ToolLabels {
                    tool: tool.to_string(),
                })
                .clone(),
            conventions: convention_metrics::ToolSeries::default(),
        };
        let mut tools = self.tools.write().unwrap_or_else(PoisonError::into_inner);
        f(tools.entry(tool.into()).or_insert(series));
    }

    /// A failed OTLP export of `signal` (`traces`, `metrics`).
    pub fn export_failed(&self, signal: &'static str) {
        self.telemetry_export_failures
            .get_or_create(&SignalLabels { signal })
            .inc();
    }

    /// The Prometheus text exposition. Called from a Tokio runtime (the admin server),
    /// it first reads that runtime's alive tasks; elsewhere the gauge keeps its last value.
    pub fn encode(&self) -> String {
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            let alive = runtime.metrics().num_alive_tasks();
            self.runtime_alive_tasks
                .set(i64::try_from(alive).unwrap_or(i64::MAX));
        }
        self.approvals_oldest_pending_age
            .set(self.oldest_pending_age(SystemTime::now()));
        let mut out = String::new();
        // Writing to a String can't fail.
        let _ = prometheus_client::encoding::text::encode(&mut out, &self.registry);
        out
    }

    /// Seconds the oldest pending approval has waited at `now`; 0 when none waits.
    fn oldest_pending_age(&self, now: SystemTime) -> f64 {
        let created = self.approvals_oldest_pending_ms.load(Ordering::Relaxed);
        let now_ms = now
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX));
        match created {
            0 => 0.0,
            created => now_ms.saturating_sub(created) as f64 / 1000.0,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The conventions' histograms: their Prometheus names and labels, a tool's kept
    /// series counting in the same series as the family, and other statuses beside it.
    #[test]
    fn convention_histograms_count_by_their_labels() {
        let m = Metrics::new();
        let served = |status| Served::Http {
            method: "GET",
            scheme: "http",
            route: Some("/logs/{id}"),
            status: Some(status),
        };
        for _ in 0..2 {
            m.record_served(
                &served(200),
                None,
                Duration::from_millis(3),
                Some("read_logs"),
            );
        }
        m.record_served(
            &served(404),
            None,
            Duration::from_millis(3),
            Some("read_logs"),
        );
        m.record_served(
            &served(429),
            Some("RATE_LIMITED".into()),
            Duration::from_millis(1),
            Some("read_logs"),
        );
        let call = Served::Mcp {
            method: "tools/call",
            tool: Some("get_order"),
        };
        m.record_served(&call, None, Duration::from_millis(2), Some("get_order"));
        m.record_served(
            &call,
            Some("tool_error".into()),
            Duration::from_millis(2),
            Some("get_order"),
        );
        let list = Served::Mcp {
            method: "tools/list",
            tool: None,
        };
        m.record_served(&list, None, Duration::from_millis(1), None);
        let text = m.encode();
        for line in [
            "# TYPE http_server_request_duration_seconds histogram",
            "# UNIT http_server_request_duration_seconds seconds",
            "http_server_request_duration_seconds_count{http_request_method=\"GET\",url_scheme=\"http\",http_route=\"/logs/{id}\",http_response_status_code=\"200\",error_type=\"\"} 2",
            "http_server_request_duration_seconds_count{http_request_method=\"GET\",url_scheme=\"http\",http_route=\"/logs/{id}\",http_response_status_code=\"404\",error_type=\"\"} 1",
            "http_server_request_duration_seconds_count{http_request_method=\"GET\",url_scheme=\"http\",http_route=\"/logs/{id}\",http_response_status_code=\"429\",error_type=\"RATE_LIMITED\"} 1",
            "http_server_request_duration_seconds_bucket{le=\"0.005\",http_request_method=\"GET\"",
            "mcp_server_operation_duration_seconds_count{mcp_method_name=\"tools/call\",gen_ai_tool_name=\"get_order\",error_type=\"\"} 1",
            "mcp_server_operation_duration_seconds_count{mcp_method_name=\"tools/call\",gen_ai_tool_name=\"get_order\",error_type=\"tool_error\"} 1",
            "mcp_server_operation_duration_seconds_count{mcp_method_name=\"tools/list\",gen_ai_tool_name=\"\",error_type=\"\"} 1",
            "mcp_server_operation_duration_seconds_bucket{le=\"300.0\",mcp_method_name=\"tools/list\"",
        ] {
            assert!(text.contains(line), "missing {line} in\n{text}");
        }
    }

    #[test]
    fn exposes_the_design_names() {
        let m = Metrics::new();
        m.record_call("read_logs", "allow", "", Duration::from_millis(1));
        m.policy_synchronized.set(1);
        let text = m.encode();
        for name in [
            "toolgate_calls_total{tool=\"read_logs\",decision=\"allow\",code=\"\"} 1",
            "toolgate_call_duration_seconds_bucket",
            "toolgate_policy_synchronized 1",
            "toolgate_policy_reload_errors_total 0",
            "toolgate_audit_records_total 0",
            "toolgate_spans_dropped_total 0",
            "# TYPE toolgate_policy_version gauge",
            "toolgate_runtime_alive_tasks 0",
        ] {
            assert!(text.contains(name), "missing {name} in\n{text}");
        }
    }

    /// An alert on `== 0` must not fire on a healthy sidecar: the memory backend's state
    /// is up; an approval's wait is measured when scraped, so it grows between scrapes.
    #[test]
    fn health_gauges_mean_what_alerts_need() {
        let m = Metrics::new();
        m.export_failed("traces");
        let text = m.encode();
        for line in [
            "toolgate_state_up 1",
            "toolgate_audit_writable 0",
            "toolgate_approvals_pending 0",
            "toolgate_approvals_oldest_pending_age_seconds 0.0",
            "toolgate_telemetry_export_failures_total{signal=\"traces\"} 1",
        ] {
            assert!(text.contains(line), "missing {line} in\n{text}");
        }
        let now = SystemTime::now();
        let requested = now - Duration::from_secs(90);
        let ms = requested.duration_since(UNIX_EPOCH).unwrap().as_millis() as u64;
        m.approvals_oldest_pending_ms.store(ms, Ordering::Relaxed);
        assert_eq!(m.oldest_pending_age(now), 90.0);
        assert_eq!(m.oldest_pending_age(now + Duration::from_secs(30)), 120.0);
    }

    #[tokio::test]
    async fn alive_tasks_are_read_at_scrape_time() {
        let m = Metrics::new();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let parked = tokio::spawn(async move {
            let _ = stopped.await;
        });
        let alive = |text: &str| -> i64 {
            text.lines()
                .find_map(|l| l.strip_prefix("toolgate_runtime_alive_tasks "))
                .and_then(|v| v.parse().ok())
                .expect("the gauge is exposed")
        };
        let with_task = alive(&m.encode());
        assert!(with_task >= 1, "the parked task is alive: {with_task}");
        let _ = stop.send(());
        parked.await.unwrap();
        assert_eq!(alive(&m.encode()), with_task - 1);
    }

    #[test]
    fn kept_series_count_in_the_families() {
        let m = Metrics::new();
        for _ in 0..3 {
            m.record_call("read_logs", ALLOW, OK, Duration::from_millis(1));
        }
        m.record_call(
            "read_logs",
            ALLOW,
            "BACKEND_ERROR",
            Duration::from_millis(1),
        );
        m.record_call(
            "read_logs",
            "deny",
            "RATE_LIMITED",
            Duration::from_millis(1),
        );
        let sent = Sent::Http {
            method: "GET",
            status: Some(200),
        };
        m.record_upstream("read_logs", &sent, None, Duration::from_millis(1));
        m.record_upstream("read_logs", &sent, None, Duration::from_millis(2));
        let failed = Sent::Http {
            method: "GET",
            status: None,
        };
        let timeout = Some("BACKEND_TIMEOUT".into());
        m.record_upstream("read_logs", &failed, timeout, Duration::from_secs(5));
        let text = m.encode();
        for line in [
            "toolgate_calls_total{tool=\"read_logs\",decision=\"allow\",code=\"OK\"} 3",
            "toolgate_calls_total{tool=\"read_logs\",decision=\"allow\",code=\"BACKEND_ERROR\"} 1",
            "toolgate_calls_total{tool=\"read_logs\",decision=\"deny\",code=\"RATE_LIMITED\"} 1",
            "toolgate_call_duration_seconds_count{tool=\"read_logs\",decision=\"allow\"} 4",
            "toolgate_call_duration_seconds_count{tool=\"read_logs\",decision=\"deny\"} 1",
            "toolgate_upstream_duration_seconds_count{tool=\"read_logs\"} 2",
            "http_client_request_duration_seconds_count{http_request_method=\"GET\",server_address=\"\",server_port=\"0\",http_response_status_code=\"200\",error_type=\"\"} 2",
            "http_client_request_duration_seconds_count{http_request_method=\"GET\",server_address=\"\",server_port=\"0\",http_response_status_code=\"\",error_type=\"BACKEND_TIMEOUT\"} 1",
        ] {
            assert!(text.contains(line), "missing {line} in\n{text}");
        }
    }
}
