//! `telemetry.metricsExport: otlp`: the conventions' duration histograms, pushed over
//! OTLP to the collector the spans go to, by the opentelemetry SDK's periodic reader.
//!
//! The reader runs on its own thread and exports every `metricsIntervalMs`; a call only
//! records into the SDK's aggregation. The exporter's requests run on the sidecar's
//! runtime (gRPC through tonic's channel, HTTP through [`RuntimeHttpClient`]); a push
//! every few seconds is too little traffic to need the span exporter's own runtime.

use opentelemetry::metrics::MeterProvider as _;
use opentelemetry_otlp::{Protocol, WithExportConfig, WithHttpConfig};
use opentelemetry_sdk::metrics::{PeriodicReader, SdkMeterProvider};
use opentelemetry_sdk::Resource;
use std::time::Duration;

use super::export::RuntimeHttpClient;
use super::metrics::Metrics;
use crate::config::{MetricsExport, OtlpProtocol, Telemetry};

const EXPORT_TIMEOUT: Duration = Duration::from_secs(5);

/// Starts pushing when `metricsExport` is `otlp` (inside the Tokio runtime); the provider
/// is kept to flush at shutdown.
pub fn start(settings: &Telemetry, metrics: &Metrics) -> Result<Option<SdkMeterProvider>, String> {
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
