//! validate: the arguments against the contract's input schema, defaults filled first so
//! rules and the backend see the same complete arguments. A schema that accepts any object
//! (`Schema::accepts_any_object`) has nothing to check or fill in an object, so such
//! arguments pass as they are, unparsed if they were.
//!
//! A call whose only problems are absent `required` properties is `MISSING_ARGUMENT`
//! (the agent should ask the user); any other violation is `INVALID_ARGUMENTS`.

use serde_json::Value;

use crate::policy::contract::Contract;
use crate::vocab::args::Args;
use crate::vocab::{Code, Reject};

/// Validated arguments, defaults filled; `filled` says whether defaults were added.
#[derive(Debug)]
pub struct Arguments {
    args: Args,
    pub filled: bool,
}

impl Arguments {
    /// Arguments forwarded without validation: what a shadow policy lets through.
    pub fn unchecked(args: Args) -> Arguments {
        Arguments {
            args,
            filled: false,
        }
    }

    pub fn value(&self) -> &Value {
        self.args.value()
    }

    pub fn args(&self) -> &Args {
        &self.args
    }

    pub fn into_args(self) -> Args {
        self.args
    }
}

pub fn validate(contract: &Contract, args: Args) -> Result<Arguments, Reject> {
    // Nothing to check or fill: the arguments stay as they came, unparsed if they were.
    if contract.input.accepts_any_object() && args.is_object() {
        return Ok(Arguments {
            args,
            filled: false,
        });
    }
    let mut args = args.into_value();
    let filled = contract.input.fill_defaults(&mut args);
    if contract.input.is_valid(&args) {
        return Ok(Arguments {
            args: Args::from(args),
            filled,
        });
    }
    let violations = contract.input.violations(&args);
    let only_missing = violations.iter().all(|v| v.detail.keyword == "required");
    let code = if only_missing {
        Code::MissingArgument
    } else {
        Code::InvalidArguments
    };
    let message = violations
        .first()
        .map(|v| v.message.clone())
        .unwrap_or_else(|| "the arguments do not match the tool's schema".into());
    Err(Reject::new(code, message).with_details(violations.into_iter().map(|v| v.detail).collect()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::crd::ToolContractSpec;
    use serde_json::json;

    fn mk_contract() -> Contract {
        let spec: ToolContractSpec = serde_json::from_value(json!({
            "tool": "read_logs",
            "input": {
                "type": "object", "additionalProperties": false, "required": ["service"],
                "properties": {
                    "service": {"type": "string", "enum": ["orders", "payments"]},
                    "window_minutes": {"type": "integer", "minimum": 1, "maximum": 43200, "default": 15}
                }
            }
        }))
        .unwrap();
        Contract::compile("ToolContract/t".into(), &spec).unwrap()
    }

    #[test]
    fn fills_defaults() {
        let args = validate(&mk_contract(), json!({"service": "orders"}).into()).unwrap();
        assert_eq!(args.value()["window_minutes"], 15);
        assert!(args.filled);
    }

    #[test]
    fn an_open_schema_leaves_objects_unparsed_but_checks_other_values() {
        let spec: ToolContractSpec =
            serde_json::from_value(json!({"tool": "t", "input": {"type": "object"}})).unwrap();
        let open = Contract::compile("ToolContract/t".into(), &spec).unwrap();
        let body = bytes::Bytes::from_static(br#"{"q":"x"}"#);
        let args = validate(&open, Args::from_object_body(body).unwrap()).unwrap();
        assert!(!args.args().is_parsed() && !args.filled);
        assert_eq!(args.value(), &json!({"q": "x"}));
        // MCP arguments can be any JSON value: one that isn't an object is validated.
        let e = validate(&open, json!("text").into()).unwrap_err();
        assert_eq!(e.code, Code::InvalidArguments);
    }

    #[test]
    fn missing_vs_invalid() {
        let e = validate(&mk_contract(), json!({}).into()).unwrap_err();
        assert_eq!(e.code, Code::MissingArgument);
        assert_eq!(e.details[0].pointer, "/service");
        let e = validate(
            &mk_contract(),
            json!({"service": "orders", "window_minutes": "30"}).into(),
        )
        .unwrap_err();
        assert_eq!(e.code, Code::InvalidArguments);
        assert_eq!(e.details[0].keyword, "type");
        let e = validate(&mk_contract(), json!({"window_minutes": "30"}).into()).unwrap_err();
        assert_eq!(
            e.code,
            Code::InvalidArguments,
            "a type error is not only a missing argument"
        );
    }
}
