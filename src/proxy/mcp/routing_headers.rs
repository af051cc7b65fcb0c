//! Protocol revision 2026-07-28 (and later): every request is self-contained (no
//! `initialize`, no session), carries its envelope in `params._meta`, and mirrors its
//! routing into headers — `Mcp-Method`, and `Mcp-Name` for `tools/call`, `prompts/get`
//! and `resources/read`.
//!
//! toolgate governs by the body, so a header that disagrees with it would let whatever
//! routes on headers see a different call than the one toolgate checked: such a request
//! is `MALFORMED_REQUEST` (`-32020`, the revision's header-mismatch code) and is never
//! forwarded. A 2026-07-28 request must carry `Mcp-Method`, and `Mcp-Name` for the
//! methods that name something; older revisions' headers are compared when present.

use http::HeaderMap;

use super::jsonrpc::Message;
use super::reply::Refusal;
use crate::vocab::{Code, Reject};

pub const PROTOCOL_VERSION: &str = "mcp-protocol-version";
pub const METHOD: &str = "mcp-method";
pub const NAME: &str = "mcp-name";
/// The first revision with per-request envelopes and routing headers.
pub const FIRST_MODERN: &str = "2026-07-28";

/// Whether the request speaks 2026-07-28 or later (revisions are ISO dates).
pub fn is_modern(headers: &HeaderMap) -> bool {
    headers
        .get(PROTOCOL_VERSION)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.len() == FIRST_MODERN.len() && v >= FIRST_MODERN)
}

/// The body field a method's `Mcp-Name` mirrors.
fn named_param(method: &str) -> Option<&'static str> {
    match method {
        "tools/call" | "prompts/get" => Some("name"),
        "resources/read" => Some("uri"),
        _ => None,
    }
}

/// Checks that routing headers agree with the single message of the body.
pub fn check_headers(headers: &HeaderMap, message: &Message, modern: bool) -> Result<(), Refusal> {
    let mismatch = |what: String| {
        Refusal::header_mismatch(Reject::new(
            Code::MalformedRequest,
            format!("the {what}: send the same value in the header and the body"),
        ))
    };
    for name in [PROTOCOL_VERSION, METHOD, NAME] {
        if headers.get_all(name).iter().count() > 1 {
            return Err(mismatch(format!("{name} header appears more than once")));
        }
    }
    let method = message.method.as_deref().unwrap_or_default();
    match headers.get(METHOD) {
        Some(value) if value.to_str().ok() != Some(method) => {
            return Err(mismatch(format!(
                "{METHOD} header does not match the body's method"
            )));
        }
        // From 2026-07-28 every request and notification names its method in the header,
        // as it names its tool or resource in Mcp-Name; a response has no method.
        None if modern && message.method.is_some() => {
            return Err(mismatch(format!("{METHOD} header is missing")));
        }
        _ => {}
    }
    let Some(field) = named_param(method) else {
        // A method that names nothing carries no Mcp-Name: one on a ping or a
        // notification would route as a call of that tool wherever headers route.
        if headers.contains_key(NAME) {
            return Err(mismatch(format!(
                "{NAME} header names something, and this method names nothing"
            )));
        }
        return Ok(());
    };
    let body = message
        .params()
        .and_then(|p| p.get(field))
        .and_then(|v| v.as_str());
    let header = headers
        .get(NAME)
        .and_then(|v| v.to_str().ok())
        .map(decode_header_value);
    match (header, body) {
        (None, _) if !modern => Ok(()),
        (Some(Some(h)), Some(b)) if h == b => Ok(()),
        (None, None) => Ok(()),
        _ => Err(mismatch(format!(
            "{NAME} header does not match the body's {field}"
        ))),
    }
}

/// A header value, unwrapping the `=?base64?…?=` form used for values that aren't plain
/// printable ASCII. `None` when the wrapped form is malformed or not canonical.
pub fn decode_header_value(value: &str) -> Option<String> {
    let Some(payload) = value
        .strip_prefix("=?base64?")
        .and_then(|v| v.strip_suffix("?="))
    else {
        return Some(value.to_string());
    };
    let bytes = base64_decode(payload)?;
    String::from_utf8(bytes).ok()
}

