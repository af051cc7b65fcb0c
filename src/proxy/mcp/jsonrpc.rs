//! JSON-RPC 2.0 envelopes as MCP uses them: parse a POST body into one message or a
//! batch, and classify each message (request, notification, response).
//!
//! Parsing is strict about the envelope (`jsonrpc: "2.0"`, an id that is a string or a
//! number, a string method) and lenient about everything else: params are read only by
//! the stage that needs them. An invalid element of a batch does not spoil the others;
//! it is answered on its own with `-32600`.
//!
//! A message without an id is a notification only if its method is one
//! (`notifications/…`). Any other method without an id — `tools/call`, `resources/read` —
//! asks the server to act while escaping every answer-bearing check, so it is refused,
//! and a batch holding one is refused whole: nothing of it is forwarded (DESIGN §14).

use serde_json::{Map, Value};

use crate::vocab::json_strict::misspells;

/// Longest batch toolgate answers; each element is governed and forwarded on its own.
pub const MAX_BATCH: usize = 100;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Request,
    Notification,
    /// A result or error the client sends back to a server-initiated request.
    Response,
}

/// One well-formed JSON-RPC message.
#[derive(Debug, Clone, PartialEq)]
pub struct Message {
    pub kind: Kind,
    /// The request or response id; `None` for notifications.
    pub id: Option<Value>,
    /// The method of a request or notification.
    pub method: Option<String>,
    pub object: Map<String, Value>,
}

impl Message {
    pub fn params(&self) -> Option<&Map<String, Value>> {
        self.object.get("params").and_then(Value::as_object)
    }

    pub fn params_mut(&mut self) -> Option<&mut Map<String, Value>> {
        self.object.get_mut("params").and_then(Value::as_object_mut)
    }

    /// The id to echo in an answer: JSON-RPC uses `null` when there is none.
    pub fn reply_id(&self) -> Value {
        self.id.clone().unwrap_or(Value::Null)
    }

    pub fn to_bytes(&self) -> Vec<u8> {
        serde_json::to_vec(&self.object).unwrap_or_default()
    }
}

/// An element that is JSON but not a JSON-RPC message: answered with `-32600`.
#[derive(Debug, Clone, PartialEq)]
pub struct Invalid {
    /// Its id when one could be read, else `null`.
    pub id: Value,
    pub reason: String,
    /// A method that is not a notification sent without an id.
    pub disguised: bool,
}

#[derive(Debug, Clone, PartialEq)]
pub enum Body {
    Single(Message),
    Batch(Vec<Result<Message, Invalid>>),
}

/// Why a whole body was refused.
#[derive(Debug, Clone, PartialEq)]
pub enum Unreadable {
    /// Not JSON at all (`-32700`).
    NotJson(String),
    /// JSON, but not a message or a usable batch (`-32600`).
    Invalid(Invalid),
}

pub fn parse(bytes: &[u8]) -> Result<Body, Unreadable> {
    // Strict: a key given twice (`method`, `name`, an argument) could be read one way
    // here and another way upstream.
    let value = crate::vocab::json_strict::parse(bytes)
        .map_err(|e| Unreadable::NotJson(format!("the body is not valid JSON: {e}")))?;
    match value {
        Value::Array(items) if items.is_empty() => Err(Unreadable::Invalid(Invalid {
            id: Value::Null,
            reason: "an empty batch is not a request".into(),
            disguised: false,
        })),
        Value::Array(items) if items.len() > MAX_BATCH => Err(Unreadable::Invalid(Invalid {
            id: Value::Null,
            reason: format!("a batch holds at most {MAX_BATCH} messages"),
            disguised: false,
        })),
        Value::Array(items) => {
            let items: Vec<_> = items.into_iter().map(message).collect();
            // One element dressed as a notification spoils the batch: it would otherwise
            // be the one part answered on its own while the rest runs.
            match items
                .iter()
                .find_map(|i| i.as_ref().err().filter(|e| e.disguised))
            {
                Some(disguised) => Err(Unreadable::Invalid(Invalid {
                    id: Value::Null,
                    reason: format!("the batch was refused whole: {}", disguised.reason),
                    disguised: true,
                })),
                None => Ok(Body::Batch(items)),
            }
        }
        other => message(other)
            .map(Body::Single)
            .map_err(Unreadable::Invalid),
    }
}

