//! W3C trace context: the trace id every decision carries (`traceId` in refusals and
//! audit records), continued from the agent's `traceparent` when it sent a valid one.

use http::HeaderMap;

/// A trace id (32 lowercase hex digits) and the caller's parent span, if any.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TraceContext {
    pub trace_id: String,
    pub parent_span_id: Option<String>,
}

impl TraceContext {
    pub fn from_headers(headers: &HeaderMap) -> TraceContext {
        headers
            .get("traceparent")
            .and_then(|v| v.to_str().ok())
            .and_then(parse_traceparent)
            .unwrap_or_else(|| TraceContext {
                trace_id: hex::encode(rand::random::<[u8; 16]>()),
                parent_span_id: None,
            })
    }
}

/// `00-<trace id>-<span id>-<flags>`; all-zero ids are invalid (W3C §3.2.2).
fn parse_traceparent(value: &str) -> Option<TraceContext> {
    let mut parts = value.trim().split('-');
    let (version, trace, span, flags) =
        (parts.next()?, parts.next()?, parts.next()?, parts.next()?);
    let hex = |s: &str, n: usize| {
        s.len() == n
            && s.bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    };
    let valid = version == "00"
        && parts.next().is_none()
        && hex(trace, 32)
        && hex(span, 16)
        && hex(flags, 2)
        && trace.bytes().any(|b| b != b'0')
        && span.bytes().any(|b| b != b'0');
    valid.then(|| TraceContext {
        trace_id: trace.to_string(),
        parent_span_id: Some(span.to_string()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn continues_a_valid_traceparent() {
        let mut h = HeaderMap::new();
        h.insert(
            "traceparent",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
                .parse()
                .unwrap(),
        );
        let t = TraceContext::from_headers(&h);
        assert_eq!(t.trace_id, "4bf92f3577b34da6a3ce929d0e0e4736");
        assert_eq!(t.parent_span_id.as_deref(), Some("00f067aa0ba902b7"));
    }

    #[test]
    fn invalid_traceparent_gets_a_fresh_id() {
        let mut h = HeaderMap::new();
        h.insert(
            "traceparent",
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01"
                .parse()
                .unwrap(),
        );
        let t = TraceContext::from_headers(&h);
        assert_eq!(t.trace_id.len(), 32);
        assert!(t.parent_span_id.is_none());
    }
}
