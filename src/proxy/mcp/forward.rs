//! Forwarding MCP traffic to the upstream, and passing through what toolgate doesn't
//! rewrite: GET streams, DELETE, and the answers to messages that pass (`initialize`,
//! `ping`, `server/discover`, notifications, responses, granted methods). Those answers
//! stream back as they arrive, never buffered.
//!
//! The upstream receives the agent's headers cleaned as for REST (no credential, no
//! inbound `X-Toolgate-*`, stamped with agent and session) and with its own `Host`: MCP
//! servers guard against DNS rebinding and refuse a `Host` that isn't theirs.

use bytes::Bytes;
use http::{header, HeaderMap, HeaderValue, Method, Response};
use http_body_util::BodyExt;
use hyper::body::Incoming;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::Value;

use super::answer;
use super::jsonrpc::Message;
use super::reply::{self, Refusal};
use super::tools_call::result::shape_answer;
use super::{routing_headers, Inbound};
use crate::policy::Snapshot;
use crate::proxy::backend::collect;
use crate::proxy::backend::failure::unanswered_status;
use crate::proxy::backend::{Asked, Failure};
use crate::proxy::body::Body;
use crate::proxy::gate::Gate;
use crate::proxy::headers::{strip_hop_by_hop, strip_toolgate, to_backend, MCP_SESSION, TOOL};
use crate::proxy::outcome::Outcome;
use crate::vocab::Reject;

/// How long a passing message may take to get its response head (its body then streams
/// without a deadline: a GET stream lives as long as the session).
pub const PASS_TIMEOUT: Duration = Duration::from_secs(30);

/// What to send upstream besides the agent's headers.
pub struct Outbound<'a> {
    pub method: Method,
    pub tool: Option<&'a str>,
    pub body: Bytes,
    /// One element of a batch: the request's routing headers described the batch.
    pub split: bool,
    pub timeout: Duration,
}

pub async fn send(ex: &Inbound<'_>, out: Outbound<'_>) -> Result<Response<Incoming>, Failure> {
    let (path, headers) = outbound(ex, &out);
    ex.gate
        .upstream
        .send(out.method, &path, headers, out.body, out.timeout)
        .await
}

/// The path and headers an outbound message carries: the agent's headers, cleaned and
/// stamped, with the upstream's own Host.
pub fn outbound(ex: &Inbound<'_>, out: &Outbound<'_>) -> (String, HeaderMap) {
    let mut headers = to_backend(
        &ex.parts.headers,
        &ex.agent.id,
        ex.session,
        out.tool.unwrap_or_default(),
    );
    if out.tool.is_none() {
        headers.remove(TOOL);
        // A tool call's client span sets its own; anything else passed carries the
        // request's trace, the `traceId` of its audit record.
        crate::telemetry::spans::stamp(ex.trace_id(), &mut headers);
    }
    // The upstream's own Host, set from its URL by the client.
    headers.remove(header::HOST);
    if out.split {
        headers.remove(routing_headers::METHOD);
        headers.remove(routing_headers::NAME);
    }
    if !out.body.is_empty() {
        headers.insert(header::CONTENT_LENGTH, HeaderValue::from(out.body.len()));
    }
    let path = ex
        .parts
        .uri
        .path_and_query()
        .map(|p| p.as_str())
        .unwrap_or("/")
        .to_string();
    (path, headers)
}

/// A backend can't set toolgate's headers (or hop-by-hop ones) on the agent's response.
pub fn clean(headers: &mut HeaderMap) {
    strip_hop_by_hop(headers);
    strip_toolgate(headers);
}

/// The upstream's response, streamed to the agent as it comes.
pub fn stream_through(response: Response<Incoming>) -> Response<Body> {
    let (mut parts, incoming) = response.into_parts();
    clean(&mut parts.headers);
    Response::from_parts(parts, incoming.map_err(Into::into).boxed())
}

