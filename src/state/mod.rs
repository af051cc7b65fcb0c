//! Shared state across replicas (`state.backend: redis`; docs/state.md).
//!
//! With the default `memory` backend every limit lives in the sidecar (`limits::Ledger`)
//! and holds per pod. With `redis`, what must hold for the Deployment as a whole moves
//! here: rate limits, session budgets and loop detection, never-twice claims and their
//! results, and MCP session ownership.
//!
//! ```text
//! call ─ admit (one script: rate limits, claim lookup, session, claim) ─┬ refused
//!                                                                       ├ joined ─ follow: poll the claim for its result
//!                                                                       └ admitted ─ send ─ settle (one SET)
//! ```
//!
//! Failure policy, when Redis can't be asked within `timeoutMs` ([`link::Unavailable`]):
//! rate limits, budgets and loop detection fail open (the caller proceeds and records it);
//! a claim fails closed (`STATE_UNAVAILABLE`), since a call run without one might run
//! twice. The local duplicate table still runs in front of Redis, so identical calls on
//! one pod join there and only the first of them asks Redis.

pub mod actions;
pub mod admit;
pub mod history;
pub mod keys;
pub mod link;
pub mod owners;
pub mod record;
pub mod remember;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::config::Redis as Settings;
use crate::limits::budget::Charges;
use crate::limits::dedupe::{Ran, Settled};
use crate::limits::Call;
use crate::telemetry::metrics::Metrics;
use crate::vocab::{Code, Reject};
use admit::{Admission, Claim, Limits};
use keys::Keys;
use link::{Link, Op, Unavailable};
use record::Held;

/// How long a result that must not be kept (the call certainly didn't run, or it was a
/// step of a multi-round call) stays readable for duplicates already waiting on it.
const UNKEPT: Duration = Duration::from_secs(1);
/// How often a duplicate polls the claim of a call running on another pod: from the
/// first to the last interval, doubling.
const FOLLOW_FIRST: Duration = Duration::from_millis(2);
const FOLLOW_LAST: Duration = Duration::from_millis(50);

pub struct Shared {
    link: Arc<Link>,
    keys: Keys,
    /// Names this sidecar's claims, so a late result never overwrites another pod's.
    token: String,
    claims: AtomicU64,
}

impl Shared {
    pub fn start(settings: &Settings, metrics: Arc<Metrics>) -> anyhow::Result<Shared> {
        Ok(Shared {
            link: Link::start(settings, metrics)?,
            keys: Keys::new(&settings.key_prefix),
            token: format!("{:016x}", rand::random::<u64>()),
            claims: AtomicU64::new(0),
        })
    }

    pub fn keys(&self) -> &Keys {
        &self.keys
    }

    pub fn link(&self) -> &Link {
        &self.link
    }

    /// The claim a non-idempotent call would take.
    pub fn claim_for(&self, call: &Call<'_>) -> Claim {
        let key = crate::limits::dedupe::key(call);
        let fingerprint = call.identity();
        let n = self.claims.fetch_add(1, Ordering::Relaxed);
        Claim {
            key: self.keys.claim(call.agent, &key),
            fingerprint,
            running: record::running(&fingerprint, &format!("{}:{n}", self.token)),
        }
    }

    /// Admits a call: its limits and, with `claim`, its never-twice claim, in one round trip.
    pub async fn admit(
        &self,
        call: &Call<'_>,
        limits: &Limits<'_>,
        claim: Option<(&Claim, Duration)>,
    ) -> Result<Admission, Unavailable> {
        let window = claim.map_or(Duration::ZERO, |(_, w)| w);
        let invocation = admit::invocation(&self.keys, call, limits, claim);
        let reply: redis::Value = self
            .link
            .call(Op::Admit, |mut conn| async move {
                invocation.invoke_async(&mut conn).await
            })
            .await?;
        admit::read(reply, call, limits, window).map_err(|e| {
            tracing::error!(error = %e, "unexpected answer from the shared state");
            Unavailable(e)
        })
    }

    /// Calls admitted so far in the agent's session, for rules reading `session.calls`.
    pub async fn session_calls(&self, agent: &str, session: &str) -> Result<u64, Unavailable> {
        let key = self.keys.session(agent, session);
        let calls: Option<String> = self
            .link
            .call(Op::Session, |mut conn| async move {
                redis::cmd("HGET")
                    .arg(&key)
                    .arg("c")
                    .query_async(&mut conn)
                    .await
            })
            .await
            // A session key of another type is not ours: no calls counted.
            .or_else(|e| {
                if e.0.contains("WRONGTYPE") {
                    Ok(None)
                } else {
                    Err(e)
                }
            })?;
        Ok(calls.and_then(|c| c.parse().ok()).unwrap_or(0))
    }

    /// Leaves a claimed call's outcome for its duplicates on every pod, unless the claim
    /// is no longer this call's (it expired and another call took it).
    pub async fn settle(&self, claim: &Claim, settled: &Settled) {
        let value = record::settled(&claim.fingerprint, settled);
        let keep = match settled {
            Settled::Answered(answer) => !answer.interim,
            Settled::Failed { ran, .. } => *ran != Ran::No,
        };
        let key = claim.key.clone();
        let running = claim.running.clone();
        let stored = self
            .link
            .call(Op::Settle, |mut conn| async move {
                SETTLE
                    .key(key)
                    .arg(running)
                    .arg(value)
                    .arg(if keep { 0 } else { UNKEPT.as_millis() as u64 })
                    .invoke_async::<i64>(&mut conn)
                    .await
            })
            .await;
        if let Err(e) = stored {
            tracing::warn!(error = %e, "a claimed call's result was not stored in the shared state; its duplicates on other pods will get BACKEND_TIMEOUT");
        }
    }

