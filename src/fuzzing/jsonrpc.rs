//! The `jsonrpc` target: an MCP POST body → one message or a batch. What parses keeps
//! its envelope through the bytes it is forwarded as; ids stay echoable.

use serde_json::{json, Value};

use crate::proxy::backend::collect;
use crate::proxy::mcp::jsonrpc::{self, Kind, Message, MAX_BATCH};

/// A POST body as the MCP endpoint receives it.
pub fn jsonrpc(data: &[u8]) {
    let as_json = serde_json::from_slice::<Value>(data);
    match jsonrpc::parse(data) {
        // Strict parsing may refuse JSON serde_json takes (a key given twice), never
        // the reverse.
        Err(jsonrpc::Unreadable::NotJson(_)) => {}
        Err(jsonrpc::Unreadable::Invalid(invalid)) => {
            assert!(as_json.is_ok());
            check_invalid_id(&invalid.id);
        }
        Ok(jsonrpc::Body::Single(message)) => {
            check_message(&message);
            answer_each(as_json.unwrap_or_default());
        }
        Ok(jsonrpc::Body::Batch(items)) => {
            assert!(!items.is_empty() && items.len() <= MAX_BATCH);
            for item in &items {
                match item {
                    Ok(message) => check_message(message),
                    Err(invalid) => check_invalid_id(&invalid.id),
                }
            }
            answer_each(as_json.unwrap_or_default());
        }
    }
}

fn check_invalid_id(id: &Value) {
    assert!(id.is_null() || usable_id(id), "{id}");
}

/// A parsed message's envelope holds, and it survives the bytes it is forwarded as.
fn check_message(message: &Message) {
    assert_eq!(message.object.get("jsonrpc"), Some(&json!("2.0")));
    let id_ok = message.id.as_ref().is_none_or(usable_id);
    assert!(id_ok, "{:?}", message.id);
    match message.kind {
        Kind::Request => assert!(message.id.is_some() && message.method.is_some()),
        Kind::Notification => assert!(message.id.is_none() && message.method.is_some()),
        Kind::Response => assert!(message.id.is_some() && message.method.is_none()),
    }
    let again: Value = match serde_json::from_slice(&message.to_bytes()) {
        Ok(value) => value,
        Err(e) => panic!("a parsed message does not serialize back: {e}"),
    };
    assert_eq!(jsonrpc::message(again).as_ref(), Ok(message));
}

/// Whatever answer is picked out of a body is a response carrying the asked-for id.
fn answer_each(value: Value) {
    let id = json!(1);
    if let Some(found) = collect::answer_in(value, &id) {
        assert!(collect::is_response(&found), "{found}");
        assert_eq!(found.get("id"), Some(&id));
    }
}

/// An id toolgate can echo back as sent: a string or a 64-bit integer.
fn usable_id(id: &Value) -> bool {
    id.is_string() || id.is_i64() || id.is_u64()
}
