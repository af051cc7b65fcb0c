//! A request body's part of the input: the JSON body object's properties join the
//! parameters (DESIGN §3). A body toolgate can't merge — not JSON, not an object — is
//! described in a note, and the input keeps the parameters alone, closed.

use serde_json::{json, Map, Value};

use super::arguments::Args;
use super::direction::{keep, Direction};
use super::flatten::flatten;
use super::media;
use super::refs::{Inliner, Resolver};

/// What the body adds to the object schema besides properties.
pub struct Outcome {
    /// `additionalProperties` of the whole input; `None` leaves it open.
    pub additional: Option<Value>,
    /// Keywords of the body schema that apply to the whole object (`oneOf`, …).
    pub rest: Option<Value>,
}

/// Keywords of the body schema that describe it, and say nothing about the arguments.
const DESCRIPTIVE: &[&str] = &[
    "type",
    "title",
    "description",
    "examples",
    "example",
    "default",
    "readOnly",
    "writeOnly",
    "deprecated",
    "$comment",
    "nullable",
    "xml",
    "externalDocs",
    "discriminator",
];

pub fn merge(
    inliner: &mut Inliner,
    resolver: &Resolver,
    operation: &Value,
    args: &mut Args,
) -> Result<Outcome, Option<String>> {
    let closed = Outcome {
        additional: Some(Value::Bool(false)),
        rest: None,
    };
    let Some(body) = operation.get("requestBody") else {
        return Ok(closed);
    };
    let body = resolver.object(body).map_err(Some)?;
    let offered = media::pick(body.get("content"));
    let Some((kind, schema)) = offered.json else {
        if !offered.others.is_empty() {
            args.review(format!(
                "the request body is {}: toolgate reads a REST body as one JSON object and refuses \
                 anything else (MALFORMED_REQUEST), so this draft describes the parameters only",
                offered.others.join(", ")
            ));
        }
        return Ok(closed);
    };
    if !offered.others.is_empty() {
        args.info(format!(
            "the body may also be {}; the draft describes {kind}",
            offered.others.join(", ")
        ));
    }
    let mut schema = match schema {
        Some(schema) => inliner.schema(schema)?,
        None => json!({}),
    };
    flatten(&mut schema);
    let dropped = keep(&mut schema, Direction::Request);
    if !dropped.is_empty() {
        args.info(format!(
            "read-only properties are not part of the input: {}",
            dropped.join(", ")
        ));
    }
    let required = body.get("required") == Some(&Value::Bool(true));
    Ok(fields(schema, required, args))
}

fn fields(schema: Value, body_is_required: bool, args: &mut Args) -> Outcome {
    let Value::Object(mut body) = schema else {
        args.review(
            "the request body schema is a boolean: the draft describes the parameters only".into(),
        );
        return Outcome {
            additional: Some(Value::Bool(false)),
            rest: None,
        };
    };
    if !is_object(body.get("type")) {
        args.review(format!(
            "the request body is {} (not an object): toolgate merges a JSON object body into the \
             arguments and refuses any other (MALFORMED_REQUEST); wrap it in an object on the \
             backend, or serve the tool over MCP",
            body.get("type")
                .map_or("untyped".to_string(), Value::to_string)
        ));
        return Outcome {
            additional: Some(Value::Bool(false)),
            rest: None,
        };
    }
    let props = match body.remove("properties") {
        Some(Value::Object(props)) => props,
        _ => Map::new(),
    };
    let required: Vec<String> = match body.remove("required") {
        Some(Value::Array(names)) => names
            .iter()
            .filter_map(|n| n.as_str().map(String::from))
            .collect(),
        _ => Vec::new(),
    };
    let additional = body.remove("additionalProperties");
    for keyword in DESCRIPTIVE {
        body.remove(*keyword);
    }
    let free = props.is_empty() && additional.is_none() && body.is_empty();
    for (name, schema) in props {
        if let Some(place) = args.origin.get(&name).copied() {
            args.review(format!(
                "{name} is both a {place} parameter and a body property: toolgate refuses a key \
                 given in two places, so the body's {name} can't be sent; the draft keeps the \
                 {place} parameter"
            ));
            continue;
        }
        args.props.insert(name.clone(), schema);
        args.origin.insert(name, "body");
    }
    let body_required: Vec<String> = required
        .into_iter()
        .filter(|r| args.origin.get(r) == Some(&"body"))
        .collect();
    if body_is_required {
        args.required.extend(body_required);
    } else if !body_required.is_empty() {
        args.review(format!(
            "the body is optional, so its required properties ({}) are not required here",
            body_required.join(", ")
        ));
    }
    if free {
        args.review(
            "the body is any JSON object: the draft can't name its fields; list them under \
             input.properties and consider additionalProperties: false"
                .into(),
        );
    }
    let rest = if body.is_empty() {
        None
    } else {
        let keys: Vec<&str> = body.keys().map(String::as_str).collect();
        args.review(format!(
            "the body schema's {} apply to the whole argument object, path and query \
             parameters included: check they still hold",
            keys.join(", ")
        ));
        Some(Value::Object(body))
    };
    Outcome { additional, rest }
}

/// No `type` (properties alone, a composition) or one that admits an object.
fn is_object(declared: Option<&Value>) -> bool {
    match declared {
        None => true,
        Some(Value::String(t)) => t == "object",
        Some(Value::Array(types)) => types.iter().any(|t| t == "object"),
        Some(_) => false,
    }
}
