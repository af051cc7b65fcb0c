//! One OpenTelemetry server span per request (named at its end as the conventions say:
//! `proxy::conventions`), a client span for the backend call, and W3C trace context in
//! and out.
//!
//! The span's parent is the agent's `traceparent`; the backend receives the gateway's
//! client span as its `traceparent`. Argument values are never attributes. With no
//! `telemetry.otlpEndpoint`, nothing is exported and the trace id still follows the
//! agent's `traceparent` (or is fresh), so refusals and audit records carry one.
//!
//! `telemetry.sampler` decides, before any span exists, whether a call's spans are
//! exported (`sampling`). An unsampled call builds none: the backend gets a
//! `traceparent` with the sampled flag off, and, with `sampleDenials`, a call that ends
//! refused has its span built at its end and exported all the same.

use http::HeaderMap;
use http::HeaderValue;
use opentelemetry::propagation::TextMapPropagator;
use opentelemetry::trace::{
    Span as _, SpanKind, Status, TraceContextExt, TraceId, Tracer as _, TracerProvider as _,
};
use opentelemetry::{Context, KeyValue};
use opentelemetry_http::{HeaderExtractor, HeaderInjector};
use opentelemetry_sdk::metrics::SdkMeterProvider;
use opentelemetry_sdk::propagation::TraceContextPropagator;
use opentelemetry_sdk::trace::{Sampler, SdkTracer, SdkTracerProvider};
use opentelemetry_sdk::Resource;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use super::attributes;
use super::batch::Batcher;
use super::metrics::Metrics;
use super::metrics_export;
use super::otlp_send::Sender;
use super::sampling::{self, PresetTraceIds, Sampling};
use super::trace::TraceContext;
use crate::config::{OtlpProtocol, Telemetry};

const EXPORT_TIMEOUT: Duration = Duration::from_secs(5);
/// How long shutdown waits for queued spans to leave.
const SHUTDOWN_TIMEOUT: Duration = Duration::from_secs(2);

pub struct Tracing {
    exporting: Option<Arc<Exporting>>,
    propagator: TraceContextPropagator,
    /// `telemetry.metricsExport: otlp`: flushed at shutdown.
    meters: Option<SdkMeterProvider>,
}

/// What exports spans: the tracer, and which calls it is given.
#[derive(Debug)]
struct Exporting {
    provider: SdkTracerProvider,
    tracer: SdkTracer,
    sampling: Sampling,
}

impl Tracing {
    pub fn disabled() -> Tracing {
        Tracing {
            exporting: None,
            propagator: TraceContextPropagator::new(),
            meters: None,
        }
    }

    /// Starts exporting to `telemetry.otlpEndpoint` (must run inside the Tokio runtime).
    pub fn start(settings: &Telemetry, metrics: Arc<Metrics>) -> Result<Tracing, String> {
        let Some(endpoint) = &settings.otlp_endpoint else {
            return Ok(Tracing::disabled());
        };
        let cap = settings.max_queued_spans;
        let sender = match settings.otlp_protocol {
            OtlpProtocol::Grpc => Sender::grpc(endpoint, EXPORT_TIMEOUT),
            OtlpProtocol::Http => {
                // A programmatic endpoint is used verbatim: name the traces path.
                let url = if endpoint.ends_with("/v1/traces") {
                    endpoint.clone()
                } else {
                    format!("{}/v1/traces", endpoint.trim_end_matches('/'))
                };
                Sender::http(&url, EXPORT_TIMEOUT)
            }
        }
        .map_err(|e| format!("telemetry.otlpEndpoint: {e}"))?;
        let started = Batcher::new(sender, cap, metrics.clone());
        let processor =
            started.map_err(|e| format!("telemetry: cannot start the span exporter: {e}"))?;
        let meters = metrics_export::start(settings, &metrics)?;
        let provider = SdkTracerProvider::builder()
            .with_resource(
                Resource::builder()
                    .with_service_name(settings.service_name.clone())
                    .build(),
            )
            // Which calls are exported is decided before a span is built (`Sampling`).
            .with_sampler(Sampler::AlwaysOn)
            .with_id_generator(PresetTraceIds::default())
            .with_span_processor(processor)
            .build();
        let tracer = provider.tracer("toolgate");
        Ok(Tracing {
            exporting: Some(Arc::new(Exporting {
                provider,
                tracer,
                sampling: Sampling::new(settings),
            })),
            propagator: TraceContextPropagator::new(),
            meters,
        })
    }

