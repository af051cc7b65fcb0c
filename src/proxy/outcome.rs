//! What one call decided, gathered as the pipeline runs and emitted exactly once at the
//! end: response headers, metrics, and the audit record.

use http::{HeaderValue, Response};
use std::time::Instant;

use crate::audit::record::{args_digest, now};
use crate::audit::{AuditLog, Entry};
use crate::proxy::body::Body;
use crate::proxy::headers::{CODE, DECISION, REPLAYED};
use crate::telemetry::metrics::{self, Metrics};
use crate::telemetry::spans::CallSpan;
use crate::vocab::args::Args;
use crate::vocab::Code;
use opentelemetry::KeyValue;

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
    pub span: CallSpan,
    /// MCP: the JSON-RPC method and id of the message, for the span.
    pub mcp_method: Option<String>,
    pub call_id: Option<String>,
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
    /// The answer is a duplicate's copy of the first call's (`X-Toolgate-Replayed`).
    pub replayed: bool,
    /// An audit log is kept: with `audit.path: off` the record (and the digest of the
    /// arguments, which only the record uses) is never built.
    pub audited: bool,
}

impl Outcome {
    pub fn new(span: CallSpan, started: Instant) -> Outcome {
        Outcome {
            started,
            span,
            mcp_method: None,
            call_id: None,
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
            replayed: false,
            audited: true,
        }
    }

    pub fn set_args(&mut self, args: &Args) {
        if self.audited {
            self.args_digest = Some(args_digest(args.value()));
        }
    }

    pub fn trace_id(&self) -> &str {
        self.span.trace_id()
    }

    /// The tool is known: name the span after it.
    pub fn set_tool(&mut self, tool: &str) {
        self.span.set_name(tool);
        self.tool = Some(tool.to_string());
    }

    /// Span attributes of DESIGN §6; never argument values.
    fn span_attributes(&self) -> Vec<KeyValue> {
        let mut attributes = vec![KeyValue::new("toolgate.decision", self.decision.as_str())];
        let optional = [
            ("gen_ai.tool.name", self.tool.clone()),
            ("gen_ai.tool.call.id", self.call_id.clone()),
            ("mcp.method.name", self.mcp_method.clone()),
            (
                "mcp.session.id",
                self.mcp_method.as_ref().and(self.session.clone()),
            ),
            ("toolgate.agent.id", self.agent.clone()),
            ("toolgate.code", self.code.map(|c| c.as_str().to_string())),
            ("toolgate.rule", self.rule.clone()),
        ];
        for (key, value) in optional {
            if let Some(value) = value {
                attributes.push(KeyValue::new(key, value));
            }
        }
        if let Some(version) = self.policy_version {
            attributes.push(KeyValue::new("toolgate.policy.version", version as i64));
        }
        if let Some(status) = self.upstream_status {
            attributes.push(KeyValue::new("toolgate.upstream.status", status as i64));
        }
        attributes
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
        if self.replayed {
            headers.insert(REPLAYED, HeaderValue::from_static("true"));
        }
        self.record(metrics, audit).await;
        response
    }

    /// Counts the call and writes its audit record, for a call that has no response of
    /// its own (one tools/call of an MCP batch).
    pub async fn record(self, metrics: &Metrics, audit: &AuditLog) {
        let elapsed = self.started.elapsed();
        if let Some(code) = self.code {
            self.span.event(
                "refused",
                vec![KeyValue::new("toolgate.code", code.as_str())],
            );
        }
        // An error span: refused, or allowed but failed by the backend. A shadow-deny that
        // ran fine is no error: the call did what it was asked.
        let failed = self.decision == Decision::Deny
            || self.code.is_some_and(|c| {
                matches!(
                    c,
                    Code::BackendTimeout
                        | Code::BackendUnavailable
                        | Code::BackendError
                        | Code::BackendRejected
                        | Code::OutputContractViolation
                )
            });
        if self.span.is_recording() {
            self.span.end(self.span_attributes(), failed);
        }
        let tool = self.tool.as_deref().unwrap_or("-");
        metrics.record_call(
            tool,
            self.decision.as_str(),
            self.code.map(Code::as_str).unwrap_or(metrics::OK),
            elapsed,
        );
        if !self.audited {
            return;
        }
        audit
            .record(Entry {
                ts: now(),
                trace_id: self.span.trace_id().to_string(),
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