/// Reads one message out of a JSON value.
pub fn message(value: Value) -> Result<Message, Invalid> {
    let Value::Object(object) = value else {
        return Err(Invalid {
            id: Value::Null,
            reason: "a JSON-RPC message must be an object".into(),
            disguised: false,
        });
    };
    let id = object.get("id").cloned();
    let invalid = |reason: &str| Invalid {
        id: id.clone().filter(usable_id).unwrap_or(Value::Null),
        reason: reason.to_string(),
        disguised: false,
    };
    // A member spelled like one of the message's in another case (`Method`, `ID`,
    // `paramſ`) is one some servers read as that member (Go's encoding/json matches
    // names ignoring case): the message would be judged as one thing and run as
    // another. Refused whole, in a batch too. Other extra members ride along.
    if object.keys().any(|key| misspells(key, &MEMBERS)) {
        return Err(Invalid {
            reason: "a member of the message is spelled like jsonrpc, id, method, params, \
                     result or error in another case: spell it exactly"
                .into(),
            disguised: true,
            ..invalid("")
        });
    }
    if object.get("jsonrpc").and_then(Value::as_str) != Some("2.0") {
        return Err(invalid("jsonrpc must be \"2.0\""));
    }
    if let Some(id) = &id {
        if !usable_id(id) {
            return Err(invalid(
                "id must be a string or an integer of at most 64 bits",
            ));
        }
    }
    if let Some(params) = object.get("params") {
        if !(params.is_object() || params.is_array()) {
            return Err(invalid("params must be an object or an array"));
        }
    }
    // A message that is both a request and a response could be read as either: as a
    // governed call here, and as the answer to one of its own requests by a server.
    if object.contains_key("method")
        && (object.contains_key("result") || object.contains_key("error"))
    {
        return Err(invalid("a message is a request or a response, not both: give it a method or a result (or error), not both"));
    }
    let kind = match (object.get("method"), &id) {
        (Some(Value::String(_)), Some(_)) => Kind::Request,
        (Some(Value::String(method)), None) if is_notification(method) => Kind::Notification,
        (Some(Value::String(method)), None) => {
            return Err(Invalid {
                id: Value::Null,
                reason: format!(
                    "{method:?} without an id is neither a request nor a notification (only \
                     notifications/* methods go without an id): send it with an id"
                ),
                disguised: true,
            })
        }
        (Some(_), _) => return Err(invalid("method must be a string")),
        (None, Some(_)) if object.contains_key("result") != object.contains_key("error") => {
            Kind::Response
        }
        (None, _) => {
            return Err(invalid(
                "a message needs a method, or one of result and error",
            ))
        }
    };
    let method = object
        .get("method")
        .and_then(Value::as_str)
        .map(str::to_string);
    Ok(Message {
        kind,
        id,
        method,
        object,
    })
}

/// The members of a JSON-RPC 2.0 message.
const MEMBERS: [&str; 6] = ["jsonrpc", "id", "method", "params", "result", "error"];

/// Whether a method is a notification's: the only methods that may go without an id.
pub fn is_notification(method: &str) -> bool {
    method.starts_with("notifications/")
}

