//! How much memory a JSON line would take as a `serde_json::Value` tree, found in one
//! pass that builds nothing.
//!
//! A recorded call is re-decided on its arguments as a tree, and a tree can be far larger
//! than its text: `[0,0,0,…]` is 2 bytes a value as text and 32 or more as `Value`s; a
//! list of small objects is over 100 times its text (a `BTreeMap` node each). So a long
//! line is weighed before it is parsed, and one whose tree would pass replay's budget is
//! re-decided without its arguments (`partial`), keeping `toolgate replay` within a
//! small multiple of the longest line (DESIGN §14).
//!
//! The estimate errs high: every value is a `Value` (32 bytes); an array's slack from
//! doubling is counted whole; a map pays for a full `BTreeMap` node and then a node's
//! share per entry; strings pay their length.

use serde::de::{self, Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};
use std::fmt;

/// `size_of::<serde_json::Value>()`.
const VALUE: u64 = 32;
/// A `BTreeMap<String, Value>` leaf node (11 keys and values, and its header).
const MAP_NODE: u64 = 640;
/// A map entry's key `String` and its share of the nodes (nodes are at least half full).
const MAP_ENTRY: u64 = 24 + MAP_NODE / 5;

/// The bytes a `Value` tree of `json` would take, about; `None` if `json` is not one
/// JSON value (then it is no record either, and nothing needs to be built).
pub fn of(json: &[u8]) -> Option<u64> {
    let mut parser = serde_json::Deserializer::from_slice(json);
    let weight = Weight::deserialize(&mut parser).ok()?;
    parser.end().ok()?;
    Some(weight.0)
}

struct Weight(u64);

impl<'de> Deserialize<'de> for Weight {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(Weigh)
    }
}

struct Weigh;

impl<'de> Visitor<'de> for Weigh {
    type Value = Weight;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_bool<E: de::Error>(self, _: bool) -> Result<Weight, E> {
        Ok(Weight(VALUE))
    }

    fn visit_i64<E: de::Error>(self, _: i64) -> Result<Weight, E> {
        Ok(Weight(VALUE))
    }

    fn visit_u64<E: de::Error>(self, _: u64) -> Result<Weight, E> {
        Ok(Weight(VALUE))
    }

    fn visit_f64<E: de::Error>(self, _: f64) -> Result<Weight, E> {
        Ok(Weight(VALUE))
    }

    fn visit_unit<E: de::Error>(self) -> Result<Weight, E> {
        Ok(Weight(VALUE))
    }

    fn visit_str<E: de::Error>(self, text: &str) -> Result<Weight, E> {
        Ok(Weight(VALUE + text.len() as u64))
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Weight, A::Error> {
        let mut total = VALUE;
        while let Some(Weight(item)) = seq.next_element()? {
            // The element, and as much again for a doubling Vec's spare room.
            total = total.saturating_add(item).saturating_add(VALUE);
        }
        Ok(Weight(total))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Weight, A::Error> {
        let mut total = VALUE + MAP_NODE;
        while let Some(Weight(key)) = map.next_key()? {
            let Weight(value) = map.next_value()?;
            total = total
                .saturating_add(MAP_ENTRY)
                .saturating_add(key)
                .saturating_add(value);
        }
        Ok(Weight(total))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn trees_weigh_more_than_their_text_where_they_should() {
        let zeros = format!("[{}]", vec!["0"; 1000].join(","));
        assert!(of(zeros.as_bytes()).unwrap() >= 64 * 1000);
        let objects = format!("[{}]", vec![r#"{"a":0}"#; 1000].join(","));
        assert!(of(objects.as_bytes()).unwrap() > 600 * 1000);
        let long = format!("\"{}\"", "x".repeat(100_000));
        let weight = of(long.as_bytes()).unwrap();
        assert!((100_000..101_000).contains(&weight), "{weight}");
    }

    #[test]
    fn what_is_not_one_json_value_has_no_weight() {
        assert_eq!(of(b"[1,2"), None);
        assert_eq!(of(b"{} {}"), None);
        assert!(of(b"  {\"a\": [true, null, 1.5, \"x\"]}  ").is_some());
    }
}
