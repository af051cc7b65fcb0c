//! Which way a schema is read: OpenAPI marks properties `readOnly` (sent only in
//! responses) and `writeOnly` (sent only in requests). A request's schema drops the
//! first, a response's the second, and `required` follows, as the specification says.

use serde_json::Value;

use crate::contracts::dialect::{LISTS, MAPS, SINGLE};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Direction {
    Request,
    Response,
}

const MAX_DEPTH: usize = 256;

/// Removes the properties that don't travel this way; returns their names (sorted, once).
pub fn keep(schema: &mut Value, direction: Direction) -> Vec<String> {
    let flag = match direction {
        Direction::Request => "readOnly",
        Direction::Response => "writeOnly",
    };
    let mut dropped = Vec::new();
    walk(schema, flag, &mut dropped, 0);
    dropped.sort();
    dropped.dedup();
    dropped
}

fn walk(schema: &mut Value, flag: &str, dropped: &mut Vec<String>, depth: usize) {
    let Value::Object(map) = schema else {
        return;
    };
    if depth > MAX_DEPTH {
        return;
    }
    if let Some(Value::Object(props)) = map.get_mut("properties") {
        let gone: Vec<String> = props
            .iter()
            .filter(|(_, p)| p.get(flag) == Some(&Value::Bool(true)))
            .map(|(name, _)| name.clone())
            .collect();
        for name in &gone {
            props.remove(name);
        }
        if let Some(Value::Array(required)) = map.get_mut("required") {
            required.retain(|r| !r.as_str().is_some_and(|r| gone.iter().any(|g| g == r)));
        }
        dropped.extend(gone);
    }
    for (key, value) in map.iter_mut() {
        let key = key.as_str();
        if SINGLE.contains(&key) {
            walk(value, flag, dropped, depth + 1);
        } else if LISTS.contains(&key) {
            if let Value::Array(list) = value {
                list.iter_mut()
                    .for_each(|s| walk(s, flag, dropped, depth + 1));
            }
        } else if MAPS.contains(&key) {
            if let Value::Object(named) = value {
                named
                    .values_mut()
                    .for_each(|s| walk(s, flag, dropped, depth + 1));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn read_only_leaves_requests_and_write_only_leaves_responses() {
        let pet = json!({
            "type": "object",
            "required": ["id", "name", "password"],
            "properties": {
                "id": {"type": "integer", "readOnly": true},
                "name": {"type": "string"},
                "password": {"type": "string", "writeOnly": true},
                "owner": {"type": "object", "properties": {"id": {"readOnly": true}}}
            }
        });
        let mut request = pet.clone();
        assert_eq!(keep(&mut request, Direction::Request), vec!["id"]);
        assert_eq!(request["required"], json!(["name", "password"]));
        assert_eq!(request["properties"]["owner"]["properties"], json!({}));
        let mut response = pet;
        assert_eq!(keep(&mut response, Direction::Response), vec!["password"]);
        assert_eq!(response["required"], json!(["id", "name"]));
    }
}
