//! A tools/call as a proposal for the one call sequence (`proxy::call::run`), the same
//! a REST call makes: the tool its `params.name` names, its `params.arguments`, the
//! round fields of a multi-round call; and the message the backend then runs.

use bytes::Bytes;
use serde_json::{Map, Value};

use crate::policy::schema::empty_args;
use crate::policy::{Snapshot, ToolId};
use crate::proxy::govern::{Proposal, Verdict};
use crate::proxy::mcp::jsonrpc::Message;
use crate::proxy::mcp::reply::Refusal;
use crate::proxy::mcp::Inbound;
use crate::vocab::args::Args;
use crate::vocab::{Code, Reject};

/// The proposal a tools/call makes, and its tool: the message's `params.name` and
/// `params.arguments` (taken out of the message, which is forwarded as its original
/// bytes or rebuilt with the checked arguments, [`with_defaults`]) and its round.
pub fn proposal<'s>(
    ex: &'s Inbound<'_>,
    snapshot: &Snapshot,
    message: &mut Message,
) -> Result<(ToolId, Proposal<'s>), Refusal> {
    let params = message.params();
    let Some(name) = params.and_then(|p| p.get("name")).and_then(Value::as_str) else {
        return Err(Refusal::of_call(Reject::new(
            Code::MalformedRequest,
            "tools/call needs params.name, the name of the tool to call",
        )));
    };
    let Some(tool) = snapshot.tool(name) else {
        return Err(Refusal::of_call(Reject::new(
            Code::UnknownTool,
            format!("no tool named {name:?} is registered"),
        )));
    };
    let args = message
        .params_mut()
        .and_then(|p| p.remove("arguments"))
        .filter(|a| !a.is_null())
        .map_or_else(|| Args::from(empty_args()), Args::from);
    let proposal = Proposal {
        tool,
        args,
        round: round_of(message),
        idempotency_key: ex.idempotency_key,
        agent: ex.agent,
        method: ex.parts.method.as_str(),
        path: ex.parts.uri.path(),
        headers: &ex.parts.headers,
        session: ex.session,
        trace_id: &ex.trace_id,
    };
    Ok((tool, proposal))
}

/// The message the backend runs: what was checked, so filled defaults travel with the
/// call; else the message as it arrived (`original`).
pub fn with_defaults(message: &Message, verdict: &Verdict<'_>, original: Bytes) -> Bytes {
    if !verdict.args.filled {
        return original;
    }
    let mut object = message.object.clone();
    if let Some(Value::Object(params)) = object.get_mut("params") {
        params.insert("arguments".into(), verdict.args.value().clone());
    }
    Bytes::from(serde_json::to_vec(&object).unwrap_or_default())
}

/// What a retry of a multi-round call (2026-07-28) carries besides the arguments: the
/// answers to the server's `inputRequests` and its opaque `requestState`. Forwarded as
/// they came; they make the retry a new round rather than a duplicate.
fn round_of(message: &Message) -> Option<Value> {
    let params = message.params()?;
    let mut round = Map::new();
    for field in ["inputResponses", "requestState"] {
        if let Some(value) = params.get(field).filter(|v| !v.is_null()) {
            round.insert(field.into(), value.clone());
        }
    }
    (!round.is_empty()).then_some(Value::Object(round))
}
