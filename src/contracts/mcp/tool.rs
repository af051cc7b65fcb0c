//! One listed MCP tool as a draft: `tool` is its name, `input` its `inputSchema`,
//! `output` its `outputSchema`, `description` its description; `idempotent` follows the
//! annotations (`readOnlyHint` or `idempotentHint` true), and there is no `http` binding:
//! the tool is served over MCP.

use serde_json::{json, Value};

use crate::contracts::dialect::{normalize, Dialect};
use crate::contracts::Draft;

/// The draft of one listed tool, or why it can't be drafted (a tool without a name).
pub fn draft(tool: &Value) -> Result<Draft, String> {
    let name = match tool.get("name").and_then(Value::as_str) {
        Some(name) if !name.is_empty() => name,
        _ => return Err("a listed tool has no name; it was skipped".into()),
    };
    let mut draft = Draft::new(format!("MCP tool {name}"), name.to_string());
    if let Some(title) = tool.get("title").and_then(Value::as_str) {
        draft.info(format!("title: {title}"));
    }
    match tool.get("description").and_then(Value::as_str) {
        Some(text) if !text.trim().is_empty() => {
            draft.description = Some(text.to_string());
            draft.review(
                "the description is the server's own: the model reads it, so check it says \
                 what the tool does and nothing else",
            );
        }
        _ => draft.review("the server gives no description: write one (the model reads it)"),
    }
    input(&mut draft, tool.get("inputSchema"));
    if let Some(schema) = tool.get("outputSchema").filter(|s| s.is_object()) {
        let mut schema = schema.clone();
        for note in normalize(&mut schema, Dialect::JsonSchema) {
            draft.info(format!("output: {note}"));
        }
        draft.output = Some(schema);
        draft.review(
            "output is enforced on structuredContent: a result that doesn't match it is \
             refused and fields it doesn't declare are dropped",
        );
    }
    idempotent(&mut draft, tool.get("annotations"));
    Ok(draft)
}

fn input(draft: &mut Draft, schema: Option<&Value>) {
    let Some(schema) = schema.filter(|s| s.is_object()) else {
        draft.review("the server gives no inputSchema: any object is accepted; write one");
        return;
    };
    let mut schema = schema.clone();
    for note in normalize(&mut schema, Dialect::JsonSchema) {
        draft.info(format!("input: {note}"));
    }
    if schema.get("additionalProperties") != Some(&json!(false)) {
        draft.review(
            "input accepts properties it doesn't declare: add additionalProperties: false \
             unless the tool needs them",
        );
    }
    draft.input = schema;
}

/// The annotations are the server's hints, not guarantees; the comment says which one
/// decided, and a destructive tool gets a note.
fn idempotent(draft: &mut Draft, annotations: Option<&Value>) {
    let hint = |name: &str| {
        annotations
            .and_then(|a| a.get(name))
            .and_then(Value::as_bool)
    };
    draft.idempotent = true;
    draft.idempotent_why = match (hint("readOnlyHint"), hint("idempotentHint")) {
        (Some(true), _) => "the server's readOnlyHint: true (a hint, not a guarantee)".into(),
        (_, Some(true)) => "the server's idempotentHint: true (a hint, not a guarantee)".into(),
        _ => {
            draft.idempotent = false;
            "review: no readOnlyHint or idempotentHint, so never retried and duplicates \
             suppressed; set true if running it twice is harmless"
                .into()
        }
    };
    if hint("destructiveHint") == Some(true) && hint("readOnlyHint") != Some(true) {
        draft.review(
            "the server marks it destructive (destructiveHint): consider an approval for it \
             in the AgentPolicy",
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn annotations_decide_idempotent() {
        let read = draft(&json!({"name": "r", "inputSchema": {"type": "object"}, "annotations": {"readOnlyHint": true}})).unwrap();
        assert!(read.idempotent && read.idempotent_why.contains("readOnlyHint"));
        let same = draft(
            &json!({"name": "s", "annotations": {"idempotentHint": true, "readOnlyHint": false}}),
        )
        .unwrap();
        assert!(same.idempotent && same.idempotent_why.contains("idempotentHint"));
        let write = draft(&json!({"name": "w", "annotations": {"destructiveHint": true}})).unwrap();
        assert!(!write.idempotent && write.idempotent_why.starts_with("review:"));
        assert!(write
            .notes
            .iter()
            .any(|n| format!("{n:?}").contains("destructive")));
        assert!(!draft(&json!({"name": "n"})).unwrap().idempotent);
    }

    #[test]
    fn schemas_and_description_are_carried_over() {
        let d = draft(&json!({
            "name": "get_weather",
            "description": "Weather for a city.",
            "inputSchema": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"], "additionalProperties": false},
            "outputSchema": {"type": "object", "properties": {"temp": {"type": "number"}}}
        }))
        .unwrap();
        assert_eq!(d.tool, "get_weather");
        assert_eq!(d.description.as_deref(), Some("Weather for a city."));
        assert_eq!(d.input["required"], json!(["city"]));
        assert_eq!(d.output.unwrap()["properties"]["temp"]["type"], "number");
        assert!(d.http.is_none());
    }

    #[test]
    fn a_nameless_tool_is_not_drafted() {
        assert!(draft(&json!({"description": "x"})).is_err());
        assert!(draft(&json!({"name": ""})).is_err());
    }
}
