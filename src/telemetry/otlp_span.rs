//! One finished span as OTLP protobuf bytes, written straight from the SDK's `SpanData`.
//!
//! The `opentelemetry-proto` crate's way there builds its generated `Span` first: a copy
//! of every attribute key and string value, a vector per attribute list, then `prost`
//! walks that copy and it is dropped. On a loaded sidecar that copy was the larger half
//! of a span's encoding (docs/bench-history.md, item 22), so this module writes the same
//! message without it, with `prost`'s own varint and key encoders. Each message lists its
//! fields once, in the order prost writes them (by number), to a [`Sink`] that either
//! counts them (for the length that prefixes the message) or writes them; proto3's
//! defaults (empty strings and lists, zeros) are left out as prost leaves them.
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
    Write(buf).put_message(tag, &SpanMessage(span));
}

/// A message written by this module: its fields, listed once for counting and writing.
trait Message {
    fn fields<S: Sink>(&self, sink: &mut S);
}

/// The length of a message's body.
#[inline]
fn body_len(message: &impl Message) -> usize {
    let mut count = Count(0);
    message.fields(&mut count);
    count.0
}

/// Where a message's fields go. The `put_` methods write a field whatever its value (a
/// `oneof` member, a present message); the others leave proto3's default out.
///
/// This module's small functions are `#[inline]`: left to the compiler, the span
/// processor took 3.7–4.2% of a loaded sidecar's samples instead of 2.6–3.3%.
trait Sink {
    fn put_bytes(&mut self, tag: u32, bytes: &[u8]);
    fn put_varint(&mut self, tag: u32, value: u64);
    fn put_fixed32(&mut self, tag: u32, value: u32);
    fn put_fixed64(&mut self, tag: u32, value: u64);
    fn put_message<M: Message>(&mut self, tag: u32, message: &M);

    /// A `bytes` or `string` field.
    #[inline]
    fn bytes(&mut self, tag: u32, bytes: &[u8]) {
        if !bytes.is_empty() {
            self.put_bytes(tag, bytes);
        }
    }

    /// A `uint32` or enumeration field.
    #[inline]
    fn varint(&mut self, tag: u32, value: u64) {
        if value != 0 {
            self.put_varint(tag, value);
        }
    }

    #[inline]
    fn fixed32(&mut self, tag: u32, value: u32) {
        if value != 0 {
            self.put_fixed32(tag, value);
        }
    }

    #[inline]
    fn fixed64(&mut self, tag: u32, value: u64) {
        if value != 0 {
            self.put_fixed64(tag, value);
        }
    }
}

/// Counts the bytes the fields would take.
struct Count(usize);

impl Sink for Count {
    #[inline]
    fn put_bytes(&mut self, tag: u32, bytes: &[u8]) {
        self.0 += key_len(tag) + encoded_len_varint(bytes.len() as u64) + bytes.len();
    }

    #[inline]
    fn put_varint(&mut self, tag: u32, value: u64) {
        self.0 += key_len(tag) + encoded_len_varint(value);
    }

    #[inline]
    fn put_fixed32(&mut self, tag: u32, _: u32) {
        self.0 += key_len(tag) + 4;
    }

    #[inline]
    fn put_fixed64(&mut self, tag: u32, _: u64) {
        self.0 += key_len(tag) + 8;
    }

    #[inline]
    fn put_message<M: Message>(&mut self, tag: u32, message: &M) {
        let len = body_len(message);
        self.0 += key_len(tag) + encoded_len_varint(len as u64) + len;
    }
}

/// Writes the fields.
struct Write<'b>(&'b mut Vec<u8>);

