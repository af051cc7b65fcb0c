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
//! in the sidecar's memory (approvals live in the pod that issued them) or, with
//! `state.backend: redis`, in the shared state, where any pod can decide an approval and
//! any pod runs the approved call. Either way it is bounded in count
//! (`approvals.maxPending`), in bytes of arguments (`approvals.maxPendingBytes`) and by
//! time; past a bound a new approval is refused and the live ones are kept.
//!
//! Arguments are kept as their JSON text, so a held approval costs about the bytes it
//! is counted as, and listings ([`page`]) never carry them: `GET /approvals` pages
//! through summaries, `GET /approvals/{id}` shows one approval whole.

pub mod api;
pub mod approvers;
pub mod ask;
pub mod backlog;
pub mod cli;
pub mod memory;
pub mod notify;
pub mod page;
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
    /// The validated arguments with the contract's `redact` applied, as compact JSON
    /// text (an object in the serialized form, as before).
    #[serde(with = "json_text")]
    pub arguments: String,
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

    /// The API's view of it (docs/approvals.md): the `APPROVAL` object, arguments
    /// included.
    pub fn view(&self, now_ms: u64) -> Value {
        let mut view = self.summary(now_ms);
        let arguments = serde_json::from_str(&self.arguments).unwrap_or(Value::Null);
        view["arguments"] = arguments;
        view
    }

    /// The listing's view of it: the `APPROVAL` object without its arguments.
    pub fn summary(&self, now_ms: u64) -> Value {
        json!({
            "id": self.id,
            "status": self.status_at(now_ms).as_str(),
            "tool": self.tool,
            "agent": self.agent,
            "session": self.session,
            "condition": self.condition,
            "approvers": self.approvers,
            "createdAt": rfc3339(self.created_ms),
            "expiresAt": rfc3339(self.expires_ms),
            "decidedBy": self.decided_by,
            "reason": self.reason,
        })
    }

    /// A copy without its arguments (`null`), for listings; nothing large is copied.
    pub fn head(&self) -> Approval {
        Approval {
            id: self.id.clone(),
            status: self.status,
            tool: self.tool.clone(),
            agent: self.agent.clone(),
            session: self.session.clone(),
            arguments: "null".into(),
            condition: self.condition.clone(),
            approvers: self.approvers.clone(),
            created_ms: self.created_ms,
            expires_ms: self.expires_ms,
            decided_by: self.decided_by.clone(),
            reason: self.reason.clone(),
            binding: self.binding.clone(),
        }
    }

    /// What it counts against `approvals.maxPendingBytes`: its arguments as stored.
    pub fn weight(&self) -> u64 {
        self.arguments.len() as u64
    }

    /// Whether it still answers its call: pending, approved or denied, and not past its
    /// expiry (a denial expires too: the same call then asks anew).
    pub fn is_live(&self, now_ms: u64) -> bool {
        let live = matches!(
            self.status,
            Status::Pending | Status::Approved | Status::Denied
        );
        live && now_ms < self.expires_ms
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

/// Arguments kept as JSON text, serialized as the JSON value they hold (so the shared
/// state's records read the same as before).
mod json_text {
    use serde::{Deserialize, Deserializer, Serialize, Serializer};
    use serde_json::Value;

    pub fn serialize<S: Serializer>(text: &str, serializer: S) -> Result<S::Ok, S::Error> {
        let value: Value = serde_json::from_str(text).map_err(serde::ser::Error::custom)?;
        value.serialize(serializer)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(deserializer: D) -> Result<String, D::Error> {
        let value = Value::deserialize(deserializer)?;
        serde_json::to_string(&value).map_err(serde::de::Error::custom)
    }
}
