//! Session budgets and loop detection (`AgentPolicy.spec.session`).
//!
//! A session is keyed by agent id AND session id, so one agent naming another's session id
//! gets its own, separate tally. Per session the ledger keeps the number of calls admitted,
//! the fingerprint (tool + canonical arguments) of the last one, and how many times in a
//! row that fingerprint was admitted.
//!
//! Invariants:
//! - `maxCalls` calls are admitted; the next is `BUDGET_EXHAUSTED`.
//! - At most `maxRepeats` identical calls run in a row; the next identical one is
//!   `LOOP_DETECTED`, and so is every identical one after it, until a different call
//!   breaks the streak. A refused call is not counted.
//! - Only calls about to run are admitted: a duplicate answered from the first call never
//!   reaches here (see `once`), and neither does a call refused earlier.
//! - With `maxSame`, at most that many identical calls run in one session, in a row or
//!   not (a cycle A, B, A, B … is caught too); the counts of up to [`MAX_SAME_TRACKED`]
//!   distinct calls are kept per session (a session of more distinct calls than that is
//!   no cycle of few).
//! - The "session" is the call's task when it carries a task token (`limits::scope`).
//! - A call without a session id has no session state: budgets and loop detection don't
//!   apply to it (rate limits still do). See the module docs of `limits` for why.
//! - Memory is bounded: at most `capacity` sessions, least recently used dropped first;
//!   a session with no call for `idle` is forgotten (its budget starts over); a refused
//!   call keeps it alive too, so an exhausted session can't be waited out by retrying.
//! - Admission is atomic per session (one [`Table`] shard lock), so parallel calls in one
//!   session can't both take the last unit of budget.

use std::sync::Arc;
use std::time::Duration;

use super::canonical::{Key, KeyBuilder};
use super::clock::Clock;
use super::scope::label;
use super::table::{Op, Table, MIN_SHARD_ENTRIES};
use super::Call;
use crate::crd::SessionLimits;
use crate::vocab::{Code, Reject};

/// Distinct calls whose counts `maxSame` keeps per session.
pub const MAX_SAME_TRACKED: usize = 256;

#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct Tally {
    calls: u64,
    last: Key,
    streak: u32,
    /// With `maxSame`: how often each call ran in the session (empty otherwise).
    same: Vec<(Key, u32)>,
}

#[derive(Clone)]
pub struct Sessions {
    tallies: Arc<Table<Tally>>,
    idle: Duration,
    clock: Clock,
}

impl Sessions {
    pub fn new(capacity: u64, idle: Duration, clock: Clock) -> Sessions {
        Sessions {
            tallies: Arc::new(Table::new(capacity, MIN_SHARD_ENTRIES)),
            idle,
            clock,
        }
    }

    /// Calls admitted so far in the agent's session (0 without a session).
    pub fn calls(&self, agent: &str, session: Option<&str>) -> u64 {
        let Some(session) = session else { return 0 };
        let now = self.clock.now();
        self.tallies.compute(key(agent, session), now, |current| {
            (Op::Keep, current.map_or(0, |t| t.calls))
        })
    }

    /// Counts a call that is about to run, or refuses it.
    pub fn admit(&self, call: &Call<'_>, limits: Option<&SessionLimits>) -> Result<(), Reject> {
        let Some(session) = call.session else {
            return Ok(());
        };
        let max_calls = limits.and_then(|l| l.max_calls);
        let max_repeats = limits.and_then(|l| l.max_repeats);
        let max_same = limits.and_then(|l| l.max_same);
        // Zeros when nothing compares calls: no call's fingerprint, so should the limits
        // change, the next call's streak starts at one.
        let fingerprint = call.compared(limits).unwrap_or_default();
        let now = self.clock.now();
        // `limits.sessionIdleSeconds` has no upper bound: saturate rather than overflow.
        let expires_at = now.saturating_add(self.idle);
        self.tallies
            .compute(key(call.agent, session), now, |current| {
                let mut tally = current.cloned().unwrap_or_default();
                let streak = if tally.calls > 0 && tally.last == fingerprint {
                    tally.streak.saturating_add(1)
                } else {
                    1
                };
                if let Some(max) = max_calls.filter(|max| tally.calls >= *max) {
                    return (Op::Touch(expires_at), Err(budget_spent(session, max)));
                }
                if let Some(max) = max_repeats.filter(|max| streak > *max) {
                    return (Op::Touch(expires_at), Err(looping(call.tool, session, max)));
                }
                if let Some(max) = max_same {
                    if !count_same(&mut tally.same, fingerprint, max) {
                        return (
                            Op::Touch(expires_at),
                            Err(same_again(call.tool, session, max)),
                        );
                    }
                }
                let tally = Tally {
                    calls: tally.calls + 1,
                    last: fingerprint,
                    streak,
                    same: tally.same,
                };
                (
                    Op::Put {
                        value: tally,
                        weight: 1,
                        expires_at,
                    },
                    Ok(()),
                )
            })
    }

