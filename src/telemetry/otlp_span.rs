//! One finished span as OTLP protobuf bytes, written straight from the SDK's `SpanData`.
//!
//! The `opentelemetry-proto` crate's way there builds its generated `Span` first: a copy
//! of every attribute key and string value, a vector per attribute list, then `prost`
//! walks that copy and it is dropped. On a loaded sidecar that copy was the larger half
//! of a span's encoding (docs/bench-history.md, item 22), so this module writes the same
//! message without it, with `prost`'s own varint and key encoders: each message's length
//! is computed, then its fields are written in the order prost writes them (by number),
//! and proto3's defaults (empty strings and lists, zeros) are left out as it leaves them.
//!
//! Field numbers are those of `opentelemetry/proto/trace/v1/trace.proto` and
//! `opentelemetry/proto/common/v1/common.proto`; the tests decode what this writes with
//! the crate's generated types and compare it with the crate's own conversion.

use opentelemetry::trace::{Event, Link, SpanContext, SpanId, SpanKind, Status};
use opentelemetry::{Array, KeyValue, Value};
use opentelemetry_sdk::trace::SpanData;
use prost::encoding::WireType::{LengthDelimited, SixtyFourBit, ThirtyTwoBit, Varint};
use prost::encoding::{encode_key, encode_varint, encoded_len_varint, key_len};
use std::time::{SystemTime, UNIX_EPOCH};

/// `SpanFlags`: the span context says whether its parent is remote, and whether it is.
const CONTEXT_HAS_IS_REMOTE: u32 = 0x100;
const CONTEXT_IS_REMOTE: u32 = 0x200;

/// Appends `span` to `buf` as one entry of the repeated field `tag` (`ScopeSpans.spans`).
pub fn append(tag: u32, span: &SpanData, buf: &mut Vec<u8>) {
    put_message(tag, &SpanMessage(span), buf);
}

/// A message written by this module: the length of its body, then the body.
trait Message {
    fn body_len(&self) -> usize;
    fn write_body(&self, buf: &mut Vec<u8>);
}

fn message_len(tag: u32, message: &impl Message) -> usize {
    let len = message.body_len();
    key_len(tag) + encoded_len_varint(len as u64) + len
}

fn put_message(tag: u32, message: &impl Message, buf: &mut Vec<u8>) {
    encode_key(tag, LengthDelimited, buf);
    encode_varint(message.body_len() as u64, buf);
    message.write_body(buf);
}

fn repeated_len<M: Message>(tag: u32, items: impl Iterator<Item = M>) -> usize {
    items.map(|m| message_len(tag, &m)).sum()
}

fn put_repeated<M: Message>(tag: u32, items: impl Iterator<Item = M>, buf: &mut Vec<u8>) {
    items.for_each(|m| put_message(tag, &m, buf));
}

/// A `bytes` or `string` field; proto3 leaves an empty one out.
fn bytes_len(tag: u32, bytes: &[u8]) -> usize {
    match bytes.len() {
        0 => 0,
        n => key_len(tag) + encoded_len_varint(n as u64) + n,
    }
}

fn put_bytes(tag: u32, bytes: &[u8], buf: &mut Vec<u8>) {
    if !bytes.is_empty() {
        encode_key(tag, LengthDelimited, buf);
        encode_varint(bytes.len() as u64, buf);
        buf.extend_from_slice(bytes);
    }
}

/// A varint field (`uint32`, an enumeration); left out when zero.
fn varint_len(tag: u32, value: u64) -> usize {
    match value {
        0 => 0,
        v => key_len(tag) + encoded_len_varint(v),
    }
}

fn put_varint(tag: u32, value: u64, buf: &mut Vec<u8>) {
    if value != 0 {
        encode_key(tag, Varint, buf);
        encode_varint(value, buf);
    }
}

/// A `fixed32` or `fixed64` field; left out when zero.
fn fixed_len(tag: u32, value: u64, width: usize) -> usize {
    match value {
        0 => 0,
        _ => key_len(tag) + width,
    }
}

fn put_fixed32(tag: u32, value: u32, buf: &mut Vec<u8>) {
    if value != 0 {
        encode_key(tag, ThirtyTwoBit, buf);
        buf.extend_from_slice(&value.to_le_bytes());
    }
}

fn put_fixed64(tag: u32, value: u64, buf: &mut Vec<u8>) {
    if value != 0 {
        encode_key(tag, SixtyFourBit, buf);
        buf.extend_from_slice(&value.to_le_bytes());
    }
}

fn nanos(time: SystemTime) -> u64 {
    time.duration_since(UNIX_EPOCH)
        .map_or(0, |since| since.as_nanos() as u64)
}

