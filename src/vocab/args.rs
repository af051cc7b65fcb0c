//! A call's arguments, built into a JSON tree only when something reads them.
//!
//! Turning a 1 KiB REST body into a `serde_json::Value` (an allocation per key, string and
//! tree node) was the largest single cost of a minimal call: 13,300 of its instructions
//! (callgrind, `benchkit inproc --profile minimal`). Most contracts read the arguments
//! anyway (a schema with constraints, rules over `args`, an audit digest, a call
//! fingerprint). When none does, the body is only checked, in one pass that keeps
//! nothing, and goes to the backend as it came.
//!
//! The check (`vocab::json_strict::check`) accepts exactly what the strict tree parser
//! accepts (an object naming a key twice is refused by both): it drives serde_json's own
//! deserializer through the same paths (strings decoded, numbers converted, same
//! recursion limit, no trailing characters), so a checked body always parses later. That
//! holds for serde_json as this crate builds it; its `arbitrary_precision` feature would
//! hand numbers to the check as maps, and the parity test below would fail.

use bytes::Bytes;
use serde_json::Value;
use std::sync::OnceLock;

use crate::vocab::json_strict;

/// Arguments, parsed or still the checked bytes of a JSON object.
#[derive(Debug, Clone)]
pub struct Args {
    /// The checked body the value is parsed from on first use; `None` when built from a
    /// value.
    raw: Option<Bytes>,
    value: OnceLock<Value>,
}

/// Why a body can't carry arguments.
#[derive(Debug)]
pub enum BodyError {
    NotJson(serde_json::Error),
    NotAnObject,
}

impl Args {
    /// Arguments from a body that must be one JSON object: checked now, parsed on first
    /// read.
    pub(crate) fn from_object_body(body: Bytes) -> Result<Args, BodyError> {
        match check(&body) {
            Ok(true) => Ok(Args {
                raw: Some(body),
                value: OnceLock::new(),
            }),
            Ok(false) => Err(BodyError::NotAnObject),
            Err(e) => Err(BodyError::NotJson(e)),
        }
    }

    /// The arguments as a tree, parsed on the first call.
    pub fn value(&self) -> &Value {
        self.value.get_or_init(|| match &self.raw {
            // The check accepted these bytes, so this parse can't fail (see the module
            // docs). Were it to, `null` is what rules and digests see: rules reading
            // `args` then fail their call, but the original bytes would still be what the
            // backend gets, so the parity test guards this.
            Some(raw) => serde_json::from_slice(raw).unwrap_or_else(|e| {
                tracing::error!(error = %e, "a checked body did not parse");
                Value::Null
            }),
            None => Value::Null,
        })
    }

    pub fn into_value(mut self) -> Value {
        self.value();
        self.value.take().unwrap_or_default()
    }

    /// Whether the arguments are a JSON object; known without parsing a checked body.
    pub fn is_object(&self) -> bool {
        self.raw.is_some() || self.value().is_object()
    }

    /// Whether the tree has been built.
    #[cfg(test)]
    pub(crate) fn is_parsed(&self) -> bool {
        self.value.get().is_some()
    }
}

impl From<Value> for Args {
    fn from(value: Value) -> Args {
        Args {
            raw: None,
            value: OnceLock::from(value),
        }
    }
}

impl Default for Args {
    fn default() -> Args {
        Args::from(Value::Null)
    }
}

/// Checks that `body` is JSON and says whether it is an object, without keeping any of it.
fn check(body: &[u8]) -> Result<bool, serde_json::Error> {
    // The strict walk: a key named twice in one object is refused here too, since these
    // bytes reach the backend as they came.
    json_strict::check(body)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// The check and the tree parser agree on every input, the awkward ones included.
    #[test]
    fn the_check_accepts_exactly_what_the_parser_accepts() {
        let deep_ok = format!("{}1{}", "[".repeat(100), "]".repeat(100));
        let too_deep = format!("{}1{}", "[".repeat(200), "]".repeat(200));
        let inputs = [
            r#"{"a":1,"b":[true,null,{"c":"d"}],"e":-1.5e3}"#,
            r#"{}"#,
            r#"  {"a" : "x"}  "#,
            r#"{"a":"\ud83d\ude00 \n \u0041"}"#,
            r#"{"a":"\ud800"}"#,
            r#"{"a":"\ud800\u0041"}"#,
            r#"{"a":1e999}"#,
            r#"{"a":-1e999}"#,
            r#"{"a":18446744073709551616}"#,
            r#"{"a":-9223372036854775809}"#,
            r#"{"a":01}"#,
            r#"{"a":1.}"#,
            r#"{"a":1,}"#,
            r#"{"a":1}}"#,
            r#"{"a":1} x"#,
            r#"{"a":1,"a":2}"#,
            r#"{"a":"tab	inside"}"#,
            r#"{"a":"\x"}"#,
            r#"{1:2}"#,
            r#"{"a":nul}"#,
            r#"[1,2]"#,
            r#""text""#,
            r#"12"#,
            r#"null"#,
            "",
            "{",
            "\u{feff}{}",
            &deep_ok,
            &too_deep,
        ];
        for input in inputs {
            let parsed = json_strict::parse(input.as_bytes());
            let checked = check(input.as_bytes());
            assert_eq!(
                checked.is_ok(),
                parsed.is_ok(),
                "{input:?}: check {checked:?}, parse {parsed:?}"
            );
            if let (Ok(is_object), Ok(value)) = (checked, parsed) {
                assert_eq!(is_object, value.is_object(), "{input:?}");
            }
        }
        // Invalid UTF-8 inside a string.
        let bytes = b"{\"a\":\"\xff\"}";
        assert_eq!(check(bytes).is_ok(), json_strict::parse(bytes).is_ok());
    }

    #[test]
    fn checked_bytes_parse_once_on_first_read() {
        let args =
            Args::from_object_body(Bytes::from_static(br#"{"service":"orders","n":3}"#)).unwrap();
        assert!(!args.is_parsed());
        assert!(args.is_object());
        assert!(!args.is_parsed(), "known to be an object without parsing");
        assert_eq!(args.value(), &json!({"service": "orders", "n": 3}));
        assert!(args.is_parsed());
        let copy = args.clone();
        assert_eq!(copy.into_value(), json!({"service": "orders", "n": 3}));
        assert_eq!(Args::from(json!({"x": 1})).value()["x"], 1);
        assert!(matches!(
            Args::from_object_body(Bytes::from_static(b"[1]")),
            Err(BodyError::NotAnObject)
        ));
        assert!(matches!(
            Args::from_object_body(Bytes::from_static(b"{")),
            Err(BodyError::NotJson(_))
        ));
    }
}