    pub fn len(&self) -> u64 {
        self.tallies.len() as u64
    }

    pub fn is_empty(&self) -> bool {
        self.tallies.is_empty()
    }
}

/// Counts one more run of `call` in `same`, unless it ran `max` times already.
fn count_same(same: &mut Vec<(Key, u32)>, call: Key, max: u32) -> bool {
    match same.iter_mut().find(|(k, _)| *k == call) {
        Some((_, n)) if *n >= max => false,
        Some((_, n)) => {
            *n += 1;
            true
        }
        None => {
            if same.len() < MAX_SAME_TRACKED {
                same.push((call, 1));
            }
            true
        }
    }
}

/// `BUDGET_EXHAUSTED`: the session ran the `maxCalls` it may.
pub fn budget_spent(session: &str, max: u64) -> Reject {
    let scope = label(session);
    Reject::new(
        Code::BudgetExhausted,
        format!("{scope} has used all {max} calls its policy allows; start a new task"),
    )
}

/// `LOOP_DETECTED`: the session ran this identical call `maxRepeats` times in a row.
pub fn looping(tool: &str, session: &str, max: u32) -> Reject {
    let scope = label(session);
    Reject::new(
        Code::LoopDetected,
        format!(
            "{tool} was called with the same arguments {max} times in a row in {scope}; calling it again will not change the result"
        ),
    )
}

/// `LOOP_DETECTED`: the session ran this identical call `maxSame` times in all.
pub fn same_again(tool: &str, session: &str, max: u32) -> Reject {
    let scope = label(session);
    Reject::new(
        Code::LoopDetected,
        format!(
            "{tool} was already called with the same arguments {max} times in {scope} (maxSame); calling it again will not change the result"
        ),
    )
}

