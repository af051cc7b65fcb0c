//! Spend budgets in this sidecar (`state.backend: memory`): what each agent spent today
//! against each `budget` (a policy's, a grant's), charged when a call is admitted.
//!
//! A call carries its [`Charges`] (computed by the gate: the cost of its arguments, and
//! for each budget that applies, the local day and when it ends). Admission charges all
//! of them or none: a call that one budget refuses costs nothing against the others.
//! Charging happens at admission, right before the call is sent (`Ledger::admit`), so a
//! call held for approval, refused by another limit, or answered as a duplicate costs
//! nothing.
//!
//! Memory is bounded like the sessions table: one entry per agent, budget and day, at
//! most `limits.maxSessions` of them, each dropped at its day's end.

use std::sync::Arc;
use std::time::Duration;

use super::canonical::{Key, KeyBuilder};
use super::clock::Clock;
use super::table::{Op, Table, MIN_SHARD_ENTRIES};
use crate::vocab::{Code, Reject};

/// One budget a call is charged against.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Charge {
    /// Which budget: `p:<policy object>` or `g:<policy object>:<tool>`.
    pub budget: String,
    pub per_day: u64,
    /// The local day, `YYYY-MM-DD`.
    pub day: String,
    /// Until the next local midnight.
    pub resets_in: Duration,
    pub zone: String,
}

/// What a call costs, and the budgets it is charged against (one or two).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Charges {
    pub cost: u64,
    pub budgets: Vec<Charge>,
}

#[derive(Clone)]
pub struct Budgets {
    spent: Arc<Table<u64>>,
    clock: Clock,
}

impl Budgets {
    pub fn new(capacity: u64, clock: Clock) -> Budgets {
        Budgets {
            spent: Arc::new(Table::new(capacity, MIN_SHARD_ENTRIES)),
            clock,
        }
    }

    /// Charges every budget, or refuses the call (`BUDGET_EXHAUSTED`) and charges none.
    pub fn charge(&self, agent: &str, charges: &Charges) -> Result<(), Reject> {
        for (i, charge) in charges.budgets.iter().enumerate() {
            if let Err(reject) = self.charge_one(agent, charges.cost, charge) {
                for done in &charges.budgets[..i] {
                    self.refund(agent, charges.cost, done);
                }
                return Err(reject);
            }
        }
        Ok(())
    }

    /// Gives back what [`charge`](Self::charge) took (another limit refused the call).
    pub fn refund_all(&self, agent: &str, charges: &Charges) {
        for charge in &charges.budgets {
            self.refund(agent, charges.cost, charge);
        }
    }

    fn charge_one(&self, agent: &str, cost: u64, charge: &Charge) -> Result<(), Reject> {
        let now = self.clock.now();
        let expires_at = now.saturating_add(charge.resets_in);
        self.spent.compute(key(agent, charge), now, |current| {
            let spent = current.copied().unwrap_or(0);
            let after = spent.saturating_add(cost);
            if after > charge.per_day {
                return (Op::Keep, Err(exhausted(charge, spent, cost)));
            }
            let put = Op::Put {
                value: after,
                weight: 1,
                expires_at,
            };
            (put, Ok(()))
        })
    }

    fn refund(&self, agent: &str, cost: u64, charge: &Charge) {
        let now = self.clock.now();
        self.spent
            .compute(key(agent, charge), now, |current| match current {
                Some(spent) => (
                    Op::Put {
                        value: spent.saturating_sub(cost),
                        weight: 1,
                        expires_at: now.saturating_add(charge.resets_in),
                    },
                    (),
                ),
                None => (Op::Keep, ()),
            });
    }

    /// Spent today against `charge`'s budget.
    pub fn spent(&self, agent: &str, charge: &Charge) -> u64 {
        let now = self.clock.now();
        self.spent.compute(key(agent, charge), now, |c| {
            (Op::Keep, c.copied().unwrap_or(0))
        })
    }

    pub fn len(&self) -> u64 {
        self.spent.len() as u64
    }

    pub fn is_empty(&self) -> bool {
        self.spent.is_empty()
    }
}

/// `BUDGET_EXHAUSTED` for a spend budget, retryable at the next local midnight.
pub fn exhausted(charge: &Charge, spent: u64, cost: u64) -> Reject {
    let wait = u64::try_from(charge.resets_in.as_millis()).unwrap_or(u64::MAX);
    Reject::new(
        Code::BudgetExhausted,
        format!(
            "this call costs {cost}, and {} of today's {} are left (budget resets at midnight {}); ask the user, or try again after the reset",
            charge.per_day.saturating_sub(spent),
            charge.per_day,
            charge.zone
        ),
    )
    .with_retry_after(wait.max(1))
}

fn key(agent: &str, charge: &Charge) -> Key {
    KeyBuilder::new("budget")
        .text(agent)
        .text(&charge.budget)
        .text(&charge.day)
        .finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mk(per_day: u64, day: &str) -> Charge {
        Charge {
            budget: "p:AgentPolicy/x".into(),
            per_day,
            day: day.into(),
            resets_in: Duration::from_secs(600),
            zone: "UTC".into(),
        }
    }

    #[test]
    fn spends_up_to_the_day_then_refuses_with_the_reset() {
        let budgets = Budgets::new(100, Clock::fake());
        let day = mk(100, "2026-12-05");
        let charges = |cost| Charges {
            cost,
            budgets: vec![day.clone()],
        };
        assert!(budgets.charge("bot", &charges(60)).is_ok());
        let e = budgets.charge("bot", &charges(50)).unwrap_err();
        assert_eq!(e.code, Code::BudgetExhausted);
        assert_eq!(e.retry_after_ms, Some(600_000));
        assert!(e.message.contains("40 of today's 100"), "{}", e.message);
        assert!(budgets.charge("bot", &charges(40)).is_ok());
        assert!(budgets.charge("other", &charges(100)).is_ok(), "per agent");
        let tomorrow = Charges {
            cost: 100,
            budgets: vec![mk(100, "2026-12-06")],
        };
        assert!(budgets.charge("bot", &tomorrow).is_ok(), "a new day");
    }

    #[test]
    fn all_or_nothing_across_budgets() {
        let budgets = Budgets::new(100, Clock::fake());
        let wide = mk(100, "d");
        let mut narrow = mk(10, "d");
        narrow.budget = "g:AgentPolicy/x:refund".into();
        let both = Charges {
            cost: 20,
            budgets: vec![wide.clone(), narrow],
        };
        assert!(budgets.charge("bot", &both).is_err());
        assert_eq!(budgets.spent("bot", &wide), 0, "refunded");
    }

    #[test]
    fn a_day_is_forgotten_when_it_ends() {
        let clock = Clock::fake();
        let budgets = Budgets::new(100, clock.clone());
        let day = mk(10, "d");
        let charges = Charges {
            cost: 10,
            budgets: vec![day.clone()],
        };
        budgets.charge("bot", &charges).unwrap();
        clock.advance(Duration::from_secs(601));
        assert_eq!(budgets.spent("bot", &day), 0);
    }
}
