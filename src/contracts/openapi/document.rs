//! An OpenAPI document read from a file: YAML or JSON, at most [`MAX_DOCUMENT`] bytes,
//! as one JSON value. YAML mapping keys that aren't strings (`200:` unquoted is a number)
//! become the strings OpenAPI means; merge keys (`<<`) are applied; values JSON can't
//! hold (`.nan`, a non-scalar key) are errors.

use serde_json::{Map, Value};
use std::path::Path;

use crate::contracts::DraftError;

pub const MAX_DOCUMENT: u64 = 16 << 20;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Version {
    V30,
    V31,
}

pub struct Document {
    pub root: Value,
    pub version: Version,
    /// The `openapi` field as written: `3.0.3`.
    pub declared: String,
    /// `info.title` and `info.version`, for the header.
    pub about: String,
    /// The file as named on the command line.
    pub path: String,
}

pub fn load(path: &Path) -> Result<Document, DraftError> {
    let shown = path.display().to_string();
    let text = read(path, &shown)?;
    let root = parse(&text).map_err(|reason| DraftError::Syntax {
        path: shown.clone(),
        reason,
    })?;
    let not = |reason: String| DraftError::NotOpenApi {
        path: shown.clone(),
        reason,
    };
    if !root.is_object() {
        return Err(not("the document is not a mapping".into()));
    }
    if root.get("swagger").is_some() {
        return Err(not(
            "a Swagger 2.0 document: convert it to OpenAPI 3 first".into()
        ));
    }
    let declared = match root.get("openapi") {
        Some(Value::String(v)) => v.clone(),
        Some(_) => {
            return Err(not(
                "`openapi` must be a version string such as 3.1.0".into()
            ))
        }
        None => return Err(not("no `openapi` field: not an OpenAPI document".into())),
    };
    let version = if declared.starts_with("3.0") {
        Version::V30
    } else if declared.starts_with("3.1") {
        Version::V31
    } else {
        return Err(not(format!(
            "OpenAPI {}: only 3.0 and 3.1 are supported",
            crate::contracts::render::comment(&declared)
        )));
    };
    match root.get("paths") {
        None | Some(Value::Object(_)) => {}
        Some(_) => {
            return Err(not(
                "`paths` must be a mapping of paths to operations".into()
            ))
        }
    }
    let info = |k: &str| {
        root.pointer(&format!("/info/{k}"))
            .and_then(Value::as_str)
            .unwrap_or("")
    };
    let about = format!("{} {}", info("title"), info("version"))
        .trim()
        .to_string();
    Ok(Document {
        root,
        version,
        declared,
        about,
        path: shown,
    })
}

fn read(path: &Path, shown: &str) -> Result<String, DraftError> {
    let fail = |error| DraftError::Read {
        path: shown.to_string(),
        error,
    };
    let file = std::fs::File::open(path).map_err(fail)?;
    let mut bytes = Vec::new();
    std::io::Read::read_to_end(&mut std::io::Read::take(file, MAX_DOCUMENT + 1), &mut bytes)
        .map_err(fail)?;
    if bytes.len() as u64 > MAX_DOCUMENT {
        return Err(DraftError::TooLarge {
            path: shown.to_string(),
            limit: MAX_DOCUMENT,
        });
    }
    String::from_utf8(bytes).map_err(|_| DraftError::Syntax {
        path: shown.to_string(),
        reason: "not UTF-8 text".into(),
    })
}

/// JSON when it looks like JSON (so its errors read as JSON errors), YAML otherwise.
pub fn parse(text: &str) -> Result<Value, String> {
    if text.trim_start().starts_with('{') {
        return serde_json::from_str(text).map_err(|e| format!("JSON: {e}"));
    }
    let mut yaml: serde_yaml::Value =
        serde_yaml::from_str(text).map_err(|e| format!("YAML: {e}"))?;
    yaml.apply_merge().map_err(|e| format!("YAML: {e}"))?;
    to_json(yaml)
}

fn to_json(yaml: serde_yaml::Value) -> Result<Value, String> {
    use serde_yaml::Value as Y;
    Ok(match yaml {
        Y::Null => Value::Null,
        Y::Bool(b) => Value::Bool(b),
        Y::Number(n) => number(&n)?,
        Y::String(s) => Value::String(s),
        Y::Sequence(items) => {
            Value::Array(items.into_iter().map(to_json).collect::<Result<_, _>>()?)
        }
        Y::Mapping(entries) => {
            let mut map = Map::new();
            for (key, value) in entries {
                map.insert(key_text(key)?, to_json(value)?);
            }
            Value::Object(map)
        }
        Y::Tagged(tagged) => to_json(tagged.value)?,
    })
}

fn number(n: &serde_yaml::Number) -> Result<Value, String> {
    if let Some(i) = n.as_i64() {
        return Ok(Value::from(i));
    }
    if let Some(u) = n.as_u64() {
        return Ok(Value::from(u));
    }
    n.as_f64()
        .and_then(serde_json::Number::from_f64)
        .map(Value::Number)
        .ok_or_else(|| format!("YAML: {n} is not a number JSON can hold"))
}

fn key_text(key: serde_yaml::Value) -> Result<String, String> {
    use serde_yaml::Value as Y;
    match key {
        Y::String(s) => Ok(s),
        Y::Number(n) => Ok(n.to_string()),
        Y::Bool(b) => Ok(b.to_string()),
        Y::Null => Ok("null".into()),
        Y::Tagged(tagged) => key_text(tagged.value),
        Y::Sequence(_) | Y::Mapping(_) => Err("YAML: a mapping key that is not a scalar".into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn yaml_keys_become_the_strings_openapi_means() {
        let v = parse("responses:\n  200: {description: ok}\n  2XX: {}\nbase: &b {a: 1}\nmerged: {<<: *b, c: 2}\n").unwrap();
        assert_eq!(v["responses"]["200"]["description"], "ok");
        assert!(v["responses"].get("2XX").is_some());
        assert_eq!(v["merged"], json!({"a": 1, "c": 2}));
    }

    #[test]
    fn what_json_cannot_hold_is_an_error() {
        assert!(parse("x: .nan\n").unwrap_err().contains("not a number"));
        assert!(parse("? [a]\n: 1\n").unwrap_err().contains("not a scalar"));
        assert!(parse("{\"a\": ").unwrap_err().starts_with("JSON:"));
        assert!(parse("a: [1\n").unwrap_err().starts_with("YAML:"));
    }
}