const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

/// Standard padded base64; non-canonical encodings (stray bits) are refused.
fn base64_decode(text: &str) -> Option<Vec<u8>> {
    let bytes = text.as_bytes();
    if !bytes.len().is_multiple_of(4) {
        return None;
    }
    let padding = bytes.iter().rev().take_while(|&&b| b == b'=').count();
    if padding > 2 {
        return None;
    }
    let mut out = Vec::with_capacity(bytes.len() / 4 * 3);
    let mut bits: u32 = 0;
    let mut count = 0;
    for &b in &bytes[..bytes.len() - padding] {
        let v = ALPHABET.iter().position(|&a| a == b)? as u32;
        bits = (bits << 6) | v;
        count += 6;
        if count >= 8 {
            count -= 8;
            out.push((bits >> count) as u8);
            bits &= (1 << count) - 1;
        }
    }
    (bits == 0).then_some(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proxy::mcp::jsonrpc::message;
    use serde_json::json;

    fn mk_call(name: &str) -> Message {
        message(
            json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": name}}),
        )
        .unwrap()
    }

    fn mk_headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.append(*k, v.parse().unwrap());
        }
        h
    }

    #[test]
    fn detects_the_revision() {
        assert!(is_modern(&mk_headers(&[(PROTOCOL_VERSION, "2026-07-28")])));
        assert!(!is_modern(&mk_headers(&[(PROTOCOL_VERSION, "2025-11-25")])));
        assert!(!is_modern(&HeaderMap::new()));
    }

    #[test]
    fn name_and_method_must_agree_with_the_body() {
        let ok = mk_headers(&[(METHOD, "tools/call"), (NAME, "read_logs")]);
        assert!(check_headers(&ok, &mk_call("read_logs"), true).is_ok());
        let other = mk_headers(&[(METHOD, "tools/call"), (NAME, "echo")]);
        let e = check_headers(&other, &mk_call("read_logs"), true).unwrap_err();
        assert_eq!(e.reject.code, Code::MalformedRequest);
        let wrong_method = mk_headers(&[(METHOD, "tools/list"), (NAME, "read_logs")]);
        assert!(check_headers(&wrong_method, &mk_call("read_logs"), true).is_err());
        assert!(
            check_headers(&mk_headers(&[(METHOD, "tools/call")]), &mk_call("x"), true).is_err()
        );
        assert!(check_headers(&HeaderMap::new(), &mk_call("x"), false).is_ok());
        let twice = mk_headers(&[(NAME, "x"), (NAME, "y")]);
        assert!(check_headers(&twice, &mk_call("x"), false).is_err());
    }

    #[test]
    fn method_header_is_required_from_2026_07_28() {
        let no_method = mk_headers(&[(NAME, "x")]);
        let e = check_headers(&no_method, &mk_call("x"), true).unwrap_err();
        assert_eq!(e.message(&json!(7), "t", true)["error"]["code"], -32020);
        assert_eq!(e.status(true), http::StatusCode::BAD_REQUEST);
        assert!(check_headers(&no_method, &mk_call("x"), false).is_ok());
        let response = message(json!({"jsonrpc": "2.0", "id": 7, "result": {}})).unwrap();
        assert!(check_headers(&HeaderMap::new(), &response, true).is_ok());
    }

    #[test]
    fn wrapped_names_are_decoded() {
        assert_eq!(
            decode_header_value("=?base64?w6l0w6k=?=").as_deref(),
            Some("été")
        );
        assert_eq!(decode_header_value("plain").as_deref(), Some("plain"));
        assert_eq!(
            decode_header_value("=?base64?w6l0w6l=?="),
            None,
            "stray bits"
        );
        assert_eq!(decode_header_value("=?base64?abc?="), None);
        let h = mk_headers(&[(METHOD, "tools/call"), (NAME, "=?base64?w6l0w6k=?=")]);
        assert!(check_headers(&h, &mk_call("été"), true).is_ok());
    }
}
