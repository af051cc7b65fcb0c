//! Canonical JSON text: object keys sorted, no whitespace, strings and numbers as
//! serde_json writes them. Values equal as JSON, key order and formatting aside, have
//! one canonical text; it is what call fingerprints (`limits::canonical`) and the audit
//! record's `argsDigest` hash, so neither depends on how an agent ordered its keys.
//!
//! serde_json's own writer gives this text only while its map type is sorted: with its
//! `preserve_order` feature, which any crate in the build may turn on, maps keep
//! insertion order. So objects are written here, and one is sorted only when it isn't
//! already: with the sorted map (the default) that costs a comparison per key and no
//! allocation.
//!
//! Every caller hashes the text and drops it, so [`with_text`] writes it into a buffer
//! kept per thread instead of allocating one (and growing it) for every call.

use serde_json::Value;
use std::cell::Cell;

thread_local! {
    static SCRATCH: Cell<Vec<u8>> = const { Cell::new(Vec::new()) };
}

/// The largest buffer a thread keeps between calls; one grown past it by a large value
/// is freed after use, so a thread holds at most this much.
const KEEP_BYTES: usize = 64 * 1024;

/// Runs `read` over the canonical text of `value`.
pub fn with_text<R>(value: &Value, read: impl FnOnce(&[u8]) -> R) -> R {
    // Taken out while in use: a `read` that asks for more text gets an empty buffer.
    let mut buf = SCRATCH.take();
    buf.clear();
    write(value, &mut buf);
    let result = read(&buf);
    if buf.capacity() <= KEEP_BYTES {
        SCRATCH.set(buf);
    }
    result
}

/// Appends the canonical text of `value` to `out`.
fn write(value: &Value, out: &mut Vec<u8>) {
    match value {
        Value::Array(items) => {
            out.push(b'[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                write(item, out);
            }
            out.push(b']');
        }
        Value::Object(map) => write_object(map.iter(), out),
        scalar => write_serde(scalar, out),
    }
}

/// An object's entries, in the map's order; sorted here only if they aren't already.
fn write_object<'v, I>(entries: I, out: &mut Vec<u8>)
where
    I: Iterator<Item = (&'v String, &'v Value)> + Clone,
{
    out.push(b'{');
    if entries.clone().map(|(key, _)| key).is_sorted() {
        write_entries(entries, out);
    } else {
        let mut sorted: Vec<_> = entries.collect();
        sorted.sort_unstable_by(|a, b| a.0.cmp(b.0));
        write_entries(sorted.into_iter(), out);
    }
    out.push(b'}');
}

fn write_entries<'v>(entries: impl Iterator<Item = (&'v String, &'v Value)>, out: &mut Vec<u8>) {
    for (i, (key, value)) in entries.enumerate() {
        if i > 0 {
            out.push(b',');
        }
        write_serde(key.as_str(), out);
        out.push(b':');
        write(value, out);
    }
}

fn write_serde<T: serde::Serialize + ?Sized>(scalar: &T, out: &mut Vec<u8>) {
    // Writing a string or a scalar into a Vec can't fail; an empty write would only
    // merge two calls that are already malformed in the same way.
    let _ = serde_json::to_writer(&mut *out, scalar);
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn text(value: &Value) -> String {
        with_text(value, |bytes| String::from_utf8(bytes.to_vec()).unwrap())
    }

    #[test]
    fn key_order_and_whitespace_do_not_matter() {
        let a: Value =
            serde_json::from_str(r#"{"b": [1, {"y": 2, "x": "q"}], "a": null}"#).unwrap();
        let b: Value = serde_json::from_str(r#"{"a":null,"b":[1,{"x":"q","y":2}]}"#).unwrap();
        assert_eq!(text(&a), text(&b));
        assert_eq!(text(&a), r#"{"a":null,"b":[1,{"x":"q","y":2}]}"#);
    }

    #[test]
    fn strings_and_numbers_are_written_as_serde_json_writes_them() {
        let value = json!({"k\"": "a\nb\u{1}é", "n": [1, 1.0, -0.5, 18446744073709551615u64]});
        assert_eq!(
            text(&value),
            "{\"k\\\"\":\"a\\nb\\u0001é\",\"n\":[1,1.0,-0.5,18446744073709551615]}"
        );
        // With the sorted map this build uses, it is serde_json's own compact text.
        assert_eq!(text(&value).as_bytes(), serde_json::to_vec(&value).unwrap());
    }

    #[test]
    fn an_unsorted_object_is_sorted() {
        // The map iterates sorted in this build, so its entries are handed over reversed,
        // as a map keeping insertion order could.
        let map = json!({"a": {"y": [], "b": {}}, "z": 1});
        let Value::Object(map) = &map else {
            unreachable!()
        };
        let mut out = Vec::new();
        write_object(map.iter().rev(), &mut out);
        assert_eq!(out, br#"{"a":{"b":{},"y":[]},"z":1}"#);
    }

    #[test]
    fn reading_the_text_may_ask_for_more_text_and_large_buffers_are_not_kept() {
        let inner = json!({"b": 2, "a": 1});
        let outer = json!({"x": "y"});
        let both = with_text(&outer, |o| {
            let i = with_text(&inner, |i| i.to_vec());
            [o, b"+", &i].concat()
        });
        assert_eq!(both, br#"{"x":"y"}+{"a":1,"b":2}"#);

        let large = json!({"s": "x".repeat(KEEP_BYTES * 2)});
        assert_eq!(with_text(&large, <[u8]>::len), KEEP_BYTES * 2 + 8);
        let kept = SCRATCH.take().capacity();
        assert!(kept <= KEEP_BYTES, "{kept} bytes kept");
    }
}
