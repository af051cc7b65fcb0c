//! One OpenTelemetry server span per request (named at its end as the conventions say:
//! `proxy::conventions`), a client span for the backend call, and W3C trace context in
//! and out.
//!
//! The span's parent is the agent's `traceparent`; the backend receives the gateway's
//! client span as its `traceparent`. Argument values are never attributes. With no
//! `telemetry.otlpEndpoint`, nothing is exported and the trace id still follows the
//! agent's `traceparent` (or is fresh), so refusals and audit records carry one.

use http::HeaderMap;
use opentelemetry::propagation::TextMapPropagator;
use opentelemetry::trace::{
    Span as _, SpanKind, Status, TraceContextExt, Tracer as _, TracerProvider as _,
};
use opentelemetry::{Context, KeyValue};
use opentelemetry_http::{HeaderExtractor, HeaderInjector};
use opentelemetry_otlp::{Protocol, WithExportConfig, WithHttpConfig};
use opentelemetry_sdk::propagation::TraceContextPropagator;
use opentelemetry_sdk::trace::{SdkTracer, SdkTracerProvider};
use opentelemetry_sdk::Resource;
use std::sync::Arc;
use std::time::Duration;

use super::batch::Batcher;
use super::export::RuntimeHttpClient;
use super::metrics::Metrics;
use super::trace::TraceContext;
use crate::config::{OtlpProtocol, Telemetry};

const EXPORT_TIMEOUT: Duration = Duration::from_secs(5);
/// How long shutdown waits for queued spans to leave.
const SHUTDOWN_TIMEOUT: Duration = Duration::from_secs(2);

pub struct Tracing {
    exporting: Option<(SdkTracerProvider, SdkTracer)>,
    propagator: TraceContextPropagator,
}

impl Tracing {
    pub fn disabled() -> Tracing {
        Tracing {
            exporting: None,
            propagator: TraceContextPropagator::new(),
        }
    }

    /// Starts exporting to `telemetry.otlpEndpoint` (must run inside the Tokio runtime).
    pub fn start(settings: &Telemetry, metrics: Arc<Metrics>) -> Result<Tracing, String> {
        let Some(endpoint) = &settings.otlp_endpoint else {
            return Ok(Tracing::disabled());
        };
        let cap = settings.max_queued_spans;
        let started = match settings.otlp_protocol {
            OtlpProtocol::Grpc => {
                let exporter = opentelemetry_otlp::SpanExporter::builder()
                    .with_tonic()
                    .with_endpoint(endpoint.clone())
                    .with_timeout(EXPORT_TIMEOUT)
                    .build()
                    .map_err(|e| format!("telemetry.otlpEndpoint: {e}"))?;
                Batcher::new(exporter, cap, metrics)
            }
            OtlpProtocol::Http => {
                // A programmatic endpoint is used verbatim: name the traces path.
                let url = if endpoint.ends_with("/v1/traces") {
                    endpoint.clone()
                } else {
                    format!("{}/v1/traces", endpoint.trim_end_matches('/'))
                };
                let exporter = opentelemetry_otlp::SpanExporter::builder()
                    .with_http()
                    .with_http_client(RuntimeHttpClient::new(EXPORT_TIMEOUT))
                    .with_protocol(Protocol::HttpBinary)
                    .with_endpoint(url)
                    .with_timeout(EXPORT_TIMEOUT)
                    .build()
                    .map_err(|e| format!("telemetry.otlpEndpoint: {e}"))?;
                Batcher::new(exporter, cap, metrics)
            }
        };
        let processor =
            started.map_err(|e| format!("telemetry: cannot start the span exporter: {e}"))?;
        let provider = SdkTracerProvider::builder()
            .with_resource(
                Resource::builder()
                    .with_service_name(settings.service_name.clone())
                    .build(),
            )
            .with_span_processor(processor)
            .build();
        let tracer = provider.tracer("toolgate");
        Ok(Tracing {
            exporting: Some((provider, tracer)),
            propagator: TraceContextPropagator::new(),
        })
    }

    /// The server span of a call, child of the agent's `traceparent`.
    pub fn start_call(&self, headers: &HeaderMap) -> CallSpan {
        let Some((_, tracer)) = &self.exporting else {
            let trace = TraceContext::from_headers(headers);
            return CallSpan {
                cx: None,
                trace_id: trace.trace_id,
            };
        };
        let parent = self.propagator.extract(&HeaderExtractor(headers));
        let span = tracer
            // Renamed at the end, once what the request was is known.
            .span_builder("request")
            .with_kind(SpanKind::Server)
            .start_with_context(tracer, &parent);
        let trace_id = span.span_context().trace_id().to_string();
        CallSpan {
            cx: Some(parent.with_span(span)),
            trace_id,
        }
    }

    /// A client span for the backend call; its context goes into `headers` as `traceparent`.
    pub fn start_client(
        &self,
        call: &CallSpan,
        name: String,
        headers: &mut HeaderMap,
    ) -> ClientSpan {
        let (Some((_, tracer)), Some(cx)) = (&self.exporting, &call.cx) else {
            return ClientSpan { cx: None };
        };
        let span = tracer
            .span_builder(name)
            .with_kind(SpanKind::Client)
            .start_with_context(tracer, cx);
        let cx = cx.with_span(span);
        headers.remove("traceparent");
        headers.remove("tracestate");
        self.propagator
            .inject_context(&cx, &mut HeaderInjector(headers));
        ClientSpan { cx: Some(cx) }
    }

    /// Exports what is queued, within a bound; called once at shutdown.
    pub async fn shutdown(&self) {
        if let Some((provider, _)) = &self.exporting {
            let provider = provider.clone();
            // The SDK blocks the calling thread while it flushes.
            let _ = tokio::task::spawn_blocking(move || {
                provider.shutdown_with_timeout(SHUTDOWN_TIMEOUT)
            })
            .await;
        }
    }
}

/// The server span of one call (a no-op, bar its trace id, when nothing is exported).
pub struct CallSpan {
    cx: Option<Context>,
    trace_id: String,
}

impl CallSpan {
    /// No span, only a trace id: for a record that belongs to a span already ended.
    pub fn detached(trace_id: String) -> CallSpan {
        CallSpan { cx: None, trace_id }
    }

    pub fn trace_id(&self) -> &str {
        &self.trace_id
    }

    /// Whether the span is exported (else attributes need not be built).
    pub fn is_recording(&self) -> bool {
        self.cx.is_some()
    }

    /// A stage outcome, as a span event.
    pub fn event(&self, name: &'static str, attributes: Vec<KeyValue>) {
        if let Some(cx) = &self.cx {
            cx.span().add_event(name, attributes);
        }
    }

    pub fn set_name(&self, name: String) {
        if let Some(cx) = &self.cx {
            cx.span().update_name(name);
        }
    }

    /// Sets the final attributes and ends the span.
    pub fn end(&self, attributes: Vec<KeyValue>, failed: bool) {
        if let Some(cx) = &self.cx {
            let span = cx.span();
            span.set_attributes(attributes);
            if failed {
                span.set_status(Status::error("refused or failed"));
            }
            span.end();
        }
    }
}

pub struct ClientSpan {
    cx: Option<Context>,
}

impl ClientSpan {
    pub fn end(self, status: Option<u16>) {
        if let Some(cx) = self.cx {
            let span = cx.span();
            match status {
                Some(code) => {
                    span.set_attribute(KeyValue::new("http.response.status_code", code as i64));
                    if code >= 500 {
                        span.set_status(Status::error("backend error"));
                    }
                }
                None => span.set_status(Status::error("no response")),
            }
            span.end();
        }
    }
}
