//! Duplicate suppression for `idempotent: false` tools: the table of calls in flight or
//! recently answered, and what a duplicate gets from it.
//!
//! A duplicate is a call with the same agent, tool and `Idempotency-Key`; or, without a
//! key, the same agent, session, tool and canonical arguments — within the contract's
//! `dedupeWindowSeconds` of the first. The first call *leads*: it alone may reach the
//! backend, and its settled outcome lands in its [`Flight`]. Every duplicate *joins* that
//! flight and gets the same outcome, whether it arrives while the call runs or after.
//!
//! Invariants:
//! - One key, one flight at a time: claiming is atomic (one lock per [`Table`] shard), so
//!   of any number of concurrent identical calls exactly one leads.
//! - A flight whose call may have run (answered, or outcome unknown) is kept for the whole
//!   window; only an outcome that proves the call did not run ([`Ran::No`]: connection
//!   refused, backend 503, refused by the session budget) is dropped, so a retry runs.
//! - A lead always settles: dropping a [`Lead`] unsettled settles it as "outcome unknown",
//!   so joiners never wait on a flight nobody will finish.
//! - An `Idempotency-Key` reused for different arguments is refused, never replayed.
//! - Memory is bounded by weight: each flight counts a fixed overhead plus its buffered
//!   result, and the table holds at most `max_bytes`; past that the oldest flight is
//!   dropped (a duplicate of it arriving later would run again — the price of a bound;
//!   size `limits.dedupeMaxBytes` for the non-idempotent traffic of one window). Flights
//!   also expire with their window. The table's shards are sized so a flight holding the
//!   largest result toolgate buffers (`limits.maxResponseBytes`) fits one; when
//!   `dedupeMaxBytes` is smaller than that, such a flight is not kept.

use bytes::Bytes;
use http::{HeaderMap, StatusCode};
use std::sync::{Arc, OnceLock};
use std::time::Duration;
use tokio::sync::Notify;

use super::canonical::{Key, KeyBuilder};
use super::clock::Clock;
use super::table::{Op, Table};
use super::Call;
use crate::vocab::{Code, Reject};

/// What one flight costs besides its result: key, flight, settled outcome, the table's own
/// bookkeeping, and what the allocator keeps around them in a loaded sidecar. Measured
/// there, not in isolation: under the MCP load of `bench/wrk/mcp.lua` (`wrk -t1 -c64`,
/// the full profile as `bench/run.sh` sets it up; every call kept, results of 98 bytes, no
/// headers) peak resident memory was 14.2 MB higher at a 12 MiB table than at 4 MiB, 923
/// bytes per flight of the difference, where 448 had been charged
/// (`examples/limits_memory.rs`, one thread, the system allocator: 362). Charged what
/// they cost, flights keep `limits.dedupeMaxBytes` a bound on memory (docs/bench-history.md, item 16).
pub const FLIGHT_OVERHEAD: usize = 832;
/// The least share of `max_bytes` a table shard is given: room for many flights.
const MIN_SHARD_BYTES: u64 = 64 * 1024;
/// Room for a kept result's headers when sizing shards (weighed as in [`Settled::weight`]).
const HEADERS_ALLOWANCE: u64 = 64 * 1024;
/// What one kept response header costs besides its name and value.
const HEADER_OVERHEAD: usize = 96;

/// A backend answer, buffered so it can be replayed.
#[derive(Debug, Clone)]
pub struct Buffered {
    pub status: StatusCode,
    pub headers: HeaderMap,
    pub body: Bytes,
    /// Not the call's result but a step towards it (MCP `input_required`): delivered to
    /// those waiting, never kept for later duplicates.
    pub interim: bool,
}

/// Whether a settled call ran on the backend.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ran {
    /// Certainly not: a retry may run it.
    No,
    /// Unknown (the connection broke, no answer in time): it must not run again.
    Maybe,
    Yes,
}

/// How a lead's call ended.
#[derive(Debug, Clone)]
pub enum Settled {
    Answered(Buffered),
    Failed { reject: Reject, ran: Ran },
}

impl Settled {
    fn keep(&self) -> bool {
        match self {
            Settled::Failed { ran, .. } => *ran != Ran::No,
            Settled::Answered(answer) => !answer.interim,
        }
    }

    fn weight(&self) -> usize {
        match self {
            Settled::Answered(b) => {
                b.body.len()
                    + b.headers
                        .iter()
                        .map(|(k, v)| k.as_str().len() + v.len() + HEADER_OVERHEAD)
                        .sum::<usize>()
            }
            Settled::Failed { reject, .. } => reject.message.len(),
        }
    }
}

