//! Jittered exponential backoff for retrying idempotent calls.
//!
//! Delays double from [`BASE`] up to [`CAP`], each drawn uniformly from its upper half
//! ("equal jitter"): never zero, so a backend that just refused isn't hit again at once,
//! and spread out, so sidecars that failed together don't retry in lockstep. The caller
//! decides whether a delay still fits in the call's time budget.

use rand::Rng;
use std::time::Duration;

pub const BASE: Duration = Duration::from_millis(25);
pub const CAP: Duration = Duration::from_millis(800);
/// Attempts in all, the first included.
pub const MAX_ATTEMPTS: u32 = 4;

#[derive(Debug, Default)]
pub struct Backoff {
    retries: u32,
}

impl Backoff {
    /// The delay before the next attempt, or `None` when the attempts are spent.
    pub fn next_delay(&mut self) -> Option<Duration> {
        if self.retries + 1 >= MAX_ATTEMPTS {
            return None;
        }
        let ceiling = BASE.saturating_mul(1 << self.retries.min(16)).min(CAP);
        self.retries += 1;
        let half = ceiling / 2;
        let jitter = rand::rng().random_range(0..=half.as_micros() as u64);
        Some(half + Duration::from_micros(jitter))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn delays_grow_within_bounds_and_stop() {
        let mut backoff = Backoff::default();
        let mut ceiling = BASE;
        let mut delays = 0;
        while let Some(d) = backoff.next_delay() {
            assert!(
                d >= ceiling / 2 && d <= ceiling,
                "{d:?} outside {ceiling:?}"
            );
            ceiling = (ceiling * 2).min(CAP);
            delays += 1;
        }
        assert_eq!(delays, MAX_ATTEMPTS - 1);
    }
}
