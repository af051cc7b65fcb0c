//! tools/list on the wire: forwarded, and its result filtered ([`filter::filter`]) before
//! the agent sees it, whether it comes back as JSON or inside an SSE stream.
//!
//! The listing is never passed on unchecked: an answer toolgate can't read (not JSON,
//! too large, late) becomes a JSON-RPC error instead of the backend's list.

pub mod filter;

use bytes::Bytes;
use http::{header, HeaderValue, Method, Response, StatusCode};
use serde_json::Value;
use std::sync::Arc;

use super::answer::{self, rewrite_sse, shape_of, Rewrite, Shape};
use super::forward::{self, clean, stream_through, Outbound, PASS_TIMEOUT};
use super::jsonrpc::Message;

use super::reply::{Refusal, INTERNAL_ERROR};
use super::Inbound;
use crate::policy::Snapshot;
use crate::proxy::backend::{Asked, Failure};
use crate::proxy::body::{full, Body};
use crate::proxy::outcome::Outcome;
use crate::vocab::{Code, Reject};

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
            return ex.refuse(outcome, Refusal::error(INTERNAL_ERROR, reject), &id);
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
    let mut rewrite = ListRewrite::new(ex, snapshot, id.clone());
    match shape_of(&response) {
        Shape::EventStream => {
            let (mut parts, incoming) = response.into_parts();
            clean(&mut parts.headers);
            parts.headers.remove(header::CONTENT_LENGTH);
            let body = rewrite_sse(incoming, id, rewrite, max, Some(deadline));
            Response::from_parts(parts, body)
        }
        Shape::Json => {
            let (mut parts, incoming) = response.into_parts();
            let message = match answer::read_json(incoming, &id, max, deadline).await {
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
            ex.refuse(outcome, Refusal::error(INTERNAL_ERROR, reject), &id)
        }
    }
}

/// One tools/list of a batch: its filtered answer.
pub async fn element(ex: &Inbound<'_>, message: &Message) -> Value {
    let id = message.reply_id();
    let Some(snapshot) = ex.snapshot.clone() else {
        return not_ready().message(&id, ex.trace_id(), false);
    };
    let mut rewrite = ListRewrite::new(ex, snapshot, id.clone());
    match forward::collect(ex, message, PASS_TIMEOUT).await {
        Ok(answer) => rewrite.answer(answer),
        Err(refusal) => refusal.message(&id, ex.trace_id(), false),
    }
}

fn not_ready() -> Refusal {
    Refusal::error(
        INTERNAL_ERROR,
        Reject::new(Code::NotReady, "no policy is loaded yet"),
    )
}

struct ListRewrite {
    snapshot: Arc<Snapshot>,
    agent: Arc<str>,
    id: Value,
    trace_id: String,
    modern: bool,
}

impl ListRewrite {
    fn new(ex: &Inbound<'_>, snapshot: Arc<Snapshot>, id: Value) -> ListRewrite {
        ListRewrite {
            snapshot,
            agent: ex.agent.id.clone(),
            id,
            trace_id: ex.trace_id().to_string(),
            modern: ex.modern,
        }
    }
}

impl Rewrite for ListRewrite {
    fn answer(&mut self, mut message: Value) -> Value {
        if let Some(result) = message.get_mut("result").and_then(Value::as_object_mut) {
            filter::filter(
                result,
                &self.snapshot,
                self.snapshot.policy_for(&self.agent),
            );
        }
        message
    }

    fn failed(&mut self, failure: Failure) -> Value {
        let reject = failure.reject(Asked::message(PASS_TIMEOUT));
        Refusal::error(INTERNAL_ERROR, reject).message(&self.id, &self.trace_id, self.modern)
    }
}