    /// Gives back what admission charged `agent`'s spend budgets for a call the backend
    /// never got (DESIGN §16: a budget pays for calls that ran). Best effort: a refund
    /// lost to an unreachable Redis leaves the call charged, the safe side.
    pub async fn refund(&self, agent: &str, charges: &Charges) {
        if charges.cost == 0 {
            return;
        }
        let keys: Vec<String> = charges
            .budgets
            .iter()
            .map(|c| self.keys.budget(agent, &c.budget, &c.day))
            .collect();
        let cost = charges.cost;
        let refunded = self
            .link
            .call(Op::Admit, |mut conn| async move {
                let mut invocation = REFUND.prepare_invoke();
                for key in keys {
                    invocation.key(key);
                }
                invocation.arg(cost).invoke_async::<i64>(&mut conn).await
            })
            .await;
        if let Err(e) = refunded {
            tracing::warn!(error = %e, "a spend budget's charge for a call that never ran was not given back");
        }
    }

    /// Deletes `key` if it still holds `value` (what this pod wrote there).
    async fn release_value(&self, key: String, running: Vec<u8>) {
        let _ = self
            .link
            .call(Op::Settle, |mut conn| async move {
                RELEASE
                    .key(key)
                    .arg(running)
                    .invoke_async::<i64>(&mut conn)
                    .await
            })
            .await;
    }

    /// Waits, up to `wait`, for the outcome of the call holding `claim`'s key, that ran or
    /// runs elsewhere. Its outcome never known, the duplicate gets `BACKEND_TIMEOUT`: it
    /// is never run, since the first may have.
    pub async fn follow(&self, claim: &Claim, held: Held, wait: Duration) -> Settled {
        let deadline = Instant::now() + wait;
        let mut held = held;
        let mut interval = FOLLOW_FIRST;
        loop {
            match held {
                Held::Settled { settled, .. } => return settled,
                Held::Foreign => return unreadable(),
                Held::Running { .. } => {}
            }
            let now = Instant::now();
            if now >= deadline {
                return unknown_outcome(wait);
            }
            tokio::time::sleep(interval.min(deadline - now)).await;
            interval = (interval * 2).min(FOLLOW_LAST);
            let key = claim.key.clone();
            let value: Result<Option<Vec<u8>>, _> = self
                .link
                .call(Op::Follow, |mut conn| async move {
                    redis::cmd("GET").arg(key).query_async(&mut conn).await
                })
                .await;
            held = match value {
                Ok(Some(value)) => record::read(&value),
                // Gone: expired with its window, or given back by a call that never ran.
                Ok(None) => return unknown_outcome(wait),
                // Redis unreachable for a moment: keep waiting until the deadline.
                Err(_) => Held::Running {
                    fingerprint: claim.fingerprint,
                },
            };
        }
    }
}

static SETTLE: std::sync::LazyLock<redis::Script> = std::sync::LazyLock::new(|| {
    redis::Script::new(
        r"
-- The result replaces the claim only if the claim is still this call's.
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
if ARGV[3] == '0' then
  redis.call('SET', KEYS[1], ARGV[2], 'KEEPTTL')
else
  redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3])
end
return 1",
    )
});

/// Takes a refunded cost off each budget key that still exists (a day gone is not
/// brought back), never below zero, keeping its expiry.
static REFUND: std::sync::LazyLock<redis::Script> = std::sync::LazyLock::new(|| {
    redis::Script::new(
        r"
local cost = tonumber(ARGV[1])
for _, key in ipairs(KEYS) do
  local spent = tonumber(redis.pcall('GET', key))
  if spent then
    redis.call('SET', key, string.format('%.0f', math.max(0, spent - cost)), 'KEEPTTL')
  end
end
return 1",
    )
});

static RELEASE: std::sync::LazyLock<redis::Script> = std::sync::LazyLock::new(|| {
    redis::Script::new(
        r"
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0",
    )
});

/// What a non-idempotent call gets when Redis can't take its claim.
pub fn unavailable(error: &Unavailable) -> Reject {
    Reject::new(
        Code::StateUnavailable,
        format!("the shared state can't be reached, and this tool may run only once: nothing was sent; retry shortly ({error})"),
    )
}

/// The outcome of a call whose first run is on another pod and never reported.
fn unknown_outcome(wait: Duration) -> Settled {
    Settled::Failed {
        reject: Reject::new(
            Code::BackendTimeout,
            format!(
                "an identical call is running (or ran) on another replica and reported no result within {} ms; it will not be sent again",
                wait.as_millis()
            ),
        )
        .with_retryable(false)
        .with_recovery(crate::vocab::Recovery::Stop),
        // Not kept here: a later duplicate asks the shared state again.
        ran: Ran::No,
    }
}

fn unreadable() -> Settled {
    Settled::Failed {
        reject: unavailable(&Unavailable(
            "the claim holds a value this version can't read".into(),
        )),
        ran: Ran::No,
    }
}
