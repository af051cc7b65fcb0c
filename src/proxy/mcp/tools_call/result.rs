//! A tools/call's result shaped by its contract: `structuredContent` held to `output`
//! and redacted with `redact`; a live answer's ([`shape_answer`]) or the one an
//! at-most-once call kept for its duplicates ([`from_kept`]).
//!
//! At most once (`idempotent: false`, the default for MCP-served tools): the forward path
//! sends the first call once, detached, the backend keeping its unshaped JSON-RPC answer
//! (`Keep::Answer`, `backend::collect`), and every duplicate gets that answer under its
//! own request id, marked `X-Toolgate-Replayed: true`. Shaping runs per delivery, so a
//! policy reload between two duplicates is honoured.
//!
//! Shaping a result also rewrites its `content` to the shaped JSON as one text item: the
//! SDKs put the same data there, and a redacted field must not survive in the text copy.
//! A result with `isError: true` is the tool's own error for the model: it is redacted
//! but not held to `output`. When shaping is needed, a successful result without
//! `structuredContent` is refused (`OUTPUT_CONTRACT_VIOLATION`): toolgate can't check it.

use http::StatusCode;
use serde_json::{json, Map, Value};

use crate::limits::dedupe::Settled;
use crate::policy::contract::Contract;
use crate::proxy::backend::collect::with_id;
use crate::proxy::mcp::reply::Refusal;
use crate::proxy::stage::shape;
use crate::vocab::{Code, Reject};

/// Shapes the response to a tools/call; JSON-RPC errors pass as they are.
pub fn shape_answer(contract: &Contract, mut message: Value) -> Result<Value, Reject> {
    if !shape::needed(contract) {
        return Ok(message);
    }
    let Some(result) = message.get_mut("result").and_then(Value::as_object_mut) else {
        return Ok(message);
    };
    shape_result(contract, result)?;
    Ok(message)
}

/// The JSON-RPC answer for request `id`, shaped, from a kept outcome; the HTTP status
/// rides along for JSON-RPC errors an upstream sent with a 4xx.
pub fn from_kept(
    settled: &Settled,
    contract: &Contract,
    id: &Value,
) -> Result<(StatusCode, Value), Refusal> {
    match settled {
        Settled::Failed { reject, .. } => Err(Refusal::of_call(reject.clone())),
        Settled::Answered(buffered) if !buffered.status.is_success() => {
            Ok((buffered.status, with_id(&buffered.body, id)))
        }
        Settled::Answered(buffered) => {
            let message = with_id(&buffered.body, id);
            let shaped = shape_answer(contract, message).map_err(Refusal::of_call)?;
            Ok((StatusCode::OK, shaped))
        }
    }
}

fn shape_result(contract: &Contract, result: &mut Map<String, Value>) -> Result<(), Reject> {
    // A round asking for input (2026-07-28) is not the tool's result: nothing to hold to
    // `output` yet. Its requests pass; the final round is shaped.
    if result.get("resultType").and_then(Value::as_str) == Some("input_required") {
        return Ok(());
    }
    let is_error = result.get("isError") == Some(&Value::Bool(true));
    let structured = result.remove("structuredContent").filter(|s| !s.is_null());
    let Some(structured) = structured else {
        if is_error {
            return Ok(());
        }
        return Err(Reject::new(
            Code::OutputContractViolation,
            "the tool's result has no structuredContent to check against its contract",
        ));
    };
    let shaped = if is_error {
        let mut redacted = structured;
        contract.redact.iter().for_each(|r| r.apply(&mut redacted));
        redacted
    } else {
        shape::shape(contract, structured)?
    };
    let text = serde_json::to_string(&shaped).unwrap_or_default();
    result.insert("content".into(), json!([{"type": "text", "text": text}]));
    result.insert("structuredContent".into(), shaped);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::crd::ToolContractSpec;

    fn mk_contract(spec: Value) -> Contract {
        let spec: ToolContractSpec = serde_json::from_value(spec).unwrap();
        Contract::compile("ToolContract/t".into(), &spec).unwrap()
    }

    fn mk_logs() -> Contract {
        mk_contract(json!({
            "tool": "read_logs",
            "output": {"type": "object", "properties": {"lines": {"type": "array"}}},
            "redact": ["/lines/*/client_ip"]
        }))
    }

    fn mk_answer(result: Value) -> Value {
        json!({"jsonrpc": "2.0", "id": 1, "result": result})
    }

    #[test]
    fn shapes_structured_content_and_its_text_copy() {
        let raw = json!({"lines": [{"msg": "m", "client_ip": "10.0.0.1"}], "host": "db-7"});
        let answer = mk_answer(json!({
            "content": [{"type": "text", "text": raw.to_string()}],
            "structuredContent": raw,
        }));
        let shaped = shape_answer(&mk_logs(), answer).unwrap();
        let expected = json!({"lines": [{"msg": "m", "client_ip": "[REDACTED]"}]});
        assert_eq!(shaped["result"]["structuredContent"], expected);
        let text = shaped["result"]["content"][0]["text"].as_str().unwrap();
        assert!(
            !text.contains("10.0.0.1") && !text.contains("db-7"),
            "{text}"
        );
        assert_eq!(shaped["id"], 1);
    }

    #[test]
    fn unshaped_tools_and_errors_pass_unchanged() {
        let plain = mk_contract(json!({"tool": "echo"}));
        let answer = mk_answer(json!({"content": [{"type": "text", "text": "hi"}]}));
        assert_eq!(shape_answer(&plain, answer.clone()).unwrap(), answer);
        let error = json!({"jsonrpc": "2.0", "id": 1, "error": {"code": -32602, "message": "x"}});
        assert_eq!(shape_answer(&mk_logs(), error.clone()).unwrap(), error);
    }

    #[test]
    fn results_that_cannot_be_checked_are_refused() {
        let text_only = mk_answer(json!({"content": [{"type": "text", "text": "x"}]}));
        let e = shape_answer(&mk_logs(), text_only).unwrap_err();
        assert_eq!(e.code, Code::OutputContractViolation);
        let broken = mk_answer(json!({"structuredContent": {"lines": 3}}));
        assert_eq!(
            shape_answer(&mk_logs(), broken).unwrap_err().code,
            Code::OutputContractViolation
        );
    }

    #[test]
    fn a_round_asking_for_input_is_not_held_to_output() {
        let answer = mk_answer(json!({"resultType": "input_required", "requestState": "r1",
            "inputRequests": {"confirm": {"method": "elicitation/create"}}}));
        assert_eq!(shape_answer(&mk_logs(), answer.clone()).unwrap(), answer);
    }

    #[test]
    fn tool_errors_are_redacted_not_validated() {
        let answer = mk_answer(json!({
            "isError": true,
            "structuredContent": {"error": "nope", "lines": [{"client_ip": "10.0.0.9"}]},
        }));
        let shaped = shape_answer(&mk_logs(), answer).unwrap();
        let s = &shaped["result"]["structuredContent"];
        assert_eq!(s["error"], "nope");
        assert_eq!(s["lines"][0]["client_ip"], "[REDACTED]");
        let bare = mk_answer(json!({"isError": true, "content": []}));
        assert!(shape_answer(&mk_logs(), bare).is_ok());
    }
}
