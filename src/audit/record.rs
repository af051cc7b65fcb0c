//! One audit record (DESIGN §6) and its place in the hash chain.
//!
//! A line is the record's JSON with `hash` last: `hash` = SHA-256 over the previous
//! line's hash followed by this line's JSON up to (not including) `,"hash":…`. Editing,
//! inserting, deleting or reordering a line breaks either the hash or the `prev`/`seq`
//! links, which `toolgate audit verify` reports.

use serde::Serialize;
use serde_json::Value;
use sha2::{Digest, Sha256};

/// The `prev` of the first record of a chain.
pub const GENESIS: &str = "0000000000000000000000000000000000000000000000000000000000000000";

/// What the pipeline knows about a decision; the writer adds `seq`, `prev` and `hash`.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Entry {
    pub ts: String,
    pub trace_id: String,
    pub agent: Option<String>,
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
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Chained<'a> {
    ts: &'a str,
    seq: u64,
    #[serde(flatten)]
    rest: Rest<'a>,
    prev: &'a str,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Rest<'a> {
    trace_id: &'a str,
    agent: &'a Option<String>,
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
}

/// Serializes `entry` as chain line number `seq` after `prev`; returns the line (no
/// newline) and its hash.
pub fn chain(entry: &Entry, seq: u64, prev: &str) -> (String, String) {
    let chained = Chained {
        ts: &entry.ts,
        seq,
        rest: Rest {
            trace_id: &entry.trace_id,
            agent: &entry.agent,
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
        },
        prev,
    };
    let mut body = serde_json::to_string(&chained).unwrap_or_default();
    let hash = link_hash(prev, &body[..body.len() - 1]);
    body.truncate(body.len() - 1);
    body.push_str(",\"hash\":\"");
    body.push_str(&hash);
    body.push_str("\"}");
    (body, hash)
}

/// The hash of a line: over `prev` and the line's JSON without its closing brace.
pub fn link_hash(prev: &str, body_without_brace: &str) -> String {
    let mut h = Sha256::new();
    h.update(prev.as_bytes());
    h.update(b"\n");
    h.update(body_without_brace.as_bytes());
    hex::encode(h.finalize())
}

/// The digest of canonical arguments (sorted keys, no whitespace).
pub fn args_digest(args: &Value) -> String {
    let canonical = serde_json::to_vec(args).unwrap_or_default();
    format!("sha256:{}", hex::encode(Sha256::digest(canonical)))
}

/// Now, as an RFC 3339 timestamp with microseconds.
pub fn now() -> String {
    humantime::format_rfc3339_micros(std::time::SystemTime::now()).to_string()
}
