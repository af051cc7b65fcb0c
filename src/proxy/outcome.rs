//! What one call decided, gathered as the pipeline runs and emitted exactly once at the
//! end: response headers, metrics, the span and the audit record.
//!
//! Stages return values; the dispatchers hand them to the outcome through the methods
//! below, named for what happened (`identified`, `proposed`, `governed`, `answered`,
//! `refused` …). Its fields are private: this file is the only one that fills the record
//! the metrics, the span and the audit line are made of.

use http::{HeaderValue, Response};
use std::borrow::Cow;
use std::time::Instant;

use crate::audit::privacy::Privacy;
use crate::audit::record::now;
use crate::audit::record::ApprovalRef;
use crate::audit::{AuditLog, Entry};
use crate::policy::contract::Contract;
use crate::proxy::body::Body;
use crate::proxy::conventions;
use crate::proxy::govern::Verdict;
use crate::proxy::headers::{CODE, DECISION, REPLAYED};
use crate::telemetry::attributes;
use crate::telemetry::convention_metrics::Served;
use crate::telemetry::metrics::{self, Metrics};
use crate::telemetry::spans::CallSpan;
use crate::vocab::{Args, Code, Decision, Reject};
use opentelemetry::KeyValue;

pub struct Outcome {
    started: Instant,
    span: CallSpan,
    /// MCP: the JSON-RPC method and id of the message, for the span.
    mcp_method: Option<String>,
    call_id: Option<String>,
    agent: Option<String>,
    /// Who vouched for the agent id: `tokens`, `mtls` or the agent JWT's `iss`.
    issuer: Option<std::sync::Arc<str>>,
    session: Option<String>,
    tool: Option<String>,
    args_digest: Option<String>,
    captured_args: Option<serde_json::Value>,
    decision: Decision,
    code: Option<Code>,
    rule: Option<String>,
    policy_version: Option<u64>,
    upstream_status: Option<u16>,
    /// The answer is a duplicate's copy of the first call's (`X-Toolgate-Replayed`).
    replayed: bool,
    /// The audit log's rules for secrets, when a log is kept: with `audit.path: off` the
    /// record (and the digest of the arguments, which only the record uses) is never
    /// built.
    privacy: Option<Privacy>,
    /// What the span needs of the request, kept only while the span is exported.
    request: Option<Box<conventions::Request>>,
    /// The request's method and scheme, for the conventions' HTTP metric.
    http_method: &'static str,
    scheme: &'static str,
    /// MCP: what a message other than tools/call names (a prompt), for the span's name.
    target: Option<String>,
    /// REST: the route the call matched; the tool's description.
    route: Option<String>,
    tool_description: Option<String>,
    /// The HTTP status the agent got.
    status: Option<u16>,
    /// An MCP tool answered `isError: true`.
    tool_error: bool,
    /// The MCP server answered the call with a JSON-RPC `error`.
    rpc_error: bool,
    /// The shared state couldn't be asked: the call's limits failed open.
    state_failed_open: bool,
    /// The approval the call ran under.
    approval: Option<ApprovalRef>,
    /// With `captureArguments`: what the call's rules read besides `args`.
    inputs: Option<serde_json::Value>,
    /// This outcome counts the request in the conventions' duration histograms; a
    /// streamed call's passes it to its follow-up, which ends with the stream.
    measured: bool,
    /// An answer naming no agent past its address's allowance (`proxy::anonymous`):
    /// counted, but no audit record or exported span of its own.
    suppressed: bool,
    /// A request that is not a tool call was let through ([`passed`](Self::passed)).
    passed: bool,
    /// §16: the call to remember for `requires` once it has succeeded (`proxy::seeds`).
    remember: Option<Box<crate::state::remember::Remember>>,
    /// §16: the task the call's limits keyed on, for the audit record (`toolgate replay`).
    task: Option<String>,
}

/// `toolgate.state` and the audit record's `state` when limits failed open.
const FAILED_OPEN: &str = "failed_open";