    /// The server span of a call, child of the agent's `traceparent`.
    pub fn start_call(&self, headers: &HeaderMap) -> CallSpan {
        let Some(exporting) = &self.exporting else {
            let trace = TraceContext::from_headers(headers);
            return CallSpan::detached(trace.trace_id);
        };
        let parent = self.propagator.extract(&HeaderExtractor(headers));
        let start = |parent: &Context| {
            let tracer = &exporting.tracer;
            tracer
                // Renamed at the end, once what the request was is known.
                .span_builder("request")
                .with_kind(SpanKind::Server)
                .start_with_context(tracer, parent)
        };
        let span = match exporting.sampling.decide(&parent) {
            None => start(&parent),
            Some(decision) if decision.sampled => {
                sampling::with_trace_id(decision.trace_id, || start(&parent))
            }
            Some(decision) => {
                let span = match exporting.sampling.sample_denials {
                    true => Exported::IfFailed(Box::new(Unsampled {
                        exporting: exporting.clone(),
                        parent,
                        started: SystemTime::now(),
                        trace_id: decision.trace_id,
                        ended: AtomicBool::new(false),
                    })),
                    false => Exported::No,
                };
                return CallSpan {
                    trace_id: decision.trace_id.to_string(),
                    span,
                };
            }
        };
        let trace_id = span.span_context().trace_id().to_string();
        CallSpan {
            trace_id,
            span: Exported::Sampled(parent.with_span(span)),
        }
    }

    /// A client span for the backend call; its context goes into `headers` as
    /// `traceparent`. `describe` names the span and gives its attributes, and is called
    /// only for a span that is exported.
    pub fn start_client(
        &self,
        call: &CallSpan,
        describe: impl FnOnce() -> (String, Vec<KeyValue>),
        headers: &mut HeaderMap,
    ) -> ClientSpan {
        let Some(exporting) = &self.exporting else {
            stamp(&call.trace_id, headers);
            return ClientSpan { cx: None };
        };
        let Exported::Sampled(cx) = &call.span else {
            // Not sampled: the backend, and what it calls, learn so from the flags.
            let traceparent = format!("00-{}-{}-00", call.trace_id, sampling::new_span_id());
            if let Ok(value) = HeaderValue::from_str(&traceparent) {
                headers.insert("traceparent", value);
            }
            return ClientSpan { cx: None };
        };
        let (name, attributes) = describe();
        let tracer = &exporting.tracer;
        let span = tracer
            .span_builder(name)
            .with_kind(SpanKind::Client)
            .with_attributes(attributes)
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
        let tracer = self.exporting.as_ref().map(|e| e.provider.clone());
        let meters = self.meters.clone();
        if tracer.is_none() && meters.is_none() {
            return;
        }
        // The SDK blocks the calling thread while it flushes.
        let _ = tokio::task::spawn_blocking(move || {
            if let Some(provider) = tracer {
                let _ = provider.shutdown_with_timeout(SHUTDOWN_TIMEOUT);
            }
            if let Some(provider) = meters {
                let _ = provider.shutdown_with_timeout(SHUTDOWN_TIMEOUT);
            }
        })
        .await;
    }
}

/// Puts the request's trace id in the `traceparent` of what is sent on without a client
/// span of its own (a passed MCP message; any call when nothing is exported), keeping
/// the agent's sampling flag: the backend learns the `traceId` of the audit record that
/// let the request through, never a `traceparent` the agent chose.
pub fn stamp(trace_id: &str, headers: &mut HeaderMap) {
    let flags = headers
        .get("traceparent")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.rsplit('-').next())
        .filter(|f| *f == "01")
        .unwrap_or("00");
    let traceparent = format!("00-{trace_id}-{}-{flags}", sampling::new_span_id());
    if let Ok(value) = HeaderValue::from_str(&traceparent) {
        headers.insert("traceparent", value);
    }
}

