//! Fetched keys, kept fresh: one task per issuer fetches its JWKS (from a URL, through
//! OpenID discovery, or from the Kubernetes API server), publishes it, and fetches again
//! when the answer's `Cache-Control: max-age` runs out (clamped to [`MIN_TTL`] …
//! [`MAX_TTL`]), or sooner when a token names a key it doesn't have.
//!
//! Invariants:
//! - **One fetch in flight per issuer.** Only the issuer's task fetches; a call that
//!   needs fresh keys asks it and waits for *its* answer, so many calls with an unknown
//!   `kid` share one fetch.
//! - **Bounded waits.** A call waits at most [`Timing::wait`] for a refresh, however slow
//!   the provider is; the fetch itself is bounded by [`Timing::fetch_timeout`] and, in
//!   bytes, by `fetch::MAX_DOCUMENT_BYTES`. In the common case (a known key) no call
//!   waits or fetches.
//! - **Rate-limited.** An unknown `kid` triggers at most one fetch per
//!   [`Timing::kid_interval`] (30 s), so tokens with made-up `kid`s can't turn the
//!   sidecar into a flood against the provider; past it they are refused at once.
//! - **The last good keys survive.** A failed or unusable answer never replaces keys:
//!   the previous set keeps serving while the provider is away, and the task retries
//!   with backoff ([`Timing::retry_first`] doubling up to [`Timing::retry_max`]).
//! - Every fetch counts in `toolgate_jwks_refresh_total{issuer, result}` (`ok`, `error`).

use arc_swap::ArcSwap;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};
use tokio::sync::{watch, Notify};
use tokio::task::AbortHandle;

use super::fetch::FetchError;
use super::keyset::KeySet;
pub use super::origin::{Fetched, Fetcher, Origin};

/// Keys are refetched no sooner than this after a good answer, whatever it says.
pub const MIN_TTL: Duration = Duration::from_secs(5 * 60);
/// … and no later than this.
pub const MAX_TTL: Duration = Duration::from_secs(24 * 60 * 60);

/// `toolgate_jwks_refresh_total`'s labels: the issuer (as configured, or `kubernetes`)
/// and `ok` or `error`. Bounded: one issuer per settings entry.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RefreshLabels {
    pub issuer: String,
    pub result: &'static str,
}

/// `toolgate_jwks_refresh_total`, registered by the metrics.
pub type Refreshes = Family<RefreshLabels, Counter>;

/// How often and how long: [`TIMING`] in the sidecar; tests shorten it.
#[derive(Debug, Clone, Copy)]
pub struct Timing {
    /// At most one unknown-`kid` refresh per issuer this often.
    pub kid_interval: Duration,
    /// The longest a call waits for a refresh.
    pub wait: Duration,
    /// The longest one fetch (discovery and keys together) may take.
    pub fetch_timeout: Duration,
    /// The wait after a first failed fetch, doubled after each further one …
    pub retry_first: Duration,
    /// … up to this.
    pub retry_max: Duration,
}

pub const TIMING: Timing = Timing {
    kid_interval: Duration::from_secs(30),
    wait: Duration::from_secs(2),
    fetch_timeout: Duration::from_secs(10),
    retry_first: Duration::from_secs(5),
    retry_max: Duration::from_secs(5 * 60),
};

/// The fetch task of one issuer; dropping it stops the task.
pub struct Remote {
    shared: Arc<Shared>,
    task: AbortHandle,
}

struct Shared {
    name: Arc<str>,
    keys: Arc<ArcSwap<KeySet>>,
    flight: Mutex<Flight>,
    /// Wakes the task for an unknown-`kid` refresh.
    kick: Notify,
    /// Fetches finished (good or not): what waiting calls watch.
    done: watch::Sender<u64>,
    timing: Timing,
}

#[derive(Default)]
struct Flight {
    fetching: bool,
    /// When an unknown `kid` last triggered a fetch.
    last_kick: Option<Instant>,
}

impl Remote {
    /// Starts the fetch task of `name`, publishing into `keys`. Must run inside the tokio
    /// runtime.
    pub fn start(
        name: &str,
        keys: Arc<ArcSwap<KeySet>>,
        origin: Origin,
        fetcher: &Fetcher,
    ) -> Result<Remote, String> {
        let runtime = tokio::runtime::Handle::try_current()
            .map_err(|_| "fetched keys need the tokio runtime".to_string())?;
        let shared = Arc::new(Shared {
            name: Arc::from(name),
            keys,
            flight: Mutex::new(Flight {
                // The first fetch starts at once: calls before it wait for it.
                fetching: true,
                last_kick: None,
            }),
            kick: Notify::new(),
            done: watch::channel(0).0,
            timing: fetcher.timing(),
        });
        let counts = Counts::new(fetcher.refreshes(), name);
        let task = runtime
            .spawn(run(shared.clone(), origin, counts))
            .abort_handle();
        Ok(Remote { shared, task })
    }