fn flags(context: &SpanContext, parent_is_remote: bool) -> u32 {
    let remote = if parent_is_remote {
        CONTEXT_IS_REMOTE
    } else {
        0
    };
    u32::from(context.trace_flags().to_u8()) | CONTEXT_HAS_IS_REMOTE | remote
}

/// `Span`.
struct SpanMessage<'a>(&'a SpanData);

/// A root span's `parent_span_id` is empty, so left out.
fn parent_of(span: &SpanData) -> Option<[u8; 8]> {
    (span.parent_span_id != SpanId::INVALID).then(|| span.parent_span_id.to_bytes())
}

impl Message for SpanMessage<'_> {
    fn body_len(&self) -> usize {
        let span = self.0;
        let context = &span.span_context;
        bytes_len(1, &context.trace_id().to_bytes())
            + bytes_len(2, &context.span_id().to_bytes())
            + bytes_len(3, context.trace_state().header().as_bytes())
            + parent_of(span).map_or(0, |id| bytes_len(4, &id))
            + fixed_len(16, flags(context, span.parent_span_is_remote).into(), 4)
            + bytes_len(5, span.name.as_bytes())
            + varint_len(6, kind(&span.span_kind))
            + fixed_len(7, nanos(span.start_time), 8)
            + fixed_len(8, nanos(span.end_time), 8)
            + repeated_len(9, span.attributes.iter().map(Attribute))
            + varint_len(10, span.dropped_attributes_count.into())
            + repeated_len(11, span.events.iter().map(EventMessage))
            + varint_len(12, span.events.dropped_count.into())
            + repeated_len(13, span.links.iter().map(LinkMessage))
            + varint_len(14, span.links.dropped_count.into())
            + message_len(15, &StatusMessage(&span.status))
    }

    fn write_body(&self, buf: &mut Vec<u8>) {
        let span = self.0;
        let context = &span.span_context;
        put_bytes(1, &context.trace_id().to_bytes(), buf);
        put_bytes(2, &context.span_id().to_bytes(), buf);
        put_bytes(3, context.trace_state().header().as_bytes(), buf);
        if let Some(id) = parent_of(span) {
            put_bytes(4, &id, buf);
        }
        put_bytes(5, span.name.as_bytes(), buf);
        put_varint(6, kind(&span.span_kind), buf);
        put_fixed64(7, nanos(span.start_time), buf);
        put_fixed64(8, nanos(span.end_time), buf);
        put_repeated(9, span.attributes.iter().map(Attribute), buf);
        put_varint(10, span.dropped_attributes_count.into(), buf);
        put_repeated(11, span.events.iter().map(EventMessage), buf);
        put_varint(12, span.events.dropped_count.into(), buf);
        put_repeated(13, span.links.iter().map(LinkMessage), buf);
        put_varint(14, span.links.dropped_count.into(), buf);
        put_message(15, &StatusMessage(&span.status), buf);
        put_fixed32(16, flags(context, span.parent_span_is_remote), buf);
    }
}

/// `Span.SpanKind`.
fn kind(kind: &SpanKind) -> u64 {
    match kind {
        SpanKind::Internal => 1,
        SpanKind::Server => 2,
        SpanKind::Client => 3,
        SpanKind::Producer => 4,
        SpanKind::Consumer => 5,
    }
}

/// `Span.Event`.
struct EventMessage<'a>(&'a Event);

impl Message for EventMessage<'_> {
    fn body_len(&self) -> usize {
        let event = self.0;
        fixed_len(1, nanos(event.timestamp), 8)
            + bytes_len(2, event.name.as_bytes())
            + repeated_len(3, event.attributes.iter().map(Attribute))
            + varint_len(4, event.dropped_attributes_count.into())
    }

    fn write_body(&self, buf: &mut Vec<u8>) {
        let event = self.0;
        put_fixed64(1, nanos(event.timestamp), buf);
        put_bytes(2, event.name.as_bytes(), buf);
        put_repeated(3, event.attributes.iter().map(Attribute), buf);
        put_varint(4, event.dropped_attributes_count.into(), buf);
    }
}

/// `Span.Link`.
struct LinkMessage<'a>(&'a Link);

