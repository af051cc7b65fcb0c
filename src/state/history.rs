//! The call history `requires` reads (DESIGN §16), in Redis: the same facts as
//! `limits::history`, shared by every replica.
//!
//! One list per agent and task or session (`{agent}:history:<scope>`), each item a
//! successful call as JSON `{"t": tool, "a": arguments, "ms": unix milliseconds}`,
//! newest last, trimmed to [`MAX_ENTRIES`] and expiring with the session's idle time. A
//! call whose grant `requires` something reads it whole (one `LRANGE`, one round trip);
//! a successful call of a tool some grant requires appends to it (one pipeline).
//!
//! A Redis outage fails **closed** for the read: a call whose order can't be checked is
//! `STATE_UNAVAILABLE` (retryable), never let through, since call order is a safety rule
//! (a refund for an order nobody looked up) rather than a budget. A failed write is
//! logged and counted (`toolgate_state_errors_total{op="history"}`); the call it was
//! for is already answered, and a later call requiring it is refused until it is made
//! again.

use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use std::sync::Arc;

use super::keys::Keys;
use super::link::{Link, Op, Unavailable};
use super::Shared;
use crate::limits::history::{weigh, MAX_ENTRIES};

/// One remembered call as Redis keeps it.
#[derive(Debug, Serialize, Deserialize)]
pub struct Stored {
    #[serde(rename = "t")]
    pub tool: String,
    #[serde(rename = "a")]
    pub args: Value,
    #[serde(rename = "ms")]
    pub at_ms: u64,
}

impl Stored {
    /// How long ago it was remembered, by this pod's clock.
    pub fn age(&self, now_ms: u64) -> Duration {
        Duration::from_millis(now_ms.saturating_sub(self.at_ms))
    }
}

pub fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// What writes a successful call into the shared history, held by the call's outcome
/// until its answer is known.
#[derive(Clone)]
pub struct Writer {
    link: Arc<Link>,
    keys: Keys,
}

impl Shared {
    pub fn history_writer(&self) -> Writer {
        Writer {
            link: self.link.clone(),
            keys: self.keys.clone(),
        }
    }
}

impl Writer {
    /// Remembers a successful call of `tool` in the agent's task or session `scope`.
    pub async fn remember(
        &self,
        agent: &str,
        scope: &str,
        tool: &str,
        args: &Value,
        idle: Duration,
    ) -> Result<(), Unavailable> {
        if weigh(args).is_none() {
            return Ok(());
        }
        let item = serde_json::to_vec(&serde_json::json!({"t": tool, "a": args, "ms": now_ms()}))
            .unwrap_or_default();
        let key = self.keys.history(agent, scope);
        let idle_ms = idle.as_millis().max(1) as u64;
        self.link
            .call(Op::History, |mut conn| async move {
                redis::pipe()
                    .atomic()
                    .rpush(&key, item)
                    .ignore()
                    .ltrim(&key, -(MAX_ENTRIES as isize), -1)
                    .ignore()
                    .pexpire(&key, idle_ms as i64)
                    .ignore()
                    .query_async::<()>(&mut conn)
                    .await
            })
            .await
    }
}

impl Shared {
    /// The agent's earlier successful calls in `scope`, newest first. Items this version
    /// can't read are skipped.
    pub async fn history(&self, agent: &str, scope: &str) -> Result<Vec<Stored>, Unavailable> {
        let key = self.keys.history(agent, scope);
        let items: Vec<Vec<u8>> = self
            .link
            .call(Op::History, |mut conn| async move {
                redis::cmd("LRANGE")
                    .arg(&key)
                    .arg(0)
                    .arg(-1)
                    .query_async(&mut conn)
                    .await
            })
            .await
            .or_else(|e| {
                if e.0.contains("WRONGTYPE") {
                    Ok(Vec::new())
                } else {
                    Err(e)
                }
            })?;
        Ok(items
            .iter()
            .rev()
            .filter_map(|item| serde_json::from_slice(item).ok())
            .collect())
    }
}
