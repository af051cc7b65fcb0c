//! The shared state the data plane runs on: one per sidecar, read by every request.

use std::sync::Arc;

use crate::audit::AuditLog;
use crate::config::Limits;
use crate::limits::Ledger;
use crate::policy::SnapshotReader;
use crate::proxy::backend::upstream::Upstream;
use crate::proxy::stage::identify::Identity;
use crate::telemetry::metrics::Metrics;
use crate::telemetry::spans::Tracing;

pub struct Gate {
    /// The published policy, read once per request.
    pub snapshots: SnapshotReader,
    pub identity: Identity,
    pub upstream: Upstream,
    pub audit: AuditLog,
    pub metrics: Arc<Metrics>,
    pub tracing: Tracing,
    pub limits: Limits,
    pub mcp_path: String,
    /// `mcp.allowedOrigins` / `mcp.allowedHosts`, checked before any MCP request is read.
    pub mcp_origins: crate::proxy::mcp::origin::Guard,
    /// Rate-limit, session and dedupe state: outlives snapshots, bounded (`limits`).
    pub ledger: Ledger,
    /// `state.backend: redis`: limits, claims and MCP session owners shared by every
    /// replica. `None` keeps all of it in `ledger` and `mcp_sessions` (per pod).
    pub shared: Option<Arc<crate::state::Shared>>,
    /// Calls held for a person's approval (`approval` on a grant).
    pub approvals: Arc<crate::approvals::service::Approvals>,
    /// Which agent each MCP session was issued to.
    pub mcp_sessions: crate::proxy::mcp::session::Sessions,
    /// Which tool each call of a session called, for answers replayed on resumption.
    pub mcp_pending: crate::proxy::mcp::pending::Pending,
    /// Calls finishing after their client left; shutdown waits for them.
    pub stragglers: crate::proxy::detach::Stragglers,
    /// The per-address allowance of answers that name no agent.
    pub anonymous: Arc<crate::proxy::anonymous::Anonymous>,
    /// `mcp.listing` / `mcp.onDrift`, and which tools the backend lists unlike their
    /// contracts.
    pub tool_drift: Arc<crate::proxy::mcp::tools_list::tool_drift::ToolDrift>,
}
