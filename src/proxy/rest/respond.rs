//! The REST ends of a forwarded call: the request the backend receives (as it came —
//! method, path, query, body — with defaults filled into a JSON body), and the response
//! the agent gets: streamed, or buffered and shaped when the contract has `output` or
//! `redact`. An at-most-once call's answer is the one settled for it and its duplicates
//! (`proxy::forward`), shaped per delivery.

use bytes::Bytes;
use http::request::Parts;
use http::{header, HeaderMap, HeaderValue, Response};
use http_body_util::BodyExt;
use hyper::body::Incoming;
use serde_json::Value;
use std::time::{Duration, Instant};

use crate::limits::dedupe::Settled;
use crate::policy::contract::Contract;
use crate::proxy::backend::exchange::Exchange;
use crate::proxy::backend::status_reject;
use crate::proxy::backend::{Asked, Failure};
use crate::proxy::body::{full, read_limited, Body};
use crate::proxy::gate::Gate;
use crate::proxy::headers::{strip_hop_by_hop, strip_toolgate, to_backend};
use crate::proxy::stage::shape;
use crate::vocab::Reject;

/// The request the backend receives: as it came, with toolgate's headers and, when
/// defaults were filled, the body [`with_defaults`].
pub fn exchange(
    parts: &Parts,
    body: Bytes,
    agent: &str,
    session: Option<&str>,
    tool: &str,
) -> Exchange {
    let mut headers = to_backend(&parts.headers, agent, session, tool);
    if !body.is_empty() {
        headers.insert(header::CONTENT_LENGTH, HeaderValue::from(body.len()));
    }
    let path_and_query = parts
        .uri
        .path_and_query()
        .map(|p| p.as_str())
        .unwrap_or("/")
        .to_string();
    Exchange {
        method: parts.method.clone(),
        path_and_query,
        headers,
        body,
    }
}

/// An idempotent call's response: streamed through, or buffered and shaped.
pub async fn streamed(
    gate: &Gate,
    contract: &Contract,
    response: Response<Incoming>,
    sent: Instant,
) -> Result<Response<Body>, Reject> {
    if let Some(reject) = status_reject(response.status()) {
        // The backend's error body is dropped unread: it never reaches the agent.
        return Err(reject);
    }
    let (mut parts, incoming) = response.into_parts();
    clean_response_headers(&mut parts.headers);
    if !shape::needed(contract) || !parts.status.is_success() {
        return Ok(Response::from_parts(
            parts,
            incoming.map_err(Into::into).boxed(),
        ));
    }
    let remaining = contract
        .timeout
        .saturating_sub(sent.elapsed())
        .max(Duration::from_millis(1));
    let raw = read_limited(incoming, gate.limits.max_response_bytes, remaining)
        .await
        .map_err(|e| Failure::from(e).reject(Asked::call(contract.idempotent, contract.timeout)))?;
    let shaped = shape::shape_bytes(contract, &raw)?;
    parts.headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    parts
        .headers
        .insert(header::CONTENT_LENGTH, HeaderValue::from(shaped.len()));
    Ok(Response::from_parts(parts, full(shaped)))
}

/// A non-idempotent call's settled outcome, as this requester sees it: the same for the
/// first call and every duplicate (shaping is deterministic).
pub fn buffered(contract: &Contract, settled: &Settled) -> Result<Response<Body>, Reject> {
    let answer = match settled {
        Settled::Failed { reject, .. } => return Err(reject.clone()),
        Settled::Answered(answer) => answer,
    };
    if let Some(reject) = status_reject(answer.status) {
        return Err(reject);
    }
    let mut headers = answer.headers.clone();
    let body = if shape::needed(contract) && answer.status.is_success() {
        headers.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
        Bytes::from(shape::shape_bytes(contract, &answer.body)?)
    } else {
        answer.body.clone()
    };
    headers.insert(header::CONTENT_LENGTH, HeaderValue::from(body.len()));
    let mut response = Response::new(full(body));
    *response.status_mut() = answer.status;
    *response.headers_mut() = headers;
    Ok(response)
}

/// The JSON body the backend receives: the agent's fields plus filled defaults, without
/// the arguments that travel in the path or query.
pub fn with_defaults(args: &Value, url_keys: &[String]) -> Bytes {
    let mut fields = args.as_object().cloned().unwrap_or_default();
    for key in url_keys {
        fields.remove(key);
    }
    Bytes::from(serde_json::to_vec(&Value::Object(fields)).unwrap_or_default())
}

/// A backend can't set toolgate's headers (or hop-by-hop ones) on the agent's response.
fn clean_response_headers(headers: &mut HeaderMap) {
    strip_hop_by_hop(headers);
    strip_toolgate(headers);
}
