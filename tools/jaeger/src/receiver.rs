//! The OTLP trace receiver: otlp-embedded's store, plus the tags a real Jaeger derives.
//!
//! otlp-embedded turns a span's attributes into Jaeger tags but drops its kind and status,
//! so the UI would neither say which span is the server and which the client nor paint a
//! failed span red. [`annotate`] adds them as the tags Jaeger's own OTLP receiver writes
//! (`span.kind`, `otel.status_code`, `otel.status_description`, `error`) before storing.

use otlp_embedded::proto::collector::trace::v1::{
    ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use otlp_embedded::proto::common::v1::{any_value, AnyValue, KeyValue};
use otlp_embedded::proto::trace::v1::{span::SpanKind, status::StatusCode, Span};
use otlp_embedded::{StateRef, TraceService, TraceServiceImpl};
use tonic::{Request, Response, Status};

pub struct Receiver {
    inner: TraceServiceImpl,
}

impl Receiver {
    pub fn new(state: StateRef) -> Receiver {
        Receiver {
            inner: TraceServiceImpl::new(state),
        }
    }
}

#[tonic::async_trait]
impl TraceService for Receiver {
    async fn export(
        &self,
        request: Request<ExportTraceServiceRequest>,
    ) -> Result<Response<ExportTraceServiceResponse>, Status> {
        let mut request = request.into_inner();
        annotate(&mut request);
        self.inner.export(Request::new(request)).await
    }
}

/// Adds each span's kind and status as Jaeger-style tags.
pub fn annotate(request: &mut ExportTraceServiceRequest) {
    let spans = request
        .resource_spans
        .iter_mut()
        .flat_map(|r| r.scope_spans.iter_mut())
        .flat_map(|s| s.spans.iter_mut());
    for span in spans {
        annotate_span(span);
    }
}

fn annotate_span(span: &mut Span) {
    let kind = match SpanKind::try_from(span.kind) {
        Ok(SpanKind::Server) => Some("server"),
        Ok(SpanKind::Client) => Some("client"),
        Ok(SpanKind::Producer) => Some("producer"),
        Ok(SpanKind::Consumer) => Some("consumer"),
        Ok(SpanKind::Internal) => Some("internal"),
        _ => None,
    };
    if let Some(kind) = kind {
        span.attributes.push(text("span.kind", kind));
    }
    let Some(status) = &span.status else {
        return;
    };
    match StatusCode::try_from(status.code) {
        Ok(StatusCode::Error) => {
            let message = status.message.clone();
            span.attributes.push(text("otel.status_code", "ERROR"));
            if !message.is_empty() {
                span.attributes
                    .push(text("otel.status_description", &message));
            }
            span.attributes.push(KeyValue {
                key: "error".into(),
                value: Some(AnyValue {
                    value: Some(any_value::Value::BoolValue(true)),
                }),
            });
        }
        Ok(StatusCode::Ok) => span.attributes.push(text("otel.status_code", "OK")),
        _ => {}
    }
}

fn text(key: &str, value: &str) -> KeyValue {
    KeyValue {
        key: key.into(),
        value: Some(AnyValue {
            value: Some(any_value::Value::StringValue(value.into())),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use otlp_embedded::proto::trace::v1::{ResourceSpans, ScopeSpans};

    fn mk_request(span: Span) -> ExportTraceServiceRequest {
        ExportTraceServiceRequest {
            resource_spans: vec![ResourceSpans {
                scope_spans: vec![ScopeSpans {
                    spans: vec![span],
                    ..Default::default()
                }],
                ..Default::default()
            }],
        }
    }

    fn tags(request: &ExportTraceServiceRequest) -> Vec<(String, String)> {
        request.resource_spans[0].scope_spans[0].spans[0]
            .attributes
            .iter()
            .map(|kv| {
                let value = match kv.value.as_ref().and_then(|v| v.value.as_ref()) {
                    Some(any_value::Value::StringValue(s)) => s.clone(),
                    Some(any_value::Value::BoolValue(b)) => b.to_string(),
                    other => format!("{other:?}"),
                };
                (kv.key.clone(), value)
            })
            .collect()
    }

    fn pair(k: &str, v: &str) -> (String, String) {
        (k.to_string(), v.to_string())
    }

    #[test]
    fn a_refused_server_span_is_tagged_as_an_error() {
        let mut request = mk_request(Span {
            kind: SpanKind::Server as i32,
            status: Some(otlp_embedded::proto::trace::v1::Status {
                message: "refused".into(),
                code: StatusCode::Error as i32,
            }),
            ..Default::default()
        });
        annotate(&mut request);
        assert_eq!(
            tags(&request),
            vec![
                pair("span.kind", "server"),
                pair("otel.status_code", "ERROR"),
                pair("otel.status_description", "refused"),
                pair("error", "true"),
            ]
        );
    }

    #[test]
    fn an_unset_status_adds_only_the_kind() {
        let mut request = mk_request(Span {
            kind: SpanKind::Client as i32,
            ..Default::default()
        });
        annotate(&mut request);
        assert_eq!(tags(&request), vec![pair("span.kind", "client")]);
    }
}