impl Outcome {
    /// A call's outcome from its first moment; `privacy`: the audit log's, when one is
    /// kept ([`AuditLog::privacy`]).
    pub fn new(span: CallSpan, started: Instant, privacy: Option<Privacy>) -> Outcome {
        Outcome {
            started,
            span,
            mcp_method: None,
            call_id: None,
            agent: None,
            issuer: None,
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
            privacy,
            request: None,
            http_method: "_OTHER",
            scheme: "http",
            target: None,
            route: None,
            tool_description: None,
            status: None,
            tool_error: false,
            rpc_error: false,
            state_failed_open: false,
            approval: None,
            inputs: None,
            measured: true,
            suppressed: false,
            passed: false,
            remember: None,
            task: None,
        }
    }

    /// The request the call came in, for the span.
    pub fn requested(&mut self, parts: &http::request::Parts) {
        self.http_method = conventions::static_method(&parts.method);
        self.scheme = conventions::scheme(parts);
        if self.span.is_recording() {
            self.request = Some(Box::new(conventions::Request::of(parts)));
        }
    }

    pub fn trace_id(&self) -> &str {
        self.span.trace_id()
    }

    /// The server span, parent of the backend call's client span.
    pub fn span(&self) -> &CallSpan {
        &self.span
    }

    /// Whether the record will be written: the arguments' digest is only needed then.
    pub fn audited(&self) -> bool {
        self.privacy.is_some()
    }

    /// The session label the request named.
    pub fn in_session(&mut self, session: Option<&str>) {
        self.session = session.map(str::to_string);
    }

    /// The policy version that decides the call (`None` before the first snapshot).
    pub fn under_policy(&mut self, version: Option<u64>) {
        self.policy_version = version;
    }

    /// No agent was identified (refused before, or answered without one).
    pub fn is_anonymous(&self) -> bool {
        self.agent.is_none()
    }

    /// Counted in a `suppressed` record instead of one of its own (`proxy::anonymous`).
    pub fn suppress(&mut self) {
        self.suppressed = true;
    }

    /// The caller is known, and who vouched for it.
    pub fn identified(&mut self, agent: &crate::vocab::Agent) {
        self.agent = Some(agent.id.to_string());
        self.issuer = Some(agent.issuer.clone());
        self.span.event(attributes::IDENTIFIED, vec![]);
    }

    /// An MCP message: its JSON-RPC method, id and (beyond tools/call) what it names, for
    /// the span.
    pub fn mcp_message(
        &mut self,
        method: &str,
        id: Option<&serde_json::Value>,
        target: Option<&str>,
    ) {
        self.mcp_method = Some(method.to_string());
        self.target = target.map(str::to_string);
        self.call_id = id.map(|id| match id {
            serde_json::Value::String(s) => s.clone(),
            other => other.to_string(),
        });
    }

    /// The tool and arguments are known: the span is a tool call's, and the record keeps
    /// the arguments' digest.
    pub fn proposed(&mut self, contract: &Contract, args: &Args) {
        let tool = contract.tool.as_str();
        // The route labels the conventions' HTTP metric, so it is kept for every call.
        self.route = contract.http.as_ref().map(|(_, route)| route.clone());
        if self.span.is_recording() {
            self.tool_description = contract.description.clone();
        }
        self.tool = Some(tool.to_string());
        if let Some(privacy) = &self.privacy {
            self.args_digest = Some(privacy.args_digest(args.value()));
        }
        self.span.event(attributes::CLASSIFIED, vec![]);
    }

    /// The gate let the call run.
    pub fn governed(&mut self, verdict: &Verdict<'_>) {
        self.decision = verdict.decision;
        if let Some(reject) = &verdict.shadowed {
            self.code = Some(reject.code);
            self.rule = reject.rule.clone();
        } else {
            self.span.event(attributes::ALLOWED, vec![]);
        }
        self.state_failed_open |= verdict.state_failed_open;
        // §16 (proxy::seeds): what `requires` remembers if the call succeeds.
        self.remember = verdict.remember.clone().map(Box::new);
        self.task = verdict
            .scope
            .as_deref()
            .map(crate::limits::scope::task_label);
        if let Some(approval) = &verdict.approval {
            self.span.event(
                attributes::APPROVAL_USED,
                vec![KeyValue::new(attributes::APPROVAL_ID, approval.id.clone())],
            );
            self.approval = Some(ApprovalRef {
                id: approval.id.clone(),
                approver: approval.decided_by.clone(),
                reason: approval.reason.clone(),
            });
        }
    }

