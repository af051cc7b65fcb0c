//! Audit records (docs/observability.md, "The audit log") and their place in the hash chain.
//!
//! A line is the record's JSON with `hash` last: `hash` = SHA-256 (HMAC-SHA256 with
//! `audit.keyFile`) over the previous line's hash, a newline, and this line's JSON up to
//! (not including) `,"hash":…`. Editing, inserting, deleting or reordering a line breaks
//! either the hash or the `prev`/`seq` links, which `toolgate audit verify` reports.

use serde::Serialize;
use serde_json::Value;

use super::key::{link_hash, AuditKey};

/// The `prev` of the first record of a chain.
pub const GENESIS: &str = "0000000000000000000000000000000000000000000000000000000000000000";

/// What the pipeline knows about a decision; the writer adds `seq`, `prev` and `hash`.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Entry {
    pub ts: String,
    pub trace_id: String,
    pub agent: Option<String>,
    /// Who vouched for `agent`: `tokens`, `mtls` or the agent JWT's `iss`.
    pub issuer: Option<String>,
    pub session: Option<String>,
    pub tool: Option<String>,
    pub args_digest: Option<String>,
    /// Only when the contract opts into capture, with its `redact` pointers masked.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub args: Option<Value>,
    pub decision: &'static str,
    pub code: Option<&'static str>,
    pub rule: Option<String>,
    pub policy_version: Option<u64>,
    pub upstream_status: Option<u16>,
    pub latency_us: u64,
    /// `failed_open`: the shared state couldn't be asked, so limits were not applied.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub state: Option<&'static str>,
    /// The approval this call ran under.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub approval: Option<ApprovalRef>,
    /// The answer was a duplicate's copy of an earlier call's (`X-Toolgate-Replayed`).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub replayed: bool,
    /// With `captureArguments`: the variables besides `args` its rules read, versioned
    /// (`{"v": 1, "agent"?, "task"?, "session"?, "request"?}`), for `toolgate replay`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub inputs: Option<Value>,
    /// The task (its token's `task_id` or `jti`) the call's session limits and call
    /// history keyed on, when it carried a task token and its policy keys on one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub task: Option<String>,
}

/// A call's approval as its record names it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ApprovalRef {
    pub id: String,
    pub approver: Option<String>,
    pub reason: Option<String>,
}

/// A record the writer chains: a decision, or one of the records that say what the
/// sidecar was doing when it decided.
#[derive(Debug, Clone, PartialEq)]
pub enum Record {
    /// A decision (`"kind":"call"`; a line without `kind` is one too, as older logs are).
    Call(Box<Entry>),
    /// The writer's first act, before any call can be forwarded.
    Start(Start),
    /// A policy version was published; the calls after it name it in `policyVersion`.
    Policy(Published),
    /// An approval changed: requested, approved, denied, expired or used.
    Approval(ApprovalEvent),
    /// Requests that named no agent, refused past their address's allowance and counted
    /// here instead of recorded one by one.
    Suppressed(Suppressed),
}

/// The `suppressed` record: within about a second, `count` requests from
/// `clientAddress` that named no agent were answered `RATE_LIMITED` (past
/// `limits.unauthenticatedPerSecond`) without a record each. An IPv6 client is named
/// by its /64, the block one host controls.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Suppressed {
    #[serde(skip)]
    pub ts: String,
    pub client_address: String,
    pub count: u64,
}

/// The `approval` record: one transition of a human approval.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ApprovalEvent {
    #[serde(skip)]
    pub ts: String,
    /// `requested`, `approved`, `denied`, `expired` or `used`.
    pub event: &'static str,
    pub approval_id: String,
    pub tool: String,
    pub agent: String,
    pub session: Option<String>,
    /// The approver who decided it (approved, denied).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub approver: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// The call that requested or used it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub trace_id: Option<String>,
}

/// The `start` record: which binary, with which settings, chained how.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Start {
    #[serde(skip)]
    pub ts: String,
    /// toolgate's version.
    pub toolgate: &'static str,
    /// `sha256:` over the settings as loaded (no secrets are in them, only file paths).
    pub settings_digest: String,
    /// `sha256`, or `hmac-sha256` with `audit.keyFile`.
    pub chain: &'static str,
    /// Which key (its public id) a keyed chain needs.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub key_id: Option<String>,
    /// Bytes of a torn last line (a crash mid-write) cut off before this start.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub truncated_bytes: Option<u64>,
}

