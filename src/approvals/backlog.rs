//! The approval backlog as gauges: how many approvals wait for a person
//! (`toolgate_approvals_pending`) and since when the oldest has waited
//! (`toolgate_approvals_oldest_pending_age_seconds`, aged at scrape time).
//!
//! The store is counted every [`REFRESH`] by a task of its own, never by a call or a
//! scrape: a scrape stays instant and never waits on Redis. With `state.backend: redis`
//! the count is the whole Deployment's (every pod reports the same backlog), so alerts
//! take the `max` over pods, not the sum.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use super::service::Approvals;
use crate::telemetry::metrics::Metrics;

/// How often the store is counted.
pub const REFRESH: Duration = Duration::from_secs(10);
/// The most approvals a shared store's count looks at, oldest first.
pub const SCAN_LIMIT: usize = 10_000;

/// Approvals waiting for a decision.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Backlog {
    pub pending: u64,
    /// When the oldest pending approval was requested (ms since the epoch).
    pub oldest_created_ms: Option<u64>,
}

impl Backlog {
    /// Counts one approval that waits, requested at `created_ms`.
    pub fn add(&mut self, created_ms: u64) {
        self.pending += 1;
        self.oldest_created_ms = Some(
            self.oldest_created_ms
                .map_or(created_ms, |o| o.min(created_ms)),
        );
    }
}

/// Keeps the gauges current until the task is aborted (at shutdown). A store that can't
/// be counted (Redis away) keeps the last count: `toolgate_state_up` says why.
pub async fn watch(approvals: Arc<Approvals>, metrics: Arc<Metrics>) {
    loop {
        match approvals.store.backlog().await {
            Ok(backlog) => publish(&metrics, backlog),
            Err(error) => tracing::debug!(%error, "the approval backlog could not be counted"),
        }
        tokio::time::sleep(REFRESH).await;
    }
}

fn publish(metrics: &Metrics, backlog: Backlog) {
    metrics
        .approvals_pending
        .set(i64::try_from(backlog.pending).unwrap_or(i64::MAX));
    metrics
        .approvals_oldest_pending_ms
        .store(backlog.oldest_created_ms.unwrap_or(0), Ordering::Relaxed);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_oldest_is_the_earliest_requested() {
        let mut backlog = Backlog::default();
        for created in [300, 100, 200] {
            backlog.add(created);
        }
        assert_eq!(backlog.pending, 3);
        assert_eq!(backlog.oldest_created_ms, Some(100));
        let metrics = Metrics::new();
        publish(&metrics, backlog);
        assert!(metrics.encode().contains("toolgate_approvals_pending 3"));
    }
}