impl Message for LinkMessage<'_> {
    fn body_len(&self) -> usize {
        let (link, context) = (self.0, &self.0.span_context);
        bytes_len(1, &context.trace_id().to_bytes())
            + bytes_len(2, &context.span_id().to_bytes())
            + bytes_len(3, context.trace_state().header().as_bytes())
            + repeated_len(4, link.attributes.iter().map(Attribute))
            + varint_len(5, link.dropped_attributes_count.into())
            + fixed_len(6, flags(context, context.is_remote()).into(), 4)
    }

    fn write_body(&self, buf: &mut Vec<u8>) {
        let (link, context) = (self.0, &self.0.span_context);
        put_bytes(1, &context.trace_id().to_bytes(), buf);
        put_bytes(2, &context.span_id().to_bytes(), buf);
        put_bytes(3, context.trace_state().header().as_bytes(), buf);
        put_repeated(4, link.attributes.iter().map(Attribute), buf);
        put_varint(5, link.dropped_attributes_count.into(), buf);
        put_fixed32(6, flags(context, context.is_remote()), buf);
    }
}

/// `Status`: always present, as the crate's conversion makes it.
struct StatusMessage<'a>(&'a Status);

impl Message for StatusMessage<'_> {
    fn body_len(&self) -> usize {
        let (code, description) = status(self.0);
        bytes_len(2, description.as_bytes()) + varint_len(3, code)
    }

    fn write_body(&self, buf: &mut Vec<u8>) {
        let (code, description) = status(self.0);
        put_bytes(2, description.as_bytes(), buf);
        put_varint(3, code, buf);
    }
}

/// `Status.StatusCode` and the message: only an error carries one.
fn status(status: &Status) -> (u64, &str) {
    match status {
        Status::Unset => (0, ""),
        Status::Ok => (1, ""),
        Status::Error { description } => (2, description),
    }
}

/// `KeyValue`: the key, and the value always present.
struct Attribute<'a>(&'a KeyValue);

impl Message for Attribute<'_> {
    fn body_len(&self) -> usize {
        bytes_len(1, self.0.key.as_str().as_bytes()) + message_len(2, &Any::from(&self.0.value))
    }

    fn write_body(&self, buf: &mut Vec<u8>) {
        put_bytes(1, self.0.key.as_str().as_bytes(), buf);
        put_message(2, &Any::from(&self.0.value), buf);
    }
}

/// `AnyValue`: a `oneof`, so its one field is written even when it holds a default.
enum Any<'a> {
    Str(&'a str),
    Bool(bool),
    I64(i64),
    F64(f64),
    Array(&'a Array),
    /// A value type added to the API after this was written: sent as no value.
    Unknown,
}

impl<'a> From<&'a Value> for Any<'a> {
    fn from(value: &'a Value) -> Any<'a> {
        match value {
            Value::String(s) => Any::Str(s.as_str()),
            Value::Bool(b) => Any::Bool(*b),
            Value::I64(i) => Any::I64(*i),
            Value::F64(f) => Any::F64(*f),
            Value::Array(array) => Any::Array(array),
            _ => Any::Unknown,
        }
    }
}

impl Message for Any<'_> {
    fn body_len(&self) -> usize {
        match *self {
            Any::Str(s) => key_len(1) + encoded_len_varint(s.len() as u64) + s.len(),
            Any::Bool(_) => key_len(2) + 1,
            Any::I64(i) => key_len(3) + encoded_len_varint(i as u64),
            Any::F64(_) => key_len(4) + 8,
            Any::Array(array) => message_len(5, &ArrayValue(array)),
            Any::Unknown => 0,
        }
    }

    fn write_body(&self, buf: &mut Vec<u8>) {
        match *self {
            Any::Str(s) => {
                encode_key(1, LengthDelimited, buf);
                encode_varint(s.len() as u64, buf);
                buf.extend_from_slice(s.as_bytes());
            }
            Any::Bool(b) => {
                encode_key(2, Varint, buf);
                encode_varint(u64::from(b), buf);
            }
            Any::I64(i) => {
                encode_key(3, Varint, buf);
                encode_varint(i as u64, buf);
            }
            Any::F64(f) => {
                encode_key(4, SixtyFourBit, buf);
                buf.extend_from_slice(&f.to_le_bytes());
            }
            Any::Array(array) => put_message(5, &ArrayValue(array), buf),
            Any::Unknown => {}
        }
    }
}

/// `ArrayValue`: each element an `AnyValue`.
struct ArrayValue<'a>(&'a Array);

