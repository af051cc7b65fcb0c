//! Spend budgets (DESIGN §16, docs/policies.md "Spend budgets"), compiled: a contract's
//! `cost` and a policy's or grant's `budget`.
//!
//! The time zone is resolved when the snapshot is built (from the tz database bundled
//! into the binary, so a pod without `/usr/share/zoneinfo` resolves it too); an unknown
//! name is an error of the manifest. A call asks only for [`SpendBudget::today`]: which
//! local day it is and how long until the next local midnight, when the day's spend
//! starts over.

use jiff::tz::TimeZone;
use jiff::Timestamp;
use std::time::Duration;

use super::fault::FieldError;
use super::rule::{Bindings, CompiledRule};
use crate::crd::{Budget, Cost, Rule};
use crate::vocab::{Code, Reject};

/// The rule name a refusal of an uncomputable cost carries.
pub const COST_RULE: &str = "cost";

#[derive(Debug)]
pub struct SpendBudget {
    pub per_day: u64,
    /// The zone's IANA name, as the manifest gave it.
    pub zone_name: String,
    zone: TimeZone,
}

/// The local day a call falls in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Day {
    /// `YYYY-MM-DD` in the budget's zone.
    pub date: String,
    /// Until the next local midnight, when the day's spend starts over.
    pub resets_in: Duration,
}

impl SpendBudget {
    /// `at`: the budget's path (`spec.budget`, `spec.tools[2].budget`).
    pub fn compile(at: &str, spec: &Budget) -> Result<SpendBudget, FieldError> {
        let per_day = u64::try_from(spec.per_day)
            .ok()
            .filter(|n| *n > 0)
            .ok_or_else(|| {
                FieldError::spec(
                    format!("{at}.perDay"),
                    format!(
                        "must be a positive whole number (got {}); a tool nobody may spend on \
                         is not granted instead",
                        spec.per_day
                    ),
                )
            })?;
        let zone_name = spec.timezone.clone().unwrap_or_else(|| "UTC".to_string());
        let zone = TimeZone::get(&zone_name).map_err(|_| {
            FieldError::spec(
                format!("{at}.timezone"),
                format!(
                    "unknown time zone {zone_name:?}: use an IANA name such as UTC or \
                     Europe/Berlin"
                ),
            )
        })?;
        Ok(SpendBudget {
            per_day,
            zone_name,
            zone,
        })
    }

    /// The local day of `now`, and how long until it ends.
    pub fn day_of(&self, now: Timestamp) -> Day {
        let local = now.to_zoned(self.zone.clone());
        let date = local.date();
        let next = date
            .tomorrow()
            .and_then(|d| d.to_zoned(self.zone.clone()))
            .map(|z| z.timestamp());
        let resets_in = match next {
            Ok(next) => {
                let ms = next.as_millisecond() - now.as_millisecond();
                Duration::from_millis(u64::try_from(ms).unwrap_or(0).max(1))
            }
            // The end of the representable calendar: nothing resets.
            Err(_) => Duration::from_secs(86_400),
        };
        Day {
            date: date.to_string(),
            resets_in,
        }
    }

    /// The day it is now.
    pub fn today(&self) -> Day {
        self.day_of(Timestamp::now())
    }
}

/// What one call of a contract costs.
#[derive(Debug)]
pub enum CallCost {
    Fixed(u64),
    Expr(Box<CompiledRule>),
}

impl Default for CallCost {
    fn default() -> CallCost {
        CallCost::Fixed(1)
    }
}

impl CallCost {
    pub fn compile(spec: Option<&Cost>) -> Result<CallCost, FieldError> {
        match spec {
            None => Ok(CallCost::default()),
            Some(Cost::Fixed(n)) => u64::try_from(*n).map(CallCost::Fixed).map_err(|_| {
                FieldError::spec("spec.cost", format!("must not be negative (got {n})"))
            }),
            Some(Cost::Expr(source)) => {
                let rule = CompiledRule::compile(&Rule {
                    name: COST_RULE.into(),
                    expr: source.clone(),
                    message: None,
                    recovery: None,
                })
                .map_err(|e| FieldError::rule("spec.cost", e))?;
                let reads = rule.reads;
                if reads.task || reads.session || reads.request {
                    return Err(FieldError::rule(
                        "spec.cost",
                        "cost may read only args and agent",
                    ));
                }
                Ok(CallCost::Expr(Box::new(rule)))
            }
        }
    }

