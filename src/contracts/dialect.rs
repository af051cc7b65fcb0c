//! Schemas brought to JSON Schema 2020-12, the only dialect toolgate compiles.
//!
//! OpenAPI 3.0 writes schemas in its own dialect: `nullable: true` instead of a `null`
//! type, `example` instead of `examples`, and `exclusiveMinimum`/`exclusiveMaximum` as
//! booleans beside `minimum`/`maximum`. Older JSON Schema drafts (what many MCP servers
//! emit, `$schema: draft-07`) write tuples as an `items` array and `dependencies` for what
//! 2020-12 splits in two. [`normalize`] rewrites each of these where it applies and
//! leaves everything else as written. It walks only keywords that hold subschemas, never
//! data (`enum`, `const`, `default`, `examples`), so a value that looks like a keyword is
//! left alone.

use serde_json::{json, Map, Value};

/// Which rules a schema was written under.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dialect {
    /// OpenAPI 3.0's schema object.
    OpenApi30,
    /// OpenAPI 3.1 and MCP: JSON Schema, possibly of an older draft.
    JsonSchema,
}

const DRAFT_2020_12: &str = "https://json-schema.org/draft/2020-12/schema";

/// Rewrites `schema` in place to 2020-12. Returns a note for each kind of change, so the
/// reviewer knows the schema is not byte for byte the source's.
pub fn normalize(schema: &mut Value, dialect: Dialect) -> Vec<String> {
    let mut notes = Vec::new();
    if let Some(declared) = schema.get("$schema").and_then(Value::as_str) {
        if declared.trim_end_matches('#') != DRAFT_2020_12 {
            notes.push(format!(
                "the schema declared $schema {declared}; it is read as JSON Schema 2020-12 \
                 (converted where the drafts differ)"
            ));
        }
    }
    if let Value::Object(map) = schema {
        map.remove("$schema");
    }
    walk(schema, dialect, &mut notes, 0);
    notes.sort();
    notes.dedup();
    notes
}

/// Deeper than any schema a person writes; past it the rest is left as it is (the
/// compiler then decides).
const MAX_DEPTH: usize = 256;

fn walk(schema: &mut Value, dialect: Dialect, notes: &mut Vec<String>, depth: usize) {
    let Value::Object(map) = schema else {
        return;
    };
    if depth > MAX_DEPTH {
        return;
    }
    if dialect == Dialect::OpenApi30 {
        openapi30(map, notes);
    }
    exclusive_bounds(map, notes);
    tuples(map, notes);
    dependencies(map, notes);
    for keyword in SINGLE {
        if let Some(child) = map.get_mut(*keyword) {
            walk(child, dialect, notes, depth + 1);
        }
    }
    for keyword in LISTS {
        if let Some(Value::Array(children)) = map.get_mut(*keyword) {
            for child in children {
                walk(child, dialect, notes, depth + 1);
            }
        }
    }
    for keyword in MAPS {
        if let Some(Value::Object(children)) = map.get_mut(*keyword) {
            for child in children.values_mut() {
                walk(child, dialect, notes, depth + 1);
            }
        }
    }
}

/// Keywords whose value is one subschema.
pub const SINGLE: &[&str] = &[
    "items",
    "additionalProperties",
    "not",
    "if",
    "then",
    "else",
    "contains",
    "propertyNames",
    "unevaluatedItems",
    "unevaluatedProperties",
    "contentSchema",
];
/// Keywords whose value is a list of subschemas.
pub const LISTS: &[&str] = &["allOf", "anyOf", "oneOf", "prefixItems"];
/// Keywords whose value maps names to subschemas.
pub const MAPS: &[&str] = &[
    "properties",
    "patternProperties",
    "$defs",
    "definitions",
    "dependentSchemas",
];

fn openapi30(map: &mut Map<String, Value>, notes: &mut Vec<String>) {
    if let Some(example) = map.remove("example") {
        map.entry("examples").or_insert_with(|| json!([example]));
        notes.push("OpenAPI 3.0 `example` became `examples`".into());
    }
    if let Some(Value::Bool(true)) = map.remove("nullable") {
        nullable(map);
        notes.push("OpenAPI 3.0 `nullable: true` became a `null` type".into());
    }
}

/// `nullable: true` in 2020-12 terms: `null` joins the type (and the enum, which would
/// otherwise still refuse it); without a type, a composition gets a `null` alternative.
fn nullable(map: &mut Map<String, Value>) {
    match map.get_mut("type") {
        Some(Value::String(t)) if t != "null" => {
            let t = std::mem::take(t);
            map.insert("type".into(), json!([t, "null"]));
        }
        Some(Value::Array(types)) if !types.iter().any(|t| t == "null") => {
            types.push(json!("null"));
        }
        Some(_) => {}
        None => {
            let composed = ["allOf", "anyOf", "oneOf", "$ref"]
                .iter()
                .any(|k| map.contains_key(*k));
            if composed {
                let inner = std::mem::take(map);
                map.insert(
                    "anyOf".into(),
                    json!([Value::Object(inner), {"type": "null"}]),
                );
                return;
            }
        }
    }
    if let Some(Value::Array(values)) = map.get_mut("enum") {
        if !values.iter().any(Value::is_null) {
            values.push(Value::Null);
        }
    }
}