    /// What the audit record keeps of a capturing contract's call (arguments and the
    /// inputs its rules read), allowed or refused.
    pub fn captured(&mut self, captured: crate::proxy::govern::Captured) {
        if captured.args.is_some() {
            self.captured_args = captured.args;
        }
        self.inputs = captured.inputs;
    }

    /// A shadow policy's session limit would have refused the call; it runs anyway. The
    /// first would-be refusal is the one the record keeps.
    pub fn shadowed(&mut self, reject: &Reject) {
        self.decision = Decision::ShadowDeny;
        if self.code.is_none() {
            self.code = Some(reject.code);
        }
    }

    /// The shared state couldn't be asked, so the call's limits were not applied
    /// (`state.backend: redis`, which fails open for limits).
    pub fn state_failed_open(&mut self) {
        self.state_failed_open = true;
    }

    /// The MCP tool answered `isError: true`: the call ran, and failed as the tool saw it.
    pub fn tool_error(&mut self) {
        self.tool_error = true;
    }

    /// The MCP server answered the call with a JSON-RPC `error`: no successful call, so
    /// `requires` does not remember it.
    pub fn rpc_error(&mut self) {
        self.rpc_error = true;
    }

    /// A message that is not a tool call was let through (MCP handshake, listing, streams,
    /// a batch's own record).
    pub fn passed(&mut self) {
        self.decision = Decision::Allow;
        self.passed = true;
    }

    /// Whether `toolgate_calls_total` counts this request: a tool call (REST, or an MCP
    /// `tools/call`), or a request refused before it could say what it was (no
    /// credential, unreadable). MCP's other messages, its streams and a batch's own POST
    /// are counted by method in the conventions' histograms instead, so
    /// `tool="-"` only ever means a call that named no known tool.
    fn is_tool_call(&self) -> bool {
        !self.passed && self.mcp_method.as_deref().is_none_or(|m| m == "tools/call")
    }

    /// The backend answered with this HTTP status.
    pub fn answered(&mut self, status: u16) {
        self.upstream_status = Some(status);
    }

    /// The answer is a duplicate's copy of the first call's.
    pub fn replayed(&mut self, replayed: bool) {
        self.replayed = replayed;
    }

    /// The gate refused the call after having let it through the decision (a session
    /// limit): the decision becomes `deny`.
    pub fn denied(&mut self, reject: &Reject) {
        self.decision = Decision::Deny;
        self.refused(reject);
    }

    /// The call ends in this refusal. The decision stays as the gate made it: `deny`
    /// unless the call was let through (a backend failure after that keeps its `allow`).
    pub fn refused(&mut self, reject: &Reject) {
        self.code = Some(reject.code);
        self.rule = reject.rule.clone();
        let approval_event = match reject.code {
            Code::ApprovalRequired => Some(attributes::APPROVAL_REQUESTED),
            Code::ApprovalDenied => Some(attributes::APPROVAL_DENIED),
            _ => None,
        };
        let id = reject.details.iter().find_map(|d| d.approval_id.clone());
        if let (Some(event), Some(id)) = (approval_event, id) {
            self.span
                .event(event, vec![KeyValue::new(attributes::APPROVAL_ID, id)]);
        }
    }

