//! Which tool each `tools/call` of a session called, so that its answer can still be
//! checked when it comes back on a resumed stream.
//!
//! A client whose event stream broke mid-call resumes it with a GET carrying
//! `Last-Event-ID`, and the server replays what the broken stream missed, the call's
//! response included. That stream is not the call's request, so toolgate looks the
//! response's id up here (session + JSON-RPC id → tool) to shape it with the tool's
//! contract; a response it can't tie to a call is dropped, never passed unchecked.
//!
//! Bounded: at most [`CAPACITY`] calls, each remembered for its contract's timeout plus
//! [`GRACE`] (a resumption after that finds the server's replay window closed too).

use serde_json::Value;
use std::sync::Arc;
use std::time::Duration;

use crate::limits::canonical::{Key, KeyBuilder};
use crate::limits::table::{Op, Table, MIN_SHARD_ENTRIES};
use crate::limits::Clock;

pub const CAPACITY: u64 = 100_000;
pub const GRACE: Duration = Duration::from_secs(300);

pub struct Pending {
    tools: Table<Arc<str>>,
    clock: Clock,
}

impl Default for Pending {
    fn default() -> Self {
        Pending::new(CAPACITY, Clock::real())
    }
}

impl Pending {
    pub fn new(capacity: u64, clock: Clock) -> Pending {
        Pending {
            tools: Table::new(capacity, MIN_SHARD_ENTRIES),
            clock,
        }
    }

    /// Remembers that request `id` of `session` calls `tool`.
    pub fn record(&self, session: &str, id: &Value, tool: &str, timeout: Duration) {
        let now = self.clock.now();
        let expires_at = now.saturating_add(timeout).saturating_add(GRACE);
        self.tools
            .insert(key(session, id), now, Arc::from(tool), 1, expires_at);
    }

    /// The tool request `id` of `session` called, if it is remembered.
    pub fn tool(&self, session: &str, id: &Value) -> Option<Arc<str>> {
        let now = self.clock.now();
        self.tools
            .compute(key(session, id), now, |tool| (Op::Keep, tool.cloned()))
    }
}

fn key(session: &str, id: &Value) -> Key {
    let mut key = KeyBuilder::new("pending-call");
    key.text(session).json(id);
    key.finish()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn calls_are_remembered_per_session_until_they_expire() {
        let clock = Clock::fake();
        let pending = Pending::new(1000, clock.clone());
        pending.record("s1", &json!(5), "read_logs", Duration::from_secs(10));
        assert_eq!(pending.tool("s1", &json!(5)).as_deref(), Some("read_logs"));
        assert_eq!(
            pending.tool("s2", &json!(5)),
            None,
            "another session's call"
        );
        assert_eq!(pending.tool("s1", &json!("5")), None, "ids compare as JSON");
        clock.advance(Duration::from_secs(10) + GRACE + Duration::from_secs(1));
        assert_eq!(pending.tool("s1", &json!(5)), None);
    }
}
