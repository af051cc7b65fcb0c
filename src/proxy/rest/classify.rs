//! classify: which tool a REST request calls, and its arguments.
//!
//! Arguments are path parameters + query parameters + the JSON body object, merged. Path
//! and query values are strings on the wire; one becomes the number or boolean the input
//! schema declares only when the string is that value's exact spelling (`"30"` → `30`,
//! but `"030"` stays a string and fails validation). A key given twice is an error.
//!
//! A body that alone carries the arguments of a contract whose schema accepts any object
//! is only checked here, not parsed, when nothing known yet will read them: no audit
//! digest or session fingerprint (the caller says), no duplicate suppression or capture
//! (the contract says). A rule reading `args` still gets them, parsed then
//! (`vocab::args`). Either way a body that names a key twice is refused
//! (`vocab::json_strict`).

use bytes::Bytes;
use http::Method;
use percent_encoding::percent_decode_str;
use serde_json::{Map, Value};

use crate::policy::schema::Schema;
use crate::policy::{Snapshot, ToolId};
use crate::vocab::args::{Args, BodyError};
use crate::vocab::json_strict;
use crate::vocab::{Code, Detail, Reject};

/// A classified REST call.
#[derive(Debug)]
pub struct Classified {
    pub tool: ToolId,
    pub args: Args,
    /// The body was a JSON object (defaults get written back into it when forwarded).
    pub json_body: bool,
    /// Arguments that came from the path or the query, not the body.
    pub url_keys: Vec<String>,
}

pub fn classify(
    snapshot: &Snapshot,
    method: &Method,
    path: &str,
    query: Option<&str>,
    body: &Bytes,
    reads_args: bool,
) -> Result<Classified, Reject> {
    let Some(route) = snapshot.routes.find(method, path) else {
        return Err(Reject::new(
            Code::UnknownTool,
            format!("no tool is bound to {method} {path}"),
        ));
    };
    let contract = snapshot.contract(route.tool);
    let mut args = Map::new();
    for (name, raw) in route.params {
        let text = decode(raw, false)?;
        insert(&mut args, name, typed(&contract.input, name, text))?;
    }
    for pair in query.unwrap_or("").split('&').filter(|p| !p.is_empty()) {
        let (name, raw) = pair.split_once('=').unwrap_or((pair, ""));
        let name = decode(name, true)?;
        let text = decode(raw, true)?;
        let value = typed(&contract.input, &name, text);
        insert(&mut args, &name, value)?;
    }
    let url_keys: Vec<String> = args.keys().cloned().collect();
    let json_body = !body.is_empty();
    let unread = !reads_args && contract.idempotent && !contract.capture_arguments;
    if json_body && args.is_empty() && unread && contract.input.accepts_any_object() {
        // The bytes go to the backend as they came: the check refuses a key named twice.
        let args = Args::from_object_body(body.clone()).map_err(|e| match e {
            BodyError::NotJson(e) => not_json(e),
            BodyError::NotAnObject => not_an_object(),
        })?;
        return Ok(Classified {
            tool: route.tool,
            args,
            json_body,
            url_keys,
        });
    }
    if json_body {
        let parsed = json_strict::parse(body).map_err(not_json)?;
        let Value::Object(fields) = parsed else {
            return Err(not_an_object());
        };
        if args.is_empty() {
            // Nothing came from the path or query: the body's object is the arguments.
            args = fields;
        } else {
            for (name, value) in fields {
                insert(&mut args, &name, value)?;
            }
        }
    }
    Ok(Classified {
        tool: route.tool,
        args: Args::from(Value::Object(args)),
        json_body,
        url_keys,
    })
}

fn not_json(e: serde_json::Error) -> Reject {
    Reject::new(
        Code::MalformedRequest,
        format!("the body is not valid JSON: {e}"),
    )
}

fn not_an_object() -> Reject {
    Reject::new(Code::MalformedRequest, "the body must be a JSON object")
}

fn decode(raw: &str, plus_is_space: bool) -> Result<String, Reject> {
    let spaced;
    let raw = if plus_is_space && raw.contains('+') {
        spaced = raw.replace('+', " ");
        spaced.as_str()
    } else {
        raw
    };
    percent_decode_str(raw)
        .decode_utf8()
        .map(|s| s.into_owned())
        .map_err(|_| {
            Reject::new(
                Code::MalformedRequest,
                "a path or query value is not valid UTF-8",
            )
        })
}

fn insert(args: &mut Map<String, Value>, name: &str, value: Value) -> Result<(), Reject> {
    if args.contains_key(name) {
        return Err(Reject::new(
            Code::InvalidArguments,
            format!("{name}: given more than once (path, query or body)"),
        )
        .with_details(vec![Detail {
            pointer: format!("/{}", crate::policy::schema::escape(name)),
            keyword: "duplicate".into(),
            ..Detail::default()
        }]));
    }
    args.insert(name.to_string(), value);
    Ok(())
}

