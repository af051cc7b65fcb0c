//! One OpenAPI operation as a draft: `tool` from `operationId` (snake_cased), else the
//! method and path; `description` from `summary` and `description`; the `http` binding
//! with the path prefixed; `idempotent` from the method, as toolgate itself defaults it.

use serde_json::Value;

use super::refs::Resolver;
use super::{arguments, response, Operation};
use crate::contracts::dialect::Dialect;
use crate::contracts::name::snake_case;
use crate::contracts::{Binding, Draft};

/// Methods in the order their operations are drafted.
pub const METHODS: [&str; 8] = [
    "get", "put", "post", "delete", "options", "head", "patch", "trace",
];

pub fn draft(
    resolver: &Resolver,
    dialect: Dialect,
    op: &Operation,
    prefix: &str,
) -> Result<Draft, String> {
    let method = op.method.to_ascii_uppercase();
    let operation_id = op.operation.get("operationId").and_then(Value::as_str);
    let origin = match operation_id {
        Some(id) => format!("{method} {} (operationId {id})", op.path),
        None => format!("{method} {}", op.path),
    };
    let from_id = operation_id.map(snake_case).filter(|t| !t.is_empty());
    let tool = from_id.unwrap_or_else(|| snake_case(&format!("{} {}", op.method, op.path)));
    let mut draft = Draft::new(origin, tool);
    if operation_id.is_none() {
        draft.review(
            "no operationId: the tool is named after the method and path; name it for the model",
        );
    }
    draft.description = description(op.operation);
    if draft.description.is_none() {
        draft.review("no summary or description: write one (the model reads it)");
    }
    if op.operation.get("deprecated") == Some(&Value::Bool(true)) {
        draft.review("the operation is deprecated");
    }
    draft.http = Some(Binding {
        method: method.clone(),
        path: format!("{prefix}{}", op.path),
    });
    draft.idempotent = !matches!(method.as_str(), "POST" | "PATCH");
    draft.idempotent_why = if draft.idempotent {
        format!("{method} is idempotent")
    } else {
        format!(
            "review: {method}, so never retried and duplicates suppressed; set true if it only \
             reads (a search)"
        )
    };
    let (input, notes) = arguments::input(resolver, dialect, op)?;
    draft.input = input;
    draft.notes.extend(notes);
    let (output, notes) = response::output(resolver, dialect, op.operation)?;
    draft.output = output;
    draft.notes.extend(notes);
    Ok(draft)
}

fn description(operation: &Value) -> Option<String> {
    let text = |k: &str| {
        operation
            .get(k)
            .and_then(Value::as_str)
            .map(str::trim)
            .filter(|t| !t.is_empty())
    };
    match (text("summary"), text("description")) {
        (Some(s), Some(d)) if d.starts_with(s) => Some(d.to_string()),
        (Some(s), Some(d)) => Some(format!("{s}\n\n{d}")),
        (Some(one), None) | (None, Some(one)) => Some(one.to_string()),
        (None, None) => None,
    }
}
