//! Business-key dedupe (`dedupeKey`): who owns an action within its window.
//!
//! The first call of an action (tool + key value) owns it for the dedupe window: a later
//! call of the same action from the same agent and session is a duplicate of it (it joins
//! or replays through the duplicate table, `dedupe`, which keys such calls by the
//! action); one from any other agent or session is refused with `DUPLICATE_CALL`, naming
//! the first call's trace id. An owner whose call certainly did not run gives the action
//! back ([`Actions::release`]), so a refused or failed-to-connect first attempt doesn't
//! block everyone else for the window.
//!
//! Memory is bounded: at most [`CAPACITY`] actions (least recently claimed dropped first),
//! each for its window.

use std::sync::Arc;
use std::time::Duration;

use super::canonical::{Key, KeyBuilder};
use super::clock::Clock;
use super::table::{Op, Table, MIN_SHARD_ENTRIES};
use crate::vocab::{Code, Detail, Reject};

pub const CAPACITY: u64 = 100_000;

/// Who sent an action's first call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Owner {
    pub agent: String,
    pub session: Option<String>,
    pub trace_id: String,
}

impl Owner {
    /// The same agent and session: its calls are one another's duplicates.
    pub fn same_caller(&self, other: &Owner) -> bool {
        self.agent == other.agent && self.session == other.session
    }
}

/// What claiming an action found.
#[derive(Debug, PartialEq, Eq)]
pub enum Claimed {
    /// No one had it: this call owns it.
    First,
    /// The same agent and session had it: a duplicate.
    Again,
    /// Someone else had it: `DUPLICATE_CALL`.
    Taken(Owner),
}

#[derive(Clone)]
pub struct Actions {
    owners: Arc<Table<Arc<Owner>>>,
    clock: Clock,
}

impl Actions {
    pub fn new(clock: Clock) -> Actions {
        Actions {
            owners: Arc::new(Table::new(CAPACITY, MIN_SHARD_ENTRIES)),
            clock,
        }
    }

    /// Claims `action` of `tool` for `owner`, for `window`, or finds who has it.
    pub fn claim(&self, tool: &str, action: &str, owner: &Owner, window: Duration) -> Claimed {
        let now = self.clock.now();
        self.owners
            .compute(key(tool, action), now, |current| match current {
                Some(held) if held.same_caller(owner) => (Op::Keep, Claimed::Again),
                Some(held) => (Op::Keep, Claimed::Taken((**held).clone())),
                None => {
                    let put = Op::Put {
                        value: Arc::new(owner.clone()),
                        weight: 1,
                        expires_at: now.saturating_add(window),
                    };
                    (put, Claimed::First)
                }
            })
    }

    /// Gives `action` back, if `owner` still has it: its call certainly did not run.
    pub fn release(&self, tool: &str, action: &str, owner: &Owner) {
        let now = self.clock.now();
        self.owners.compute(key(tool, action), now, |current| {
            let op = match current {
                Some(held) if held.trace_id == owner.trace_id => Op::Remove,
                _ => Op::Keep,
            };
            (op, ())
        });
    }
}

/// `DUPLICATE_CALL`: another caller ran this action within the window.
pub fn duplicate(tool: &str, owner: &Owner) -> Reject {
    Reject::new(
        Code::DuplicateCall,
        format!(
            "this {tool} action was already run by another caller (trace {}) within its dedupe window; it will not run again",
            owner.trace_id
        ),
    )
    .with_details(vec![Detail {
        keyword: "dedupeKey".into(),
        trace_id: Some(owner.trace_id.clone()),
        ..Detail::default()
    }])
}

fn key(tool: &str, action: &str) -> Key {
    KeyBuilder::new("action").text(tool).text(action).finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn owner(agent: &str, session: Option<&str>, trace: &str) -> Owner {
        Owner {
            agent: agent.into(),
            session: session.map(String::from),
            trace_id: trace.into(),
        }
    }

    #[test]
    fn an_action_belongs_to_its_first_caller_for_its_window() {
        let clock = Clock::fake();
        let actions = Actions::new(clock.clone());
        let window = Duration::from_secs(60);
        let first = owner("a", Some("s"), "t1");
        assert_eq!(
            actions.claim("refund", "\"A-1\"", &first, window),
            Claimed::First
        );
        assert_eq!(
            actions.claim("refund", "\"A-1\"", &owner("a", Some("s"), "t2"), window),
            Claimed::Again
        );
        assert_eq!(
            actions.claim("refund", "\"A-1\"", &owner("b", Some("s"), "t3"), window),
            Claimed::Taken(first.clone())
        );
        assert_eq!(
            actions.claim("refund", "\"A-1\"", &owner("a", None, "t4"), window),
            Claimed::Taken(first.clone()),
            "another session of the same agent is another caller"
        );
        assert_eq!(
            actions.claim("refund", "\"A-2\"", &owner("b", None, "t5"), window),
            Claimed::First
        );
        clock.advance(window + Duration::from_secs(1));
        assert_eq!(
            actions.claim("refund", "\"A-1\"", &owner("b", None, "t6"), window),
            Claimed::First
        );
    }

    #[test]
    fn only_the_owner_gives_an_action_back() {
        let actions = Actions::new(Clock::fake());
        let window = Duration::from_secs(60);
        let first = owner("a", None, "t1");
        actions.claim("t", "1", &first, window);
        actions.release("t", "1", &owner("b", None, "t2"));
        assert!(matches!(
            actions.claim("t", "1", &owner("b", None, "t2"), window),
            Claimed::Taken(_)
        ));
        actions.release("t", "1", &first);
        assert_eq!(
            actions.claim("t", "1", &owner("b", None, "t3"), window),
            Claimed::First
        );
    }
}
