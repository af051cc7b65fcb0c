//! JSON bodies read strictly: an object that names a key twice is refused, and so is a
//! number this reading can't hold exactly.
//!
//! RFC 8259 leaves duplicate names to the parser, and parsers disagree: serde_json keeps
//! the last value, others keep the first or fail. The gateway decides on one reading and
//! forwards the bytes, so `{"method":"tools/call",…,"method":"ping"}` or
//! `{"project":"SEC","project":"OPS"}` could be judged as one call and run as another.
//! Refusing duplicates leaves every reader one meaning. Keys are compared **ignoring
//! case** (Unicode's, so `paramſ` is `params`): Go's `encoding/json`, and the backends
//! built on it, match member names that way, so `{"amount":5,"Amount":100000}` is one
//! key read twice for them.
//!
//! Numbers: serde_json holds a number as a 64-bit integer or a double. An integer past
//! 64 bits, or a double past 2^53 whose digits a double rounds, would be judged (and
//! deduplicated, approved) as a rounded value while the backend gets the digits sent:
//! `100000000000000000001` and `…002` would be one call. Such a number is refused.
//!
//! Both functions drive serde_json's own deserializer, so they accept exactly what
//! `serde_json::from_slice::<Value>` accepts (same numbers, strings, recursion limit, no
//! trailing characters) except those.

use serde::de::{self, DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::map::Entry;
use serde_json::{Map, Value};
use std::borrow::Cow;
use std::fmt;

/// Parses `bytes` into a tree, refusing an object that names a key twice.
pub fn parse(bytes: &[u8]) -> Result<Value, serde_json::Error> {
    let mut deserializer = serde_json::Deserializer::from_slice(bytes);
    let value = Tree.deserialize(&mut deserializer)?;
    deserializer.end()?;
    Ok(value)
}

/// Checks that `bytes` is JSON without duplicate keys, keeping nothing but the keys of
/// the object being walked; `Ok(true)` when the top value is an object.
pub fn check(bytes: &[u8]) -> Result<bool, serde_json::Error> {
    let mut deserializer = serde_json::Deserializer::from_slice(bytes);
    let is_object = Walk.deserialize(&mut deserializer)?;
    deserializer.end()?;
    Ok(is_object)
}

fn duplicate<E: de::Error>(key: &str) -> E {
    E::custom(format_args!(
        "the key {key:?} appears twice in one object (keys are compared ignoring case)"
    ))
}

/// A key as compared for duplicates: case folded. Borrowed when it has nothing to fold
/// (the common, lowercase ASCII key).
pub fn folded(key: &str) -> Cow<'_, str> {
    if is_folded(key) {
        return Cow::Borrowed(key);
    }
    if key.is_ascii() {
        return Cow::Owned(key.to_ascii_lowercase());
    }
    // Lower, upper, lower: letters with one uppercase and two lowercase forms (ſ and s,
    // ς and σ; the Kelvin sign and k) meet, and so do ß and ẞ (which Go folds together,
    // while ẞ's lowercase is ß and ß's uppercase is SS). It folds more than Go does
    // (`strasse` meets `straße`): a refusal too many, never a pair missed.
    Cow::Owned(
        key.chars()
            .flat_map(char::to_lowercase)
            .flat_map(char::to_uppercase)
            .flat_map(char::to_lowercase)
            .collect(),
    )
}

/// Whether `key` stands for one of `members` in another spelling (`Method`, `ARGUMENTS`,
/// `paramſ`): not one of them, but equal to one once folded. A reader that matches
/// names ignoring case takes it for that member.
pub fn misspells(key: &str, members: &[&str]) -> bool {
    if members.contains(&key) {
        return false;
    }
    let key = folded(key);
    members.iter().any(|member| key == folded(member))
}

/// Whether `key` folds to itself: ASCII without capitals, the usual key. Objects whose
/// keys all do need no folding to compare (the fast path of every call's body).
fn is_folded(key: &str) -> bool {
    key.bytes().all(|b| b.is_ascii() && !b.is_ascii_uppercase())
}

/// The first key of `keys` that equals another once folded.
fn folded_duplicate<'k>(keys: impl Iterator<Item = &'k str>) -> Option<&'k str> {
    let mut folded: Vec<(Cow<'k, str>, &'k str)> = keys.map(|k| (folded(k), k)).collect();
    if folded.len() < 2 {
        return None;
    }
    // Sorted, so a large object costs n log n, not n².
    folded.sort_unstable_by(|a, b| a.0.cmp(&b.0));
    folded
        .windows(2)
        .find(|pair| pair[0].0 == pair[1].0)
        .map(|pair| pair[1].1)
}

