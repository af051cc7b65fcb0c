//! tools/list on the wire: forwarded, and its result filtered ([`filter::filter`]) before
//! the agent sees it, whether it comes back as JSON or inside an SSE stream.
//!
//! The listing is never passed on unchecked: an answer toolgate can't read (not JSON,
//! too large, late) becomes a JSON-RPC error instead of the backend's list.
//!
//! What the answer showed of drift goes to the sidecar's record ([`ToolDrift`]) and, as
//! a `tool_drift` event, to the listing's span. An SSE answer arrives after the request's
//! record is written, so the span is taken over by the rewrite and ends with the stream.

pub mod drift;
pub mod filter;
pub mod tool_drift;

use bytes::Bytes;
use http::{header, HeaderValue, Method, Response, StatusCode};
use serde_json::Value;
use std::sync::Arc;

use super::answer::{rewrite_sse, Rewrite};
use super::forward::{self, clean, stream_through, Outbound, PASS_TIMEOUT};
use super::jsonrpc::Message;
use crate::proxy::backend::collect::{self, shape_of, Shape};

use super::reply::Refusal;
use super::Inbound;
use crate::policy::Snapshot;
use crate::proxy::backend::{Asked, Failure};
use crate::proxy::body::{full, Body};
use crate::proxy::outcome::Outcome;
use crate::telemetry::attributes;
use crate::telemetry::metrics::Metrics;
use crate::vocab::{Code, Reject};
use tool_drift::ToolDrift;

/// A single tools/list POST.
pub async fn single(
    ex: &Inbound<'_>,
    message: &Message,
    body: Bytes,
    outcome: &mut Outcome,
) -> Response<Body> {
    let id = message.reply_id();
    let Some(snapshot) = ex.snapshot.clone() else {
        return ex.refuse(outcome, not_ready(), &id);
    };
    let request = Outbound {
        method: Method::POST,
        tool: None,
        body,
        split: false,
        timeout: PASS_TIMEOUT,
    };
    let response = match forward::send(ex, request).await {
        Ok(response) => response,
        Err(failure) => {
            let reject = failure.reject(Asked::message(PASS_TIMEOUT));
            return ex.refuse(outcome, Refusal::failed(reject), &id);
        }
    };
    outcome.passed();
    outcome.answered(response.status().as_u16());
    if !response.status().is_success() || response.status() == StatusCode::ACCEPTED {
        // An HTTP error carries no listing; the client needs to see it as it is.
        return stream_through(response);
    }
    let deadline = tokio::time::Instant::now() + PASS_TIMEOUT;
    let max = ex.gate.limits.max_response_bytes;
    match shape_of(&response) {
        Shape::EventStream => {
            let rewrite = ListRewrite::new(ex, snapshot, id.clone(), Some(outcome));
            let (mut parts, incoming) = response.into_parts();
            clean(&mut parts.headers);
            parts.headers.remove(header::CONTENT_LENGTH);
            let body = rewrite_sse(incoming, id, rewrite, max, Some(deadline));
            Response::from_parts(parts, body)
        }
        Shape::Json => {
            let mut rewrite = ListRewrite::new(ex, snapshot, id.clone(), Some(outcome));
            let (mut parts, incoming) = response.into_parts();
            let message = match collect::read_json(incoming, &id, max, deadline).await {
                Ok(message) => rewrite.answer(message),
                Err(failure) => rewrite.failed(failure),
            };
            let bytes = serde_json::to_vec(&message).unwrap_or_default();
            clean(&mut parts.headers);
            parts
                .headers
                .insert(header::CONTENT_LENGTH, HeaderValue::from(bytes.len()));
            Response::from_parts(parts, full(bytes))
        }
        Shape::Other => {
            let reject = Failure::NotAnAnswer.reject(Asked::message(PASS_TIMEOUT));
            ex.refuse(outcome, Refusal::failed(reject), &id)
        }
    }
}

/// One tools/list of a batch: its filtered answer.
pub async fn element(ex: &Inbound<'_>, message: &Message) -> Value {
    let id = message.reply_id();
    let Some(snapshot) = ex.snapshot.clone() else {
        return ex.refused(&not_ready(), &id);
    };
    let mut rewrite = ListRewrite::new(ex, snapshot, id.clone(), None);
    match forward::collect(ex, message, PASS_TIMEOUT).await {
        Ok(answer) => rewrite.answer(answer),
        Err(refusal) => ex.refused(&refusal, &id),
    }
}

fn not_ready() -> Refusal {
    Refusal::failed(Reject::new(Code::NotReady, "no policy is loaded yet"))
}

struct ListRewrite {
    snapshot: Arc<Snapshot>,
    agent: Arc<str>,
    id: Value,
    trace_id: String,
    modern: bool,
    drift: Arc<ToolDrift>,
    /// The listing's span, when this answer is a request's own (a batch's element has
    /// none of its own).
    span: Option<ListSpan>,
}

impl ListRewrite {
    fn new(
        ex: &Inbound<'_>,
        snapshot: Arc<Snapshot>,
        id: Value,
        outcome: Option<&mut Outcome>,
    ) -> ListRewrite {
        ListRewrite {
            snapshot,
            agent: ex.agent.id.clone(),
            id,
            trace_id: ex.trace_id().to_string(),
            modern: ex.modern,
            drift: ex.gate.tool_drift.clone(),
            span: outcome.map(|outcome| ListSpan {
                outcome: outcome.follow_up(),
                metrics: ex.gate.metrics.clone(),
            }),
        }
    }
}

/// The listing's span, taken over from its request: it ends when the rewrite is dropped
/// (the answer delivered, or the stream gone).
struct ListSpan {
    outcome: Outcome,
    metrics: Arc<Metrics>,
}

impl Drop for ListSpan {
    fn drop(&mut self) {
        self.outcome.close(&self.metrics);
    }
}

impl Rewrite for ListRewrite {
    fn answer(&mut self, mut message: Value) -> Value {
        let Some(result) = message.get_mut("result").and_then(Value::as_object_mut) else {
            return message;
        };
        let seen = filter::filter(
            result,
            &self.snapshot,
            self.snapshot.policy_for(&self.agent),
            self.drift.presentation,
        );
        self.drift.observe(&self.snapshot, &seen);
        let drifted: Vec<opentelemetry::StringValue> = seen
            .into_iter()
            .filter(|s| s.drift.is_some())
            .map(|s| s.tool.into())
            .collect();
        if let (Some(span), false) = (&self.span, drifted.is_empty()) {
            let tools = opentelemetry::Value::Array(opentelemetry::Array::String(drifted));
            span.outcome.span().event(
                attributes::TOOL_DRIFT,
                vec![opentelemetry::KeyValue::new(
                    attributes::DRIFTED_TOOLS,
                    tools,
                )],
            );
        }
        message
    }

    fn failed(&mut self, failure: Failure) -> Value {
        let reject = failure.reject(Asked::message(PASS_TIMEOUT));
        Refusal::failed(reject).message(&self.id, &self.trace_id, self.modern)
    }
}
