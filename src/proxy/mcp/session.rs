//! MCP sessions belong to the agent that opened them: the session key is agent id +
//! `Mcp-Session-Id`.
//!
//! When an `initialize` response passes with an `Mcp-Session-Id`, the id is recorded as
//! issued to the agent that sent the `initialize`. A request naming a session is
//! forwarded only when the session was issued to the same agent; a session issued to
//! another agent, or unknown to this sidecar (expired here, or issued before a restart),
//! is answered `404`, which MCP clients read as "session ended, initialize again" — and
//! which doesn't tell an agent whether another agent's session exists.
//!
//! Memory is bounded whatever the number of agents: at most [`CAPACITY`] sessions, each
//! forgotten after [`IDLE`] without use or when the agent ends it with DELETE.

use std::sync::Arc;
use std::time::Duration;

use crate::limits::canonical::{Key, KeyBuilder};
use crate::limits::table::{Op, Table, MIN_SHARD_ENTRIES};
use crate::limits::Clock;
use crate::vocab::{Code, Reject};

pub const CAPACITY: u64 = 100_000;
pub const IDLE: Duration = Duration::from_secs(12 * 3600);

pub struct Sessions {
    /// Owner by session id; each use moves a session's idle deadline.
    owners: Table<Arc<str>>,
    idle: Duration,
    clock: Clock,
}

impl Default for Sessions {
    fn default() -> Self {
        Sessions::new(CAPACITY, IDLE, Clock::real())
    }
}

impl Sessions {
    pub fn new(capacity: u64, idle: Duration, clock: Clock) -> Sessions {
        Sessions {
            owners: Table::new(capacity, MIN_SHARD_ENTRIES),
            idle,
            clock,
        }
    }

    /// Records that the upstream issued `session` to `agent`.
    pub fn bind(&self, session: &str, agent: &Arc<str>) {
        let now = self.clock.now();
        self.owners
            .insert(key(session), now, agent.clone(), 1, now + self.idle);
    }

    /// Whether `agent` may use `session`; a refusal is the `404` of an ended session.
    pub fn check(&self, session: &str, agent: &str) -> Result<(), Reject> {
        let now = self.clock.now();
        let owner = self.owners.compute(key(session), now, |owner| match owner {
            Some(owner) if &**owner == agent => (Op::Touch(now + self.idle), Some(owner.clone())),
            owner => (Op::Keep, owner.cloned()),
        });
        match owner {
            Some(owner) if &*owner == agent => Ok(()),
            owner => {
                if owner.is_some() {
                    tracing::warn!(agent = %agent, "an agent presented a session issued to another agent");
                }
                Err(Reject::new(
                    Code::MalformedRequest,
                    "this session is not known to this agent: start a new one with initialize",
                )
                .with_status(404))
            }
        }
    }

    /// Forgets a session its agent ended.
    pub fn end(&self, session: &str) {
        self.owners.remove(key(session), self.clock.now());
    }
}

fn key(session: &str) -> Key {
    KeyBuilder::new("mcp-session").text(session).finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_session_serves_only_its_agent() {
        let sessions = Sessions::default();
        let ops: Arc<str> = Arc::from("ops-bot");
        sessions.bind("s1", &ops);
        assert!(sessions.check("s1", "ops-bot").is_ok());
        let e = sessions.check("s1", "other-bot").unwrap_err();
        assert_eq!((e.code, e.status()), (Code::MalformedRequest, 404));
        assert!(
            sessions.check("s2", "ops-bot").is_err(),
            "unknown sessions are refused"
        );
        sessions.end("s1");
        assert!(sessions.check("s1", "ops-bot").is_err());
    }

    #[test]
    fn a_session_in_use_stays_an_idle_one_is_forgotten() {
        let clock = Clock::fake();
        let idle = Duration::from_secs(60);
        let sessions = Sessions::new(100, idle, clock.clone());
        let ops: Arc<str> = Arc::from("ops-bot");
        sessions.bind("busy", &ops);
        sessions.bind("quiet", &ops);
        for _ in 0..3 {
            clock.advance(Duration::from_secs(40));
            assert!(sessions.check("busy", "ops-bot").is_ok());
        }
        assert!(sessions.check("quiet", "ops-bot").is_err());
    }
}
