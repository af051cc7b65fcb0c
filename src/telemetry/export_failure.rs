//! Failed OTLP exports, made visible to the operator: each failed export request (after
//! its retries) counts in `toolgate_telemetry_export_failures_total{signal}` and is
//! logged at `warn`.
//!
//! Invariants:
//! - The log is rate-limited per signal: the first failure is logged at once, later ones
//!   at most once per [`WARN_EVERY`], each line saying how many failed since the last
//!   one, so a collector that stays away costs a line every 30 s, not one per batch.
//! - The first success after failures is logged at `info`, with the failures not yet
//!   reported, so the log says when telemetry flowed again.
//! - Nothing here blocks an export for long: one uncontended lock per export.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use super::metrics::Metrics;

/// The least time between two warnings of one signal.
pub const WARN_EVERY: Duration = Duration::from_secs(30);

/// The export failures of one signal (`traces`, `metrics`).
#[derive(Debug)]
pub struct ExportFailures {
    signal: &'static str,
    metrics: Arc<Metrics>,
    window: Mutex<Window>,
}

#[derive(Debug, Default)]
struct Window {
    last_warned: Option<Instant>,
    /// Failures, and items they lost, since the last line logged.
    unreported: u64,
    lost: u64,
    /// Whether the last export failed.
    failing: bool,
}

/// What to log after an export, decided by [`Window`].
#[derive(Debug, PartialEq, Eq)]
enum Note {
    Nothing,
    /// `failures` exports failed since the last line, losing `lost` items.
    Failed {
        failures: u64,
        lost: u64,
    },
    /// Exports work again; `failures` failed since the last line.
    Recovered {
        failures: u64,
    },
}

impl Window {
    fn failed(&mut self, now: Instant, lost: u64) -> Note {
        self.failing = true;
        self.unreported += 1;
        self.lost += lost;
        let due = self
            .last_warned
            .is_none_or(|at| now.saturating_duration_since(at) >= WARN_EVERY);
        if !due {
            return Note::Nothing;
        }
        self.last_warned = Some(now);
        let note = Note::Failed {
            failures: self.unreported,
            lost: self.lost,
        };
        (self.unreported, self.lost) = (0, 0);
        note
    }

    fn succeeded(&mut self) -> Note {
        if !std::mem::take(&mut self.failing) {
            return Note::Nothing;
        }
        let failures = std::mem::take(&mut self.unreported);
        self.lost = 0;
        // The next outage is reported at once.
        self.last_warned = None;
        Note::Recovered { failures }
    }
}

impl ExportFailures {
    /// Exposes the signal's counter at 0 from the start, so a rate over it works from
    /// the first failure (a series born at 1 hides that failure from `rate`).
    pub fn new(signal: &'static str, metrics: Arc<Metrics>) -> ExportFailures {
        drop(
            metrics
                .telemetry_export_failures
                .get_or_create(&super::metrics::SignalLabels { signal }),
        );
        ExportFailures {
            signal,
            metrics,
            window: Mutex::default(),
        }
    }

    /// One export request failed for good (after its retries), losing `lost` items
    /// (spans, or metrics).
    pub fn failed(&self, error: &str, lost: u64) {
        self.metrics.export_failed(self.signal);
        let note = self.window().failed(Instant::now(), lost);
        if let Note::Failed { failures, lost } = note {
            // The client's error names the endpoint, userinfo and query included.
            let error = crate::vocab::shown_url::scrub_urls(error);
            tracing::warn!(
                signal = self.signal,
                %error,
                failures,
                lost,
                "OTLP export failed: telemetry is being lost (toolgate_telemetry_export_failures_total); \
                 check telemetry.otlpEndpoint and the collector; next warning in 30 s at the earliest"
            );
        }
    }

    /// One export request got through.
    pub fn succeeded(&self) {
        if let Note::Recovered { failures } = self.window().succeeded() {
            tracing::info!(
                signal = self.signal,
                failures_since_last_warning = failures,
                "OTLP export works again"
            );
        }
    }

    fn window(&self) -> std::sync::MutexGuard<'_, Window> {
        // The window is a few counters: a panic mid-update can't leave it unusable.
        self.window.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_failure_is_told_at_once_then_at_most_every_30_s() {
        let mut window = Window::default();
        let t0 = Instant::now();
        assert_eq!(
            window.failed(t0, 6),
            Note::Failed {
                failures: 1,
                lost: 6
            }
        );
        for s in 1..30 {
            let at = t0 + Duration::from_secs(s);
            assert_eq!(window.failed(at, 1), Note::Nothing, "{s} s");
        }
        assert_eq!(
            window.failed(t0 + Duration::from_secs(30), 2),
            Note::Failed {
                failures: 30,
                lost: 31
            }
        );
        assert_eq!(
            window.failed(t0 + Duration::from_secs(31), 1),
            Note::Nothing
        );
        assert_eq!(window.succeeded(), Note::Recovered { failures: 1 });
        assert_eq!(window.succeeded(), Note::Nothing);
        // A new outage is told at once, however soon.
        assert_eq!(
            window.failed(t0 + Duration::from_secs(32), 1),
            Note::Failed {
                failures: 1,
                lost: 1
            }
        );
    }

    #[test]
    fn every_failure_is_counted_by_signal() {
        let metrics = Arc::new(Metrics::new());
        let traces = ExportFailures::new("traces", metrics.clone());
        let meters = ExportFailures::new("metrics", metrics.clone());
        for _ in 0..3 {
            traces.failed("collector unreachable", 10);
        }
        meters.failed("collector answered 503", 4);
        traces.succeeded();
        let _unused = ExportFailures::new("logs", metrics.clone());
        let text = metrics.encode();
        for line in [
            "toolgate_telemetry_export_failures_total{signal=\"traces\"} 3",
            "toolgate_telemetry_export_failures_total{signal=\"metrics\"} 1",
            "toolgate_telemetry_export_failures_total{signal=\"logs\"} 0",
        ] {
            assert!(text.contains(line), "missing {line} in\n{text}");
        }
    }
}