/// The value of a path/query string for a property of the given schema types.
fn typed(schema: &Schema, name: &str, text: String) -> Value {
    for kind in schema.property_types(name) {
        let converted = match kind {
            "integer" => text
                .parse::<i64>()
                .ok()
                .filter(|n| n.to_string() == text)
                .map(Value::from),
            "number" => text
                .parse::<serde_json::Number>()
                .ok()
                .filter(|n| n.to_string() == text)
                .map(Value::Number),
            "boolean" => match text.as_str() {
                "true" => Some(Value::Bool(true)),
                "false" => Some(Value::Bool(false)),
                _ => None,
            },
            "null" if text == "null" => Some(Value::Null),
            _ => None,
        };
        if let Some(value) = converted {
            return value;
        }
    }
    Value::String(text)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// The contracts classification is fuzzed against (`crate::fuzzing::classify`).
    fn mk_snapshot() -> &'static Snapshot {
        crate::fuzzing::classify::classify_snapshot()
    }

    /// A GET classified with nothing known to read its arguments.
    fn get(
        s: &Snapshot,
        path: &str,
        query: Option<&str>,
        body: &str,
    ) -> Result<Classified, Reject> {
        let body = Bytes::copy_from_slice(body.as_bytes());
        classify(s, &Method::GET, path, query, &body, false)
    }

    #[test]
    fn merges_path_query_and_converts_exact_spellings() {
        let s = mk_snapshot();
        let call = get(
            s,
            "/logs/or%20ders",
            Some("window_minutes=30&ratio=0.5&verbose=true&x=a+b"),
            "",
        )
        .unwrap();
        assert_eq!(
            call.args.value(),
            &json!({"service": "or ders", "window_minutes": 30, "ratio": 0.5, "verbose": true, "x": "a b"})
        );
    }

    #[test]
    fn inexact_spellings_stay_strings() {
        let s = mk_snapshot();
        let call = get(s, "/logs/a", Some("window_minutes=030"), "").unwrap();
        assert_eq!(call.args.value()["window_minutes"], "030");
        let call = get(s, "/logs/a", Some("window_minutes=1e3"), "").unwrap();
        assert_eq!(call.args.value()["window_minutes"], "1e3");
    }

    #[test]
    fn a_key_given_twice_is_invalid() {
        let s = mk_snapshot();
        let e = get(s, "/logs/a", Some("service=b"), "").unwrap_err();
        assert_eq!(e.code, Code::InvalidArguments);
        let e = get(s, "/logs/a", Some("x=1&x=2"), "").unwrap_err();
        assert_eq!(e.code, Code::InvalidArguments);
        let e = get(s, "/logs/a", None, r#"{"service":"b"}"#).unwrap_err();
        assert_eq!(e.details[0].pointer, "/service");
    }

    #[test]
    fn an_open_contracts_body_is_checked_not_parsed() {
        let s = mk_snapshot();
        let body = Bytes::from(r#"{"q": "x", "n": [1, 2]}"#);
        let call = classify(s, &Method::POST, "/search", None, &body, false).unwrap();
        assert!(call.json_body && !call.args.is_parsed());
        assert_eq!(call.args.value(), &json!({"q": "x", "n": [1, 2]}));
        for (bad, message) in [
            ("{nope", "not valid JSON"),
            (r#"{"a": 1e999}"#, "not valid JSON"),
            ("[1]", "must be a JSON object"),
            ("\"text\"", "must be a JSON object"),
            (r#"{"q": 1, "q": 2}"#, "appears twice"),
        ] {
            let e =
                classify(s, &Method::POST, "/search", None, &Bytes::from(bad), false).unwrap_err();
            assert_eq!(e.code, Code::MalformedRequest, "{bad}");
            assert!(e.message.contains(message), "{bad}: {}", e.message);
        }
        // Parsed at once when they will be read anyway: by the caller (an audit digest, a
        // session's fingerprint) or for the contract (duplicate suppression).
        let call = classify(s, &Method::POST, "/search", None, &body, true).unwrap();
        assert!(call.args.is_parsed());
        let call = classify(s, &Method::POST, "/create", None, &body, false).unwrap();
        assert!(call.args.is_parsed());
        // Arguments from the query as well: merged, so parsed.
        let call = classify(s, &Method::POST, "/search", Some("page=2"), &body, false).unwrap();
        assert_eq!(
            call.args.value(),
            &json!({"q": "x", "n": [1, 2], "page": "2"})
        );
        let e = classify(s, &Method::POST, "/search", Some("q=y"), &body, false).unwrap_err();
        assert_eq!(e.code, Code::InvalidArguments);
    }

    #[test]
    fn bad_bodies_and_unknown_routes() {
        let s = mk_snapshot();
        assert_eq!(
            get(s, "/nope", None, "").unwrap_err().code,
            Code::UnknownTool
        );
        assert_eq!(
            classify(s, &Method::POST, "/logs/a", None, &Bytes::new(), false)
                .unwrap_err()
                .code,
            Code::UnknownTool
        );
        let e = get(s, "/logs/a", None, "{nope").unwrap_err();
        assert_eq!(e.code, Code::MalformedRequest);
        let e = get(s, "/logs/a", None, "[1]").unwrap_err();
        assert_eq!(e.code, Code::MalformedRequest);
        let e = get(s, "/logs/a", None, r#"{"ratio": 1, "ratio": 2}"#).unwrap_err();
        assert_eq!(e.code, Code::MalformedRequest);
        let e = get(s, "/logs/%ff", None, "").unwrap_err();
        assert_eq!(e.code, Code::MalformedRequest);
    }
}
