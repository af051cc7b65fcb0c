//! The credential a request presents: `Authorization: Bearer <token>`, once.
//!
//! Two `Authorization` headers name no one caller: the gateway and whatever reads the
//! request after it could each take a different one (the first, the last, or both
//! joined), so a repeated header is its own answer, never a choice. The agent port and
//! the admin listener (approval API) read credentials through this one function.

use http::{header, HeaderMap};

/// What the request's `Authorization` header holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Presented<'h> {
    /// No `Authorization` header.
    Nothing,
    /// One header with a non-empty bearer token (scheme matched case-insensitively).
    Bearer(&'h str),
    /// One header, but not a usable bearer token (another scheme, empty, not text).
    Unusable,
    /// More than one `Authorization` header.
    Repeated,
}

impl Presented<'_> {
    /// Whether the request carried any credential at all (for the 401 challenge).
    pub fn any(&self) -> bool {
        !matches!(self, Presented::Nothing)
    }
}

/// The request's credential.
pub fn presented(headers: &HeaderMap) -> Presented<'_> {
    let mut values = headers.get_all(header::AUTHORIZATION).iter();
    let value = match (values.next(), values.next()) {
        (None, _) => return Presented::Nothing,
        (Some(_), Some(_)) => return Presented::Repeated,
        (Some(value), None) => value,
    };
    let token = value
        .to_str()
        .ok()
        .and_then(|v| v.split_once(' '))
        .filter(|(scheme, _)| scheme.eq_ignore_ascii_case("bearer"))
        .map(|(_, token)| token.trim())
        .filter(|t| !t.is_empty());
    match token {
        Some(token) => Presented::Bearer(token),
        None => Presented::Unusable,
    }
}

/// Whether the request carries more than one `Authorization` header.
pub fn repeated(headers: &HeaderMap) -> bool {
    presented(headers) == Presented::Repeated
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mk_headers(values: &[&str]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for v in values {
            h.append(header::AUTHORIZATION, v.parse().unwrap());
        }
        h
    }

    #[test]
    fn one_bearer_token_in_any_case() {
        for v in ["Bearer abc", "bearer abc", "BEARER  abc "] {
            assert_eq!(
                presented(&mk_headers(&[v])),
                Presented::Bearer("abc"),
                "{v}"
            );
        }
    }

    #[test]
    fn nothing_unusable_and_repeated_are_told_apart() {
        assert_eq!(presented(&mk_headers(&[])), Presented::Nothing);
        for v in ["Basic YTpi", "Bearer", "Bearer   ", "token"] {
            assert_eq!(presented(&mk_headers(&[v])), Presented::Unusable, "{v}");
        }
        let two = mk_headers(&["Bearer a", "Bearer b"]);
        assert_eq!(presented(&two), Presented::Repeated);
        assert!(repeated(&two));
        // Even when both say the same: two headers are two credentials.
        assert!(repeated(&mk_headers(&["Bearer a", "Bearer a"])));
        assert!(!repeated(&mk_headers(&["Bearer a"])));
    }
}
