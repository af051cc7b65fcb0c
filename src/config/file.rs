//! One settings document, whichever it is (the sidecar's or the injector's): read from
//! its file or empty (the defaults), overridden by its environment variables, and
//! deserialized with the path of any bad key in the error.
//!
//! The file is read as every file is ([`crate::input::file`]: a regular file, at most
//! 1 MiB), and errors keep the position and the kind of a bad value, never the value
//! ([`crate::input::quiet`]): a settings file may hold a URL with a password.

use serde::de::DeserializeOwned;
use serde_json::Value;
use std::path::Path;

use super::SettingsError;
use crate::input::file::{self, Bound};
use crate::input::quiet;

/// The document's origin (its path, or `defaults`) and its text.
pub fn read(file: Option<&Path>) -> Result<(String, String), SettingsError> {
    let Some(path) = file else {
        return Ok(("defaults".to_string(), String::new()));
    };
    let text = file::read_text(path, Bound::SMALL).map_err(|e| SettingsError::Read {
        path: path.display().to_string(),
        source: std::io::Error::other(e.reason()),
    })?;
    Ok((path.display().to_string(), text))
}

/// Parses `text`, lets `apply` set the variables of `vars` on it, then deserializes it.
pub fn parse<T: DeserializeOwned, V>(
    origin: &str,
    text: &str,
    vars: V,
    apply: impl FnOnce(&mut Value, V) -> Result<(), (String, String)>,
) -> Result<T, SettingsError> {
    let invalid = |field: String, message: String| invalid(origin, field, message);
    let mut tree: Value = if text.trim().is_empty() {
        Value::Object(Default::default())
    } else {
        serde_yaml::from_str(text).map_err(|e| invalid("(document)".into(), quiet::error(&e)))?
    };
    apply(&mut tree, vars).map_err(|(field, message)| invalid(field, message))?;
    serde_path_to_error::deserialize(tree)
        .map_err(|e| invalid(e.path().to_string(), quiet::error(&e.into_inner())))
}

/// The error for a bad value at `field` of the document from `origin`.
pub fn invalid(origin: &str, field: String, message: String) -> SettingsError {
    SettingsError::Invalid {
        origin: origin.to_string(),
        field,
        message,
    }
}

/// The dotted paths of a settings tree's leaves (an empty map is a leaf: it is set
/// whole), for tests that every key has a variable.
#[cfg(test)]
pub fn leaves(tree: &Value) -> Vec<String> {
    fn walk(value: &Value, prefix: String, out: &mut Vec<String>) {
        match value {
            Value::Object(map) if !map.is_empty() => {
                for (k, v) in map {
                    let path = if prefix.is_empty() {
                        k.clone()
                    } else {
                        format!("{prefix}.{k}")
                    };
                    walk(v, path, out);
                }
            }
            _ => out.push(prefix),
        }
    }
    let mut out = Vec::new();
    walk(tree, String::new(), &mut out);
    out
}
