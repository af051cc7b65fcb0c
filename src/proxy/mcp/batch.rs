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
use super::reply::{json_response, Refusal};
use super::{route, tools_call, tools_list, Inbound, Route};
use crate::proxy::body::{empty, Body};
use crate::proxy::outcome::Outcome;
use crate::vocab::{Code, Reject};
use http::{Response, StatusCode};

pub async fn answer(
    ex: &Inbound<'_>,
    items: Vec<Result<Message, Invalid>>,
    outcome: &mut Outcome,
) -> Response<Body> {
    if ex.modern {
        let reject = Reject::new(
            Code::MalformedRequest,
            "protocol 2026-07-28 has no batches: send one message per request",
        );
        return ex.refuse(outcome, Refusal::malformed(reject), &Value::Null);
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
async fn element(ex: &Inbound<'_>, message: Message) -> Option<Value> {
    let id = message.reply_id();
    let answer = match route(&message) {
        Route::Call => tools_call::element(ex, message).await,
        Route::List => tools_list::element(ex, &message).await,
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
            Err(refusal) => ex.refused(&refusal, &id),
        },
    };
    Some(answer)
}

async fn collected(ex: &Inbound<'_>, message: &Message) -> Value {
    match forward::collect(ex, message, PASS_TIMEOUT).await {
        Ok(answer) => answer,
        Err(refusal) => ex.refused(&refusal, &message.reply_id()),
    }
}

fn invalid_message(ex: &Inbound<'_>, id: &Value, reason: String) -> Value {
    ex.refused(
        &Refusal::malformed(Reject::new(Code::MalformedRequest, reason)),
        id,
    )
}
