//! A JSON Schema compiled once, when the snapshot is built, plus the few schema-driven
//! transformations the pipeline needs: filling defaults, converting path/query strings,
//! dropping undeclared response fields.
//!
//! Validation is `jsonschema` (draft 2020-12, formats checked, no remote `$ref`s: the
//! build has no retriever, so a schema can't make the sidecar fetch anything).

use serde_json::{Map, Value};

use crate::vocab::Detail;

/// A compiled schema and the document it came from.
#[derive(Debug)]
pub struct Schema {
    validator: jsonschema::Validator,
    raw: Value,
    /// Accepts every JSON object and fills in nothing (see [`Schema::accepts_any_object`]).
    open: bool,
}

/// One schema violation, safe to show the agent.
#[derive(Debug, Clone, PartialEq)]
pub struct Violation {
    pub detail: Detail,
    pub message: String,
}

impl Schema {
    pub fn compile(raw: &Value) -> Result<Schema, String> {
        let validator = jsonschema::options()
            .with_draft(jsonschema::Draft::Draft202012)
            .should_validate_formats(true)
            .build(raw)
            .map_err(|e| e.to_string())?;
        Ok(Schema {
            validator,
            raw: raw.clone(),
            open: accepts_any_object(raw),
        })
    }

    /// True when validating an object against this schema can only succeed and fill in
    /// nothing: `{}`, `true`, or `{type: object}` with annotations at most. A call under
    /// such a schema needs no parsed arguments for validation (`vocab::args`).
    pub fn accepts_any_object(&self) -> bool {
        self.open
    }

    pub fn raw(&self) -> &Value {
        &self.raw
    }

    pub fn is_valid(&self, instance: &Value) -> bool {
        self.validator.is_valid(instance)
    }

    /// Every violation, in the validator's order. A `required` error points at the missing
    /// property itself (`/service`), which is what an agent needs to fix.
    pub fn violations(&self, instance: &Value) -> Vec<Violation> {
        self.validator
            .iter_errors(instance)
            .map(|error| {
                let keyword = error.kind().keyword().to_string();
                let mut pointer = error.instance_path().as_str().to_string();
                // The message is about the object that lacks the property, so it is
                // prefixed with that object's path, not the missing property's.
                let at = display_path(&pointer);
                if let jsonschema::error::ValidationErrorKind::Required { property } = error.kind()
                {
                    if let Some(name) = property.as_str() {
                        pointer.push('/');
                        pointer.push_str(&escape(name));
                    }
                }
                let message = if at.is_empty() {
                    error.to_string()
                } else {
                    format!("{at}: {error}")
                };
                Violation {
                    detail: Detail {
                        pointer,
                        keyword,
                        ..Detail::default()
                    },
                    message,
                }
            })
            .collect()
    }

    /// Fills `default`s of declared properties that are absent, recursively through
    /// objects that are present. Returns whether anything was added.
    pub fn fill_defaults(&self, instance: &mut Value) -> bool {
        fill_defaults(&self.raw, instance)
    }

    /// The JSON types a top-level property declares (`["integer"]`), for converting path
    /// and query strings.
    pub fn property_types(&self, name: &str) -> Vec<&str> {
        match self.raw.pointer(&format!("/properties/{}", escape(name))) {
            Some(prop) => match prop.get("type") {
                Some(Value::String(t)) => vec![t.as_str()],
                Some(Value::Array(ts)) => ts.iter().filter_map(Value::as_str).collect(),
                _ => Vec::new(),
            },
            None => Vec::new(),
        }
    }

    /// Removes object fields the schema does not declare, unless it explicitly allows more.
    pub fn project(&self, instance: &mut Value) {
        project(&self.raw, instance)
    }
}

/// Keywords that constrain nothing: a schema made only of these accepts any object.
const ANNOTATIONS: [&str; 3] = ["title", "description", "$comment"];

fn accepts_any_object(schema: &Value) -> bool {
    match schema {
        Value::Bool(true) => true,
        Value::Object(keywords) => keywords.iter().all(|(keyword, value)| {
            ANNOTATIONS.contains(&keyword.as_str()) || (keyword == "type" && value == "object")
        }),
        _ => false,
    }
}

fn fill_defaults(schema: &Value, instance: &mut Value) -> bool {
    let (Some(props), Value::Object(map)) = (
        schema.get("properties").and_then(Value::as_object),
        instance,
    ) else {
        return false;
    };
    let mut changed = false;
    for (name, prop) in props {
        match map.get_mut(name) {
            Some(child) => changed |= fill_defaults(prop, child),
            None => {
                if let Some(default) = prop.get("default") {
                    map.insert(name.clone(), default.clone());
                    changed = true;
                }
            }
        }
    }
    changed
}