/// 2^53: past it a double no longer holds every integer.
const EXACT: f64 = 9_007_199_254_740_992.0;

/// A double read from the body is refused when it may be a rounded reading of its
/// digits: an integral value from 2^53 on (an integer literal past 64 bits arrives so,
/// and so does `1e20`, which the same double would stand for). Every double that large
/// is integral, so a tool wanting such magnitudes takes them as strings.
fn exact<E: de::Error>(v: f64) -> Result<f64, E> {
    if v.fract() == 0.0 && v.abs() >= EXACT {
        return Err(E::custom(
            "a number past 2^53 that is not a 64-bit integer can't be read exactly: send \
             it as a string",
        ));
    }
    Ok(v)
}

/// Builds a `Value`, as serde_json's own visitor does.
struct Tree;

impl<'de> DeserializeSeed<'de> for Tree {
    type Value = Value;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Value, D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Tree {
    type Value = Value;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_bool<E>(self, v: bool) -> Result<Value, E> {
        Ok(Value::Bool(v))
    }

    fn visit_i64<E>(self, v: i64) -> Result<Value, E> {
        Ok(Value::from(v))
    }

    fn visit_u64<E>(self, v: u64) -> Result<Value, E> {
        Ok(Value::from(v))
    }

    fn visit_f64<E: de::Error>(self, v: f64) -> Result<Value, E> {
        exact(v).map(Value::from)
    }

    fn visit_str<E>(self, v: &str) -> Result<Value, E> {
        Ok(Value::String(v.to_string()))
    }

    fn visit_string<E>(self, v: String) -> Result<Value, E> {
        Ok(Value::String(v))
    }

    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let mut items = Vec::with_capacity(seq.size_hint().unwrap_or(0).min(4096));
        while let Some(item) = seq.next_element_seed(Tree)? {
            items.push(item);
        }
        Ok(Value::Array(items))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let mut object = Map::new();
        while let Some(key) = map.next_key::<String>()? {
            let value = map.next_value_seed(Tree)?;
            match object.entry(key) {
                Entry::Vacant(slot) => {
                    slot.insert(value);
                }
                Entry::Occupied(taken) => return Err(duplicate(taken.key())),
            }
        }
        // Exact repeats are refused above; only keys that fold can meet another.
        if object.keys().all(|k| is_folded(k)) {
            return Ok(Value::Object(object));
        }
        match folded_duplicate(object.keys().map(String::as_str)) {
            Some(key) => Err(duplicate(key)),
            None => Ok(Value::Object(object)),
        }
    }
}

/// Walks a value, keeping only the keys of the object being walked; says whether the
/// value is an object.
struct Walk;

