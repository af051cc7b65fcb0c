//! A contract's `dedupeKey`: a CEL expression over `args` and `agent` naming what makes
//! two calls of the tool "the same action" (the order a refund is for), whoever sends them.
//!
//! Compiled with the same bounds as rules (`super::rule`); evaluated after validation, on
//! the validated arguments. Its value must be a string, a number, a boolean, bytes, or a
//! list of those; it becomes the action's key as canonical JSON, so `5` and `5u` are one
//! key and `"5"` another. An expression that fails to evaluate refuses the call
//! (`POLICY_DENIED`, rule `dedupeKey`): a key that can't be computed can't be enforced.

use cel::Value;
use serde_json::Value as Json;
use std::borrow::Cow;

use super::rule::{Bindings, CompiledRule};
use crate::crd::Rule;
use crate::vocab::{Code, Reject};

/// The rule name a refusal of an unusable key carries.
pub const RULE: &str = "dedupeKey";

pub struct ActionKey {
    expression: CompiledRule,
}

impl std::fmt::Debug for ActionKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("ActionKey")
            .field(&self.expression.source)
            .finish()
    }
}

impl ActionKey {
    pub fn compile(source: &str) -> Result<ActionKey, String> {
        let expression = CompiledRule::compile(&Rule {
            name: RULE.into(),
            expr: source.into(),
            message: None,
            recovery: None,
        })?;
        let reads = expression.reads;
        if reads.task || reads.session || reads.request {
            return Err("dedupeKey may read only args and agent".into());
        }
        Ok(ActionKey { expression })
    }

    pub fn source(&self) -> &str {
        &self.expression.source
    }

    /// The action `args` (validated) and `agent` (its claims) name, as a key.
    pub fn evaluate(&self, args: &Json, agent: impl FnOnce() -> Json) -> Result<String, Reject> {
        let reads = self.expression.reads;
        let bindings = Bindings {
            args: reads.args.then_some(Cow::Borrowed(args)),
            args_fields: Some(&self.expression.args),
            agent: reads.agent.then(|| Cow::Owned(agent())),
            ..Bindings::default()
        };
        let value = bindings
            .scope(|scope| self.expression.value_in(scope))
            .and_then(|v| canonical(&v));
        value.map(|v| v.to_string()).map_err(|why| {
            Reject::new(
                Code::PolicyDenied,
                format!(
                    "the tool's dedupeKey ({}) can't be computed for these arguments: {why}",
                    self.source()
                ),
            )
            .with_rule(RULE)
        })
    }
}

fn canonical(value: &Value) -> Result<Json, String> {
    Ok(match value {
        Value::Int(n) => Json::from(*n),
        Value::UInt(n) => Json::from(*n),
        Value::Float(f) => serde_json::Number::from_f64(*f)
            .map(Json::Number)
            .ok_or("it evaluated to a number that is not finite")?,
        Value::String(s) => Json::String(s.to_string()),
        Value::Bool(b) => Json::Bool(*b),
        Value::Bytes(b) => Json::String(hex::encode(b.as_slice())),
        Value::List(items) => Json::Array(items.iter().map(canonical).collect::<Result<_, _>>()?),
        Value::Null => return Err("it evaluated to null".into()),
        other => {
            return Err(format!(
                "it evaluated to a {}; use a string, a number, a boolean or a list of them",
                other.type_of()
            ))
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn key(source: &str, args: Json) -> Result<String, Reject> {
        ActionKey::compile(source)
            .unwrap()
            .evaluate(&args, || json!({"id": "ops-bot"}))
    }

    #[test]
    fn keys_are_canonical_values() {
        assert_eq!(
            key("args.order_id", json!({"order_id": "A-1"})).unwrap(),
            r#""A-1""#
        );
        assert_eq!(key("args.n", json!({"n": 5})).unwrap(), "5");
        assert_eq!(
            key("[args.order_id, agent.id]", json!({"order_id": 7})).unwrap(),
            r#"[7,"ops-bot"]"#
        );
        let e = key("args.missing", json!({})).unwrap_err();
        assert_eq!(
            (e.code, e.rule.as_deref()),
            (Code::PolicyDenied, Some(RULE))
        );
        assert!(key("args", json!({"a": 1})).is_err(), "a map is not a key");
    }

    #[test]
    fn only_args_and_agent_may_be_read() {
        assert!(ActionKey::compile("session.id").is_err());
        assert!(ActionKey::compile("request.path").is_err());
        assert!(ActionKey::compile("nope.x").is_err());
        assert!(ActionKey::compile("args.order_id").is_ok());
    }
}