/// The `policy` record: a published snapshot's version and the digest of its sources.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Published {
    #[serde(skip)]
    pub ts: String,
    pub policy_version: u64,
    pub digest: String,
}

impl Record {
    pub fn kind(&self) -> &'static str {
        match self {
            Record::Call(_) => "call",
            Record::Start(_) => "start",
            Record::Policy(_) => "policy",
            Record::Approval(_) => "approval",
            Record::Suppressed(_) => "suppressed",
        }
    }

    fn ts(&self) -> &str {
        match self {
            Record::Call(entry) => &entry.ts,
            Record::Start(start) => &start.ts,
            Record::Policy(published) => &published.ts,
            Record::Approval(event) => &event.ts,
            Record::Suppressed(suppressed) => &suppressed.ts,
        }
    }
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Line<'a, T: Serialize> {
    ts: &'a str,
    seq: u64,
    kind: &'static str,
    #[serde(flatten)]
    body: &'a T,
    prev: &'a str,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Call<'a> {
    trace_id: &'a str,
    agent: &'a Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    issuer: &'a Option<String>,
    session: &'a Option<String>,
    tool: &'a Option<String>,
    args_digest: &'a Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    args: &'a Option<Value>,
    decision: &'static str,
    code: Option<&'static str>,
    rule: &'a Option<String>,
    policy_version: Option<u64>,
    upstream_status: Option<u16>,
    latency_us: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    state: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    approval: &'a Option<ApprovalRef>,
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    replayed: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    inputs: &'a Option<Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    task: &'a Option<String>,
}

impl<'a> Call<'a> {
    fn of(entry: &'a Entry) -> Call<'a> {
        Call {
            trace_id: &entry.trace_id,
            agent: &entry.agent,
            issuer: &entry.issuer,
            session: &entry.session,
            tool: &entry.tool,
            args_digest: &entry.args_digest,
            args: &entry.args,
            decision: entry.decision,
            code: entry.code,
            rule: &entry.rule,
            policy_version: entry.policy_version,
            upstream_status: entry.upstream_status,
            latency_us: entry.latency_us,
            state: entry.state,
            approval: &entry.approval,
            replayed: entry.replayed,
            inputs: &entry.inputs,
            task: &entry.task,
        }
    }
}

/// Serializes `record` as chain line number `seq` after `prev`, sealed with `key`;
/// returns the line (no newline) and its hash.
pub fn chain(record: &Record, seq: u64, prev: &str, key: Option<&AuditKey>) -> (String, String) {
    let (ts, kind) = (record.ts(), record.kind());
    let body = match record {
        Record::Call(entry) => to_json(&Line {
            ts,
            seq,
            kind,
            body: &Call::of(entry),
            prev,
        }),
        Record::Start(start) => to_json(&Line {
            ts,
            seq,
            kind,
            body: start,
            prev,
        }),
        Record::Policy(published) => to_json(&Line {
            ts,
            seq,
            kind,
            body: published,
            prev,
        }),
        Record::Approval(event) => to_json(&Line {
            ts,
            seq,
            kind,
            body: event,
            prev,
        }),
        Record::Suppressed(suppressed) => to_json(&Line {
            ts,
            seq,
            kind,
            body: suppressed,
            prev,
        }),
    };
    seal(body, prev, key)
}

fn to_json<T: Serialize>(line: &T) -> String {
    // Plain structs of strings and numbers: serializing them can't fail.
    serde_json::to_string(line).unwrap_or_else(|_| "{}".into())
}

/// Appends `"hash"` as the last field of `body` (a JSON object).
fn seal(mut body: String, prev: &str, key: Option<&AuditKey>) -> (String, String) {
    body.truncate(body.len() - 1);
    let hash = link_hash(key, prev, &body);
    body.push_str(",\"hash\":\"");
    body.push_str(&hash);
    body.push_str("\"}");
    (body, hash)
}

/// Now, as an RFC 3339 timestamp with microseconds.
pub fn now() -> String {
    humantime::format_rfc3339_micros(std::time::SystemTime::now()).to_string()
}
