//! What one call decided, gathered as the pipeline runs and emitted exactly once at the
//! end: response headers, metrics, and the audit record.

use http::{HeaderValue, Response};
use std::time::Instant;

use crate::audit::record::{args_digest, now};
use crate::audit::{AuditLog, Entry};
use crate::proxy::body::Body;
use crate::proxy::headers::{CODE, DECISION};
use crate::proxy::reject::Code;
use crate::telemetry::metrics::Metrics;
use crate::telemetry::trace::TraceContext;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    Allow,
    Deny,
    /// A shadow policy would have denied; the call was forwarded anyway.
    ShadowDeny,
}

impl Decision {
    pub fn as_str(self) -> &'static str {
        match self {
            Decision::Allow => "allow",
            Decision::Deny => "deny",
            Decision::ShadowDeny => "shadow-deny",
        }
    }
}

pub struct Outcome {
    pub started: Instant,
    pub trace: TraceContext,
    pub agent: Option<String>,
    pub session: Option<String>,
    pub tool: Option<String>,
    pub args_digest: Option<String>,
    pub captured_args: Option<serde_json::Value>,
    pub decision: Decision,
    pub code: Option<Code>,
    pub rule: Option<String>,
    pub policy_version: Option<u64>,
    pub upstream_status: Option<u16>,
}

impl Outcome {
    pub fn new(trace: TraceContext, started: Instant) -> Outcome {
        Outcome {
            started,
            trace,
            agent: None,
            session: None,
            tool: None,
            args_digest: None,
            captured_args: None,
            decision: Decision::Deny,
            code: None,
            rule: None,
            policy_version: None,
            upstream_status: None,
        }
    }

    pub fn set_args(&mut self, args: &serde_json::Value) {
        self.args_digest = Some(args_digest(args));
    }

    /// Stamps the response, counts the call and writes its audit record.
    pub async fn finish(
        self,
        mut response: Response<Body>,
        metrics: &Metrics,
        audit: &AuditLog,
    ) -> Response<Body> {
        let headers = response.headers_mut();
        headers.insert(DECISION, HeaderValue::from_static(self.decision.as_str()));
        if let Some(code) = self.code {
            headers.insert(CODE, HeaderValue::from_static(code.as_str()));
        }
        self.record(metrics, audit).await;
        response
    }

    /// Counts the call and writes its audit record, for a call that has no response of
    /// its own (one tools/call of an MCP batch).
    pub async fn record(self, metrics: &Metrics, audit: &AuditLog) {
        let elapsed = self.started.elapsed();
        let tool = self.tool.as_deref().unwrap_or("-");
        metrics.record_call(
            tool,
            self.decision.as_str(),
            self.code.map(Code::as_str).unwrap_or("OK"),
            elapsed,
        );
        audit
            .record(Entry {
                ts: now(),
                trace_id: self.trace.trace_id,
                agent: self.agent,
                session: self.session,
                tool: self.tool,
                args_digest: self.args_digest,
                args: self.captured_args,
                decision: self.decision.as_str(),
                code: self.code.map(Code::as_str),
                rule: self.rule,
                policy_version: self.policy_version,
                upstream_status: self.upstream_status,
                latency_us: elapsed.as_micros() as u64,
            })
            .await;
    }
}