    /// What is left of a call whose answer streams on after its record is written: the
    /// same facts, and the call's span itself, which ends when the stream does, so that
    /// it shows the call's final outcome (a refusal found in the stream included). This
    /// outcome keeps a detached span: its record no longer ends the span.
    pub fn follow_up(&mut self) -> Outcome {
        let trace_id = self.trace_id().to_string();
        let span = std::mem::replace(&mut self.span, CallSpan::detached(trace_id));
        let mut copy = Outcome::new(span, self.started, self.privacy.clone());
        copy.mcp_method = self.mcp_method.clone();
        copy.call_id = self.call_id.clone();
        copy.request = self.request.clone();
        copy.http_method = self.http_method;
        copy.scheme = self.scheme;
        copy.target = self.target.clone();
        copy.route = self.route.clone();
        copy.tool_description = self.tool_description.clone();
        // A streamed answer's head is a 200.
        copy.status = Some(http::StatusCode::OK.as_u16());
        copy.agent = self.agent.clone();
        copy.issuer = self.issuer.clone();
        copy.session = self.session.clone();
        copy.tool = self.tool.clone();
        copy.args_digest = self.args_digest.clone();
        copy.captured_args = self.captured_args.clone();
        copy.decision = self.decision;
        copy.passed = self.passed;
        copy.code = self.code;
        copy.rule = self.rule.clone();
        copy.policy_version = self.policy_version;
        copy.upstream_status = self.upstream_status;
        copy.state_failed_open = self.state_failed_open;
        copy.approval = self.approval.clone();
        copy.inputs = self.inputs.clone();
        // §16: whether a streamed call succeeded is known when its stream ends.
        copy.remember = self.remember.take();
        copy.task = self.task.clone();
        // One request, measured once, with its final outcome: by the follow-up.
        self.measured = false;
        copy
    }

    /// The tool, once known (for logs).
    pub fn tool(&self) -> Option<&str> {
        self.tool.as_deref()
    }

    /// Ends the span with the call's outcome and counts the request in the conventions'
    /// histograms (`metrics`), and nothing else: for a streamed call whose stream ended
    /// without a refusal, its record being written already.
    pub fn close(&self, metrics: &Metrics) {
        self.close_at(metrics, self.started.elapsed());
        // §16: nothing is remembered here. A streamed call is remembered when its
        // result is seen whole and successful (`take_remembered`); a stream that ended
        // without one (empty, cut, garbage, left to be resumed) proves no success.
    }

    /// What `requires` remembers of the call, taken now that its answer is known to have
    /// succeeded (a streamed call, before the answer reaches the agent: its next call,
    /// sent as soon as it reads the answer, must find it). `None` if it didn't succeed
    /// or there is nothing to remember; either way nothing is left for [`close`].
    ///
    /// [`close`]: Self::close
    pub fn take_remembered(&mut self) -> Option<crate::state::remember::Remember> {
        let remember = self.remember.take()?;
        self.succeeded().then_some(*remember)
    }

    /// The call was allowed and answered successfully: what `requires` counts as prior.
    fn succeeded(&self) -> bool {
        self.decision == Decision::Allow
            && self.code.is_none()
            && !self.tool_error
            && !self.rpc_error
            && self.upstream_status.is_none_or(|s| (200..300).contains(&s))
    }

    /// [`close`](Self::close), the call having taken `elapsed`.
    fn close_at(&self, metrics: &Metrics, elapsed: std::time::Duration) {
        if self.measured {
            self.record_served(metrics, elapsed);
        }
        self.close_span();
    }

    fn close_span(&self) {
        // An unsampled call's span is exported only if it failed (`sampleDenials`):
        // refused, failed by the backend, or failed as its tool saw it.
        let error_type = self.error_type();
        if self.suppressed || !self.span.exports(error_type.is_some()) {
            return;
        }
        self.end_span(error_type);
    }

    /// Refused, or allowed but failed by the backend. A shadow-deny that ran fine is
    /// neither: the call did what it was asked, and its would-be code refused nothing.
    fn refused_or_failed(&self) -> bool {
        let backend_failed = self.code.is_some_and(|c| {
            matches!(
                c,
                Code::BackendTimeout
                    | Code::BackendUnavailable
                    | Code::BackendError
                    | Code::BackendRejected
                    | Code::OutputContractViolation
            )
        });
        self.decision == Decision::Deny || backend_failed
    }