    /// Waits at most `bound` for the first fetch to finish.
    pub async fn first_fetch(&self, bound: Duration) {
        let mut done = self.shared.done.subscribe();
        let _ = tokio::time::timeout(bound, done.wait_for(|n| *n > 0)).await;
    }

    /// A token named a key these keys lack: joins the fetch in flight, or starts one if
    /// none ran for this reason within [`Timing::kid_interval`], and waits at most
    /// [`Timing::wait`] for it. Whether a fetch finished (the keys may be new).
    pub async fn refresh_for_unknown_key(&self) -> bool {
        let shared = &self.shared;
        let mut done = shared.done.subscribe();
        {
            let mut flight = shared.flight.lock().unwrap_or_else(PoisonError::into_inner);
            if !flight.fetching {
                let recent = flight
                    .last_kick
                    .is_some_and(|at| at.elapsed() < shared.timing.kid_interval);
                if recent {
                    return false;
                }
                flight.last_kick = Some(Instant::now());
                flight.fetching = true;
                shared.kick.notify_one();
            }
        }
        matches!(
            tokio::time::timeout(shared.timing.wait, done.changed()).await,
            Ok(Ok(()))
        )
    }
}

impl Drop for Remote {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// The two series of one issuer, resolved once.
struct Counts {
    ok: Counter,
    error: Counter,
}

impl Counts {
    fn new(family: &Refreshes, issuer: &str) -> Counts {
        let series = |result| {
            family
                .get_or_create(&RefreshLabels {
                    issuer: issuer.to_string(),
                    result,
                })
                .clone()
        };
        Counts {
            ok: series("ok"),
            error: series("error"),
        }
    }
}

/// The issuer's task: fetch, publish, sleep until the keys expire or a call asks.
async fn run(shared: Arc<Shared>, origin: Origin, counts: Counts) {
    let timing = shared.timing;
    let mut failures: u32 = 0;
    loop {
        shared.set_fetching(true);
        let outcome = match tokio::time::timeout(timing.fetch_timeout, origin.fetch()).await {
            Ok(outcome) => outcome,
            Err(_) => Err(FetchError::TimedOut(timing.fetch_timeout)),
        };
        let wait = match outcome {
            Ok(fetched) => {
                counts.ok.inc();
                failures = 0;
                shared.publish(fetched.keys);
                ttl(fetched.max_age)
            }
            Err(error) => {
                counts.error.inc();
                let kept = shared.keys.load().len();
                tracing::warn!(issuer = %shared.name, %error, kept_keys = kept, "keys not refreshed; the last good keys keep serving");
                let wait = backoff(timing, failures);
                failures = failures.saturating_add(1);
                wait
            }
        };
        shared.set_fetching(false);
        shared.done.send_modify(|n| *n += 1);
        tokio::select! {
            _ = tokio::time::sleep(wait) => {}
            _ = shared.kick.notified() => {}
        }
    }
}

impl Shared {
    fn set_fetching(&self, fetching: bool) {
        self.flight
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .fetching = fetching;
    }

    fn publish(&self, keys: KeySet) {
        let before = self.keys.load();
        let (old, new) = (before.kids(), keys.kids());
        if old != new {
            tracing::info!(issuer = %self.name, keys = keys.len(), kids = ?new, "keys fetched");
        }
        drop(before);
        self.keys.store(Arc::new(keys));
    }
}

/// How long good keys are kept: the server's `max-age`, within [`MIN_TTL`] … [`MAX_TTL`]
/// (no `max-age`: the minimum).
pub fn ttl(max_age: Option<Duration>) -> Duration {
    max_age.unwrap_or(MIN_TTL).clamp(MIN_TTL, MAX_TTL)
}

/// The wait after `failures` earlier failures in a row.
fn backoff(timing: Timing, failures: u32) -> Duration {
    timing
        .retry_first
        .saturating_mul(1 << failures.min(16))
        .min(timing.retry_max)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cache_lifetime_is_clamped() {
        let mins = |m: u64| Some(Duration::from_secs(m * 60));
        assert_eq!(ttl(None), MIN_TTL);
        assert_eq!(ttl(Some(Duration::ZERO)), MIN_TTL);
        assert_eq!(ttl(mins(1)), MIN_TTL);
        assert_eq!(ttl(mins(60)), Duration::from_secs(3600));
        assert_eq!(ttl(mins(48 * 60)), MAX_TTL);
    }

    #[test]
    fn failures_back_off_up_to_the_cap() {
        let waits: Vec<u64> = (0..8).map(|n| backoff(TIMING, n).as_secs()).collect();
        assert_eq!(waits, [5, 10, 20, 40, 80, 160, 300, 300]);
        assert_eq!(backoff(TIMING, u32::MAX), TIMING.retry_max);
    }
}
