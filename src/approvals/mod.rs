//! Human approval, the second gate (docs/approvals.md): a grant's `approval` holds a call
//! that passed every other check until a person approves it.
//!
//! ```text
//! call ─ govern: rules pass, `when` true ─ ask (store.request by binding)
//!          ├ none, or expired/used  ─▶ new pending approval ─▶ APPROVAL_REQUIRED (202), notify
//!          ├ pending                ─▶ APPROVAL_REQUIRED, the same id
//!          ├ denied                 ─▶ APPROVAL_DENIED (403), the approver's reason
//!          └ approved               ─▶ take (approved → used, atomically) ─▶ the call runs once
//! approver ─ admin API (approver credential) ─ decide: pending → approved | denied
//! ```
//!
//! An approval is bound to the call's one identity (its binding: agent + session + tool +
//! canonical arguments + the round fields of a multi-round MCP call): any other call —
//! other arguments, another agent, a later round — is another approval. The store is
//! in the sidecar's memory (bounded in count and by TTL; approvals live in the pod that
//! issued them) or, with `state.backend: redis`, in the shared state, where any pod can
//! decide an approval and any pod runs the approved call.

pub mod api;
pub mod approvers;
pub mod ask;
pub mod backlog;
pub mod cli;
pub mod memory;
pub mod notify;
pub mod service;
pub mod shared;
pub mod store;

use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Where an approval is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    Pending,
    Approved,
    Denied,
    /// Past its `expiresAt` while pending or approved: the call needs a new approval.
    Expired,
    /// Approved, and its call ran: the approval can't be used again.
    Used,
}

impl Status {
    pub fn as_str(self) -> &'static str {
        match self {
            Status::Pending => "pending",
            Status::Approved => "approved",
            Status::Denied => "denied",
            Status::Expired => "expired",
            Status::Used => "used",
        }
    }

    pub fn parse(text: &str) -> Option<Status> {
        [
            Status::Pending,
            Status::Approved,
            Status::Denied,
            Status::Expired,
            Status::Used,
        ]
        .into_iter()
        .find(|s| s.as_str() == text)
    }
}

/// One approval. What never changes is set when it is requested; `status`,
/// `decided_by` and `reason` change on decisions.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Approval {
    pub id: String,
    pub status: Status,
    pub tool: String,
    pub agent: String,
    pub session: Option<String>,
    /// The validated arguments with the contract's `redact` applied.
    pub arguments: Value,
    /// The `when` expression that asked for it, or `always`.
    pub condition: String,
    /// The approver groups allowed to decide it (the grant's `approvers`).
    pub approvers: Vec<String>,
    /// Milliseconds since the Unix epoch.
    pub created_ms: u64,
    pub expires_ms: u64,
    pub decided_by: Option<String>,
    pub reason: Option<String>,
    /// What makes a call this approval's: agent, session, tool, canonical arguments and
    /// round (`limits::Call::binding`, as hex).
    pub binding: String,
}

impl Approval {
    /// Its status now: a pending or approved approval past its expiry has expired.
    pub fn status_at(&self, now_ms: u64) -> Status {
        match self.status {
            Status::Pending | Status::Approved if now_ms >= self.expires_ms => Status::Expired,
            status => status,
        }
    }

    /// The API's view of it (docs/approvals.md): the `APPROVAL` object.
    pub fn view(&self, now_ms: u64) -> Value {
        json!({
            "id": self.id,
            "status": self.status_at(now_ms).as_str(),
            "tool": self.tool,
            "agent": self.agent,
            "session": self.session,
            "arguments": self.arguments,
            "condition": self.condition,
            "approvers": self.approvers,
            "createdAt": rfc3339(self.created_ms),
            "expiresAt": rfc3339(self.expires_ms),
            "decidedBy": self.decided_by,
            "reason": self.reason,
        })
    }

    /// Whether an approver in `groups` may decide it.
    pub fn decidable_by(&self, groups: &[String]) -> bool {
        self.approvers.iter().any(|g| groups.contains(g))
    }
}

/// A fresh approval id: 128 random bits, hex.
pub fn new_id() -> String {
    format!("apr-{:032x}", rand::random::<u128>())
}

pub fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

pub fn rfc3339(ms: u64) -> String {
    humantime::format_rfc3339_millis(UNIX_EPOCH + Duration::from_millis(ms)).to_string()
}

/// What asking the store for a call's approval found.
#[derive(Debug, Clone)]
pub struct Requested {
    /// The binding's live approval, or the new one.
    pub current: Approval,
    /// The approval the new one replaces, when that one expired pending or approved.
    pub expired: Option<Approval>,
}

/// Why a decision was not taken.
#[derive(Debug, Clone, PartialEq)]
pub enum DecideError {
    NotFound,
    /// Already decided, used or expired: the approval as it is.
    NotPending(Box<Approval>),
    Unavailable(String),
}

/// A decision on a pending approval.
#[derive(Debug, Clone)]
pub struct Decision {
    pub approve: bool,
    pub by: String,
    pub reason: Option<String>,
}

/// The longest `reason` kept; a longer one is refused by the API.
pub const MAX_REASON: usize = 2048;
