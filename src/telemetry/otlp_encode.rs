//! OTLP trace requests from spans encoded as they end.
//!
//! A finished span is turned into its protobuf bytes on the thread that ended it
//! ([`super::otlp_span`]), and those bytes are what waits in the span queue
//! ([`super::batch`]). Queued that way a span takes well
//! under a kilobyte instead of the several an SDK `SpanData` holds in small allocations,
//! so a full queue is a few MB of RSS rather than tens; and the span's allocations are
//! freed by the thread that made them, which is what the allocator handles fastest.
//!
//! Protobuf lets a message's repeated field be written as consecutive entries, so a
//! batch of encoded spans is the `spans` field of one `ScopeSpans` as is: a request is
//! that run of bytes with the resource and the scope written around it, here, with
//! prost's own field encoders. The field numbers are those of
//! `opentelemetry/proto/collector/trace/v1/trace_service.proto` and
//! `opentelemetry/proto/trace/v1/trace.proto`; the tests decode the result with the
//! crate's generated types and compare it with the crate's own grouping.

use opentelemetry_proto::tonic::common::v1::InstrumentationScope;
use opentelemetry_proto::tonic::resource::v1::Resource;
use opentelemetry_proto::transform::common::tonic::ResourceAttributesWithSchema;
use opentelemetry_sdk::trace::SpanData;
use prost::encoding::WireType::LengthDelimited;
use prost::encoding::{encode_key, encode_varint, encoded_len_varint, key_len, message, string};

/// `ExportTraceServiceRequest.resource_spans`.
const RESOURCE_SPANS: u32 = 1;
/// `ResourceSpans.resource`, `.scope_spans`, `.schema_url`.
const RESOURCE: u32 = 1;
const SCOPE_SPANS: u32 = 2;
const RESOURCE_SCHEMA_URL: u32 = 3;
/// `ScopeSpans.scope`, `.spans`, `.schema_url`.
const SCOPE: u32 = 1;
const SPANS: u32 = 2;
const SCOPE_SCHEMA_URL: u32 = 3;

/// A tracer's instrumentation scope, converted once.
#[derive(Debug, Default, Clone)]
pub struct Scope {
    scope: InstrumentationScope,
    schema_url: String,
}

impl Scope {
    pub fn of(span: &SpanData) -> Scope {
        let scope = &span.instrumentation_scope;
        Scope {
            scope: InstrumentationScope::from((scope, None)),
            schema_url: scope.schema_url().unwrap_or_default().to_string(),
        }
    }
}

/// Appends `span` to `buf` as one entry of a `ScopeSpans.spans` field.
pub fn append_span(span: &SpanData, buf: &mut Vec<u8>) {
    super::otlp_span::append(SPANS, span, buf);
}

/// What every request carries around its spans: the process's resource, converted once.
#[derive(Debug, Default, Clone)]
pub struct Envelope {
    resource: Resource,
    resource_schema_url: String,
}

impl Envelope {
    pub fn set_resource(&mut self, resource: &opentelemetry_sdk::Resource) {
        let converted = ResourceAttributesWithSchema::from(resource);
        self.resource = Resource {
            attributes: converted.attributes.0,
            ..Resource::default()
        };
        self.resource_schema_url = converted.schema_url.unwrap_or_default();
    }

    /// An `ExportTraceServiceRequest` holding `spans`, a run of [`append_span`] entries
    /// made by tracers of `scope`.
    pub fn request(&self, scope: &Scope, spans: &[u8]) -> Vec<u8> {
        let scope_spans_len = message::encoded_len(SCOPE, &scope.scope)
            + spans.len()
            + optional_string_len(SCOPE_SCHEMA_URL, &scope.schema_url);
        let resource_spans_len = message::encoded_len(RESOURCE, &self.resource)
            + key_len(SCOPE_SPANS)
            + encoded_len_varint(scope_spans_len as u64)
            + scope_spans_len
            + optional_string_len(RESOURCE_SCHEMA_URL, &self.resource_schema_url);
        let total = key_len(RESOURCE_SPANS)
            + encoded_len_varint(resource_spans_len as u64)
            + resource_spans_len;
        let mut buf = Vec::with_capacity(total);
        encode_key(RESOURCE_SPANS, LengthDelimited, &mut buf);
        encode_varint(resource_spans_len as u64, &mut buf);
        message::encode(RESOURCE, &self.resource, &mut buf);
        encode_key(SCOPE_SPANS, LengthDelimited, &mut buf);
        encode_varint(scope_spans_len as u64, &mut buf);
        message::encode(SCOPE, &scope.scope, &mut buf);
        buf.extend_from_slice(spans);
        optional_string(SCOPE_SCHEMA_URL, &scope.schema_url, &mut buf);
        optional_string(RESOURCE_SCHEMA_URL, &self.resource_schema_url, &mut buf);
        debug_assert_eq!(buf.len(), total);
        buf
    }
}