/// One call's journey through the backend, shared by its lead and its duplicates.
pub struct Flight {
    /// Tool and canonical arguments: an `Idempotency-Key` reused for another call is refused.
    fingerprint: Key,
    // A once-cell and a Notify rather than a watch channel: most flights are settled
    // entries waiting out their window, and a watch channel costs several times more.
    outcome: OnceLock<Arc<Settled>>,
    settled: Notify,
}

impl Flight {
    /// Waits up to `wait` for the call to settle; `None` if it is still running.
    pub async fn outcome(&self, wait: Duration) -> Option<Arc<Settled>> {
        let settled = async {
            loop {
                // Registered before the check, so a settle in between can't be missed.
                let mut notified = std::pin::pin!(self.settled.notified());
                notified.as_mut().enable();
                if let Some(outcome) = self.outcome.get() {
                    return outcome.clone();
                }
                notified.await;
            }
        };
        tokio::time::timeout(wait, settled).await.ok()
    }

    pub fn settled(&self) -> Option<Arc<Settled>> {
        self.outcome.get().cloned()
    }

    fn settle(&self, settled: Settled) {
        // Only a lead settles, and only once.
        let _ = self.outcome.set(Arc::new(settled));
        self.settled.notify_waiters();
    }

    fn weight(&self) -> u32 {
        let result = self.settled().map_or(0, |s| s.weight());
        u32::try_from(FLIGHT_OVERHEAD.saturating_add(result)).unwrap_or(u32::MAX)
    }
}

/// What a call gets when it claims its key.
pub enum Turn {
    /// The first of its kind: it runs, and must settle.
    Lead(Lead),
    /// A duplicate: it waits for, or replays, the lead's outcome.
    Join(Arc<Flight>),
}

#[derive(Clone)]
pub struct Dedupe {
    flights: Arc<Table<Arc<Flight>>>,
    clock: Clock,
}

impl Dedupe {
    /// A table of at most `max_bytes`, in shards that each fit a flight holding a result
    /// of `largest_result` bytes: a heavier flight is not kept (its duplicates would run).
    pub fn new(max_bytes: u64, largest_result: u64, clock: Clock) -> Dedupe {
        let largest = largest_result.saturating_add(FLIGHT_OVERHEAD as u64 + HEADERS_ALLOWANCE);
        Dedupe {
            flights: Arc::new(Table::new(max_bytes, largest.max(MIN_SHARD_BYTES))),
            clock,
        }
    }

    /// Leads a new call, or joins the identical one of the last `window`.
    pub fn claim(&self, call: &Call<'_>, window: Duration) -> Result<Turn, Reject> {
        let key = key(call);
        let fingerprint = call.identity();
        let now = self.clock.now();
        let expires_at = now.saturating_add(window);
        let claimed = self.flights.compute(key, now, |current| {
            if let Some(flight) = current {
                let joined = if flight.fingerprint == fingerprint {
                    Ok((flight.clone(), false))
                } else {
                    Err(reused_key(call, window))
                };
                return (Op::Keep, joined);
            }
            let flight = Arc::new(Flight {
                fingerprint,
                outcome: OnceLock::new(),
                settled: Notify::new(),
            });
            // After `expires_at` (on the ledger clock) an identical call is a new call.
            let put = Op::Put {
                value: flight.clone(),
                weight: flight.weight(),
                expires_at,
            };
            (put, Ok((flight, true)))
        });
        // The Lead is made outside the table's lock: dropping one settles it, which takes
        // the lock again.
        Ok(match claimed? {
            (flight, true) => Turn::Lead(Lead {
                dedupe: self.clone(),
                key,
                flight,
                settled: false,
            }),
            (flight, false) => Turn::Join(flight),
        })
    }

    /// Whether an identical call ran or runs within its window: a new one would join it.
    pub fn holds(&self, call: &Call<'_>) -> bool {
        let identity = call.identity();
        self.flights
            .compute(key(call), self.clock.now(), |current| {
                (Op::Keep, current.is_some_and(|f| f.fingerprint == identity))
            })
    }

    /// Flights held now.
    pub fn len(&self) -> u64 {
        self.flights.len() as u64
    }

    pub fn is_empty(&self) -> bool {
        self.flights.is_empty()
    }

    /// Bytes the flights are weighed at.
    pub fn weight(&self) -> u64 {
        self.flights.weight()
    }
}

/// The right to run a call; its outcome is owed to every duplicate.
pub struct Lead {
    dedupe: Dedupe,
    key: Key,
    flight: Arc<Flight>,
    settled: bool,
}

