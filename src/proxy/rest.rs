//! forward + shape for REST calls: the request goes to the backend as it came (method,
//! path, query, body; defaults filled into a JSON body), and the response comes back
//! streamed, or buffered and shaped when the contract has `output` or `redact`.
//!
//! An idempotent tool's call is counted against its session, then sent with retries
//! ([`send_retrying`]). A non-idempotent one goes through [`once::run`]: duplicates join
//! the first call, only the first is counted and sent, and its buffered answer is what
//! every one of them gets.

use bytes::Bytes;
use http::request::Parts;
use http::{header, HeaderMap, HeaderValue, Response};
use http_body_util::BodyExt;
use hyper::body::Incoming;
use serde_json::Value;
use std::time::{Duration, Instant};

use crate::limits::dedupe::Settled;
use crate::limits::{once, Call};
use crate::policy::agent_policy::Policy;
use crate::policy::contract::Contract;
use crate::proxy::body::{full, read_limited, Body, ReadError};
use crate::proxy::exchange::{send_buffered, send_retrying, Exchange, MAX_BUFFERED_BYTES};
use crate::proxy::gate::Gate;
use crate::proxy::headers::{strip_hop_by_hop, strip_toolgate, to_backend};
use crate::proxy::outcome::Outcome;
use crate::proxy::stage::session;
use crate::proxy::stage::shape;
use crate::proxy::stage::validate::Arguments;
use crate::proxy::upstream::{failure_reject, status_reject};
use crate::vocab::{Code, Reject};

pub struct Forward<'a> {
    pub parts: &'a Parts,
    pub body: Bytes,
    pub json_body: bool,
    pub url_keys: &'a [String],
    pub args: &'a Arguments,
    pub agent: &'a str,
    pub session: Option<&'a str>,
    pub contract: &'a Contract,
    /// The call as limits see it, and the policy whose session limits it meets.
    pub call: &'a Call<'a>,
    pub policy: &'a Policy,
}

pub async fn forward(
    gate: &Gate,
    call: Forward<'_>,
    outcome: &mut Outcome,
) -> Result<Response<Body>, Reject> {
    let contract = call.contract;
    let mut exchange = exchange(&call);
    let route = contract
        .http
        .as_ref()
        .map_or(exchange.path_and_query.as_str(), |(_, t)| t.as_str());
    let span_name = format!("{} {route}", exchange.method);
    let client_span = gate
        .tracing
        .start_client(&outcome.span, span_name, &mut exchange.headers);
    if contract.idempotent {
        session::admit(&gate.ledger, call.call, call.policy, outcome)?;
        let sent = Instant::now();
        let response = send_retrying(&gate.upstream, &exchange, contract.timeout).await;
        client_span.end(response.as_ref().ok().map(|r| r.status().as_u16()));
        let response = response.map_err(|f| failure_reject(f, true, contract.timeout))?;
        gate.metrics.record_upstream(&contract.tool, sent.elapsed());
        return respond_streamed(gate, contract, response, sent, outcome).await;
    }
    // Not idempotent: at most once. The send runs detached, bounded by the dedupe window,
    // so a duplicate can still get its answer after this request stops waiting.
    let upstream = gate.upstream.clone();
    let metrics = gate.metrics.clone();
    let tool = contract.tool.clone();
    let window = contract.dedupe_window.max(contract.timeout);
    let max_bytes = gate.limits.max_response_bytes.min(MAX_BUFFERED_BYTES);
    let send = async move {
        let sent = Instant::now();
        let settled = send_buffered(upstream, exchange, window, max_bytes).await;
        metrics.record_upstream(&tool, sent.elapsed());
        client_span.end(match &settled {
            Settled::Answered(answer) => Some(answer.status.as_u16()),
            Settled::Failed { .. } => None,
        });
        settled
    };
    let admit = || session::admit(&gate.ledger, call.call, call.policy, outcome);
    let delivered = once::run(
        gate.ledger.dedupe(),
        call.call,
        contract.dedupe_window,
        contract.timeout,
        admit,
        send,
    )
    .await?;
    outcome.replayed = delivered.replayed;
    respond_buffered(contract, &delivered.settled, outcome)
}

/// The request the backend receives: as it came, with toolgate's headers and the filled
/// defaults.
fn exchange(call: &Forward<'_>) -> Exchange {
    let mut headers = to_backend(
        &call.parts.headers,
        call.agent,
        call.session,
        &call.contract.tool,
    );
    let body = if call.json_body && call.args.filled {
        body_with_defaults(call.args.value(), call.url_keys)
    } else {
        call.body.clone()
    };
    if !body.is_empty() {
        headers.insert(header::CONTENT_LENGTH, HeaderValue::from(body.len()));
    }
    let path_and_query = call
        .parts
        .uri
        .path_and_query()
        .map(|p| p.as_str())
        .unwrap_or("/")
        .to_string();
    Exchange {
        method: call.parts.method.clone(),
        path_and_query,
        headers,
        body,
    }
}

/// An idempotent call's response: streamed through, or buffered and shaped.
async fn respond_streamed(
    gate: &Gate,
    contract: &Contract,
    response: Response<Incoming>,
    sent: Instant,
    outcome: &mut Outcome,
) -> Result<Response<Body>, Reject> {
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

/// A non-idempotent call's settled outcome, as this requester sees it: the same for the
/// first call and every duplicate (shaping is deterministic).
fn respond_buffered(
    contract: &Contract,
    settled: &Settled,
    outcome: &mut Outcome,
) -> Result<Response<Body>, Reject> {
    let answer = match settled {
        Settled::Failed { reject, .. } => return Err(reject.clone()),
        Settled::Answered(answer) => answer,
    };
    outcome.upstream_status = Some(answer.status.as_u16());
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
