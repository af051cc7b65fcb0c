//! The MCP rendering of the error contract (docs/errors.md): a [`Reject`] becomes a JSON-RPC
//! answer built from the same [`Reject::body`] that REST sends.
//!
//! - `UNKNOWN_TOOL` → error `-32602`, the body in `error.data`;
//! - malformed JSON-RPC → `-32700` / `-32600` (HTTP 400);
//! - `UNAUTHENTICATED` → HTTP 401 whose body is a JSON-RPC error (`data` = the body), so
//!   SDK clients surface the contract instead of a generic "server error";
//! - every other refusal of a tool call → `result` with `isError: true`, the body as
//!   `structuredContent` and as one text item, HTTP 200, so the model can self-correct.
//!
//! Refusals of other methods can't be tool results: they are JSON-RPC errors (`-32601`
//! for a method the policy doesn't grant, `-32603` when the backend failed).
//!
//! This file is the only one that decides a refusal's JSON-RPC form and code, and the
//! only one that builds its message: the rest of `proxy::mcp` names what happened
//! ([`Refusal::of_call`], [`Refusal::malformed`], [`Refusal::failed`] …) and hands the
//! refusal to `Inbound::refuse` (a single message) or `Inbound::refused` (a batch's
//! element), or to [`Refusal::message`] inside a stream's rewrite.

use http::{header, HeaderValue, Response, StatusCode};
use serde_json::{json, Value};

use crate::proxy::body::{full, Body};
use crate::vocab::{Code, Reject};

const PARSE_ERROR: i64 = -32700;
const INVALID_REQUEST: i64 = -32600;
const METHOD_NOT_FOUND: i64 = -32601;
const INVALID_PARAMS: i64 = -32602;
const INTERNAL_ERROR: i64 = -32603;
/// Protocol 2026-07-28: routing headers disagree with the body.
const HEADER_MISMATCH: i64 = -32020;
/// toolgate's code in the implementation-defined band (-32000..-32019) for a refused
/// credential; the HTTP 401 is the signal, the code only keeps the body valid JSON-RPC.
const UNAUTHENTICATED: i64 = -32010;

/// How a refusal is answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Form {
    /// A tool result with `isError: true`.
    ToolError,
    /// A JSON-RPC error with this code.
    Error(i64),
}

/// A refusal and the form it takes on the wire.
#[derive(Debug, Clone, PartialEq)]
pub struct Refusal {
    pub reject: Reject,
    pub form: Form,
}

impl Refusal {
    /// The form of a refused tool call (docs/errors.md, "MCP").
    pub fn of_call(reject: Reject) -> Refusal {
        let form = match reject.code {
            Code::UnknownTool => Form::Error(INVALID_PARAMS),
            Code::MalformedRequest => Form::Error(INVALID_REQUEST),
            Code::Unauthenticated => Form::Error(UNAUTHENTICATED),
            _ => Form::ToolError,
        };
        Refusal { reject, form }
    }

    /// A message that is not valid JSON-RPC, or a request refused before it is read as
    /// one (`-32600`).
    pub fn malformed(reject: Reject) -> Refusal {
        Refusal::error(INVALID_REQUEST, reject)
    }

    /// A body that is not JSON at all (`-32700`).
    pub fn unparsable(reject: Reject) -> Refusal {
        Refusal::error(PARSE_ERROR, reject)
    }

    /// A request without a credential toolgate accepts (HTTP 401, `-32010`).
    pub fn unauthenticated(reject: Reject) -> Refusal {
        Refusal::error(UNAUTHENTICATED, reject)
    }

    /// A method beyond tools that the agent's policy does not grant (`-32601`).
    pub fn not_granted(reject: Reject) -> Refusal {
        Refusal::error(METHOD_NOT_FOUND, reject)
    }

    /// Routing headers that disagree with the body (2026-07-28, `-32020`).
    pub fn header_mismatch(reject: Reject) -> Refusal {
        Refusal::error(HEADER_MISMATCH, reject)
    }

    /// A message other than a tool call that toolgate or the backend failed to answer
    /// (`-32603`): no policy loaded yet, the backend down or broken.
    pub fn failed(reject: Reject) -> Refusal {
        Refusal::error(INTERNAL_ERROR, reject)
    }

    fn error(code: i64, reject: Reject) -> Refusal {
        Refusal {
            reject,
            form: Form::Error(code),
        }
    }

