//! Rate limits: per agent (`spec.rateLimit`) and per agent and tool (`tools[].rateLimit`),
//! as GCRA limiters (governor) on the ledger's [`Clock`].
//!
//! Invariants:
//! - A limiter is keyed by agent, tool (or none, for the agent-wide one) and quota, and
//!   lives outside the snapshot: a reload that keeps a quota keeps its state; a changed
//!   quota gets a fresh limiter (the old one ages out).
//! - Memory is bounded: at most `capacity` limiters (least recently used go first), and a
//!   limiter unused for its full refill time is dropped — it would be full again anyway,
//!   so forgetting it changes no decision.
//! - Every request spends a cell, duplicates included. The tool's limit is checked before
//!   the agent's, so a call the tool limit refuses does not also drain the agent's budget
//!   (governor can't refund a cell; the reverse order would).

use governor::middleware::NoOpMiddleware;
use governor::nanos::Nanos;
use governor::state::{InMemoryState, NotKeyed};
use std::sync::Arc;
use std::time::Duration;

use super::canonical::KeyBuilder;
use super::clock::Clock;
use super::table::{Op, Table, MIN_SHARD_ENTRIES};
use crate::policy::quota::Quota;
use crate::vocab::{Code, Reject};

type Limiter = governor::RateLimiter<NotKeyed, InMemoryState, Clock, NoOpMiddleware<Nanos>>;

struct Entry {
    limiter: Limiter,
    /// Unused this long, the limiter is full again and can be forgotten.
    idle: Duration,
}

#[derive(Clone)]
pub struct RateLimits {
    limiters: Arc<Table<Arc<Entry>>>,
    clock: Clock,
}

/// Slack past the refill time before an idle limiter is dropped.
const IDLE_SLACK: Duration = Duration::from_secs(1);

impl RateLimits {
    pub fn new(capacity: u64, clock: Clock) -> RateLimits {
        RateLimits {
            limiters: Arc::new(Table::new(capacity, MIN_SHARD_ENTRIES)),
            clock,
        }
    }

    /// Spends one cell of each limit that applies: the tool's, then the agent's.
    pub fn check(
        &self,
        agent: &str,
        tool: &str,
        agent_quota: Option<&Quota>,
        tool_quota: Option<&Quota>,
    ) -> Result<(), Reject> {
        if let Some(quota) = tool_quota {
            self.spend(agent, Some(tool), quota)
                .map_err(|wait| over_limit(agent, Some(tool), quota, wait))?;
        }
        if let Some(quota) = agent_quota {
            self.spend(agent, None, quota)
                .map_err(|wait| over_limit(agent, None, quota, wait))?;
        }
        Ok(())
    }

    /// Limiters held now.
    pub fn len(&self) -> u64 {
        self.limiters.len() as u64
    }

    pub fn is_empty(&self) -> bool {
        self.limiters.is_empty()
    }

    /// `Err(wait)` when the limiter has no cell; `wait` is when the next one is due.
    fn spend(&self, agent: &str, tool: Option<&str>, quota: &Quota) -> Result<(), Duration> {
        let spec = quota.spec;
        let key = KeyBuilder::new("rate")
            .text(agent)
            .optional(tool)
            .bytes(
                &[
                    spec.per_second.map_or(0, u64::from).to_le_bytes(),
                    spec.per_minute.map_or(0, u64::from).to_le_bytes(),
                    spec.burst.map_or(0, u64::from).to_le_bytes(),
                ]
                .concat(),
            )
            .finish();
        let now = self.clock.now();
        // Each use touches the limiter: least recently used go first, idle ones expire.
        let entry = self.limiters.compute(key, now, |current| match current {
            Some(entry) => (Op::Touch(now + entry.idle), entry.clone()),
            None => {
                let entry = Arc::new(Entry {
                    limiter: governor::RateLimiter::direct_with_clock(
                        quota.governor,
                        self.clock.clone(),
                    ),
                    idle: quota.refill_time() + IDLE_SLACK,
                });
                let put = Op::Put {
                    value: entry.clone(),
                    weight: 1,
                    expires_at: now + entry.idle,
                };
                (put, entry)
            }
        });
        entry
            .limiter
            .check()
            .map_err(|not_until| not_until.wait_time_from(governor::clock::Clock::now(&self.clock)))
    }
}

