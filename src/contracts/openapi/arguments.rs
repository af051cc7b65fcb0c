//! The `input` of a REST operation. toolgate builds a REST call's arguments from the path
//! parameters, the query parameters and the JSON body object, merged into one object
//! (DESIGN §3), so the input schema is one object: a property per path and query
//! parameter (its schema; path parameters always required, query ones when the document
//! says so) and the body's properties ([`super::body`]).
//!
//! What toolgate can't take is said in a note, never silently dropped: a header or
//! cookie parameter is no argument, a key declared in two places can't be sent twice,
//! and an array in the query can't arrive as one string.

use serde_json::{json, Map, Value};
use std::collections::BTreeMap;

use super::body;
use super::refs::{Defs, Inliner, Resolver};
use super::Operation;
use crate::contracts::dialect::{normalize, Dialect};
use crate::contracts::Note;

/// The arguments being assembled, and what the reviewer should know about them.
#[derive(Default)]
pub struct Args {
    pub props: Map<String, Value>,
    pub required: Vec<String>,
    /// Where each property comes from: `path`, `query` or `body`.
    pub origin: BTreeMap<String, &'static str>,
    pub notes: Vec<Note>,
}

impl Args {
    pub fn review(&mut self, text: String) {
        self.notes.push(Note::Review(text));
    }

    pub fn info(&mut self, text: String) {
        self.notes.push(Note::Info(text));
    }
}

/// The input schema and its notes. Schemas too large to inline are drafted again with
/// shared definitions under `$defs`.
pub fn input(
    resolver: &Resolver,
    dialect: Dialect,
    op: &Operation,
) -> Result<(Value, Vec<Note>), String> {
    match build(resolver, dialect, op, false) {
        Ok(built) => Ok(built),
        Err(Some(broken)) => Err(broken),
        Err(None) => {
            let (schema, mut notes) = build(resolver, dialect, op, true)
                .map_err(|e| e.unwrap_or_else(|| "the input schema is too large".into()))?;
            notes.push(Note::Info(
                "input: too large to inline: each shared schema is under $defs once".into(),
            ));
            Ok((schema, notes))
        }
    }
}

fn build(
    resolver: &Resolver,
    dialect: Dialect,
    op: &Operation,
    shared: bool,
) -> Result<(Value, Vec<Note>), Option<String>> {
    let mut defs = Defs::new(shared);
    let mut args = Args::default();
    let template = template_params(op.path);
    let outcome = {
        let mut inliner = Inliner::new(resolver, &mut defs);
        let mut headers = Vec::new();
        for p in parameters(resolver, op).map_err(Some)? {
            parameter(&mut args, &mut inliner, p, &template, &mut headers)?;
        }
        for name in &template {
            if !args.origin.contains_key(name) {
                args.props.insert(name.clone(), json!({"type": "string"}));
                args.origin.insert(name.clone(), "path");
                args.required.push(name.clone());
                args.review(format!(
                    "path parameter {name} is not declared: taken as a string"
                ));
            }
        }
        header_note(&mut args, &headers);
        body::merge(&mut inliner, resolver, op.operation, &mut args)?
    };
    let mut schema = assemble(&mut args, outcome);
    let kept = defs.attach(&mut schema);
    if !kept.is_empty() {
        args.info(format!(
            "input: {} kept under $defs (recursive or shared); defaults, type conversion and \
             projection don't follow $ref",
            kept.join(", ")
        ));
    }
    for note in normalize(&mut schema, dialect) {
        args.info(format!("input: {note}"));
    }
    Ok((schema, args.notes))
}

/// Path-level parameters, replaced by the operation's own of the same name and place;
/// path parameters first, then query, then the rest (each in document order).
fn parameters<'a>(resolver: &Resolver<'a>, op: &Operation<'a>) -> Result<Vec<&'a Value>, String> {
    let key = |v: &Value| (v.get("name").cloned(), v.get("in").cloned());
    let mut out: Vec<&'a Value> = Vec::new();
    for holder in [op.item, op.operation] {
        if let Some(Value::Array(list)) = holder.get("parameters") {
            for p in list {
                let p = resolver.object(p)?;
                out.retain(|q| key(q) != key(p));
                out.push(p);
            }
        }
    }
    let rank = |p: &&Value| match p.get("in").and_then(Value::as_str) {
        Some("path") => 0,
        Some("query") => 1,
        _ => 2,
    };
    out.sort_by_key(rank);
    Ok(out)
}

