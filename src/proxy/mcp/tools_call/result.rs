//! tools/call: the message becomes a proposal for the one call sequence
//! (`proxy::call::run`), the same a REST call runs; the answer's tool result then has
//! its `structuredContent` shaped with `output` / `redact`.
//!
//! Shaping a result also rewrites its `content` to the shaped JSON as one text item: the
//! SDKs put the same data there, and a redacted field must not survive in the text copy.
//! A result with `isError: true` is the tool's own error for the model: it is redacted
//! but not held to `output`. When shaping is needed, a successful result without
//! `structuredContent` is refused (`OUTPUT_CONTRACT_VIOLATION`): toolgate can't check it.

use bytes::Bytes;
use serde_json::{json, Map, Value};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use crate::limits::dedupe::{Flight, Settled};
use crate::limits::once::unknown_outcome;
use crate::policy::contract::Contract;
use crate::policy::schema::empty_args;
use crate::policy::{Snapshot, ToolId};
use crate::proxy::gate::Gate;
use crate::proxy::govern::{Proposal, Verdict};
use crate::proxy::mcp::jsonrpc::Message;
use crate::proxy::mcp::reply::Refusal;
use crate::proxy::mcp::Inbound;
use crate::proxy::outcome::Outcome;
use crate::proxy::stage::shape;
use crate::vocab::args::Args;
use crate::vocab::{Code, Reject};
use std::time::Duration;

/// The proposal a tools/call makes, and its tool: the message's `params.name` and
/// `params.arguments` (taken out of the message, which is forwarded as its original
/// bytes or rebuilt with the checked arguments, [`with_defaults`]) and its round.
pub fn proposal<'s>(
    ex: &'s Inbound<'_>,
    snapshot: &Snapshot,
    message: &mut Message,
) -> Result<(ToolId, Proposal<'s>), Refusal> {
    let params = message.params();
    let Some(name) = params.and_then(|p| p.get("name")).and_then(Value::as_str) else {
        return Err(Refusal::of_call(Reject::new(
            Code::MalformedRequest,
            "tools/call needs params.name, the name of the tool to call",
        )));
    };
    let Some(tool) = snapshot.tool(name) else {
        return Err(Refusal::of_call(Reject::new(
            Code::UnknownTool,
            format!("no tool named {name:?} is registered"),
        )));
    };
    let args = message
        .params_mut()
        .and_then(|p| p.remove("arguments"))
        .filter(|a| !a.is_null())
        .map_or_else(|| Args::from(empty_args()), Args::from);
    let proposal = Proposal {
        tool,
        args,
        round: round_of(message),
        idempotency_key: ex.idempotency_key,
        agent: ex.agent,
        method: ex.parts.method.as_str(),
        path: ex.parts.uri.path(),
        headers: &ex.parts.headers,
        session: ex.session,
        trace_id: &ex.trace_id,
    };
    Ok((tool, proposal))
}

/// The message the backend runs: what was checked, so filled defaults travel with the
/// call; else the message as it arrived (`original`).
pub fn with_defaults(message: &Message, verdict: &Verdict<'_>, original: Bytes) -> Bytes {
    if !verdict.args.filled {
        return original;
    }
    let mut object = message.object.clone();
    if let Some(Value::Object(params)) = object.get_mut("params") {
        params.insert("arguments".into(), verdict.args.value().clone());
    }
    Bytes::from(serde_json::to_vec(&object).unwrap_or_default())
}

/// What a retry of a multi-round call (2026-07-28) carries besides the arguments: the
/// answers to the server's `inputRequests` and its opaque `requestState`. Forwarded as
/// they came; they make the retry a new round rather than a duplicate.
fn round_of(message: &Message) -> Option<Value> {
    let params = message.params()?;
    let mut round = Map::new();
    for field in ["inputResponses", "requestState"] {
        if let Some(value) = params.get(field).filter(|v| !v.is_null()) {
            round.insert(field.into(), value.clone());
        }
    }
    (!round.is_empty()).then_some(Value::Object(round))
}

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

/// The audit record of a streamed call whose result turns out refused after the call's
/// own record was written (the response head had already gone to the agent).
pub struct FollowUp {
    gate: Arc<Gate>,
    /// The call's facts and its span; taken when a refusal records it.
    outcome: Option<Outcome>,
    /// A live lead's call, running detached: if the stream goes before its outcome is
    /// known (the client left), the outcome is still awaited and a failure recorded —
    /// unless the upstream ended its stream to be resumed (`resumed`), the result going
    /// to the client on the stream it resumes.
    watch: Option<(Arc<Flight>, tokio::time::Instant, Duration, Arc<AtomicBool>)>,
}

impl FollowUp {
    /// Takes over the call's span from `outcome`, to end it when the stream ends.
    pub fn of(gate: &Arc<Gate>, outcome: &mut Outcome) -> FollowUp {
        FollowUp {
            gate: gate.clone(),
            outcome: Some(outcome.follow_up()),
            watch: None,
        }
    }

    /// The stream is a live lead's: its call runs on in `flight`, which the lead waits
    /// for until `deadline` (its contract's `timeout`).
    pub fn watch(
        &mut self,
        flight: Arc<Flight>,
        deadline: tokio::time::Instant,
        timeout: Duration,
        resumed: Arc<AtomicBool>,
    ) {
        self.watch = Some((flight, deadline, timeout, resumed));
    }

    /// The tool answered `isError: true` in the stream: the span says so when it ends.
    pub fn tool_error(&mut self) {
        if let Some(outcome) = &mut self.outcome {
            outcome.tool_error();
        }
    }

    pub fn record(mut self, reject: &Reject) {
        let Some(mut outcome) = self.outcome.take() else {
            return;
        };
        tracing::warn!(tool = ?outcome.tool(), code = %reject.code, trace_id = %outcome.trace_id(), "streamed tool result refused");
        outcome.refused(reject);
        let gate = self.gate.clone();
        tokio::spawn(async move {
            outcome.record(&gate.metrics, &gate.audit).await;
        });
    }
}

impl Drop for FollowUp {
    /// The stream ended without a refusal (or its client left): the span ends as the call
    /// went.
    fn drop(&mut self) {
        let Some(mut outcome) = self.outcome.take() else {
            return;
        };
        let (Some((flight, deadline, timeout, resumed)), Ok(runtime)) =
            (self.watch.take(), tokio::runtime::Handle::try_current())
        else {
            return outcome.close(&self.gate.metrics);
        };
        if resumed.load(Ordering::Relaxed) {
            return outcome.close(&self.gate.metrics);
        }
        // The stream went before the call's outcome reached it: a failure of the call
        // that ran is still recorded, as it would have been in the stream.
        let gate = self.gate.clone();
        runtime.spawn(async move {
            let wait = deadline.saturating_duration_since(tokio::time::Instant::now());
            let failed = match flight.outcome(wait).await.as_deref() {
                Some(Settled::Failed { reject, .. }) => reject.clone(),
                Some(Settled::Answered(_)) => return outcome.close(&gate.metrics),
                // What the lead would have been told at its timeout.
                None => unknown_outcome(
                    timeout,
                    "the call may still complete; it will not be sent again",
                ),
            };
            outcome.refused(&failed);
            outcome.record(&gate.metrics, &gate.audit).await;
        });
    }
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