impl<'de> DeserializeSeed<'de> for Walk {
    type Value = bool;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<bool, D::Error> {
        // `deserialize_any`, as `Value` does, so numbers are converted (and `1e999`
        // refused) exactly as the tree parser would.
        deserializer.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Walk {
    type Value = bool;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_bool<E>(self, _: bool) -> Result<bool, E> {
        Ok(false)
    }

    fn visit_i64<E>(self, _: i64) -> Result<bool, E> {
        Ok(false)
    }

    fn visit_u64<E>(self, _: u64) -> Result<bool, E> {
        Ok(false)
    }

    fn visit_f64<E: de::Error>(self, v: f64) -> Result<bool, E> {
        exact(v).map(|_| false)
    }

    fn visit_str<E>(self, _: &str) -> Result<bool, E> {
        Ok(false)
    }

    fn visit_unit<E>(self) -> Result<bool, E> {
        Ok(false)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<bool, A::Error> {
        while seq.next_element_seed(Walk)?.is_some() {}
        Ok(false)
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<bool, A::Error> {
        let mut keys: Vec<Cow<'de, str>> = Vec::new();
        while let Some(key) = map.next_key_seed(Key)? {
            map.next_value_seed(Walk)?;
            keys.push(key);
        }
        // Borrowed where unescaped. Keys that all fold to themselves are compared as
        // they are (sorted, so a large object costs n log n, not n²); else folded.
        if !keys.iter().all(|k| is_folded(k)) {
            return match folded_duplicate(keys.iter().map(|k| k.as_ref())) {
                Some(key) => Err(duplicate(key)),
                None => Ok(true),
            };
        }
        keys.sort_unstable();
        match keys.windows(2).find(|pair| pair[0] == pair[1]) {
            Some(pair) => Err(duplicate(&pair[0])),
            None => Ok(true),
        }
    }
}

/// An object key, borrowed from the input when it has no escapes.
struct Key;

impl<'de> DeserializeSeed<'de> for Key {
    type Value = Cow<'de, str>;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Self::Value, D::Error> {
        deserializer.deserialize_str(self)
    }
}

impl<'de> Visitor<'de> for Key {
    type Value = Cow<'de, str>;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("an object key")
    }

    fn visit_borrowed_str<E>(self, v: &'de str) -> Result<Self::Value, E> {
        Ok(Cow::Borrowed(v))
    }

    fn visit_str<E>(self, v: &str) -> Result<Self::Value, E> {
        Ok(Cow::Owned(v.to_string()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn accepts_what_serde_json_accepts() {
        for text in [
            r#"{"a": 1, "b": [1, -2, 3.5, "x", null, true], "c": {"a": {"b": 2}}}"#,
            r#"[{"a": 1}, {"a": 2}]"#,
            r#""just a string""#,
            r#"{"e\u0301": 1, "é": 2}"#,
            "  7  ",
        ] {
            let expected: Value = serde_json::from_str(text).unwrap();
            assert_eq!(parse(text.as_bytes()).unwrap(), expected, "{text}");
            assert!(check(text.as_bytes()).is_ok(), "{text}");
        }
    }

    #[test]
    fn refuses_what_serde_json_refuses() {
        let deep = "[".repeat(200) + &"]".repeat(200);
        for text in ["{nope", r#"{"a": 1e999}"#, "1 2", "", deep.as_str()] {
            assert!(serde_json::from_str::<Value>(text).is_err(), "{text}");
            assert!(parse(text.as_bytes()).is_err(), "{text}");
            assert!(check(text.as_bytes()).is_err(), "{text}");
        }
    }

    #[test]
    fn refuses_duplicate_keys_at_any_depth_and_spelling() {
        for text in [
            r#"{"method": "tools/call", "id": 1, "method": "ping"}"#,
            r#"{"params": {"arguments": {"p": "SEC", "p": "OPS"}}}"#,
            r#"[1, {"a": 1, "b": 2, "a": 3}]"#,
            r#"{"a": 1, "\u0061": 2}"#,
            // Compared as Go's encoding/json matches members: ignoring case.
            r#"{"to": "alice", "amount": 5, "Amount": 100000}"#,
            r#"{"method": "notifications/progress", "METHOD": "tools/call"}"#,
            r#"{"params": {}, "param\u017f": {}}"#,
            r#"{"k": 1, "\u212a": 2}"#,
            r#"{"stra\u00dfe": "safe", "STRA\u1e9eE": "evil"}"#,
            r#"{"\u03c3": 1, "\u03c2": 2}"#,
        ] {
            let e = parse(text.as_bytes()).unwrap_err();
            assert!(e.to_string().contains("appears twice"), "{text}: {e}");
            let e = check(text.as_bytes()).unwrap_err();
            assert!(e.to_string().contains("appears twice"), "{text}: {e}");
        }
        let wide: Map<String, Value> = (0..5000).map(|i| (format!("k{i}"), json!(i))).collect();
        let mut text = serde_json::to_string(&wide).unwrap();
        assert!(check(text.as_bytes()).is_ok());
        text.insert_str(1, r#""k4999": 0, "#);
        assert!(check(text.as_bytes()).is_err());
        assert!(parse(text.as_bytes()).is_err());
    }

    #[test]
    fn refuses_numbers_it_would_round() {
        for text in [
            r#"{"amount": 100000000000000000001}"#,
            r#"[-100000000000000000001]"#,
            r#"{"n": 9007199254740993.0}"#,
            r#"{"n": 1e20}"#,
            "1.5e300",
        ] {
            assert!(parse(text.as_bytes()).is_err(), "{text}");
            assert!(check(text.as_bytes()).is_err(), "{text}");
        }
        for text in [
            "18446744073709551615",
            "-9223372036854775808",
            "9007199254740991.0",
            "-1.5e-300",
            "0.1",
        ] {
            assert!(parse(text.as_bytes()).is_ok(), "{text}");
            assert!(check(text.as_bytes()).is_ok(), "{text}");
        }
    }
}