impl Lead {
    pub fn flight(&self) -> Arc<Flight> {
        self.flight.clone()
    }

    pub fn settle(mut self, settled: Settled) {
        self.finish(settled);
    }

    fn finish(&mut self, settled: Settled) {
        self.settled = true;
        let keep = settled.keep();
        self.flight.settle(settled);
        let flight = &self.flight;
        let weight = flight.weight();
        // Only this flight's entry is touched: after its window a new one may hold the key.
        let now = self.dedupe.clock.now();
        self.dedupe.flights.compute(self.key, now, |current| {
            let op = match current {
                Some(f) if Arc::ptr_eq(f, flight) && keep => Op::Reweigh(weight),
                Some(f) if Arc::ptr_eq(f, flight) => Op::Remove,
                _ => Op::Keep,
            };
            (op, ())
        });
    }
}

impl Drop for Lead {
    fn drop(&mut self) {
        if !self.settled {
            self.finish(Settled::Failed {
                reject: Reject::new(
                    Code::BackendUnavailable,
                    "the call was interrupted; it may have run, so it will not be sent again",
                )
                .with_retryable(false)
                .with_recovery(crate::vocab::Recovery::Stop),
                ran: Ran::Maybe,
            });
        }
    }
}

/// What makes two calls one for duplicate suppression (see the module docs).
pub fn key(call: &Call<'_>) -> Key {
    let mut key = KeyBuilder::new("dedupe");
    key.text(call.agent).text(call.tool);
    match (call.action, call.idempotency_key) {
        // One action per agent and session: others are refused by its owner (`actions`).
        (Some(action), _) => key.text("action").optional(call.session).text(action),
        (None, Some(id)) => key.text("idempotency-key").text(id),
        (None, None) => key
            .text("arguments")
            .optional(call.session)
            .bytes(&call.fingerprint()),
    };
    key.finish()
}

