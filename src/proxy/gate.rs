//! The shared state the data plane runs on: one per sidecar, read by every request.

use std::sync::Arc;

use crate::audit::AuditLog;
use crate::config::Limits;
use crate::control::Control;
use crate::proxy::stage::identify::Identity;
use crate::proxy::upstream::Upstream;
use crate::telemetry::metrics::Metrics;

pub struct Gate {
    pub control: Arc<Control>,
    pub identity: Identity,
    pub upstream: Upstream,
    pub audit: AuditLog,
    pub metrics: Arc<Metrics>,
    pub limits: Limits,
    pub mcp_path: String,
    /// Which agent each MCP session was issued to.
    pub mcp_sessions: crate::proxy::mcp::session::Sessions,
}