impl Sink for Write<'_> {
    #[inline]
    fn put_bytes(&mut self, tag: u32, bytes: &[u8]) {
        encode_key(tag, LengthDelimited, self.0);
        encode_varint(bytes.len() as u64, self.0);
        self.0.extend_from_slice(bytes);
    }

    #[inline]
    fn put_varint(&mut self, tag: u32, value: u64) {
        encode_key(tag, Varint, self.0);
        encode_varint(value, self.0);
    }

    #[inline]
    fn put_fixed32(&mut self, tag: u32, value: u32) {
        encode_key(tag, ThirtyTwoBit, self.0);
        self.0.extend_from_slice(&value.to_le_bytes());
    }

    #[inline]
    fn put_fixed64(&mut self, tag: u32, value: u64) {
        encode_key(tag, SixtyFourBit, self.0);
        self.0.extend_from_slice(&value.to_le_bytes());
    }

    #[inline]
    fn put_message<M: Message>(&mut self, tag: u32, message: &M) {
        encode_key(tag, LengthDelimited, self.0);
        encode_varint(body_len(message) as u64, self.0);
        message.fields(self);
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

impl Message for SpanMessage<'_> {
    #[inline]
    fn fields<S: Sink>(&self, sink: &mut S) {
        let span = self.0;
        let context = &span.span_context;
        sink.bytes(1, &context.trace_id().to_bytes());
        sink.bytes(2, &context.span_id().to_bytes());
        sink.bytes(3, context.trace_state().header().as_bytes());
        // A root span's parent is left out, as an empty `parent_span_id`.
        if span.parent_span_id != SpanId::INVALID {
            sink.bytes(4, &span.parent_span_id.to_bytes());
        }
        sink.bytes(5, span.name.as_bytes());
        sink.varint(6, kind(&span.span_kind));
        sink.fixed64(7, nanos(span.start_time));
        sink.fixed64(8, nanos(span.end_time));
        for attribute in &span.attributes {
            sink.put_message(9, &Attribute(attribute));
        }
        sink.varint(10, span.dropped_attributes_count.into());
        for event in span.events.iter() {
            sink.put_message(11, &EventMessage(event));
        }
        sink.varint(12, span.events.dropped_count.into());
        for link in span.links.iter() {
            sink.put_message(13, &LinkMessage(link));
        }
        sink.varint(14, span.links.dropped_count.into());
        // Always present, as the crate's conversion makes it.
        sink.put_message(15, &StatusMessage(&span.status));
        sink.fixed32(16, flags(context, span.parent_span_is_remote));
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
    #[inline]
    fn fields<S: Sink>(&self, sink: &mut S) {
        let event = self.0;
        sink.fixed64(1, nanos(event.timestamp));
        sink.bytes(2, event.name.as_bytes());
        for attribute in &event.attributes {
            sink.put_message(3, &Attribute(attribute));
        }
        sink.varint(4, event.dropped_attributes_count.into());
    }
}

/// `Span.Link`.
struct LinkMessage<'a>(&'a Link);

impl Message for LinkMessage<'_> {
    #[inline]
    fn fields<S: Sink>(&self, sink: &mut S) {
        let (link, context) = (self.0, &self.0.span_context);
        sink.bytes(1, &context.trace_id().to_bytes());
        sink.bytes(2, &context.span_id().to_bytes());
        sink.bytes(3, context.trace_state().header().as_bytes());
        for attribute in &link.attributes {
            sink.put_message(4, &Attribute(attribute));
        }
        sink.varint(5, link.dropped_attributes_count.into());
        sink.fixed32(6, flags(context, context.is_remote()));
    }
}

/// `Status`: its code, and a message only an error carries.
struct StatusMessage<'a>(&'a Status);

impl Message for StatusMessage<'_> {
    #[inline]
    fn fields<S: Sink>(&self, sink: &mut S) {
        let (code, description) = match self.0 {
            Status::Unset => (0, ""),
            Status::Ok => (1, ""),
            Status::Error { description } => (2, description.as_ref()),
        };
        sink.bytes(2, description.as_bytes());
        sink.varint(3, code);
    }
}

/// `KeyValue`: the key, and the value always present.
struct Attribute<'a>(&'a KeyValue);

impl Message for Attribute<'_> {
    #[inline]
    fn fields<S: Sink>(&self, sink: &mut S) {
        sink.bytes(1, self.0.key.as_str().as_bytes());
        sink.put_message(2, &Any::from(&self.0.value));
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
    #[inline]
    fn fields<S: Sink>(&self, sink: &mut S) {
        match *self {
            Any::Str(s) => sink.put_bytes(1, s.as_bytes()),
            Any::Bool(b) => sink.put_varint(2, b.into()),
            Any::I64(i) => sink.put_varint(3, i as u64),
            Any::F64(f) => sink.put_fixed64(4, f.to_bits()),
            Any::Array(array) => sink.put_message(5, &ArrayValue(array)),
            Any::Unknown => {}
        }
    }
}

/// `ArrayValue`: each element an `AnyValue`.
struct ArrayValue<'a>(&'a Array);

impl Message for ArrayValue<'_> {
    #[inline]
    fn fields<S: Sink>(&self, sink: &mut S) {
        let mut element = |any: Any<'_>| sink.put_message(1, &any);
        match self.0 {
            Array::Bool(v) => v.iter().for_each(|&b| element(Any::Bool(b))),
            Array::I64(v) => v.iter().for_each(|&i| element(Any::I64(i))),
            Array::F64(v) => v.iter().for_each(|&f| element(Any::F64(f))),
            Array::String(v) => v.iter().for_each(|s| element(Any::Str(s.as_str()))),
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