fn key(agent: &str, session: &str) -> Key {
    KeyBuilder::new("session")
        .text(agent)
        .text(session)
        .finish()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::vocab::args::Args;
    use serde_json::{json, Value};

    fn mk_limits(max_calls: Option<u64>, max_repeats: Option<u32>) -> SessionLimits {
        SessionLimits {
            max_calls,
            max_repeats,
            ..SessionLimits::default()
        }
    }

    fn mk_call<'a>(agent: &'a str, session: Option<&'a str>, args: &'a Args) -> Call<'a> {
        Call::new(agent, session, "read_logs", args, None)
    }

    #[test]
    fn budget_admits_max_calls_then_refuses() {
        let sessions = Sessions::new(100, Duration::from_secs(60), Clock::fake());
        let limits = mk_limits(Some(2), None);
        let (a, b, c) = (
            Args::from(json!({"n": 1})),
            Args::from(json!({"n": 2})),
            Args::from(json!({"n": 3})),
        );
        assert!(sessions
            .admit(&mk_call("bot", Some("s"), &a), Some(&limits))
            .is_ok());
        assert!(sessions
            .admit(&mk_call("bot", Some("s"), &b), Some(&limits))
            .is_ok());
        assert_eq!(sessions.calls("bot", Some("s")), 2);
        let e = sessions
            .admit(&mk_call("bot", Some("s"), &c), Some(&limits))
            .unwrap_err();
        assert_eq!(e.code, Code::BudgetExhausted);
        assert_eq!(
            sessions.calls("bot", Some("s")),
            2,
            "a refusal is not counted"
        );
    }

    #[test]
    fn repeats_in_a_row_are_a_loop_until_broken() {
        let sessions = Sessions::new(100, Duration::from_secs(60), Clock::fake());
        let limits = mk_limits(None, Some(3));
        let same = Args::from(json!({"service": "orders", "w": 15}));
        let reordered =
            Args::from(serde_json::from_str::<Value>(r#"{ "w":15, "service":"orders" }"#).unwrap());
        let other = Args::from(json!({"service": "payments"}));
        for args in [&same, &reordered, &same] {
            assert!(sessions
                .admit(&mk_call("bot", Some("s"), args), Some(&limits))
                .is_ok());
        }
        for _ in 0..2 {
            let e = sessions
                .admit(&mk_call("bot", Some("s"), &same), Some(&limits))
                .unwrap_err();
            assert_eq!(e.code, Code::LoopDetected);
        }
        assert!(sessions
            .admit(&mk_call("bot", Some("s"), &other), Some(&limits))
            .is_ok());
        assert!(sessions
            .admit(&mk_call("bot", Some("s"), &same), Some(&limits))
            .is_ok());
    }

    #[test]
    fn max_same_catches_a_cycle_max_repeats_never_sees() {
        let sessions = Sessions::new(100, Duration::from_secs(60), Clock::fake());
        let limits = SessionLimits {
            max_repeats: Some(2),
            max_same: Some(2),
            ..SessionLimits::default()
        };
        let (a, b) = (Args::from(json!({"n": 1})), Args::from(json!({"n": 2})));
        for args in [&a, &b, &a, &b] {
            assert!(sessions
                .admit(&mk_call("bot", Some("s"), args), Some(&limits))
                .is_ok());
        }
        let e = sessions
            .admit(&mk_call("bot", Some("s"), &a), Some(&limits))
            .unwrap_err();
        assert_eq!(e.code, Code::LoopDetected);
        assert!(e.message.contains("maxSame"), "{}", e.message);
        assert_eq!(
            sessions.calls("bot", Some("s")),
            4,
            "a refusal is not counted"
        );
    }

    #[test]
    fn sessions_are_keyed_by_agent_and_session() {
        let sessions = Sessions::new(100, Duration::from_secs(60), Clock::fake());
        let limits = mk_limits(Some(1), None);
        let a = Args::from(json!({}));
        assert!(sessions
            .admit(&mk_call("bot", Some("s"), &a), Some(&limits))
            .is_ok());
        assert!(sessions
            .admit(&mk_call("bot", Some("s"), &a), Some(&limits))
            .is_err());
        assert!(sessions
            .admit(&mk_call("other", Some("s"), &a), Some(&limits))
            .is_ok());
        assert!(sessions
            .admit(&mk_call("bot", Some("t"), &a), Some(&limits))
            .is_ok());
    }

    #[test]
    fn no_session_means_no_session_limits() {
        let sessions = Sessions::new(100, Duration::from_secs(60), Clock::fake());
        let limits = mk_limits(Some(1), Some(1));
        let a = Args::from(json!({}));
        for _ in 0..5 {
            assert!(sessions
                .admit(&mk_call("bot", None, &a), Some(&limits))
                .is_ok());
        }
        assert_eq!(sessions.calls("bot", None), 0);
        assert!(sessions.is_empty());
    }

    #[test]
    fn capacity_bounds_the_sessions() {
        let sessions = Sessions::new(1000, Duration::from_secs(60), Clock::fake());
        let a = Args::from(json!({}));
        for i in 0..5000 {
            let id = format!("s-{i}");
            sessions
                .admit(&mk_call("bot", Some(&id), &a), None)
                .unwrap();
        }
        assert!(sessions.len() <= 1000, "{}", sessions.len());
    }
    #[test]
    fn an_idle_session_starts_over() {
        let clock = Clock::fake();
        let sessions = Sessions::new(100, Duration::from_secs(60), clock.clone());
        let limits = mk_limits(Some(2), None);
        let a = Args::from(json!({}));
        for _ in 0..2 {
            clock.advance(Duration::from_secs(50));
            assert!(sessions
                .admit(&mk_call("bot", Some("s"), &a), Some(&limits))
                .is_ok());
        }
        assert_eq!(
            sessions.calls("bot", Some("s")),
            2,
            "each call kept it alive"
        );
        clock.advance(Duration::from_secs(60));
        assert_eq!(sessions.calls("bot", Some("s")), 0, "idle: forgotten");
        assert!(sessions
            .admit(&mk_call("bot", Some("s"), &a), Some(&limits))
            .is_ok());
    }
}
