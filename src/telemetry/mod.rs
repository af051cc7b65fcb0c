//! What the gateway tells operators: metrics (and, as they land, spans).

pub mod metrics;
pub mod trace;
