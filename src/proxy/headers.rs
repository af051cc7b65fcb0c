//! Header names (README, "Running the sidecar") and the filtering of what crosses the gateway.
//!
//! Inbound `X-Toolgate-*` headers are dropped before anything else reads them, so an agent
//! can't claim a decision, an identity or a session it doesn't have; the credential and
//! hop-by-hop headers never reach the backend.
//!
//! Backends disagree on header names with `_`: WSGI, CGI and several Java and Node
//! stacks read `X_Toolgate_Agent` as `X-Toolgate-Agent`. So [`screen`] runs first on every
//! request: a name that reads as `x-toolgate-*`, or as a header toolgate itself reads or
//! governs (`Mcp-Session-Id`, `Idempotency-Key`, `Content-Type`, `Authorization`, …),
//! once `_` is taken for `-` is dropped whatever the settings say — with `allow`, a
//! backend would otherwise see a second session id or media type toolgate never
//! checked — and any other name with `_` is dropped, refused or passed as
//! `limits.headersWithUnderscores` says. Names are case-insensitive already (the
//! `http` crate lowercases them), so `_` is the only spelling left to close.

use http::header::{self, HeaderMap, HeaderName, HeaderValue};

use crate::config::Underscores;

pub const DECISION: &str = "x-toolgate-decision";
pub const CODE: &str = "x-toolgate-code";
pub const AGENT: &str = "x-toolgate-agent";
pub const SESSION: &str = "x-toolgate-session";
pub const TOOL: &str = "x-toolgate-tool";
pub const TASK: &str = "x-toolgate-task";
pub const REPLAYED: &str = "x-toolgate-replayed";
pub const MCP_SESSION: &str = "mcp-session-id";
pub const IDEMPOTENCY_KEY: &str = "idempotency-key";
pub const TRACEPARENT: &str = "traceparent";

const PREFIX: &str = "x-toolgate-";

/// Longest accepted session id; longer ones are malformed, not truncated.
pub const MAX_SESSION_ID: usize = 256;

const HOP_BY_HOP: [HeaderName; 8] = [
    header::CONNECTION,
    HeaderName::from_static("keep-alive"),
    HeaderName::from_static("proxy-connection"),
    header::PROXY_AUTHENTICATE,
    header::PROXY_AUTHORIZATION,
    header::TE,
    header::TRAILER,
    header::TRANSFER_ENCODING,
];

/// Drops or refuses header names spelled with `_` (see the module docs); `Err` names the
/// header when `limits.headersWithUnderscores` is `reject`.
pub fn screen(headers: &mut HeaderMap, underscores: Underscores) -> Result<(), String> {
    // The common case, no `_` anywhere, costs one scan of the names and no allocation.
    if !headers.keys().any(|name| name.as_str().contains('_')) {
        return Ok(());
    }
    let mut dropped = Vec::new();
    for name in headers.keys().filter(|n| n.as_str().contains('_')) {
        let toolgate = reads_as_toolgate(name.as_str()) || reads_as_governed(name.as_str());
        match underscores {
            _ if toolgate => dropped.push(name.clone()),
            Underscores::Drop => dropped.push(name.clone()),
            Underscores::Reject => {
                return Err(format!(
                    "header {name} has an underscore in its name, which backends read \
                     differently; spell it with '-'"
                ))
            }
            Underscores::Allow => {}
        }
    }
    for name in dropped {
        headers.remove(name);
    }
    Ok(())
}

/// Headers toolgate reads or sets itself: their `_` spellings never pass.
const GOVERNED: [&str; 17] = [
    "authorization",
    "proxy-authorization",
    "content-type",
    "content-length",
    "content-encoding",
    "transfer-encoding",
    "host",
    "origin",
    "mcp-session-id",
    "mcp-protocol-version",
    "mcp-method",
    "mcp-name",
    "idempotency-key",
    "last-event-id",
    "traceparent",
    "tracestate",
    "forwarded",
];

/// Whether a name with `_` is one of [`GOVERNED`] once `_` is read as `-`.
fn reads_as_governed(name: &str) -> bool {
    GOVERNED
        .iter()
        .any(|governed| governed.len() == name.len() && starts_as(name, governed))
}

/// Whether `name` starts with `spelled` (lowercase, with `-`) once `_` is read as `-`.
fn starts_as(name: &str, spelled: &str) -> bool {
    name.len() >= spelled.len()
        && name
            .bytes()
            .zip(spelled.bytes())
            .all(|(a, b)| a.to_ascii_lowercase() == b || (a == b'_' && b == b'-'))
}

/// Whether a header name is toolgate's own once `_` is read as `-`.
fn reads_as_toolgate(name: &str) -> bool {
    starts_as(name, PREFIX)
}