/// Draft 4 and OpenAPI 3.0: `exclusiveMinimum: true` qualifies `minimum`; in 2020-12
/// `exclusiveMinimum` is the bound itself.
fn exclusive_bounds(map: &mut Map<String, Value>, notes: &mut Vec<String>) {
    for (exclusive, bound) in [
        ("exclusiveMinimum", "minimum"),
        ("exclusiveMaximum", "maximum"),
    ] {
        match map.get(exclusive) {
            Some(Value::Bool(true)) => {
                map.remove(exclusive);
                if let Some(limit) = map.remove(bound) {
                    map.insert(exclusive.into(), limit);
                }
                notes.push(format!("boolean `{exclusive}` became a numeric bound"));
            }
            Some(Value::Bool(false)) => {
                map.remove(exclusive);
            }
            _ => {}
        }
    }
}

/// Drafts before 2020-12: `items: [a, b]` is a tuple (`prefixItems`), and
/// `additionalItems` is what 2020-12 calls `items`.
fn tuples(map: &mut Map<String, Value>, notes: &mut Vec<String>) {
    if !matches!(map.get("items"), Some(Value::Array(_))) {
        return;
    }
    if let Some(tuple) = map.remove("items") {
        map.insert("prefixItems".into(), tuple);
    }
    if let Some(rest) = map.remove("additionalItems") {
        map.insert("items".into(), rest);
    }
    notes.push("an `items` list became `prefixItems`".into());
}

/// `dependencies` (before 2019-09): a list of names is `dependentRequired`, a schema is
/// `dependentSchemas`.
fn dependencies(map: &mut Map<String, Value>, notes: &mut Vec<String>) {
    let Some(Value::Object(deps)) = map.remove("dependencies") else {
        return;
    };
    let (mut required, mut schemas) = (Map::new(), Map::new());
    for (name, dep) in deps {
        if dep.is_array() {
            required.insert(name, dep);
        } else {
            schemas.insert(name, dep);
        }
    }
    if !required.is_empty() {
        map.insert("dependentRequired".into(), Value::Object(required));
    }
    if !schemas.is_empty() {
        map.insert("dependentSchemas".into(), Value::Object(schemas));
    }
    notes.push("`dependencies` became `dependentRequired`/`dependentSchemas`".into());
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::schema::Schema;

    #[test]
    fn openapi_30_keywords_become_2020_12() {
        let mut s = json!({
            "type": "object",
            "properties": {
                "age": {"type": "integer", "minimum": 0, "exclusiveMinimum": true, "example": 4},
                "nick": {"type": "string", "nullable": true, "enum": ["a", "b"]},
                "pet": {"allOf": [{"type": "object"}], "nullable": true},
                "max": {"type": "number", "maximum": 9, "exclusiveMaximum": false},
                "data": {"enum": [{"nullable": true}], "default": {"example": 1}}
            }
        });
        let notes = normalize(&mut s, Dialect::OpenApi30);
        assert_eq!(notes.len(), 3, "{notes:?}");
        let p = &s["properties"];
        assert_eq!(
            p["age"],
            json!({"type": "integer", "exclusiveMinimum": 0, "examples": [4]})
        );
        assert_eq!(
            p["nick"],
            json!({"type": ["string", "null"], "enum": ["a", "b", null]})
        );
        assert_eq!(
            p["pet"],
            json!({"anyOf": [{"allOf": [{"type": "object"}]}, {"type": "null"}]})
        );
        assert_eq!(p["max"], json!({"type": "number", "maximum": 9}));
        // Data is never rewritten.
        assert_eq!(
            p["data"],
            json!({"enum": [{"nullable": true}], "default": {"example": 1}})
        );
        let compiled = Schema::compile(&s).unwrap();
        assert!(compiled.is_valid(&json!({"age": 1, "nick": null, "pet": null})));
        assert!(!compiled.is_valid(&json!({"age": 0})));
    }

    #[test]
    fn older_drafts_become_2020_12() {
        let mut s = json!({
            "$schema": "http://json-schema.org/draft-07/schema#",
            "type": "object",
            "properties": {
                "pair": {"type": "array", "items": [{"type": "string"}, {"type": "integer"}], "additionalItems": false}
            },
            "dependencies": {"a": ["b"], "c": {"required": ["d"]}}
        });
        let notes = normalize(&mut s, Dialect::JsonSchema);
        assert!(notes[0].contains("draft-07") || notes.iter().any(|n| n.contains("draft-07")));
        assert!(s.get("$schema").is_none());
        assert_eq!(
            s["properties"]["pair"]["prefixItems"][1],
            json!({"type": "integer"})
        );
        assert_eq!(s["properties"]["pair"]["items"], json!(false));
        assert_eq!(s["dependentRequired"], json!({"a": ["b"]}));
        assert_eq!(s["dependentSchemas"], json!({"c": {"required": ["d"]}}));
        let compiled = Schema::compile(&s).unwrap();
        assert!(!compiled.is_valid(&json!({"pair": ["x", 1, 2]})));
        assert!(!compiled.is_valid(&json!({"a": 1})));
    }

    #[test]
    fn a_2020_12_schema_is_left_as_written() {
        let original = json!({
            "$schema": "https://json-schema.org/draft/2020-12/schema",
            "type": "object",
            "properties": {"n": {"type": ["integer", "null"], "exclusiveMinimum": 0}}
        });
        let mut s = original.clone();
        assert!(normalize(&mut s, Dialect::JsonSchema).is_empty());
        assert_eq!(s["properties"], original["properties"]);
    }
}
