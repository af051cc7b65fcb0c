//! JSON-RPC batches (protocol 2025-03-26): every element is governed and answered on its
//! own, as if it had come alone, and the answers go back as one JSON array (`202` when
//! only notifications and responses came).
//!
//! Elements are forwarded one by one, in order, each as a single message, so an upstream
//! that no longer accepts batches (they left the protocol in 2025-06-18) still serves
//! them. Each answer is collected whole (bounded); server notifications and requests on
//! an element's event stream are not relayed. Revisions from 2026-07-28 have no batches:
//! a batch that declares one is refused whole with `-32600`.

use serde_json::Value;

use super::forward::{self, PASS_TIMEOUT};
use super::jsonrpc::{Invalid, Kind, Message};
use super::reply::{json_response, Refusal, INVALID_REQUEST};
use super::{listing, route, tool, Exchange, Route};
use crate::proxy::body::{empty, Body};
use crate::proxy::outcome::Outcome;
use crate::vocab::{Code, Reject};
use http::{Response, StatusCode};

pub async fn answer(
    ex: &Exchange<'_>,
    items: Vec<Result<Message, Invalid>>,
    outcome: &mut Outcome,
) -> Response<Body> {
    if ex.modern {
        let reject = Reject::new(
            Code::MalformedRequest,
            "protocol 2026-07-28 has no batches: send one message per request",
        );
        return ex.refuse(
            outcome,
            Refusal::error(INVALID_REQUEST, reject),
            &Value::Null,
        );
    }
    let mut answers = Vec::new();
    for item in items {
        let answer = match item {
            Ok(message) => element(ex, message).await,
            Err(invalid) => Some(invalid_message(ex, &invalid.id, invalid.reason)),
        };
        answers.extend(answer);
    }
    // The batch's own record; every tools/call in it has its own.
    outcome.passed();
    if answers.is_empty() {
        let mut response = Response::new(empty());
        *response.status_mut() = StatusCode::ACCEPTED;
        return response;
    }
    json_response(StatusCode::OK, &Value::Array(answers))
}

/// One element's answer; `None` for notifications and responses.
async fn element(ex: &Exchange<'_>, message: Message) -> Option<Value> {
    let id = message.reply_id();
    let answer = match route(&message) {
        Route::Call => match ex.withheld_call(&message) {
            Some(reject) => withheld(ex, &message, reject).await,
            None => tool::element(ex, message).await,
        },
        Route::List => listing::element(ex, &message).await,
        Route::Pass if message.kind != Kind::Request => {
            forward::notify(ex, &message).await;
            return None;
        }
        Route::Pass if message.method.as_deref() == Some("initialize") => {
            invalid_message(ex, &id, "initialize must not be part of a batch".into())
        }
        Route::Pass => collected(ex, &message).await,
        Route::Guarded => match ex.method_permit(message.method.as_deref().unwrap_or_default()) {
            Ok(()) => collected(ex, &message).await,
            Err(refusal) => refusal.message(&id, ex.trace_id(), false),
        },
    };
    Some(answer)
}

/// A call of a tool the listing withholds (`mcp.onDrift: hide`): refused, with a
/// record of its own like every call of a batch.
async fn withheld(ex: &Exchange<'_>, message: &Message, reject: Reject) -> Value {
    let mut outcome = ex.element_outcome();
    outcome.mcp_message("tools/call", message.id.as_ref(), None);
    outcome.refused(&reject);
    let answer = Refusal::of_call(reject).message(&message.reply_id(), outcome.trace_id(), false);
    outcome.record(&ex.gate.metrics, &ex.gate.audit).await;
    answer
}

async fn collected(ex: &Exchange<'_>, message: &Message) -> Value {
    match forward::collect(ex, message, PASS_TIMEOUT).await {
        Ok(answer) => answer,
        Err(refusal) => refusal.message(&message.reply_id(), ex.trace_id(), false),
    }
}

fn invalid_message(ex: &Exchange<'_>, id: &Value, reason: String) -> Value {
    Refusal::error(INVALID_REQUEST, Reject::new(Code::MalformedRequest, reason)).message(
        id,
        ex.trace_id(),
        false,
    )
}