impl Message for ArrayValue<'_> {
    fn body_len(&self) -> usize {
        match self.0 {
            Array::Bool(v) => repeated_len(1, v.iter().map(|&b| Any::Bool(b))),
            Array::I64(v) => repeated_len(1, v.iter().map(|&i| Any::I64(i))),
            Array::F64(v) => repeated_len(1, v.iter().map(|&f| Any::F64(f))),
            Array::String(v) => repeated_len(1, v.iter().map(|s| Any::Str(s.as_str()))),
            _ => 0,
        }
    }

    fn write_body(&self, buf: &mut Vec<u8>) {
        match self.0 {
            Array::Bool(v) => put_repeated(1, v.iter().map(|&b| Any::Bool(b)), buf),
            Array::I64(v) => put_repeated(1, v.iter().map(|&i| Any::I64(i)), buf),
            Array::F64(v) => put_repeated(1, v.iter().map(|&f| Any::F64(f)), buf),
            Array::String(v) => put_repeated(1, v.iter().map(|s| Any::Str(s.as_str())), buf),
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::telemetry::otlp_encode::tests::span;
    use opentelemetry::trace::{SpanContext, TraceFlags, TraceId, TraceState};
    use opentelemetry_proto::tonic::trace::v1::{ScopeSpans, Span};
    use prost::Message as _;
    use std::time::Duration;

    /// What the crate's own conversion and prost make of `data`, and what this module
    /// makes of it, both decoded.
    fn both(data: SpanData) -> (Vec<Span>, Vec<Span>) {
        let mut ours = Vec::new();
        append(2, &data, &mut ours);
        let ours = ScopeSpans::decode(ours.as_slice()).expect("a valid ScopeSpans");
        (ours.spans, vec![Span::from(data)])
    }

    /// A span with every kind of attribute value, events and a link, all with
    /// dropped counts.
    fn rich() -> SpanData {
        let mut data = span("tools/call refund", &Default::default());
        data.attributes.extend([
            KeyValue::new("empty", ""),
            KeyValue::new("negative", -7_i64),
            KeyValue::new("zero", 0_i64),
            KeyValue::new("no", false),
            KeyValue::new("ratio", 0.25),
            KeyValue::new(
                "tags",
                Value::Array(Array::String(vec!["a".into(), "".into()])),
            ),
            KeyValue::new("flags", Value::Array(Array::Bool(vec![true, false]))),
            KeyValue::new("ints", Value::Array(Array::I64(vec![1, -1]))),
            KeyValue::new("floats", Value::Array(Array::F64(vec![]))),
            KeyValue::new("", "no key"),
        ]);
        data.dropped_attributes_count = 3;
        let at = data.start_time + Duration::from_millis(1);
        data.events.events.push(Event::new(
            "classified",
            at,
            vec![KeyValue::new("toolgate.tool", "refund")],
            2,
        ));
        data.events
            .events
            .push(Event::new("allowed", at, vec![], 0));
        data.events.dropped_count = 1;
        let linked = SpanContext::new(
            TraceId::from(11),
            SpanId::from(12),
            TraceFlags::SAMPLED,
            true,
            TraceState::from_key_value([("vendor", "x")]).unwrap(),
        );
        data.links
            .links
            .push(Link::new(linked, vec![KeyValue::new("why", "retry")], 1));
        data.links.dropped_count = 4;
        data.span_context = SpanContext::new(
            TraceId::from(7),
            SpanId::from(9),
            TraceFlags::SAMPLED,
            false,
            TraceState::from_key_value([("k", "v")]).unwrap(),
        );
        data
    }

    #[test]
    fn a_span_is_what_the_crate_would_make_of_it() {
        let (ours, theirs) = both(rich());
        assert_eq!(ours, theirs);
    }

    #[test]
    fn defaults_are_left_out_as_the_crate_leaves_them() {
        let mut data = span("", &Default::default());
        data.parent_span_id = SpanId::INVALID;
        data.parent_span_is_remote = false;
        data.status = Status::Unset;
        data.span_kind = SpanKind::Internal;
        data.attributes.clear();
        data.start_time = UNIX_EPOCH;
        let (ours, theirs) = both(data.clone());
        assert_eq!(ours, theirs);
        for (status, kind) in [
            (Status::Ok, SpanKind::Client),
            (Status::error(""), SpanKind::Producer),
            (Status::error("boom"), SpanKind::Consumer),
        ] {
            data.status = status;
            data.span_kind = kind;
            let (ours, theirs) = both(data.clone());
            assert_eq!(ours, theirs);
        }
    }

    #[test]
    fn the_bytes_are_the_crates_bytes() {
        // Same fields in the same order: byte for byte what prost writes.
        for data in [span("POST /refunds", &Default::default()), rich()] {
            let mut ours = Vec::new();
            append(2, &data, &mut ours);
            let mut theirs = Vec::new();
            prost::encoding::message::encode(2, &Span::from(data), &mut theirs);
            assert_eq!(ours, theirs);
        }
    }
}