/// The server span of one call (a no-op, bar its trace id, when nothing is exported).
pub struct CallSpan {
    trace_id: String,
    span: Exported,
}

enum Exported {
    /// Nothing is exported, or the span ended elsewhere (`detached`).
    No,
    Sampled(Context),
    /// Not sampled: built at the end if the call fails (`sampleDenials`).
    IfFailed(Box<Unsampled>),
}

/// What building an unsampled call's span at its end takes.
struct Unsampled {
    exporting: Arc<Exporting>,
    parent: Context,
    started: SystemTime,
    trace_id: TraceId,
    /// Ended (and exported, if refused) once only.
    ended: AtomicBool,
}

impl CallSpan {
    /// No span, only a trace id: for a record that belongs to a span already ended.
    pub fn detached(trace_id: String) -> CallSpan {
        CallSpan {
            trace_id,
            span: Exported::No,
        }
    }

    pub fn trace_id(&self) -> &str {
        &self.trace_id
    }

    /// Whether the span may be exported (else what it would say need not be gathered):
    /// sampled, or to be built at the end should the call be refused.
    pub fn is_recording(&self) -> bool {
        !matches!(self.span, Exported::No)
    }

    /// Whether the span is exported, given whether the call failed (was refused, or
    /// failed in the backend or its tool).
    pub fn exports(&self, failed: bool) -> bool {
        match self.span {
            Exported::No => false,
            Exported::Sampled(_) => true,
            Exported::IfFailed(_) => failed,
        }
    }

    /// A stage outcome, as a span event (an unsampled call's are not kept).
    pub fn event(&self, name: &'static str, attributes: Vec<KeyValue>) {
        if let Exported::Sampled(cx) = &self.span {
            cx.span().add_event(name, attributes);
        }
    }

    /// Ends the span: its name (when known), final attributes, and for a failed call its
    /// `error.type` and the code of the `refused` event. An unsampled call's span is
    /// built here, if `refused`, and exported.
    pub fn end(
        &self,
        name: Option<String>,
        attributes: Vec<KeyValue>,
        failed: bool,
        refused: Option<&'static str>,
    ) {
        let event = |code: &'static str| vec![KeyValue::new(attributes::CODE, code)];
        match &self.span {
            Exported::No => {}
            Exported::Sampled(cx) => {
                let span = cx.span();
                if let Some(name) = name {
                    span.update_name(name);
                }
                if let Some(code) = refused {
                    span.add_event(attributes::REFUSED, event(code));
                }
                span.set_attributes(attributes);
                if failed {
                    span.set_status(Status::error("refused or failed"));
                }
                span.end();
            }
            Exported::IfFailed(unsampled) => {
                // The caller asks only for a failed call's (`exports`).
                if unsampled.ended.swap(true, Ordering::AcqRel) {
                    return;
                }
                let tracer = &unsampled.exporting.tracer;
                let mut span = sampling::with_trace_id(unsampled.trace_id, || {
                    tracer
                        .span_builder(name.unwrap_or_else(|| "request".into()))
                        .with_kind(SpanKind::Server)
                        .with_start_time(unsampled.started)
                        .with_attributes(attributes)
                        .start_with_context(tracer, &unsampled.parent)
                });
                if let Some(code) = refused {
                    span.add_event(attributes::REFUSED, event(code));
                }
                span.set_status(Status::error("refused or failed"));
                span.end();
            }
        }
    }
}

pub struct ClientSpan {
    cx: Option<Context>,
}

impl ClientSpan {
    /// Ends the span with the backend's status, and `error` (its `error.type`: the
    /// status of a 4xx or 5xx, the failure's code) when the request failed.
    pub fn end(self, status: Option<u16>, error: Option<&str>) {
        if let Some(cx) = self.cx {
            let span = cx.span();
            if let Some(code) = status {
                span.set_attribute(KeyValue::new("http.response.status_code", code as i64));
            }
            if let Some(error) = error {
                span.set_attribute(KeyValue::new("error.type", error.to_string()));
                span.set_status(Status::error(match status {
                    Some(_) => "backend error",
                    None => "no response",
                }));
            }
            span.end();
        }
    }
}