/// GET (the server's event stream) and DELETE (session end). A GET that resumes a broken
/// stream may replay responses: one that answers a call of this session is shaped by
/// that call's contract ([`Replayed`]), any other is dropped.
pub async fn stream(ex: &Inbound<'_>, outcome: &mut Outcome) -> Result<Response<Body>, Reject> {
    let method = ex.parts.method.clone();
    let request = Outbound {
        method: method.clone(),
        tool: None,
        body: Bytes::new(),
        split: false,
        timeout: PASS_TIMEOUT,
    };
    let response = send(ex, request)
        .await
        .map_err(|f| f.reject(Asked::message(PASS_TIMEOUT)))?;
    outcome.passed();
    outcome.answered(response.status().as_u16());
    let response = match answered(response).await {
        Passed::Through(response) => response,
        Passed::Rpc(response) => return Ok(response),
        Passed::Refused(reject) => return Err(reject),
    };
    if method == Method::DELETE && response.status().is_success() {
        if let Some(session) = ex.mcp_session() {
            ex.gate.mcp_sessions.end(session);
            if let Some(shared) = &ex.gate.shared {
                shared.end_owner(session).await;
            }
        }
    }
    let resumed = ex.parts.headers.contains_key("last-event-id");
    if method == Method::GET && resumed && response.status().is_success() {
        let (mut parts, incoming) = response.into_parts();
        clean(&mut parts.headers);
        parts.headers.remove(header::CONTENT_LENGTH);
        let replayed = Replayed {
            gate: ex.gate.clone(),
            snapshot: ex.snapshot.clone(),
            session: ex.mcp_session().unwrap_or_default().to_string(),
            trace_id: ex.trace_id().to_string(),
            modern: ex.modern,
        };
        let body = answer::resumed(incoming, replayed, ex.gate.limits.max_response_bytes);
        return Ok(Response::from_parts(parts, body));
    }
    Ok(stream_through(response))
}

/// Forwards one message that passes, streaming its answer back. The session an
/// `initialize` opens is recorded as this agent's.
pub async fn pass(
    ex: &Inbound<'_>,
    message: &Message,
    body: Bytes,
    outcome: &mut Outcome,
) -> Response<Body> {
    let request = Outbound {
        method: Method::POST,
        tool: None,
        body,
        split: false,
        timeout: PASS_TIMEOUT,
    };
    let sent = Instant::now();
    let response = match send(ex, request).await {
        Ok(response) => response,
        Err(failure) => {
            let reject = failure.reject(Asked::message(PASS_TIMEOUT));
            let refusal = Refusal::failed(reject);
            return ex.refuse(outcome, refusal, &message.reply_id());
        }
    };
    tracing::debug!(elapsed = ?sent.elapsed(), method = ?message.method, "mcp message passed");
    outcome.passed();
    outcome.answered(response.status().as_u16());
    let response = match answered(response).await {
        Passed::Through(response) => response,
        Passed::Rpc(response) => return response,
        Passed::Refused(reject) => {
            return ex.refuse(outcome, Refusal::failed(reject), &message.reply_id())
        }
    };
    if message.method.as_deref() == Some("initialize") && response.status().is_success() {
        let issued = response
            .headers()
            .get(MCP_SESSION)
            .and_then(|v| v.to_str().ok());
        if let Some(session) = issued {
            ex.gate.mcp_sessions.bind(session, &ex.agent.id);
            // Awaited: the client may name the session on another replica next.
            if let Some(shared) = &ex.gate.shared {
                shared
                    .bind_owner(session, &ex.agent.id, super::session::IDLE)
                    .await;
            }
        }
    }
    stream_through(response)
}

/// What of a passed message's answer reaches the agent: a success as it came; an error
/// only as the MCP server's protocol answer (a JSON-RPC error in a 4xx, passed as JSON
/// with its status), else the refusal its status maps to (`BACKEND_REJECTED`, keeping a
/// 404 or 405 so a client still sees its 404 for an unknown session and its 405 for a
/// server without a GET stream; 502 for any other 4xx). The backend's own error page
/// and headers (a stack trace, an internal host, a cookie, its `WWW-Authenticate`)
/// never reach the agent, as for a tool call.
async fn answered(response: Response<Incoming>) -> Passed {
    let status = response.status();
    if status.is_success() {
        return Passed::Through(response);
    }
    let Some((status, bytes)) = collect::rpc_error(response, PASS_TIMEOUT).await else {
        let reject = unanswered_status(status).0;
        // 404 (a session the server no longer knows) and 405 (no GET stream) tell a
        // client what to do next; any other 4xx is the server's trouble with toolgate,
        // not the agent's: a 401 kept would send a client with a good token to re-auth.
        return Passed::Refused(match status.as_u16() {
            404 | 405 => reject,
            400..=499 => reject.with_status(502),
            _ => reject,
        });
    };
    let mut response = reply::json_bytes(bytes);
    *response.status_mut() = status;
    Passed::Rpc(response)
}

