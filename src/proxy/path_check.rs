//! The request path rule: a path that a backend could read differently from the gateway
//! is refused before anything routes on it.
//!
//! The gateway decides on the path as it arrives (percent-encoded, segments split on
//! `/`) and forwards it unchanged. A backend that decodes `%2F` into a separator, treats
//! `\` as one, resolves `..`, or stops at a NUL would reach a different handler than the
//! route the gateway checked. So a path is refused (`MALFORMED_REQUEST`) when any
//! segment, raw or after percent-decoding — repeatedly, so `%252e` counts as `.` — holds
//! a `/` or `\`, is `.` or `..` (also before a `;` parameter, as servlet containers read
//! `..;`), or holds a NUL or another control character; and when the path is not
//! origin-form (it must start with `/`), holds a `%` that starts no escape, or holds a
//! raw byte outside ASCII (which must be percent-encoded: a backend may read raw bytes
//! in another charset).
//!
//! It runs first in the pipeline, for REST and MCP alike, and reads only the path.

use crate::vocab::{Code, Reject};

/// How many rounds of percent-decoding a segment is checked through: enough for any
/// double or triple encoding a chain of proxies might undo.
const DECODE_ROUNDS: usize = 3;

/// Why a path is refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum PathError {
    #[error("the request target must be a path starting with /")]
    NotOriginForm,
    #[error("the path holds a % that starts no escape")]
    BadEscape,
    #[error("a path segment holds an encoded / or a \\")]
    Separator,
    #[error("the path holds a . or .. segment")]
    DotSegment,
    #[error("the path holds a NUL or another control character")]
    Control,
    #[error("the path holds a raw byte outside ASCII")]
    NotAscii,
}

impl From<PathError> for Reject {
    fn from(e: PathError) -> Reject {
        Reject::new(
            Code::MalformedRequest,
            format!("{e}: send the path in its plain, normalized form"),
        )
    }
}

/// Checks a request path (without the query) as received.
pub fn check_path(path: &str) -> Result<(), PathError> {
    let Some(rest) = path.strip_prefix('/') else {
        return Err(PathError::NotOriginForm);
    };
    rest.split('/').try_for_each(check_segment)
}

fn check_segment(raw: &str) -> Result<(), PathError> {
    if !raw.is_ascii() {
        return Err(PathError::NotAscii);
    }
    let mut segment = raw.as_bytes().to_vec();
    for round in 0..=DECODE_ROUNDS {
        check_decoded(&segment)?;
        if !segment.contains(&b'%') {
            return Ok(());
        }
        match decode(&segment) {
            Some(decoded) => segment = decoded,
            // Only the path as received must be well-formed; a `%` left over after a
            // round of decoding is data (`100%25` is `100%`).
            None if round == 0 => return Err(PathError::BadEscape),
            None => return Ok(()),
        }
    }
    Ok(())
}

/// The checks on one segment's bytes at one depth of decoding.
fn check_decoded(segment: &[u8]) -> Result<(), PathError> {
    if segment.iter().any(|&b| b < 0x20 || b == 0x7f) {
        return Err(PathError::Control);
    }
    if segment.iter().any(|&b| b == b'/' || b == b'\\') {
        return Err(PathError::Separator);
    }
    let name = segment.split(|&b| b == b';').next().unwrap_or_default();
    if name == b"." || name == b".." {
        return Err(PathError::DotSegment);
    }
    Ok(())
}

/// One round of percent-decoding; `None` when a `%` starts no valid escape.
fn decode(segment: &[u8]) -> Option<Vec<u8>> {
    let mut out = Vec::with_capacity(segment.len());
    let mut bytes = segment.iter();
    while let Some(&b) = bytes.next() {
        if b != b'%' {
            out.push(b);
            continue;
        }
        let hi = hex(*bytes.next()?)?;
        let lo = hex(*bytes.next()?)?;
        out.push(hi << 4 | lo);
    }
    Some(out)
}

fn hex(b: u8) -> Option<u8> {
    match b {
        b'0'..=b'9' => Some(b - b'0'),
        b'a'..=b'f' => Some(b - b'a' + 10),
        b'A'..=b'F' => Some(b - b'A' + 10),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_paths_pass() {
        for path in [
            "/",
            "/mcp",
            "/logs/orders",
            "/logs/or%20ders",
            "/logs/orders/",
            "/a/.hidden/b..c/...",
            "/files/100%25",
            "/files/%2541",
            "/q;v=1",
            "/caf%C3%A9",
        ] {
            assert_eq!(check_path(path), Ok(()), "{path}");
        }
    }

    #[test]
    fn encoded_separators_are_refused_in_any_case() {
        for path in [
            "/logs/a%2Fb",
            "/logs/a%2fb",
            "/logs/a%5Cb",
            "/logs/a%5cb",
            "/logs/a\\b",
            "/logs/a%252Fb",
        ] {
            assert_eq!(check_path(path), Err(PathError::Separator), "{path}");
        }
    }

    #[test]
    fn dot_segments_are_refused_raw_or_encoded() {
        for path in [
            "/logs/../admin",
            "/logs/./orders",
            "/..",
            "/logs/%2e%2e/admin",
            "/logs/%2E%2E",
            "/logs/.%2e/admin",
            "/logs/%2e",
            "/logs/%252e%252e/admin",
            "/logs/..;/admin",
            "/logs/..;x=1/admin",
        ] {
            assert_eq!(check_path(path), Err(PathError::DotSegment), "{path}");
        }
    }

    #[test]
    fn control_characters_are_refused_raw_or_encoded() {
        for path in [
            "/logs/a%00b",
            "/logs/a\0b",
            "/logs/a%0d%0aX-Injected:%201",
            "/logs/a%09",
            "/logs/a%7F",
            "/logs/a%2500",
        ] {
            assert_eq!(check_path(path), Err(PathError::Control), "{path}");
        }
    }

    #[test]
    fn other_forms_and_broken_escapes_are_refused() {
        assert_eq!(check_path("*"), Err(PathError::NotOriginForm));
        assert_eq!(check_path(""), Err(PathError::NotOriginForm));
        assert_eq!(check_path("logs/a"), Err(PathError::NotOriginForm));
        for path in ["/logs/%zz", "/logs/%", "/logs/a%2"] {
            assert_eq!(check_path(path), Err(PathError::BadEscape), "{path}");
        }
        assert_eq!(check_path("/logs/café"), Err(PathError::NotAscii));
    }

    #[test]
    fn a_refusal_is_a_malformed_request() {
        let reject = Reject::from(PathError::DotSegment);
        assert_eq!(reject.code, Code::MalformedRequest);
        assert_eq!(reject.status(), 400);
    }
}
