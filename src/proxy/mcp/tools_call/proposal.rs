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
use crate::vocab::json_strict::misspells;
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
    if let Some(key) = params.and_then(misspelled) {
        return Err(Refusal::of_call(Reject::new(
            Code::MalformedRequest,
            format!(
                "params.{key} is spelled differently from the member it stands for, which \
                 some servers read as that member: spell it exactly"
            ),
        )));
    }
    if params
        .and_then(|p| p.get("_meta"))
        .is_some_and(|m| !m.is_object())
    {
        return Err(Refusal::of_call(Reject::new(
            Code::MalformedRequest,
            "params._meta must be an object",
        )));
    }
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

/// The members of a tools/call's params toolgate knows.
const KNOWN: [&str; 6] = [
    "name",
    "arguments",
    "_meta",
    "task",
    "inputResponses",
    "requestState",
];

/// A member of `params` that stands for a known one in another spelling (`Name`,
/// `ARGUMENTS`, `argumentſ`): Go's `encoding/json` matches member names ignoring case,
/// so a server built on it would run the tool or arguments it names, not the ones
/// decided. Too long a key is not named back.
fn misspelled(params: &Map<String, Value>) -> Option<String> {
    params
        .keys()
        .find(|key| misspells(key, &KNOWN))
        .map(|key| key.chars().take(32).collect())
}

/// Everything of a tools/call besides its tool and arguments that can change what the
/// server does, part of the call's identity: the round fields of a multi-round call
/// (2026-07-28: the answers to the server's `inputRequests` and its opaque
/// `requestState`), a `task` to run it as, any other member of `params`, and `_meta`
/// but for what only says how to report ([`PER_REQUEST`]), which a retry of the same
/// call changes. Always present for MCP, empty or not, so an MCP call is never the same
/// call as a REST call of the tool (their answers differ in kind, and so do their
/// requests).
fn round_of(message: &Message) -> Option<Value> {
    let mut round = Map::new();
    for (key, value) in message.params().into_iter().flatten() {
        match key.as_str() {
            "name" | "arguments" => {}
            "_meta" => {
                let meta: Map<String, Value> = (value.as_object().into_iter().flatten())
                    .filter(|(k, _)| !PER_REQUEST.contains(&k.as_str()))
                    .map(|(k, v)| (k.clone(), v.clone()))
                    .collect();
                if !meta.is_empty() {
                    round.insert(key.clone(), Value::Object(meta));
                }
            }
            _ if value.is_null() => {}
            _ => {
                round.insert(key.clone(), value.clone());
            }
        }
    }
    Some(Value::Object(round))
}

/// `_meta` members a client sets anew on every request, retries included: a progress
/// token and trace context. They say how to report on the call, not what to run.
const PER_REQUEST: [&str; 4] = ["progressToken", "traceparent", "tracestate", "baggage"];

#[cfg(test)]
mod tests {
    use super::*;
    use crate::limits::Call;
    use crate::proxy::mcp::jsonrpc::message;
    use serde_json::json;

    fn call(params: Value) -> Message {
        message(json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": params}))
            .unwrap()
    }

    /// What besides its arguments makes a tools/call the call it is: every member of
    /// params but `name`, `arguments` and `_meta`; and never a REST call's identity.
    #[test]
    fn every_params_member_but_meta_is_part_of_the_call() {
        let args = Args::from(json!({"order_id": "A-1", "amount": 5}));
        let identity = |round: Option<Value>| {
            Call::new("ops-bot", None, "refund", &args, None)
                .in_round(round.as_ref())
                .fingerprint()
        };
        let plain = round_of(&call(json!({"name": "refund", "arguments": {}})));
        let traced = round_of(&call(
            json!({"name": "refund", "arguments": {}, "_meta": {"progressToken": 7, "traceparent": "00-x"}}),
        ));
        assert_eq!(identity(plain.clone()), identity(traced));
        assert_ne!(
            identity(plain.clone()),
            identity(None),
            "an MCP call is not a REST call"
        );
        for extra in [
            json!({"note": "refund to another IBAN"}),
            json!({"task": {"ttl": 60000}}),
            json!({"requestState": "round-1"}),
            json!({"_meta": {"io.example/override": {"amount": 5000}}}),
        ] {
            let mut params = json!({"name": "refund", "arguments": {}});
            params
                .as_object_mut()
                .unwrap()
                .extend(extra.as_object().unwrap().clone());
            let round = round_of(&call(params));
            assert_ne!(identity(round), identity(plain.clone()), "{extra}");
        }
    }

    #[test]
    fn a_known_member_in_another_spelling_is_found() {
        for key in [
            "Name",
            "ARGUMENTS",
            "argument\u{17f}",
            "_META",
            "Task",
            "INPUTRESPONSES",
            "requeststate",
        ] {
            let params: Map<String, Value> = [(key.to_string(), json!(1))].into_iter().collect();
            assert!(misspelled(&params).is_some(), "{key}");
        }
        let fine: Map<String, Value> = [("note".to_string(), json!(1))].into_iter().collect();
        assert!(misspelled(&fine).is_none());
    }
}
