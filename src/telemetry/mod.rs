//! What the gateway tells operators: metrics, spans, trace context.

pub mod attributes;
pub mod batch;
pub mod convention_metrics;
pub mod export;
pub mod export_failure;
pub mod logs;
pub mod metrics;
pub mod metrics_export;
pub mod otlp_encode;
pub mod otlp_send;
pub mod otlp_span;
pub mod sampling;
pub mod spans;
pub mod trace;