/// Removes hop-by-hop headers, including those the `Connection` header names.
pub fn strip_hop_by_hop(headers: &mut HeaderMap) {
    let named = connection_named(headers);
    for name in HOP_BY_HOP.iter().chain(named.iter()) {
        headers.remove(name);
    }
    headers.remove(header::UPGRADE);
}

/// The headers the `Connection` header names as hop-by-hop.
fn connection_named(headers: &HeaderMap) -> Vec<HeaderName> {
    headers
        .get_all(header::CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .filter_map(|n| HeaderName::from_bytes(n.trim().as_bytes()).ok())
        .collect()
}

/// Removes every `X-Toolgate-*` header.
pub fn strip_toolgate(headers: &mut HeaderMap) {
    let names: Vec<HeaderName> = headers
        .keys()
        .filter(|k| k.as_str().starts_with(PREFIX))
        .cloned()
        .collect();
    for name in names {
        headers.remove(name);
    }
}

/// The headers a backend receives: the agent's, cleaned, plus who/what/which session.
/// One pass that copies what may cross (values are shared, not copied), rather than a
/// clone followed by a removal per filtered name: this runs on every call.
pub fn to_backend(
    inbound: &HeaderMap,
    agent: &str,
    session: Option<&str>,
    tool: &str,
) -> HeaderMap {
    let named = connection_named(inbound);
    let mut headers = HeaderMap::with_capacity(inbound.keys_len() + 3);
    for (name, value) in inbound {
        let dropped = HOP_BY_HOP.contains(name)
            || name == header::UPGRADE
            || name == header::AUTHORIZATION
            || name == header::CONTENT_LENGTH
            || name.as_str().starts_with(PREFIX)
            || named.contains(name);
        if !dropped {
            headers.append(name.clone(), value.clone());
        }
    }
    for (name, value) in [(AGENT, Some(agent)), (SESSION, session), (TOOL, Some(tool))] {
        if let Some(v) = value.and_then(|v| HeaderValue::from_str(v).ok()) {
            headers.insert(HeaderName::from_static(name), v);
        }
    }
    headers
}

/// The session id the agent named (`Mcp-Session-Id` first, then `X-Toolgate-Session`),
/// read before the inbound `X-Toolgate-*` headers are stripped. `Err` when it is unusable.
pub fn session_id(headers: &HeaderMap) -> Result<Option<String>, String> {
    let several = |name| format!("send one {name} header, not several");
    let named = match single(headers, MCP_SESSION).map_err(several)? {
        Some(value) => Some(value),
        None => single(headers, SESSION).map_err(several)?,
    };
    let Some(value) = named else {
        return Ok(None);
    };
    let text = value
        .to_str()
        .map_err(|_| "the session id must be visible ASCII".to_string())?;
    if text.is_empty()
        || text.len() > MAX_SESSION_ID
        || !text.bytes().all(|b| (0x21..=0x7e).contains(&b))
    {
        return Err(format!(
            "the session id must be 1 to {MAX_SESSION_ID} visible ASCII characters"
        ));
    }
    Ok(Some(text.to_string()))
}

/// Longest accepted `Idempotency-Key`.
pub const MAX_IDEMPOTENCY_KEY: usize = 255;

/// The `Idempotency-Key` the agent sent, if any. `Err` when it is unusable.
pub fn idempotency_key(headers: &HeaderMap) -> Result<Option<String>, String> {
    let Some(value) = single(headers, IDEMPOTENCY_KEY)
        .map_err(|name| format!("send one {name} header, not several"))?
    else {
        return Ok(None);
    };
    match value.to_str() {
        Ok(text)
            if !text.is_empty()
                && text.len() <= MAX_IDEMPOTENCY_KEY
                && text.bytes().all(|b| (0x21..=0x7e).contains(&b)) =>
        {
            Ok(Some(text.to_string()))
        }
        _ => Err(format!(
            "the Idempotency-Key must be 1 to {MAX_IDEMPOTENCY_KEY} visible ASCII characters"
        )),
    }
}

/// The value of a header that must appear at most once. Repeated, the gateway and the
/// backend could each read a different one (the first, the last, or both joined), so
/// `Err` names the header instead of picking.
fn single<'h>(
    headers: &'h HeaderMap,
    name: &'static str,
) -> Result<Option<&'h HeaderValue>, &'static str> {
    let mut values = headers.get_all(name).iter();
    match (values.next(), values.next()) {
        (first, None) => Ok(first),
        (_, Some(_)) => Err(name),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn underscore_spellings_of_toolgate_headers_never_pass() {
        let mk = || {
            let mut h = HeaderMap::new();
            for name in [
                "x_toolgate_agent",
                "x-toolgate_session",
                "x_toolgate-tool",
                "x_api_key",
                "mcp_session_id",
                "idempotency_key",
                "content_type",
            ] {
                h.insert(
                    HeaderName::from_bytes(name.as_bytes()).unwrap(),
                    "v".parse().unwrap(),
                );
            }
            h.insert("x-toolgate-task", "t".parse().unwrap());
            h.insert("accept", "*/*".parse().unwrap());
            h
        };
        let mut allowed = mk();
        screen(&mut allowed, Underscores::Allow).unwrap();
        let names: Vec<_> = allowed.keys().map(|k| k.as_str()).collect();
        assert_eq!(names.len(), 3, "{names:?}");
        assert!(allowed.contains_key("x_api_key") && allowed.contains_key("x-toolgate-task"));
        let mut dropped = mk();
        screen(&mut dropped, Underscores::Drop).unwrap();
        assert_eq!(dropped.len(), 2, "only the hyphenated names stay");
        let e = screen(&mut mk(), Underscores::Reject).unwrap_err();
        assert!(e.contains("x_api_key"), "{e}");
        // Nothing to screen: untouched.
        let mut plain = HeaderMap::new();
        plain.insert("x-toolgate-session", "s".parse().unwrap());
        screen(&mut plain, Underscores::Reject).unwrap();
        assert_eq!(plain.len(), 1);
        assert!(reads_as_toolgate("x_toolgate_"));
        assert!(!reads_as_toolgate("x_toolgat"));
        assert!(!reads_as_toolgate("y_toolgate_agent"));
    }

    #[test]
    fn backend_headers_are_cleaned_and_stamped() {
        let mut h = HeaderMap::new();
        h.insert("authorization", "Bearer s3cret".parse().unwrap());
        h.insert("x-toolgate-agent", "admin".parse().unwrap());
        h.insert("x-toolgate-decision", "allow".parse().unwrap());
        h.insert("connection", "close, x-secret-hop".parse().unwrap());
        h.insert("x-secret-hop", "1".parse().unwrap());
        h.insert("accept", "application/json".parse().unwrap());
        h.insert("content-length", "12".parse().unwrap());
        h.insert("upgrade", "websocket".parse().unwrap());
        h.append("x-multi", "a".parse().unwrap());
        h.append("x-multi", "b".parse().unwrap());
        let out = to_backend(&h, "ops-bot", Some("s1"), "read_logs");
        assert!(out.get("content-length").is_none());
        assert!(out.get("upgrade").is_none());
        assert!(out.get("connection").is_none());
        let multi: Vec<_> = out.get_all("x-multi").iter().collect();
        assert_eq!(multi, ["a", "b"], "repeated headers cross in order");
        assert!(out.get("authorization").is_none());
        assert!(out.get("x-toolgate-decision").is_none());
        assert!(out.get("x-secret-hop").is_none());
        assert_eq!(out.get(AGENT).unwrap(), "ops-bot");
        assert_eq!(out.get(SESSION).unwrap(), "s1");
        assert_eq!(out.get("accept").unwrap(), "application/json");
    }

    #[test]
    fn session_id_is_bounded() {
        let mut h = HeaderMap::new();
        assert_eq!(session_id(&h), Ok(None));
        h.insert(SESSION, "abc".parse().unwrap());
        assert_eq!(session_id(&h), Ok(Some("abc".into())));
        h.insert(MCP_SESSION, "m1".parse().unwrap());
        assert_eq!(session_id(&h), Ok(Some("m1".into())));
        h.insert(MCP_SESSION, "x".repeat(300).parse().unwrap());
        assert!(session_id(&h).is_err());
        let mut h = HeaderMap::new();
        h.append(MCP_SESSION, "mine".parse().unwrap());
        h.append(MCP_SESSION, "theirs".parse().unwrap());
        assert!(session_id(&h).unwrap_err().contains("send one"));
        let mut h = HeaderMap::new();
        h.append(SESSION, "a".parse().unwrap());
        h.append(SESSION, "b".parse().unwrap());
        assert!(session_id(&h).is_err());
    }

    #[test]
    fn idempotency_key_is_bounded() {
        let mut h = HeaderMap::new();
        assert_eq!(idempotency_key(&h), Ok(None));
        h.insert(IDEMPOTENCY_KEY, "k-1".parse().unwrap());
        assert_eq!(idempotency_key(&h), Ok(Some("k-1".into())));
        h.insert(IDEMPOTENCY_KEY, "a b".parse().unwrap());
        assert!(idempotency_key(&h).is_err());
        h.insert(IDEMPOTENCY_KEY, "k".repeat(256).parse().unwrap());
        assert!(idempotency_key(&h).is_err());
        h.insert(IDEMPOTENCY_KEY, "k-1".parse().unwrap());
        h.append(IDEMPOTENCY_KEY, "k-2".parse().unwrap());
        assert!(idempotency_key(&h).is_err());
    }
}