fn project(schema: &Value, instance: &mut Value) {
    match instance {
        Value::Object(map) => {
            let Some(props) = schema.get("properties").and_then(Value::as_object) else {
                return;
            };
            let keeps_others = matches!(
                schema.get("additionalProperties"),
                Some(Value::Bool(true)) | Some(Value::Object(_))
            ) || schema.get("patternProperties").is_some();
            if !keeps_others {
                map.retain(|k, _| props.contains_key(k));
            }
            for (k, v) in map.iter_mut() {
                if let Some(prop) = props.get(k) {
                    project(prop, v);
                }
            }
        }
        Value::Array(items) => {
            if let Some(item_schema) = schema.get("items").filter(|s| s.is_object()) {
                for item in items {
                    project(item_schema, item);
                }
            }
        }
        _ => {}
    }
}

/// JSON pointer escaping of one segment (RFC 6901).
pub fn escape(segment: &str) -> String {
    segment.replace('~', "~0").replace('/', "~1")
}

fn display_path(pointer: &str) -> String {
    pointer
        .trim_start_matches('/')
        .split('/')
        .map(|s| s.replace("~1", "/").replace("~0", "~"))
        .collect::<Vec<_>>()
        .join(".")
}

/// An empty JSON object, the arguments of a call that sent none.
pub fn empty_args() -> Value {
    Value::Object(Map::new())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn only_schemas_without_constraints_accept_any_object() {
        for open in [
            json!({}),
            json!(true),
            json!({"type": "object"}),
            json!({"type": "object", "title": "t", "description": "d", "$comment": "c"}),
        ] {
            assert!(
                Schema::compile(&open).unwrap().accepts_any_object(),
                "{open}"
            );
        }
        for closed in [
            json!(false),
            json!({"type": "array"}),
            json!({"type": ["object", "null"]}),
            json!({"type": "object", "properties": {"a": {"default": 1}}}),
            json!({"type": "object", "additionalProperties": false}),
            json!({"required": ["a"]}),
            json!({"minProperties": 1}),
            json!({"$ref": "#/$defs/x", "$defs": {"x": {"type": "object"}}}),
            json!({"not": {}}),
        ] {
            assert!(
                !Schema::compile(&closed).unwrap().accepts_any_object(),
                "{closed}"
            );
        }
        assert!(!logs().accepts_any_object());
    }

    fn logs() -> Schema {
        Schema::compile(&json!({
            "type": "object",
            "additionalProperties": false,
            "required": ["service"],
            "properties": {
                "service": {"type": "string", "enum": ["orders", "payments"]},
                "window_minutes": {"type": "integer", "minimum": 1, "maximum": 43200, "default": 15}
            }
        }))
        .unwrap()
    }

    #[test]
    fn required_points_at_the_missing_property() {
        let v = logs().violations(&json!({}));
        assert_eq!(v[0].detail.pointer, "/service");
        assert_eq!(v[0].detail.keyword, "required");
    }

    #[test]
    fn type_error_names_the_field() {
        let v = logs().violations(&json!({"service": "orders", "window_minutes": "30"}));
        assert_eq!(v[0].detail.pointer, "/window_minutes");
        assert_eq!(v[0].detail.keyword, "type");
        assert!(
            v[0].message.starts_with("window_minutes: "),
            "{}",
            v[0].message
        );
    }

    #[test]
    fn defaults_fill_only_what_is_absent() {
        let s = logs();
        let mut args = json!({"service": "orders"});
        assert!(s.fill_defaults(&mut args));
        assert_eq!(args["window_minutes"], 15);
        let mut args = json!({"service": "orders", "window_minutes": 30});
        assert!(!s.fill_defaults(&mut args));
        assert_eq!(args["window_minutes"], 30);
    }

    #[test]
    fn projection_drops_undeclared_fields_deeply() {
        let s = Schema::compile(&json!({
            "type": "object",
            "properties": {"lines": {"type": "array", "items": {"type": "object", "properties": {"msg": {}}}}}
        }))
        .unwrap();
        let mut out = json!({"lines": [{"msg": "a", "secret": 1}], "debug": "x"});
        s.project(&mut out);
        assert_eq!(out, json!({"lines": [{"msg": "a"}]}));
    }

    #[test]
    fn bad_schema_does_not_compile() {
        assert!(Schema::compile(&json!({"type": "nonsense"})).is_err());
    }

    #[test]
    fn remote_refs_are_never_fetched() {
        assert!(Schema::compile(&json!({"$ref": "http://127.0.0.1:9/x.json"})).is_err());
    }
}