/// The refusal of an `Idempotency-Key` reused for a different call.
pub fn reused_key(call: &Call<'_>, window: Duration) -> Reject {
    Reject::new(
        Code::MalformedRequest,
        format!(
            "Idempotency-Key {} was already used for a different call of {} in the last {} s; use a new key for a new call",
            call.idempotency_key.unwrap_or(""),
            call.tool,
            window.as_secs()
        ),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::vocab::args::Args;
    use serde_json::json;

    const WINDOW: Duration = Duration::from_secs(600);

    fn mk_answer(body: &str) -> Settled {
        Settled::Answered(Buffered {
            status: StatusCode::CREATED,
            headers: HeaderMap::new(),
            body: Bytes::from(body.to_string()),
            interim: false,
        })
    }

    fn mk_call<'a>(args: &'a Args, key: Option<&'a str>) -> Call<'a> {
        Call::new("bot", Some("s"), "create_issue", args, key)
    }

    fn lead(turn: Turn) -> Lead {
        match turn {
            Turn::Lead(lead) => lead,
            Turn::Join(_) => panic!("expected to lead"),
        }
    }

    fn join(turn: Turn) -> Arc<Flight> {
        match turn {
            Turn::Join(flight) => flight,
            Turn::Lead(_) => panic!("expected to join"),
        }
    }

    #[tokio::test]
    async fn duplicates_join_the_lead_and_get_its_answer() {
        let dedupe = Dedupe::new(1 << 20, 1 << 16, Clock::fake());
        let args = Args::from(json!({"title": "x"}));
        let first = lead(dedupe.claim(&mk_call(&args, None), WINDOW).unwrap());
        // Unparsed bytes as a REST body under an open schema leaves them: the same call.
        let reordered =
            Args::from_object_body(Bytes::from_static(br#"{ "title" : "x" }"#)).unwrap();
        let second = join(dedupe.claim(&mk_call(&reordered, None), WINDOW).unwrap());
        assert!(
            second.outcome(Duration::from_millis(1)).await.is_none(),
            "still running"
        );
        first.settle(mk_answer("ok"));
        let got = second.outcome(Duration::from_secs(1)).await.unwrap();
        assert!(matches!(&*got, Settled::Answered(b) if b.body == "ok"));
        // After settling, a duplicate replays at once.
        let third = join(dedupe.claim(&mk_call(&args, None), WINDOW).unwrap());
        assert!(third.settled().is_some());
    }

    #[test]
    fn window_is_read_on_the_ledger_clock() {
        let clock = Clock::fake();
        let dedupe = Dedupe::new(1 << 20, 1 << 16, clock.clone());
        let args = Args::from(json!({}));
        lead(dedupe.claim(&mk_call(&args, None), WINDOW).unwrap()).settle(mk_answer("1"));
        clock.advance(WINDOW - Duration::from_secs(1));
        join(dedupe.claim(&mk_call(&args, None), WINDOW).unwrap());
        clock.advance(Duration::from_secs(1));
        lead(dedupe.claim(&mk_call(&args, None), WINDOW).unwrap()).settle(mk_answer("2"));
    }

    #[test]
    fn a_call_that_did_not_run_is_forgotten_one_that_may_have_is_not() {
        let dedupe = Dedupe::new(1 << 20, 1 << 16, Clock::fake());
        let args = Args::from(json!({}));
        let not_run = Settled::Failed {
            reject: Reject::new(Code::BackendUnavailable, "refused"),
            ran: Ran::No,
        };
        lead(dedupe.claim(&mk_call(&args, None), WINDOW).unwrap()).settle(not_run);
        let maybe = lead(dedupe.claim(&mk_call(&args, None), WINDOW).unwrap());
        drop(maybe); // unsettled: outcome unknown
        let flight = join(dedupe.claim(&mk_call(&args, None), WINDOW).unwrap());
        assert!(matches!(
            &*flight.settled().unwrap(),
            Settled::Failed {
                ran: Ran::Maybe,
                ..
            }
        ));
    }

    #[test]
    fn an_interim_answer_is_delivered_but_not_kept() {
        let dedupe = Dedupe::new(1 << 20, 1 << 16, Clock::fake());
        let args = Args::from(json!({}));
        let first = lead(dedupe.claim(&mk_call(&args, None), WINDOW).unwrap());
        let waiting = first.flight();
        first.settle(Settled::Answered(Buffered {
            status: http::StatusCode::OK,
            headers: http::HeaderMap::new(),
            body: Bytes::from_static(b"input_required"),
            interim: true,
        }));
        assert!(waiting.settled().is_some(), "those waiting get it");
        // The next identical call leads: nothing was kept to replay.
        lead(dedupe.claim(&mk_call(&args, None), WINDOW).unwrap());
    }

    #[test]
    fn idempotency_keys_scope_the_call() {
        let dedupe = Dedupe::new(1 << 20, 1 << 16, Clock::fake());
        let (a, b) = (Args::from(json!({"n": 1})), Args::from(json!({"n": 2})));
        lead(dedupe.claim(&mk_call(&a, Some("k1")), WINDOW).unwrap()).settle(mk_answer(""));
        join(dedupe.claim(&mk_call(&a, Some("k1")), WINDOW).unwrap());
        let e = dedupe
            .claim(&mk_call(&b, Some("k1")), WINDOW)
            .err()
            .unwrap();
        assert_eq!(e.code, Code::MalformedRequest);
        lead(dedupe.claim(&mk_call(&a, Some("k2")), WINDOW).unwrap()).settle(mk_answer(""));
        // Without a key, the same arguments in another session are another call.
        let other = Call::new("bot", Some("t"), "create_issue", &a, None);
        lead(dedupe.claim(&other, WINDOW).unwrap()).settle(mk_answer(""));
        let other_agent = Call::new("eve", Some("s"), "create_issue", &a, Some("k1"));
        lead(dedupe.claim(&other_agent, WINDOW).unwrap()).settle(mk_answer(""));
    }

    #[test]
    fn a_result_as_large_as_allowed_is_kept_and_replayed() {
        let dedupe = Dedupe::new(16 << 20, 8 << 20, Clock::fake());
        let args = Args::from(json!({}));
        let big = "x".repeat(8 << 20);
        lead(dedupe.claim(&mk_call(&args, None), WINDOW).unwrap()).settle(mk_answer(&big));
        let flight = join(dedupe.claim(&mk_call(&args, None), WINDOW).unwrap());
        assert!(
            matches!(&*flight.settled().unwrap(), Settled::Answered(b) if b.body.len() == 8 << 20)
        );
    }

    #[test]
    fn weight_bounds_the_table() {
        let dedupe = Dedupe::new(64 * 1024, 1024, Clock::fake());
        let body = "x".repeat(1000);
        for i in 0..1000 {
            let args = Args::from(json!({ "n": i }));
            lead(dedupe.claim(&mk_call(&args, None), WINDOW).unwrap()).settle(mk_answer(&body));
        }
        assert!(dedupe.weight() <= 64 * 1024, "{}", dedupe.weight());
        assert!(dedupe.len() < 1000);
    }
}
