//! `allOf` of plain object schemas merged into one object schema — the usual OpenAPI
//! spelling of inheritance, `allOf: [{$ref: Base}, {properties: …}]`. The merged schema
//! accepts exactly what the `allOf` did, and reads better: each property is listed once
//! (so a body's properties become arguments), and toolgate's projection, which doesn't
//! follow `allOf`, sees the declared fields of an output.

use serde_json::{json, Map, Value};

use crate::contracts::dialect::{LISTS, MAPS, SINGLE};

/// Keywords a member may have and still merge. `additionalProperties` is not among them:
/// inside an `allOf` it would refuse the other members' properties, and merging would
/// change that.
const PLAIN: &[&str] = &["type", "properties", "required", "description", "title"];
const MAX_DEPTH: usize = 256;

/// Flattens every plain `allOf` in `schema`, innermost first.
pub fn flatten(schema: &mut Value) {
    walk(schema, 0);
}

fn walk(schema: &mut Value, depth: usize) {
    let Value::Object(map) = schema else {
        return;
    };
    if depth > MAX_DEPTH {
        return;
    }
    for (key, value) in map.iter_mut() {
        let key = key.as_str();
        if SINGLE.contains(&key) {
            walk(value, depth + 1);
        } else if LISTS.contains(&key) {
            if let Value::Array(list) = value {
                list.iter_mut().for_each(|s| walk(s, depth + 1));
            }
        } else if MAPS.contains(&key) {
            if let Value::Object(named) = value {
                named.values_mut().for_each(|s| walk(s, depth + 1));
            }
        }
    }
    merge_all_of(map);
}

fn is_object_type(declared: Option<&Value>) -> bool {
    match declared {
        None => true,
        Some(t) => t == "object",
    }
}

fn plain(member: &Value) -> bool {
    member.as_object().is_some_and(|m| {
        m.keys().all(|k| PLAIN.contains(&k.as_str())) && is_object_type(m.get("type"))
    })
}

fn merge_all_of(map: &mut Map<String, Value>) {
    let mergeable = match map.get("allOf") {
        Some(Value::Array(members)) => !members.is_empty() && members.iter().all(plain),
        _ => false,
    };
    if !mergeable || !is_object_type(map.get("type")) {
        return;
    }
    let Some(Value::Array(members)) = map.remove("allOf") else {
        return;
    };
    for member in members {
        let Value::Object(member) = member else {
            continue;
        };
        for (key, value) in member {
            match (key.as_str(), value) {
                ("properties", Value::Object(props)) => merge_properties(map, props),
                ("required", Value::Array(names)) => merge_required(map, names),
                ("type", t) => {
                    map.insert("type".into(), t);
                }
                (_, annotation) => {
                    map.entry(key).or_insert(annotation);
                }
            }
        }
    }
}

fn merge_properties(map: &mut Map<String, Value>, props: Map<String, Value>) {
    let target = map.entry("properties").or_insert_with(|| json!({}));
    let Value::Object(target) = target else {
        return;
    };
    for (name, schema) in props {
        let merged = match target.remove(&name) {
            Some(first) => json!({"allOf": [first, schema]}),
            None => schema,
        };
        target.insert(name, merged);
    }
}

fn merge_required(map: &mut Map<String, Value>, names: Vec<Value>) {
    let target = map.entry("required").or_insert_with(|| json!([]));
    let Value::Array(target) = target else {
        return;
    };
    for name in names {
        if !target.contains(&name) {
            target.push(name);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::schema::Schema;

    #[test]
    fn plain_all_of_becomes_one_object() {
        let mut s = json!({"type": "array", "items": {"allOf": [
            {"type": "object", "required": ["name"], "properties": {"name": {"type": "string"}}},
            {"type": "object", "required": ["id"], "properties": {"id": {"type": "integer"}, "name": {"maxLength": 3}}}
        ]}});
        let before = Schema::compile(&s).unwrap();
        flatten(&mut s);
        assert_eq!(
            s["items"],
            json!({"type": "object", "required": ["name", "id"], "properties": {
                "id": {"type": "integer"},
                "name": {"allOf": [{"type": "string"}, {"maxLength": 3}]}
            }})
        );
        let after = Schema::compile(&s).unwrap();
        for instance in [
            json!([{"name": "abc", "id": 1}]),
            json!([{"name": "abcd", "id": 1}]),
            json!([{"id": 1}]),
            json!([{"name": "a", "id": "x"}]),
        ] {
            assert_eq!(
                before.is_valid(&instance),
                after.is_valid(&instance),
                "{instance}"
            );
        }
    }

    #[test]
    fn members_that_would_change_meaning_are_left_alone() {
        for s in [
            json!({"allOf": [{"type": "object", "additionalProperties": false}, {"properties": {"a": {}}}]}),
            json!({"allOf": [{"type": "string"}]}),
            json!({"type": "array", "allOf": [{"properties": {}}]}),
            json!({"allOf": [{"oneOf": [{}]}]}),
        ] {
            let mut flattened = s.clone();
            flatten(&mut flattened);
            assert_eq!(flattened, s);
        }
    }
}
