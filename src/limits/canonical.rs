//! Canonical digests: what makes two calls "the same call".
//!
//! Arguments are digested as their canonical JSON text ([`crate::vocab::canonical_json`]:
//! object keys sorted, no whitespace), so key order and formatting never make two
//! identical calls look different. Numbers are compared as serde_json writes them (`1`
//! and `1.0` differ).
//!
//! Keys are 128-bit truncations of SHA-256 over length-prefixed fields: fixed-size (so the
//! bounded state costs the same per entry whatever the ids look like), and collision-free
//! in practice, which matters because a collision would replay one call's result to another.

use serde_json::Value;
use sha2::{Digest as _, Sha256};

use crate::vocab::canonical_json;

/// A 128-bit key into the limits state.
pub type Key = [u8; 16];

/// Builds a [`Key`] from labelled, length-prefixed fields.
pub struct KeyBuilder(Sha256);

impl KeyBuilder {
    /// `domain` keeps keys of different tables apart even when their fields agree.
    pub fn new(domain: &str) -> KeyBuilder {
        let mut builder = KeyBuilder(Sha256::new());
        builder.bytes(domain.as_bytes());
        builder
    }

    pub fn bytes(&mut self, bytes: &[u8]) -> &mut KeyBuilder {
        self.0.update((bytes.len() as u64).to_le_bytes());
        self.0.update(bytes);
        self
    }

    pub fn text(&mut self, text: &str) -> &mut KeyBuilder {
        self.bytes(text.as_bytes())
    }

    /// An optional field: absent and present-but-empty stay different.
    pub fn optional(&mut self, text: Option<&str>) -> &mut KeyBuilder {
        match text {
            Some(t) => {
                self.0.update([1]);
                self.text(t)
            }
            None => {
                self.0.update([0]);
                self
            }
        }
    }

    pub fn json(&mut self, value: &Value) -> &mut KeyBuilder {
        canonical_json::with_text(value, |text| self.bytes(text));
        self
    }

    pub fn finish(&self) -> Key {
        let digest = self.0.clone().finalize();
        let mut key = [0u8; 16];
        key.copy_from_slice(&digest[..16]);
        key
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn key_order_and_whitespace_do_not_matter() {
        let a: Value =
            serde_json::from_str(r#"{"b": [1, {"y": 2, "x": "q"}], "a": null}"#).unwrap();
        let b: Value = serde_json::from_str(r#"{"a":null,"b":[1,{"x":"q","y":2}]}"#).unwrap();
        assert_eq!(
            KeyBuilder::new("t").json(&a).finish(),
            KeyBuilder::new("t").json(&b).finish()
        );
    }

    #[test]
    fn values_and_fields_keep_calls_apart() {
        let k = |v: Value| KeyBuilder::new("t").json(&v).finish();
        assert_ne!(k(json!({"a": 1})), k(json!({"a": "1"})));
        assert_ne!(k(json!([1, 2])), k(json!([2, 1])));
        // Length prefixes: ("ab", "c") is not ("a", "bc").
        let ab = KeyBuilder::new("t").text("ab").text("c").finish();
        let a = KeyBuilder::new("t").text("a").text("bc").finish();
        assert_ne!(ab, a);
        let none = KeyBuilder::new("t").optional(None).finish();
        let empty = KeyBuilder::new("t").optional(Some("")).finish();
        assert_ne!(none, empty);
        assert_ne!(KeyBuilder::new("x").finish(), KeyBuilder::new("y").finish());
    }

    /// Keys are shared through Redis by pods of different versions during a rollout:
    /// the derivation must not change (sha256 of length-prefixed fields, the JSON as
    /// canonical text).
    #[test]
    fn a_key_is_what_it_was() {
        let key = KeyBuilder::new("call")
            .text("refund")
            .json(&json!({"order": "A-1", "amount": 5}))
            .finish();
        assert_eq!(hex::encode(key), "9bc1c880b3be5f87fc95307b77d15708");
    }
}