    /// The cost of a call with `args` (validated) by `agent`.
    pub fn of(
        &self,
        args: &serde_json::Value,
        agent: impl FnOnce() -> serde_json::Value,
    ) -> Result<u64, Reject> {
        let rule = match self {
            CallCost::Fixed(n) => return Ok(*n),
            CallCost::Expr(rule) => rule,
        };
        let reads = rule.reads;
        let bindings = Bindings {
            args: reads.args.then_some(std::borrow::Cow::Borrowed(args)),
            args_fields: Some(&rule.args),
            agent: reads.agent.then(|| std::borrow::Cow::Owned(agent())),
            ..Bindings::default()
        };
        let value = bindings.scope(|scope| rule.value_in(scope));
        let cost = match value {
            Ok(cel::Value::Int(n)) => u64::try_from(n).map_err(|_| format!("it is negative ({n})")),
            Ok(cel::Value::UInt(n)) => Ok(n),
            Ok(other) => Err(format!(
                "it evaluated to a {}, not a whole number (use int(...))",
                other.type_of()
            )),
            Err(e) => Err(e),
        };
        cost.map_err(|why| {
            Reject::new(
                Code::PolicyDenied,
                format!(
                    "the tool's cost ({}) can't be computed for these arguments: {why}",
                    rule.source
                ),
            )
            .with_rule(COST_RULE)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn mk(per_day: i64, zone: Option<&str>) -> Result<SpendBudget, FieldError> {
        SpendBudget::compile(
            "spec.budget",
            &Budget {
                per_day,
                timezone: zone.map(str::to_string),
            },
        )
    }

    #[test]
    fn bad_budgets_name_their_field() {
        assert_eq!(mk(-5, None).unwrap_err().field, "spec.budget.perDay");
        assert_eq!(mk(0, None).unwrap_err().field, "spec.budget.perDay");
        let e = mk(10, Some("Mars/Olympus")).unwrap_err();
        assert_eq!(e.field, "spec.budget.timezone");
        assert!(e.message.contains("Mars/Olympus"));
    }

    #[test]
    fn the_day_ends_at_local_midnight() {
        let berlin = mk(10, Some("Europe/Berlin")).unwrap();
        // 2026-12-05 22:30 UTC is 23:30 in Berlin: 30 minutes to go.
        let now: Timestamp = "2026-12-05T22:30:00Z".parse().unwrap();
        let day = berlin.day_of(now);
        assert_eq!(day.date, "2026-12-05");
        assert_eq!(day.resets_in, Duration::from_secs(30 * 60));
        let utc = mk(10, None).unwrap();
        assert_eq!(utc.zone_name, "UTC");
        assert_eq!(utc.day_of(now).resets_in, Duration::from_secs(90 * 60));
        // Past 23:00 UTC it is already tomorrow in Berlin.
        let later: Timestamp = "2026-12-05T23:10:00Z".parse().unwrap();
        assert_eq!(berlin.day_of(later).date, "2026-12-06");
    }

    #[test]
    fn costs_are_whole_numbers() {
        let fixed = CallCost::compile(Some(&Cost::Fixed(3))).unwrap();
        assert_eq!(fixed.of(&json!({}), || json!({})).unwrap(), 3);
        assert!(CallCost::compile(Some(&Cost::Fixed(-1))).is_err());
        let amount = CallCost::compile(Some(&Cost::Expr("args.amount".into()))).unwrap();
        assert_eq!(amount.of(&json!({"amount": 40}), || json!({})).unwrap(), 40);
        let e = amount
            .of(&json!({"amount": 1.5}), || json!({}))
            .unwrap_err();
        assert_eq!(e.rule.as_deref(), Some(COST_RULE));
        assert!(amount.of(&json!({"amount": -2}), || json!({})).is_err());
        assert!(CallCost::compile(Some(&Cost::Expr("args.amount +".into()))).is_err());
        assert!(CallCost::compile(Some(&Cost::Expr("session.calls".into()))).is_err());
    }
}
