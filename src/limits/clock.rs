//! The one clock every limit reads: rate-limiter refills and dedupe windows.
//!
//! It is injectable so tests can move time instead of sleeping: [`Clock::fake`] starts at
//! zero and only moves when [`Clock::advance`] is called; [`Clock::real`] is monotonic time
//! since the sidecar started. Clones share the same time. Timers that bound how long a
//! request waits (backend timeouts, backoff) stay on tokio's clock: they are about the
//! request in hand, not about state kept between requests.

use governor::nanos::Nanos;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

#[derive(Debug, Clone)]
pub struct Clock {
    source: Source,
}

#[derive(Debug, Clone)]
enum Source {
    Real(Instant),
    /// Nanoseconds since the fake clock was made.
    Fake(Arc<AtomicU64>),
}

impl Clock {
    pub fn real() -> Clock {
        Clock {
            source: Source::Real(Instant::now()),
        }
    }

    pub fn fake() -> Clock {
        Clock {
            source: Source::Fake(Arc::new(AtomicU64::new(0))),
        }
    }

    /// Time since the clock was made.
    pub fn now(&self) -> Duration {
        match &self.source {
            Source::Real(origin) => origin.elapsed(),
            Source::Fake(nanos) => Duration::from_nanos(nanos.load(Ordering::Acquire)),
        }
    }

    /// Moves a fake clock forward. A real clock can't be moved: the call is ignored, and
    /// returns `false` so a test that expected a fake clock notices.
    pub fn advance(&self, by: Duration) -> bool {
        match &self.source {
            Source::Real(_) => false,
            Source::Fake(nanos) => {
                let by = u64::try_from(by.as_nanos()).unwrap_or(u64::MAX);
                nanos.fetch_add(by, Ordering::AcqRel);
                true
            }
        }
    }
}

impl governor::clock::Clock for Clock {
    type Instant = Nanos;

    fn now(&self) -> Nanos {
        Nanos::from(Clock::now(self))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fake_clock_moves_only_when_told_and_clones_share_it() {
        let clock = Clock::fake();
        let other = clock.clone();
        assert_eq!(clock.now(), Duration::ZERO);
        assert!(clock.advance(Duration::from_secs(3)));
        assert_eq!(other.now(), Duration::from_secs(3));
    }

    #[test]
    fn real_clock_ignores_advance() {
        let clock = Clock::real();
        assert!(!clock.advance(Duration::from_secs(3600)));
        assert!(clock.now() < Duration::from_secs(3600));
    }
}