/// What [`answered`] makes of a passed message's answer.
enum Passed {
    /// A success, streamed through.
    Through(Response<Incoming>),
    /// The server's JSON-RPC error, read whole.
    Rpc(Response<Body>),
    /// Anything else that isn't a success.
    Refused(Reject),
}

/// Forwards one request of a batch and collects its answer (`None` for notifications and
/// responses, which get none).
pub async fn collect(
    ex: &Inbound<'_>,
    message: &Message,
    timeout: Duration,
) -> Result<Value, Refusal> {
    let id = message.reply_id();
    let request = Outbound {
        method: Method::POST,
        tool: None,
        body: Bytes::from(message.to_bytes()),
        split: true,
        timeout,
    };
    let response = send(ex, request)
        .await
        .map_err(|f| Refusal::failed(f.reject(Asked::message(timeout))))?;
    let status = response.status();
    if !status.is_success() {
        return match collect::rpc_error(response, timeout).await {
            Some((_, bytes)) => Ok(collect::with_id(&bytes, &id)),
            None => Err(Refusal::failed(unanswered_status(status).0)),
        };
    }
    let deadline = tokio::time::Instant::now() + timeout;
    collect::collect(response, &id, ex.gate.limits.max_response_bytes, deadline)
        .await
        .map_err(|f| Refusal::failed(f.reject(Asked::message(timeout))))
}

/// Forwards a notification or response of a batch; nothing answers it.
pub async fn notify(ex: &Inbound<'_>, message: &Message) {
    let request = Outbound {
        method: Method::POST,
        tool: None,
        body: Bytes::from(message.to_bytes()),
        split: true,
        timeout: PASS_TIMEOUT,
    };
    if let Err(failure) = send(ex, request).await {
        tracing::debug!(?failure, "a batched notification did not reach the backend");
    }
}

/// The responses a resumed stream replays, tied back to the calls of the session that
/// they answer.
struct Replayed {
    gate: Arc<Gate>,
    snapshot: Option<Arc<Snapshot>>,
    session: String,
    trace_id: String,
    modern: bool,
}

impl answer::Rewrite for Replayed {
    fn answer(&mut self, message: Value) -> Value {
        message
    }

    fn failed(&mut self, _: Failure) -> Value {
        Value::Null
    }

    fn replayed(&mut self, message: Value) -> Option<Value> {
        if !answers_a_call(&message) {
            return None;
        }
        let id = message.get("id")?;
        let tool = self.gate.mcp_pending.tool(&self.session, id)?;
        let snapshot = self.snapshot.as_ref()?;
        let contract = snapshot.contract(snapshot.tool(&tool)?);
        let id = id.clone();
        Some(match shape_answer(contract, message) {
            Ok(shaped) => shaped,
            Err(reject) => Refusal::of_call(reject).message(&id, &self.trace_id, self.modern),
        })
    }
}

/// Whether a replayed message can be the answer to a tools/call: an error, a result with
/// `content`, or a round asking for input. Ids are the client's to choose, so a listing
/// replayed under a call's id must not pass for the call's answer.
fn answers_a_call(message: &Value) -> bool {
    if message.get("error").is_some() {
        return true;
    }
    message.get("result").is_some_and(|r| {
        r.get("tools").is_none()
            && (r.get("content").is_some_and(Value::is_array)
                || r.get("resultType").and_then(Value::as_str) == Some("input_required"))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn only_a_call_answer_is_taken_for_one() {
        let answer = |result: Value| json!({"jsonrpc": "2.0", "id": 5, "result": result});
        assert!(answers_a_call(&answer(json!({"content": []}))));
        assert!(answers_a_call(&answer(
            json!({"resultType": "input_required"})
        )));
        assert!(answers_a_call(
            &json!({"jsonrpc": "2.0", "id": 5, "error": {"code": 1}})
        ));
        let listing = answer(json!({"tools": [{"name": "x"}], "resultType": "complete"}));
        assert!(!answers_a_call(&listing));
        assert!(!answers_a_call(&answer(
            json!({"content": [], "tools": []})
        )));
        assert!(!answers_a_call(&answer(json!({"resources": []}))));
    }
}
