//! shape: what the agent sees of a result. With an `output` schema the result must match
//! it (else `OUTPUT_CONTRACT_VIOLATION`: a broken backend must not feed the model), and
//! fields it doesn't declare are dropped; `redact` pointers are masked last.

use serde_json::Value;

use crate::policy::contract::Contract;
use crate::vocab::{Code, Reject};

/// Whether a result must be buffered and rewritten at all.
pub fn needed(contract: &Contract) -> bool {
    contract.output.is_some() || !contract.redact.is_empty()
}

pub fn shape(contract: &Contract, mut result: Value) -> Result<Value, Reject> {
    if let Some(output) = &contract.output {
        if !output.is_valid(&result) {
            let first = output
                .violations(&result)
                .into_iter()
                .next()
                .map(|v| v.detail.pointer)
                .unwrap_or_default();
            // Which field broke is useful to operators; the agent only learns that it did.
            tracing::warn!(tool = %contract.tool, pointer = %first, "backend response breaks the output schema");
            return Err(Reject::new(
                Code::OutputContractViolation,
                "the tool's result does not match its declared output",
            ));
        }
        output.project(&mut result);
    }
    for redaction in &contract.redact {
        redaction.apply(&mut result);
    }
    Ok(result)
}

/// Shapes a raw body: it must be JSON when shaping is needed.
pub fn shape_bytes(contract: &Contract, body: &[u8]) -> Result<Vec<u8>, Reject> {
    let value: Value = serde_json::from_slice(body).map_err(|_| {
        Reject::new(
            Code::OutputContractViolation,
            "the tool's result is not JSON",
        )
    })?;
    let shaped = shape(contract, value)?;
    Ok(serde_json::to_vec(&shaped).unwrap_or_default())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::crd::ToolContractSpec;
    use serde_json::json;

    fn mk_contract() -> Contract {
        let spec: ToolContractSpec = serde_json::from_value(json!({
            "tool": "read_logs",
            "output": {"type": "object", "required": ["lines"], "properties": {"lines": {"type": "array"}}},
            "redact": ["/lines/*/client_ip"]
        }))
        .unwrap();
        Contract::compile("ToolContract/t".into(), &spec).unwrap()
    }

    #[test]
    fn drops_undeclared_and_masks() {
        let out = shape(
            &mk_contract(),
            json!({"lines": [{"client_ip": "10.1.1.1", "msg": "x"}], "host": "db-7"}),
        )
        .unwrap();
        assert_eq!(
            out,
            json!({"lines": [{"client_ip": "[REDACTED]", "msg": "x"}]})
        );
    }

    #[test]
    fn violation_and_non_json_are_refused() {
        assert_eq!(
            shape(&mk_contract(), json!({"lines": 3})).unwrap_err().code,
            Code::OutputContractViolation
        );
        assert_eq!(
            shape_bytes(&mk_contract(), b"<html>").unwrap_err().code,
            Code::OutputContractViolation
        );
    }
}
