//! `redact` pointers: JSON pointers where `*` stands for any array index or object key.
//! Compiled once; applied to what the agent (and the audit capture) sees.

use serde_json::Value;

/// The text that replaces a redacted value.
pub const MASK: &str = "[REDACTED]";

#[derive(Debug, Clone, PartialEq, Eq)]
enum Segment {
    Any,
    Key(String),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Redaction {
    source: String,
    segments: Vec<Segment>,
}

impl Redaction {
    pub fn compile(pointer: &str) -> Result<Redaction, String> {
        let rest = pointer
            .strip_prefix('/')
            .ok_or_else(|| format!("{pointer:?} is not a JSON pointer (it must start with /)"))?;
        let segments = rest
            .split('/')
            .map(|s| match s {
                "*" => Segment::Any,
                s => Segment::Key(s.replace("~1", "/").replace("~0", "~")),
            })
            .collect();
        Ok(Redaction {
            source: pointer.to_string(),
            segments,
        })
    }

    pub fn source(&self) -> &str {
        &self.source
    }

    /// Masks every value the pointer reaches; paths that don't exist are left alone.
    pub fn apply(&self, value: &mut Value) {
        mask(&self.segments, value)
    }
}

fn mask(segments: &[Segment], value: &mut Value) {
    let Some((first, rest)) = segments.split_first() else {
        *value = Value::String(MASK.to_string());
        return;
    };
    match (first, value) {
        (Segment::Any, Value::Array(items)) => items.iter_mut().for_each(|v| mask(rest, v)),
        (Segment::Any, Value::Object(map)) => map.values_mut().for_each(|v| mask(rest, v)),
        (Segment::Key(k), Value::Object(map)) => {
            if let Some(v) = map.get_mut(k) {
                mask(rest, v)
            }
        }
        (Segment::Key(k), Value::Array(items)) => {
            if let Some(v) = k.parse::<usize>().ok().and_then(|i| items.get_mut(i)) {
                mask(rest, v)
            }
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn wildcard_masks_every_element() {
        let r = Redaction::compile("/lines/*/client_ip").unwrap();
        let mut v = json!({"lines": [{"client_ip": "10.0.0.1", "m": 1}, {"m": 2}]});
        r.apply(&mut v);
        assert_eq!(v, json!({"lines": [{"client_ip": MASK, "m": 1}, {"m": 2}]}));
    }

    #[test]
    fn escaped_keys_and_indexes() {
        let mut v = json!({"a/b": [1, 2]});
        Redaction::compile("/a~1b/1").unwrap().apply(&mut v);
        assert_eq!(v, json!({"a/b": [1, MASK]}));
    }

    #[test]
    fn not_a_pointer_is_an_error() {
        assert!(Redaction::compile("lines").is_err());
    }
}
