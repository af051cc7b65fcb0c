//! The REST rendering of a refusal: the HTTP response of `docs/errors.md`.

use crate::proxy::body::{full, Body};
use crate::vocab::Reject;

/// Renders a refusal as the REST response of docs/errors.md (the MCP rendering lives in
/// `proxy::mcp::reply`, built from the same [`Reject::body`]).
pub fn into_response(reject: &Reject, trace_id: &str) -> http::Response<Body> {
    let body = serde_json::to_vec(&reject.body(trace_id)).unwrap_or_default();
    let mut response = http::Response::new(full(body));
    *response.status_mut() =
        http::StatusCode::from_u16(reject.status()).unwrap_or(http::StatusCode::BAD_REQUEST);
    let headers = response.headers_mut();
    headers.insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static("application/json"),
    );
    if let Some(ms) = reject.retry_after_ms {
        // Retry-After is whole seconds; round up so an agent never retries too early.
        headers.insert(
            http::header::RETRY_AFTER,
            http::HeaderValue::from(ms.div_ceil(1000).max(1)),
        );
    }
    response
}
