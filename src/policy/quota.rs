//! A `rateLimit` compiled when the snapshot is built: `perSecond` or `perMinute` plus an
//! optional `burst` (defaulting to the rate), as a governor quota.
//!
//! The spec stays alongside because it names the limiter: rate-limit state is keyed by
//! agent, tool and quota, so a policy reload that keeps a quota keeps its limiter, and a
//! changed quota starts from a fresh one.

use std::num::NonZeroU32;
use std::time::Duration;

use super::contract::FieldError;
use crate::crd::RateLimit;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Quota {
    pub spec: RateLimit,
    pub governor: governor::Quota,
}

impl Quota {
    /// Compiles the `rateLimit` at field path `at`.
    pub fn compile(at: &str, rate: &RateLimit) -> Result<Quota, FieldError> {
        let positive = |field: &str, n: u32| {
            NonZeroU32::new(n)
                .ok_or_else(|| FieldError::spec(format!("{at}.{field}"), "must be positive"))
        };
        let base = match (rate.per_second, rate.per_minute) {
            (Some(_), Some(_)) => {
                return Err(FieldError::spec(at, "set perSecond or perMinute, not both"))
            }
            (None, None) => return Err(FieldError::spec(at, "set perSecond or perMinute")),
            (Some(n), None) => governor::Quota::per_second(positive("perSecond", n)?),
            (None, Some(n)) => governor::Quota::per_minute(positive("perMinute", n)?),
        };
        let governor = match rate.burst {
            Some(burst) => base.allow_burst(positive("burst", burst)?),
            None => base,
        };
        Ok(Quota {
            spec: *rate,
            governor,
        })
    }

    /// How long an unused limiter takes to refill completely; after that it holds nothing
    /// a fresh one wouldn't, so it can be forgotten.
    pub fn refill_time(&self) -> Duration {
        self.governor.burst_size_replenished_in()
    }
}

impl std::fmt::Display for Quota {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match (self.spec.per_second, self.spec.per_minute) {
            (Some(n), _) => write!(f, "{n} per second")?,
            (_, Some(n)) => write!(f, "{n} per minute")?,
            _ => {}
        }
        write!(f, ", burst {}", self.governor.burst_size())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rate(per_second: Option<u32>, per_minute: Option<u32>, burst: Option<u32>) -> RateLimit {
        RateLimit {
            per_second,
            per_minute,
            burst,
        }
    }

    #[test]
    fn compiles_rates_and_bursts() {
        let q = Quota::compile("r", &rate(None, Some(60), Some(10))).unwrap();
        assert_eq!(q.governor.burst_size().get(), 10);
        assert_eq!(q.governor.replenish_interval(), Duration::from_secs(1));
        assert_eq!(q.refill_time(), Duration::from_secs(10));
        assert_eq!(q.to_string(), "60 per minute, burst 10");
        let q = Quota::compile("r", &rate(Some(5), None, None)).unwrap();
        assert_eq!(
            q.governor.burst_size().get(),
            5,
            "burst defaults to the rate"
        );
    }

    #[test]
    fn bad_quotas_name_their_field() {
        let err = |r| Quota::compile("spec.rateLimit", &r).unwrap_err();
        assert_eq!(err(rate(Some(1), Some(1), None)).field, "spec.rateLimit");
        assert_eq!(err(rate(None, None, Some(3))).field, "spec.rateLimit");
        assert_eq!(
            err(rate(Some(0), None, None)).field,
            "spec.rateLimit.perSecond"
        );
        assert_eq!(
            err(rate(None, Some(3), Some(0))).field,
            "spec.rateLimit.burst"
        );
    }
}
