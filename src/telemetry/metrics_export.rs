//! `telemetry.metricsExport: otlp`: the conventions' duration histograms, pushed over
//! OTLP to the collector the spans go to, by the opentelemetry SDK's periodic reader.
//!
//! The reader runs on its own thread and exports every `metricsIntervalMs`; a call only
//! records into the SDK's aggregation. The exporter's requests run on the sidecar's
//! runtime (gRPC through tonic's channel, HTTP through [`RuntimeHttpClient`]); a push
//! every few seconds is too little traffic to need the span exporter's own runtime.
//!
//! The exporter is wrapped ([`Counted`]) so a failed push counts in
//! `toolgate_telemetry_export_failures_total{signal="metrics"}` and is logged at `warn`,
//! rate-limited ([`super::export_failure`]); the SDK itself only reports it through its
//! own internal log, which the sidecar doesn't build.

use opentelemetry::metrics::MeterProvider as _;
use opentelemetry_otlp::{Protocol, WithExportConfig, WithHttpConfig};
use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::metrics::data::ResourceMetrics;
use opentelemetry_sdk::metrics::exporter::PushMetricExporter;
use opentelemetry_sdk::metrics::{PeriodicReader, SdkMeterProvider, Temporality};
use opentelemetry_sdk::Resource;
use std::sync::Arc;
use std::time::Duration;

use super::export::RuntimeHttpClient;
use super::export_failure::ExportFailures;
use super::metrics::Metrics;
use crate::config::{MetricsExport, OtlpProtocol, Telemetry};

const EXPORT_TIMEOUT: Duration = Duration::from_secs(5);

/// Starts pushing when `metricsExport` is `otlp` (inside the Tokio runtime); the provider
/// is kept to flush at shutdown.
pub fn start(
    settings: &Telemetry,
    metrics: &Arc<Metrics>,
) -> Result<Option<SdkMeterProvider>, String> {
    let (MetricsExport::Otlp, Some(endpoint)) = (settings.metrics_export, &settings.otlp_endpoint)
    else {
        return Ok(None);
    };
    let exporter = match settings.otlp_protocol {
        OtlpProtocol::Grpc => opentelemetry_otlp::MetricExporter::builder()
            .with_tonic()
            .with_endpoint(endpoint.clone())
            .with_timeout(EXPORT_TIMEOUT)
            .build(),
        OtlpProtocol::Http => {
            let url = format!(
                "{}/v1/metrics",
                endpoint
                    .trim_end_matches('/')
                    .trim_end_matches("/v1/traces")
            );
            opentelemetry_otlp::MetricExporter::builder()
                .with_http()
                .with_http_client(RuntimeHttpClient::new(EXPORT_TIMEOUT))
                .with_protocol(Protocol::HttpBinary)
                .with_endpoint(url)
                .with_timeout(EXPORT_TIMEOUT)
                .build()
        }
    }
    .map_err(|e| format!("telemetry.metricsExport: {e}"))?;
    let exporter = Counted {
        inner: exporter,
        endpoint: endpoint.clone(),
        failures: ExportFailures::new("metrics", metrics.clone()),
    };
    let reader = PeriodicReader::builder(exporter)
        .with_interval(Duration::from_millis(settings.metrics_interval_ms))
        .build();
    let provider = SdkMeterProvider::builder()
        .with_resource(
            Resource::builder()
                .with_service_name(settings.service_name.clone())
                .build(),
        )
        .with_reader(reader)
        .build();
    metrics.conventions.export_to(&provider.meter("toolgate"));
    Ok(Some(provider))
}

/// An exporter whose failed pushes are counted and logged.
#[derive(Debug)]
struct Counted<E> {
    inner: E,
    endpoint: String,
    failures: ExportFailures,
}

impl<E: PushMetricExporter> PushMetricExporter for Counted<E> {
    async fn export(&self, metrics: &ResourceMetrics) -> OTelSdkResult {
        let result = self.inner.export(metrics).await;
        match &result {
            Ok(()) => self.failures.succeeded(),
            Err(e) => {
                let lost = metrics
                    .scope_metrics()
                    .map(|s| s.metrics().count())
                    .sum::<usize>();
                let error = format!("{}: {e}", self.endpoint);
                self.failures.failed(&error, lost as u64);
            }
        }
        result
    }

    fn force_flush(&self) -> OTelSdkResult {
        self.inner.force_flush()
    }

    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        self.inner.shutdown_with_timeout(timeout)
    }

    fn temporality(&self) -> Temporality {
        self.inner.temporality()
    }
}
