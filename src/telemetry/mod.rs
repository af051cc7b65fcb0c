//! What the gateway tells operators: metrics, spans, trace context.

pub mod attributes;
pub mod batch;
pub mod export;
pub mod metrics;
pub mod spans;
pub mod trace;