/// proto3 leaves an empty string out.
fn optional_string_len(tag: u32, value: &String) -> usize {
    match value.is_empty() {
        true => 0,
        false => string::encoded_len(tag, value),
    }
}

fn optional_string(tag: u32, value: &String, buf: &mut Vec<u8>) {
    if !value.is_empty() {
        string::encode(tag, value, buf);
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use opentelemetry::trace::{
        SpanContext, SpanId, SpanKind, Status, TraceFlags, TraceId, TraceState,
    };
    use opentelemetry::KeyValue;
    use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
    use opentelemetry_proto::transform::trace::tonic::group_spans_by_resource_and_scope;
    use opentelemetry_sdk::trace::{SpanEvents, SpanLinks};
    use prost::Message;
    use std::borrow::Cow;
    use std::time::{Duration, SystemTime};

    /// A finished server span named `name`, made by a tracer of `scope`.
    pub(crate) fn span(name: &str, scope: &opentelemetry::InstrumentationScope) -> SpanData {
        let start = SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000);
        SpanData {
            span_context: SpanContext::new(
                TraceId::from(7),
                SpanId::from(9),
                TraceFlags::SAMPLED,
                false,
                TraceState::default(),
            ),
            parent_span_id: SpanId::from(3),
            parent_span_is_remote: true,
            span_kind: SpanKind::Server,
            name: Cow::Owned(name.to_string()),
            start_time: start,
            end_time: start + Duration::from_millis(3),
            attributes: vec![
                KeyValue::new("http.request.method", "POST"),
                KeyValue::new("http.response.status_code", 200),
                KeyValue::new("toolgate.decision", "allowed"),
            ],
            dropped_attributes_count: 0,
            events: SpanEvents::default(),
            links: SpanLinks::default(),
            status: Status::Error {
                description: "backend".into(),
            },
            instrumentation_scope: scope.clone(),
        }
    }

    #[test]
    fn a_request_is_what_the_crate_itself_would_send() {
        let scope = opentelemetry::InstrumentationScope::builder("toolgate")
            .with_version("1.2.3")
            .with_schema_url("https://opentelemetry.io/schemas/1.37.0")
            .build();
        let resource = opentelemetry_sdk::Resource::builder_empty()
            .with_service_name("orders")
            .with_attribute(KeyValue::new("k8s.namespace.name", "shop"))
            .with_schema_url([], "https://opentelemetry.io/schemas/1.36.0")
            .build();
        let spans = vec![
            span("POST /refunds", &scope),
            span("tools/call refund", &scope),
        ];

        let mut envelope = Envelope::default();
        envelope.set_resource(&resource);
        let mut entries = Vec::new();
        for span in &spans {
            append_span(span, &mut entries);
        }
        let request = envelope.request(&Scope::of(&spans[0]), &entries);
        let ours = ExportTraceServiceRequest::decode(request.as_slice()).expect("a valid request");

        let theirs = ExportTraceServiceRequest {
            resource_spans: group_spans_by_resource_and_scope(
                spans,
                &ResourceAttributesWithSchema::from(&resource),
            ),
        };
        assert_eq!(ours, theirs);
        assert_eq!(ours.resource_spans[0].scope_spans[0].spans.len(), 2);
    }

    #[test]
    fn empty_schema_urls_are_left_out_and_an_empty_batch_is_still_valid() {
        let envelope = Envelope::default();
        let request = envelope.request(&Scope::default(), &[]);
        let request = ExportTraceServiceRequest::decode(request.as_slice()).unwrap();
        let scope_spans = &request.resource_spans[0].scope_spans[0];
        assert!(scope_spans.spans.is_empty() && scope_spans.schema_url.is_empty());
    }
}