fn parameter(
    args: &mut Args,
    inliner: &mut Inliner,
    p: &Value,
    template: &[String],
    headers: &mut Vec<(String, bool)>,
) -> Result<(), Option<String>> {
    let name = p.get("name").and_then(Value::as_str).unwrap_or("");
    let required = p.get("required") == Some(&Value::Bool(true));
    let location = match p.get("in").and_then(Value::as_str) {
        _ if name.is_empty() => {
            args.review("a parameter without a name was left out".into());
            return Ok(());
        }
        Some("path") => "path",
        Some("query") => "query",
        Some(place @ ("header" | "cookie")) => {
            headers.push((format!("{name} ({place})"), required));
            return Ok(());
        }
        other => {
            args.review(format!(
                "parameter {name} is in {other:?}, not path or query: left out"
            ));
            return Ok(());
        }
    };
    if location == "path" && !template.iter().any(|t| t == name) {
        args.info(format!(
            "path parameter {name} is not in the path template: left out"
        ));
        return Ok(());
    }
    if let Some(first) = args.origin.get(name) {
        args.review(format!(
            "{name} is both a {first} and a {location} parameter: toolgate refuses a key given \
             twice, so the draft keeps the {first} one"
        ));
        return Ok(());
    }
    let mut schema = parameter_schema(args, inliner, name, p)?;
    if is_structured(&schema) {
        args.review(format!(
            "{location} parameter {name} is an array or object: toolgate reads each {location} \
             value once, as one string, so a REST call can't fill it; change its schema or send \
             it in the JSON body"
        ));
    }
    if let (Some(text), Value::Object(map)) = (p.get("description"), &mut schema) {
        map.entry("description").or_insert_with(|| text.clone());
    }
    args.props.insert(name.to_string(), schema);
    args.origin.insert(name.to_string(), location);
    if location == "path" || required {
        args.required.push(name.to_string());
    }
    Ok(())
}

fn parameter_schema(
    args: &mut Args,
    inliner: &mut Inliner,
    name: &str,
    p: &Value,
) -> Result<Value, Option<String>> {
    if let Some(schema) = p.get("schema") {
        return inliner.schema(schema);
    }
    let media = super::media::pick(p.get("content"));
    if let Some((kind, Some(schema))) = media.json {
        args.review(format!(
            "parameter {name} is described as {kind} content: toolgate takes it as a plain string"
        ));
        return inliner.schema(schema);
    }
    args.info(format!("parameter {name} has no schema: taken as a string"));
    Ok(json!({"type": "string"}))
}

fn is_structured(schema: &Value) -> bool {
    let structured = |t: &Value| t == "array" || t == "object";
    match schema.get("type") {
        Some(Value::Array(types)) => types.iter().any(structured),
        Some(t) => structured(t),
        None => false,
    }
}

fn header_note(args: &mut Args, headers: &[(String, bool)]) {
    if headers.is_empty() {
        return;
    }
    let names: Vec<&str> = headers.iter().map(|(n, _)| n.as_str()).collect();
    let text = format!(
        "header and cookie parameters are not arguments: the caller sends them and toolgate \
         forwards them (never the agent's Authorization): {}",
        names.join(", ")
    );
    if headers.iter().any(|(_, required)| *required) {
        args.review(format!("{text}; some are required"));
    } else {
        args.info(text);
    }
}

/// The one object schema, from the parameters and what the body left.
fn assemble(args: &mut Args, outcome: body::Outcome) -> Value {
    let mut schema = Map::new();
    schema.insert("type".into(), json!("object"));
    if !args.props.is_empty() {
        schema.insert(
            "properties".into(),
            Value::Object(std::mem::take(&mut args.props)),
        );
    }
    let mut required = std::mem::take(&mut args.required);
    required.dedup();
    if !required.is_empty() {
        schema.insert("required".into(), json!(required));
    }
    let closed = outcome.additional == Some(Value::Bool(false));
    if let Some(additional) = outcome.additional {
        schema.insert("additionalProperties".into(), additional);
    }
    if !closed {
        args.review(
            "input accepts properties it doesn't declare (the body schema allows them): make \
             it additionalProperties: false unless the backend needs them"
                .into(),
        );
    }
    if let Some(rest) = outcome.rest {
        schema.insert("allOf".into(), json!([rest]));
    }
    Value::Object(schema)
}

/// The `{name}`s of a path template, in order.
pub fn template_params(path: &str) -> Vec<String> {
    let mut names = Vec::new();
    let mut rest = path;
    while let Some(open) = rest.find('{') {
        let Some(close) = rest[open..].find('}') else {
            break;
        };
        names.push(rest[open + 1..open + close].to_string());
        rest = &rest[open + close + 1..];
    }
    names
}

#[cfg(test)]
mod tests;
