//! forward + shape for REST calls: the request goes to the backend as it came (method,
//! path, query, body; defaults filled into a JSON body), and the response comes back
//! streamed, or buffered and shaped when the contract has `output` or `redact`.

use bytes::Bytes;
use http::request::Parts;
use http::{header, HeaderMap, HeaderValue, Response};
use http_body_util::BodyExt;
use serde_json::Value;
use std::time::{Duration, Instant};

use crate::control::contract::Contract;
use crate::proxy::body::{full, read_limited, Body, ReadError};
use crate::proxy::gate::Gate;
use crate::proxy::headers::{strip_hop_by_hop, strip_toolgate, to_backend};
use crate::proxy::outcome::Outcome;
use crate::proxy::reject::{Code, Reject};
use crate::proxy::stage::shape;
use crate::proxy::stage::validate::Arguments;
use crate::proxy::upstream::{failure_reject, status_reject};

pub struct Forward<'a> {
    pub parts: &'a Parts,
    pub body: Bytes,
    pub json_body: bool,
    pub url_keys: &'a [String],
    pub args: &'a Arguments,
    pub agent: &'a str,
    pub session: Option<&'a str>,
    pub contract: &'a Contract,
}

pub async fn forward(
    gate: &Gate,
    call: Forward<'_>,
    outcome: &mut Outcome,
) -> Result<Response<Body>, Reject> {
    let contract = call.contract;
    let mut headers = to_backend(
        &call.parts.headers,
        call.agent,
        call.session,
        &contract.tool,
    );
    let body = if call.json_body && call.args.filled {
        body_with_defaults(&call.args.value, call.url_keys)
    } else {
        call.body
    };
    if !body.is_empty() {
        headers.insert(header::CONTENT_LENGTH, HeaderValue::from(body.len()));
    }
    let path = call
        .parts
        .uri
        .path_and_query()
        .map(|p| p.as_str())
        .unwrap_or("/");
    let route = contract
        .http
        .as_ref()
        .map(|(_, template)| template.as_str())
        .unwrap_or(path);
    let client_span = gate.tracing.start_client(
        &outcome.span,
        format!("{} {route}", call.parts.method),
        &mut headers,
    );
    let sent = Instant::now();
    let response = gate
        .upstream
        .send(
            call.parts.method.clone(),
            path,
            headers,
            body,
            contract.timeout,
        )
        .await;
    client_span.end(response.as_ref().ok().map(|r| r.status().as_u16()));
    let response =
        response.map_err(|f| failure_reject(f, contract.idempotent, contract.timeout))?;
    gate.metrics.record_upstream(&contract.tool, sent.elapsed());
    outcome.upstream_status = Some(response.status().as_u16());
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
        .map_err(|e| match e {
            ReadError::TimedOut => failure_reject(
                crate::proxy::upstream::Failure::TimedOut,
                contract.idempotent,
                contract.timeout,
            ),
            ReadError::TooLarge(n) => Reject::new(
                Code::OutputContractViolation,
                format!("the tool's result is larger than {n} bytes"),
            ),
            ReadError::Broken(_) => Reject::new(
                Code::BackendUnavailable,
                "the backend connection broke mid-response",
            ),
        })?;
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

/// The JSON body the backend receives: the agent's fields plus filled defaults, without
/// the arguments that travel in the path or query.
fn body_with_defaults(args: &Value, url_keys: &[String]) -> Bytes {
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