    /// The JSON-RPC message answering request `id`.
    pub fn message(&self, id: &Value, trace_id: &str, modern: bool) -> Value {
        let body = self.reject.body(trace_id);
        match self.form {
            Form::ToolError => {
                let text = serde_json::to_string(&body).unwrap_or_default();
                let mut result = json!({
                    "content": [{"type": "text", "text": text}],
                    "structuredContent": body,
                    "isError": true,
                });
                if modern {
                    // 2026-07-28 results carry their type; older revisions don't know the key.
                    result["resultType"] = json!("complete");
                }
                json!({"jsonrpc": "2.0", "id": id, "result": result})
            }
            Form::Error(code) => json!({
                "jsonrpc": "2.0",
                "id": id,
                "error": {"code": code, "message": self.reject.message, "data": body},
            }),
        }
    }

    /// The HTTP status of a single-message answer. Tool errors are 200; protocol errors
    /// follow the revision: 2026-07-28 maps `-32602` → 400 and `-32601` → 404, older
    /// revisions answer both with 200 (a 404 there would read as "session terminated").
    pub fn status(&self, modern: bool) -> StatusCode {
        let status = match self.form {
            Form::ToolError => 200,
            Form::Error(INVALID_PARAMS) if modern => 400,
            Form::Error(METHOD_NOT_FOUND) if modern => 404,
            Form::Error(INVALID_PARAMS | METHOD_NOT_FOUND) => 200,
            // Everything else keeps the contract's status: 400 malformed, 401, 413, 503 …
            Form::Error(_) => self.reject.status(),
        };
        StatusCode::from_u16(status).unwrap_or(StatusCode::BAD_REQUEST)
    }

    /// The whole HTTP answer to a single message.
    pub fn response(&self, id: &Value, trace_id: &str, modern: bool) -> Response<Body> {
        json_response(self.status(modern), &self.message(id, trace_id, modern))
    }
}

/// A JSON body.
pub fn json_response(status: StatusCode, value: &Value) -> Response<Body> {
    let mut response = json_bytes(serde_json::to_vec(value).unwrap_or_default());
    *response.status_mut() = status;
    response
}

/// JSON bytes as a 200 response.
pub fn json_bytes(bytes: impl Into<bytes::Bytes>) -> Response<Body> {
    let mut response = Response::new(full(bytes));
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tool_refusals_are_results_with_the_body_twice() {
        let r = Refusal::of_call(Reject::new(Code::ToolNotAllowed, "no"));
        let m = r.message(&json!(9), "t1", false);
        assert_eq!(m["id"], 9);
        let result = &m["result"];
        assert_eq!(result["isError"], true);
        assert_eq!(
            result["structuredContent"]["error"]["code"],
            "TOOL_NOT_ALLOWED"
        );
        let text: Value =
            serde_json::from_str(result["content"][0]["text"].as_str().unwrap()).unwrap();
        assert_eq!(text, result["structuredContent"]);
        assert!(result.get("resultType").is_none());
        assert_eq!(r.status(false), 200);
        assert_eq!(
            r.message(&json!(9), "t1", true)["result"]["resultType"],
            "complete"
        );
    }

    #[test]
    fn unknown_tool_is_invalid_params_with_data() {
        let r = Refusal::of_call(Reject::new(Code::UnknownTool, "no tool x"));
        let m = r.message(&json!("a"), "t", false);
        assert_eq!(m["error"]["code"], INVALID_PARAMS);
        assert_eq!(m["error"]["data"]["error"]["code"], "UNKNOWN_TOOL");
        assert_eq!(m["error"]["data"]["error"]["traceId"], "t");
        assert_eq!(r.status(false), 200);
        assert_eq!(r.status(true), 400);
    }

    #[test]
    fn statuses_follow_the_form() {
        let malformed = Refusal::of_call(Reject::new(Code::MalformedRequest, "x"));
        assert_eq!(malformed.status(false), 400);
        let unauth = Refusal::of_call(Reject::new(Code::Unauthenticated, "x"));
        assert_eq!(unauth.status(false), 401);
        let gone = Refusal::error(
            INVALID_REQUEST,
            Reject::new(Code::MalformedRequest, "x").with_status(404),
        );
        assert_eq!(gone.status(false), 404);
        let down = Refusal::error(INTERNAL_ERROR, Reject::new(Code::BackendUnavailable, "x"));
        assert_eq!(down.status(false), 503);
        let denied = Refusal::error(METHOD_NOT_FOUND, Reject::new(Code::ToolNotAllowed, "x"));
        assert_eq!(
            (denied.status(false), denied.status(true)),
            (StatusCode::OK, StatusCode::NOT_FOUND)
        );
    }
}