    /// The conventions' `error.type` of a failed call (its span, its metrics): the code,
    /// or `tool_error` when the MCP tool failed as it saw it; `None` when all went well.
    fn error_type(&self) -> Option<&'static str> {
        match self.code {
            Some(code) if self.refused_or_failed() => Some(code.as_str()),
            None if self.decision == Decision::Deny => Some("_OTHER"),
            _ if self.tool_error => Some("tool_error"),
            _ => None,
        }
    }

    /// The request in the conventions' duration histograms, measured as its span is
    /// named: an MCP message by its method, anything else as HTTP.
    fn record_served(&self, metrics: &Metrics, elapsed: std::time::Duration) {
        let tool = self.tool.as_deref();
        let served = match self.mcp_method.as_deref() {
            Some(method) => {
                let method = conventions::bounded(method);
                Served::Mcp {
                    method,
                    tool: tool.filter(|_| method == "tools/call"),
                }
            }
            None => Served::Http {
                method: self.http_method,
                scheme: self.scheme,
                route: self.route.as_deref(),
                status: self.status,
            },
        };
        let error_type = self.error_type().map(Cow::Borrowed);
        metrics.record_served(&served, error_type, elapsed, tool);
    }

    /// The span's name and attributes (docs/observability.md); never argument values.
    fn end_span(&self, error_type: Option<&str>) {
        let failed = error_type.is_some();
        let mut attributes = vec![KeyValue::new(attributes::DECISION, self.decision.as_str())];
        let optional = [
            (attributes::AGENT_ID, self.agent.clone()),
            (
                attributes::AGENT_ISSUER,
                self.issuer.as_deref().map(str::to_string),
            ),
            (attributes::CODE, self.code.map(|c| c.as_str().to_string())),
            (attributes::RULE, self.rule.clone()),
        ];
        for (key, value) in optional {
            if let Some(value) = value {
                attributes.push(KeyValue::new(key, value));
            }
        }
        if let Some(version) = self.policy_version {
            attributes.push(KeyValue::new(attributes::POLICY_VERSION, version as i64));
        }
        if let Some(status) = self.upstream_status {
            attributes.push(KeyValue::new(attributes::UPSTREAM_STATUS, status as i64));
        }
        if self.state_failed_open {
            attributes.push(KeyValue::new(attributes::STATE, FAILED_OPEN));
        }
        let refused = self
            .code
            .filter(|_| self.refused_or_failed())
            .map(Code::as_str);
        let Some(request) = &self.request else {
            self.span.end(None, attributes, failed, refused);
            return;
        };
        let is_call = self.mcp_method.as_deref() == Some("tools/call");
        let call = conventions::Ending {
            request,
            mcp_method: self.mcp_method.as_deref(),
            target: if is_call {
                self.tool.as_deref()
            } else {
                self.target.as_deref()
            },
            jsonrpc_id: self.call_id.as_deref(),
            session: self.mcp_method.as_ref().and(self.session.as_deref()),
            route: self.route.as_deref(),
            tool: self.tool.as_deref(),
            tool_description: self.tool_description.as_deref(),
            status: self.status,
            error_type,
        };
        call.attributes(&mut attributes);
        self.span
            .end(Some(call.name()), attributes, failed, refused);
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
        let mut outcome = self;
        outcome.status = Some(response.status().as_u16());
        outcome.record(metrics, audit).await;
        response
    }

    /// Counts the call and writes its audit record, for a call that has no response of
    /// its own (one tools/call of an MCP batch).
    pub async fn record(mut self, metrics: &Metrics, audit: &AuditLog) {
        let elapsed = self.started.elapsed();
        self.close_at(metrics, elapsed);
        // §16: remembered before the answer goes out, so the agent's next call sees it.
        if let Some(remember) = self.remember.take().filter(|_| self.succeeded()) {
            remember.commit().await;
        }
        if self.is_tool_call() {
            metrics.record_call(
                self.tool.as_deref().unwrap_or("-"),
                self.decision.as_str(),
                self.code.map(Code::as_str).unwrap_or(metrics::OK),
                elapsed,
            );
        }
        let Some(privacy) = self.privacy.as_ref().filter(|_| !self.suppressed) else {
            return;
        };
        let mut inputs = self.inputs;
        if let Some(inputs) = inputs.as_mut() {
            privacy.redact_inputs(inputs);
        }
        audit
            .record(Entry {
                ts: now(),
                trace_id: self.span.trace_id().to_string(),
                agent: self.agent,
                issuer: self.issuer.as_deref().map(str::to_string),
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
                state: self.state_failed_open.then_some(FAILED_OPEN),
                approval: self.approval,
                replayed: self.replayed,
                inputs,
                task: self.task,
            })
            .await;
    }
}
