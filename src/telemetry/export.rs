//! The OTLP export path, built so telemetry can never slow or break a call.
//!
//! Spans go to the SDK's batch processor (its own thread) through [`Admission`], which
//! caps the spans queued or in flight and counts the ones it turns away in
//! `toolgate_spans_dropped_total`: with the collector down or slow, calls keep their
//! latency and spans are dropped, counted, never waited for. [`Tally`] wraps the exporter
//! to release capacity as batches leave.

use bytes::Bytes;
use http_body_util::{BodyExt, Full, Limited};
use hyper_util::client::legacy::{connect::HttpConnector, Client};
use hyper_util::rt::TokioExecutor;
use opentelemetry::Context;
use opentelemetry_http::{HttpClient, HttpError, Request, Response};
use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::trace::{BatchSpanProcessor, Span, SpanData, SpanExporter, SpanProcessor};
use opentelemetry_sdk::Resource;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use crate::telemetry::metrics::Metrics;

/// Caps what reaches the batch processor.
#[derive(Debug)]
pub struct Admission {
    inner: BatchSpanProcessor,
    inflight: Arc<AtomicUsize>,
    cap: usize,
    metrics: Arc<Metrics>,
}

impl Admission {
    /// `cap`: spans queued or being exported at most; past it they are dropped and counted.
    pub fn new<E: SpanExporter + 'static>(
        exporter: E,
        cap: usize,
        metrics: Arc<Metrics>,
    ) -> Admission {
        let inflight = Arc::new(AtomicUsize::new(0));
        let exporter = Tally {
            inner: exporter,
            inflight: inflight.clone(),
        };
        let config = opentelemetry_sdk::trace::BatchConfigBuilder::default()
            // Larger than the admission cap, so the processor itself never drops silently.
            .with_max_queue_size(cap + 512)
            .with_max_export_batch_size(512)
            .with_scheduled_delay(Duration::from_millis(200))
            .build();
        let inner = BatchSpanProcessor::builder(exporter)
            .with_batch_config(config)
            .build();
        Admission {
            inner,
            inflight,
            cap,
            metrics,
        }
    }
}

impl SpanProcessor for Admission {
    fn on_start(&self, span: &mut Span, cx: &Context) {
        self.inner.on_start(span, cx)
    }

    fn on_end(&self, span: SpanData) {
        if self.inflight.fetch_add(1, Ordering::AcqRel) >= self.cap {
            self.inflight.fetch_sub(1, Ordering::AcqRel);
            self.metrics.spans_dropped.inc();
            return;
        }
        self.inner.on_end(span)
    }

    fn force_flush(&self) -> OTelSdkResult {
        self.inner.force_flush()
    }

    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        self.inner.shutdown_with_timeout(timeout)
    }

    fn set_resource(&mut self, resource: &Resource) {
        self.inner.set_resource(resource)
    }
}

/// The exporter, releasing admission capacity once a batch has left (or failed).
#[derive(Debug)]
struct Tally<E> {
    inner: E,
    inflight: Arc<AtomicUsize>,
}

impl<E: SpanExporter> SpanExporter for Tally<E> {
    async fn export(&self, batch: Vec<SpanData>) -> OTelSdkResult {
        let n = batch.len();
        let result = self.inner.export(batch).await;
        self.inflight.fetch_sub(n, Ordering::AcqRel);
        if let Err(e) = &result {
            tracing::debug!(error = %e, spans = n, "span export failed");
        }
        result
    }

    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        self.inner.shutdown_with_timeout(timeout)
    }

    fn force_flush(&self) -> OTelSdkResult {
        self.inner.force_flush()
    }

    fn set_resource(&mut self, resource: &Resource) {
        self.inner.set_resource(resource)
    }
}

/// The HTTP client of the OTLP/HTTP exporter. The batch processor runs on its own thread
/// with no Tokio reactor, so each request is spawned onto the sidecar's runtime.
#[derive(Debug, Clone)]
pub struct RuntimeHttpClient {
    client: Client<HttpConnector, Full<Bytes>>,
    runtime: tokio::runtime::Handle,
    timeout: Duration,
}

impl RuntimeHttpClient {
    /// Must be called inside the Tokio runtime.
    pub fn new(timeout: Duration) -> RuntimeHttpClient {
        RuntimeHttpClient {
            client: Client::builder(TokioExecutor::new()).build_http(),
            runtime: tokio::runtime::Handle::current(),
            timeout,
        }
    }
}

const MAX_RESPONSE: usize = 1 << 20;

impl HttpClient for RuntimeHttpClient {
    fn send_bytes<'a, 'b>(
        &'a self,
        request: Request<Bytes>,
    ) -> Pin<Box<dyn Future<Output = Result<Response<Bytes>, HttpError>> + Send + 'b>>
    where
        'a: 'b,
        Self: 'b,
    {
        let client = self.client.clone();
        let timeout = self.timeout;
        let task = self.runtime.spawn(async move {
            let (parts, body) = request.into_parts();
            let response = tokio::time::timeout(
                timeout,
                client.request(Request::from_parts(parts, Full::new(body))),
            )
            .await??;
            let (parts, body) = response.into_parts();
            let body = Limited::new(body, MAX_RESPONSE).collect().await?.to_bytes();
            Ok::<_, HttpError>(Response::from_parts(parts, body))
        });
        Box::pin(async move { task.await? })
    }
}