/// MCP ids are strings or integers. A fraction, or an integer past 64 bits (which
/// serde_json turns into a float), could not be echoed back as the client sent it.
fn usable_id(id: &Value) -> bool {
    id.is_string() || id.is_i64() || id.is_u64()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn mk(value: Value) -> Result<Message, Invalid> {
        message(value)
    }

    #[test]
    fn classifies_requests_notifications_and_responses() {
        let m = mk(json!({"jsonrpc": "2.0", "id": 7, "method": "tools/list"})).unwrap();
        assert_eq!(
            (m.kind, m.id, m.method.as_deref()),
            (Kind::Request, Some(json!(7)), Some("tools/list"))
        );
        let m = mk(json!({"jsonrpc": "2.0", "method": "notifications/initialized"})).unwrap();
        assert_eq!(m.kind, Kind::Notification);
        let m = mk(json!({"jsonrpc": "2.0", "id": "s1", "result": {}})).unwrap();
        assert_eq!(m.kind, Kind::Response);
    }

    #[test]
    fn refuses_bad_envelopes_keeping_the_id() {
        let e = mk(json!({"jsonrpc": "1.0", "id": 3, "method": "ping"})).unwrap_err();
        assert_eq!(e.id, json!(3));
        assert!(mk(json!({"jsonrpc": "2.0", "id": {"a": 1}, "method": "ping"})).is_err());
        assert!(mk(json!({"jsonrpc": "2.0", "id": 1, "method": 5})).is_err());
        assert!(mk(json!({"jsonrpc": "2.0", "id": 1, "result": 1, "error": {}})).is_err());
        assert!(
            mk(json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "result": {}})).is_err()
        );
        assert!(mk(json!({"jsonrpc": "2.0", "id": 1, "method": "ping", "error": {}})).is_err());
        assert!(mk(json!({"jsonrpc": "2.0", "id": 1, "method": "x", "params": 3})).is_err());
        assert_eq!(mk(json!([1])).unwrap_err().id, Value::Null);
        for id in [
            json!(1.5),
            json!(18446744073709551616.0),
            json!(null),
            json!(true),
        ] {
            let e = mk(json!({"jsonrpc": "2.0", "id": id, "method": "ping"})).unwrap_err();
            assert_eq!(e.id, Value::Null, "{id}");
        }
        assert!(mk(json!({"jsonrpc": "2.0", "id": u64::MAX, "method": "ping"})).is_ok());
        assert!(mk(json!({"jsonrpc": "2.0", "id": i64::MIN, "method": "ping"})).is_ok());
    }

    #[test]
    fn parses_bodies_and_batches() {
        assert!(matches!(parse(b"{nope"), Err(Unreadable::NotJson(_))));
        assert!(matches!(parse(b"[]"), Err(Unreadable::Invalid(_))));
        assert!(matches!(parse(b"3"), Err(Unreadable::Invalid(_))));
        let Ok(Body::Batch(items)) = parse(
            br#"[{"jsonrpc":"2.0","id":1,"method":"ping"}, 5, {"jsonrpc":"2.0","method":"notifications/n"}]"#,
        ) else {
            panic!("a batch")
        };
        assert!(items[0].is_ok() && items[1].is_err() && items[2].is_ok());
        // Only notifications/* go without an id; a call dressed as one spoils the batch.
        assert!(mk(json!({"jsonrpc": "2.0", "method": "notifications/initialized"})).is_ok());
        for method in [
            "tools/call",
            "resources/read",
            "n",
            "notifications",
            "Notifications/x",
        ] {
            let e = mk(json!({"jsonrpc": "2.0", "method": method})).unwrap_err();
            assert!(e.disguised, "{method}");
            let batch = format!(
                r#"[{{"jsonrpc":"2.0","id":1,"method":"ping"}},{{"jsonrpc":"2.0","method":"{method}"}}]"#
            );
            assert!(matches!(parse(batch.as_bytes()), Err(Unreadable::Invalid(i)) if i.disguised));
        }
        let big = format!("[{}]", vec!["1"; MAX_BATCH + 1].join(","));
        assert!(matches!(parse(big.as_bytes()), Err(Unreadable::Invalid(_))));
    }
}