/// `RATE_LIMITED` for the agent's limit (`tool: None`) or its limit for one tool, with
/// the wait until the next cell.
pub fn over_limit(agent: &str, tool: Option<&str>, quota: &Quota, wait: Duration) -> Reject {
    let message = match tool {
        Some(tool) => format!("agent {agent} is over its rate limit for {tool} ({quota})"),
        None => format!("agent {agent} is over its rate limit ({quota})"),
    };
    refusal(message, wait)
}

fn refusal(message: String, wait: Duration) -> Reject {
    // Rounded up: an agent that waits exactly this long must find a cell.
    let ms = u64::try_from(wait.as_nanos().div_ceil(1_000_000))
        .unwrap_or(u64::MAX)
        .max(1);
    Reject::new(Code::RateLimited, format!("{message}; retry in {ms} ms")).with_retry_after(ms)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::crd::RateLimit;

    fn mk_quota(per_minute: u32, burst: u32) -> Quota {
        let spec = RateLimit {
            per_second: None,
            per_minute: Some(per_minute),
            burst: Some(burst),
        };
        Quota::compile("t", &spec).unwrap()
    }

    #[test]
    fn bursts_then_refuses_with_the_wait_then_refills() {
        let clock = Clock::fake();
        let limits = RateLimits::new(100, clock.clone());
        let q = mk_quota(60, 2);
        assert!(limits.check("a", "t", Some(&q), None).is_ok());
        assert!(limits.check("a", "t", Some(&q), None).is_ok());
        let refused = limits.check("a", "t", Some(&q), None).unwrap_err();
        assert_eq!(refused.code, Code::RateLimited);
        assert_eq!(refused.retry_after_ms, Some(1000));
        clock.advance(Duration::from_secs(1));
        assert!(limits.check("a", "t", Some(&q), None).is_ok());
    }

    #[test]
    fn tool_limit_is_checked_first_and_does_not_drain_the_agent() {
        let limits = RateLimits::new(100, Clock::fake());
        let agent = mk_quota(60, 3);
        let tool = mk_quota(60, 1);
        assert!(limits.check("a", "x", Some(&agent), Some(&tool)).is_ok());
        for _ in 0..5 {
            let e = limits
                .check("a", "x", Some(&agent), Some(&tool))
                .unwrap_err();
            assert!(e.message.contains("for x"), "{}", e.message);
        }
        // The agent spent one cell only: two more for other tools.
        assert!(limits.check("a", "y", Some(&agent), None).is_ok());
        assert!(limits.check("a", "y", Some(&agent), None).is_ok());
        assert!(limits.check("a", "y", Some(&agent), None).is_err());
    }

    #[test]
    fn agents_tools_and_quotas_have_separate_limiters() {
        let limits = RateLimits::new(100, Clock::fake());
        let q = mk_quota(60, 1);
        assert!(limits.check("a", "t", Some(&q), None).is_ok());
        assert!(limits.check("a", "t", Some(&q), None).is_err());
        assert!(
            limits.check("b", "t", Some(&q), None).is_ok(),
            "another agent"
        );
        assert!(
            limits.check("a", "t", None, Some(&q)).is_ok(),
            "the per-tool limiter"
        );
        // The same quota keeps its state (a reload); a changed one starts fresh.
        assert!(limits
            .check("a", "t", Some(&mk_quota(60, 1)), None)
            .is_err());
        assert!(limits.check("a", "t", Some(&mk_quota(60, 2)), None).is_ok());
    }

    #[test]
    fn capacity_bounds_the_limiters() {
        let limits = RateLimits::new(1000, Clock::fake());
        let q = mk_quota(60, 1);
        for i in 0..5000 {
            let _ = limits.check(&format!("agent-{i}"), "t", Some(&q), None);
        }
        assert!(limits.len() <= 1000, "{}", limits.len());
    }
}
