//! A body is what it says it is: the bytes toolgate checked as JSON are the bytes a
//! backend parses as JSON (DESIGN §14).
//!
//! A JSON object sent as `application/x-www-form-urlencoded` passes a JSON check, and a
//! form-parsing backend then reads `&amount=99999&` hidden inside one of its strings. So
//! a request with a body must declare a JSON media type — `application/json` or
//! `application/*+json`, in any case, with no charset but UTF-8 — and no
//! `Content-Encoding` (compressed bytes are not the ones that were checked). Anything
//! else is `UNSUPPORTED_MEDIA_TYPE` (415) and nothing is forwarded. A body-less request
//! is not asked for a type.

use http::header::{CONTENT_ENCODING, CONTENT_TYPE};
use http::HeaderMap;

use crate::vocab::{Code, Reject};

/// `Ok` when a request carrying a body declares it as plain JSON.
pub fn check_json(headers: &HeaderMap) -> Result<(), Reject> {
    let refuse = |why: &str| {
        Reject::new(
            Code::UnsupportedMediaType,
            format!("{why}: send the body as JSON, with Content-Type: application/json"),
        )
    };
    let mut encodings = headers.get_all(CONTENT_ENCODING).iter();
    if encodings.any(|v| !v.as_bytes().eq_ignore_ascii_case(b"identity")) {
        return Err(refuse("the body has a Content-Encoding"));
    }
    let mut types = headers.get_all(CONTENT_TYPE).iter();
    let declared = match (types.next(), types.next()) {
        (None, _) => return Err(refuse("the body's media type is not declared")),
        (Some(_), Some(_)) => return Err(refuse("Content-Type is given twice")),
        (Some(value), None) => value.to_str().ok(),
    };
    match declared.map(is_json) {
        Some(Ok(())) => Ok(()),
        Some(Err(why)) => Err(refuse(why)),
        None => Err(refuse("Content-Type is not readable text")),
    }
}

/// Whether a `Content-Type` value names JSON in UTF-8; `Err` says why not.
fn is_json(value: &str) -> Result<(), &'static str> {
    let mut parts = value.split(';');
    let essence = parts.next().unwrap_or_default().trim();
    let (kind, subtype) = essence.split_once('/').unwrap_or((essence, ""));
    let json_subtype = subtype.eq_ignore_ascii_case("json")
        || (subtype.len() > 5 && subtype[subtype.len() - 5..].eq_ignore_ascii_case("+json"));
    if !kind.eq_ignore_ascii_case("application") || !json_subtype {
        return Err("the body's media type is not JSON");
    }
    for parameter in parts {
        let (name, value) = parameter.split_once('=').unwrap_or((parameter, ""));
        if name.trim().eq_ignore_ascii_case("charset") {
            let charset = value.trim().trim_matches('"');
            if !charset.eq_ignore_ascii_case("utf-8") && !charset.eq_ignore_ascii_case("utf8") {
                return Err("the body's charset is not UTF-8");
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mk(pairs: &[(&'static str, &'static str)]) -> HeaderMap {
        let mut headers = HeaderMap::new();
        for (name, value) in pairs {
            headers.append(*name, value.parse().unwrap());
        }
        headers
    }

    #[test]
    fn json_types_pass() {
        for value in [
            "application/json",
            "Application/JSON",
            "application/json; charset=utf-8",
            "application/json;charset=\"UTF-8\"",
            "application/merge-patch+json",
            "application/vnd.api+JSON ; q=1",
        ] {
            assert!(
                check_json(&mk(&[("content-type", value)])).is_ok(),
                "{value}"
            );
        }
        let identity = mk(&[
            ("content-type", "application/json"),
            ("content-encoding", "identity"),
        ]);
        assert!(check_json(&identity).is_ok());
    }

    #[test]
    fn everything_else_is_refused() {
        for value in [
            "application/x-www-form-urlencoded",
            "multipart/form-data; boundary=x",
            "text/plain",
            "text/json",
            "application/jsonx",
            "application/+json",
            "application/json; charset=utf-16",
            "application/json; charset=latin1",
            "json",
            "",
        ] {
            let e = check_json(&mk(&[("content-type", value)])).unwrap_err();
            assert_eq!(e.code, Code::UnsupportedMediaType, "{value}");
        }
        assert!(check_json(&HeaderMap::new()).is_err());
        let twice = mk(&[
            ("content-type", "application/json"),
            ("content-type", "text/plain"),
        ]);
        assert!(check_json(&twice).is_err());
        let gzip = mk(&[
            ("content-type", "application/json"),
            ("content-encoding", "gzip"),
        ]);
        assert!(check_json(&gzip).is_err());
    }
}
