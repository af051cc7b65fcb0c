//! At most once: how a call of an `idempotent: false` tool reaches the backend.
//!
//! ```text
//! claim ─ Join ─▶ wait for the lead's outcome (own timeout) ─▶ replayed
//!       └ Lead ─▶ admit (session) ─▶ spawn send ─▶ settle ─▶ wait (own timeout)
//! ```
//!
//! Invariants:
//! - Only a lead sends, and it sends once: `send` runs in its own task whose result lands
//!   in the flight. The lead's gateway timeout only stops the lead *waiting*; it never
//!   cancels the backend call that duplicates are waiting on. `send` must bound itself
//!   (the REST path gives it the dedupe window).
//! - A duplicate never sends. It waits within its own timeout; when the outcome is still
//!   unknown it gets `BACKEND_TIMEOUT` with `retryable: false`.
//! - Only a lead is admitted to the session: a duplicate is the same call, so it costs no
//!   budget and is no repeat. A lead the session refuses settles with that refusal, which
//!   its duplicates share.
//!
//! Path-agnostic: REST passes a future that forwards over HTTP; MCP can pass one that
//! forwards a JSON-RPC `tools/call`. The caller turns the [`Settled`] into its response.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use super::dedupe::{Dedupe, Flight, Lead, Ran, Settled, Turn};
use super::Call;
use crate::vocab::{Code, Recovery, Reject};

/// A call's outcome as handed to one requester.
#[derive(Debug)]
pub struct Delivered {
    pub settled: Arc<Settled>,
    /// A duplicate's copy of the first call's outcome (`X-Toolgate-Replayed: true`).
    pub replayed: bool,
}

/// Runs `call` unless an identical one ran within `window`; waits at most `wait`.
pub async fn run<S>(
    dedupe: &Dedupe,
    call: &Call<'_>,
    window: Duration,
    wait: Duration,
    admit: impl FnOnce() -> Result<(), Reject>,
    send: S,
) -> Result<Delivered, Reject>
where
    S: Future<Output = Settled> + Send + 'static,
{
    let admit = || std::future::ready(admit().map(|()| Clearance::Send));
    start(dedupe, call, window, admit, move || send)
        .await?
        .wait(wait)
        .await
}

/// A call claimed and, if it leads, sent: what is left is waiting for its outcome.
pub enum Started {
    /// This call leads: it was admitted and its send runs detached.
    Led(Arc<Flight>),
    /// An identical call is running or ran: this one waits for, or replays, its outcome.
    Joined(Arc<Flight>),
}

/// What a lead's admission decided.
pub enum Clearance {
    /// Send it: this is the one run.
    Send,
    /// An identical call holds the shared claim (it runs on another replica): this
    /// future follows it to its outcome, which this pod's duplicates then share.
    Follow(Pin<Box<dyn Future<Output = Settled> + Send>>),
}

/// The first half of [`run`]: claims the call and, when it leads, admits it and spawns
/// the send `send` makes, without waiting. `send` is called only for a lead that was
/// admitted, so nothing about sending (a client span, the request) exists for a
/// duplicate or a refusal. A lead that streams its progress live (MCP) delivers while
/// the send runs, then waits for the outcome itself.
pub async fn start<A, S>(
    dedupe: &Dedupe,
    call: &Call<'_>,
    window: Duration,
    admit: impl FnOnce() -> A,
    send: impl FnOnce() -> S,
) -> Result<Started, Reject>
where
    A: Future<Output = Result<Clearance, Reject>>,
    S: Future<Output = Settled> + Send + 'static,
{
    let lead = match dedupe.claim(call, window)? {
        Turn::Join(flight) => return Ok(Started::Joined(flight)),
        Turn::Lead(lead) => lead,
    };
    // Admission may wait (on the shared state); a request dropped meanwhile never sent.
    let mut unsent = Unsent(Some(lead));
    let clearance = admit().await;
    let Some(lead) = unsent.0.take() else {
        return Err(Reject::new(Code::NotReady, "the call's claim was lost"));
    };
    let flight = lead.flight();
    match clearance {
        Err(reject) => {
            lead.settle(Settled::Failed {
                reject: reject.clone(),
                ran: Ran::No,
            });
            Err(reject)
        }
        Ok(Clearance::Send) => {
            let send = send();
            tokio::spawn(async move {
                let settled = send.await;
                lead.settle(settled);
            });
            Ok(Started::Led(flight))
        }
        Ok(Clearance::Follow(follow)) => {
            tokio::spawn(async move {
                let settled = follow.await;
                lead.settle(settled);
            });
            Ok(Started::Joined(flight))
        }
    }
}

/// A lead not yet sent: dropped (its request gone mid-admission), it certainly never
/// ran, so it is forgotten rather than kept as "outcome unknown".
struct Unsent(Option<Lead>);

impl Drop for Unsent {
    fn drop(&mut self) {
        if let Some(lead) = self.0.take() {
            lead.settle(Settled::Failed {
                reject: Reject::new(
                    Code::BackendUnavailable,
                    "the request ended before the call was sent",
                ),
                ran: Ran::No,
            });
        }
    }
}

impl Started {
    /// Waits at most `wait` for the call's outcome.
    pub async fn wait(self, wait: Duration) -> Result<Delivered, Reject> {
        let (flight, replayed, why) = match self {
            Started::Led(flight) => (
                flight,
                false,
                "the call may still complete; it will not be sent again",
            ),
            Started::Joined(flight) => (
                flight,
                true,
                "an identical call is still running and will not be sent again",
            ),
        };
        let settled = flight
            .outcome(wait)
            .await
            .ok_or_else(|| unknown_outcome(wait, why))?;
        Ok(Delivered { settled, replayed })
    }
}

pub fn unknown_outcome(wait: Duration, why: &str) -> Reject {
    Reject::new(
        Code::BackendTimeout,
        format!(
            "the backend did not answer within {} ms; {why}",
            wait.as_millis()
        ),
    )
    .with_retryable(false)
    .with_recovery(Recovery::Stop)
}

#[cfg(test)]
mod tests {
    use super::super::clock::Clock;
    use super::super::dedupe::Buffered;
    use super::*;
    use crate::vocab::args::Args;
    use serde_json::json;
    use std::sync::atomic::{AtomicUsize, Ordering};

    const WINDOW: Duration = Duration::from_secs(600);

    fn mk_answer() -> Settled {
        Settled::Answered(Buffered {
            status: http::StatusCode::OK,
            headers: http::HeaderMap::new(),
            body: bytes::Bytes::from_static(b"{}"),
            interim: false,
        })
    }

    async fn never() -> Settled {
        panic!("this call must never be sent")
    }

    /// A duplicate of `call`: it waits `wait` for the first call's outcome, never sends.
    async fn duplicate(
        dedupe: &Dedupe,
        call: &Call<'_>,
        wait: Duration,
    ) -> Result<Delivered, Reject> {
        run(dedupe, call, WINDOW, wait, || Ok(()), never()).await
    }

    #[tokio::test]
    async fn concurrent_duplicates_send_once() {
        let dedupe = Dedupe::new(1 << 20, 1 << 16, Clock::fake());
        let sent = Arc::new(AtomicUsize::new(0));
        let args = Args::from(json!({"a": 1}));
        let mut tasks = Vec::new();
        for _ in 0..20 {
            let (dedupe, sent, args) = (dedupe.clone(), sent.clone(), args.clone());
            tasks.push(tokio::spawn(async move {
                let call = Call::new("bot", Some("s"), "t", &args, None);
                let send = async move {
                    sent.fetch_add(1, Ordering::SeqCst);
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    mk_answer()
                };
                run(
                    &dedupe,
                    &call,
                    WINDOW,
                    Duration::from_secs(5),
                    || Ok(()),
                    send,
                )
                .await
                .unwrap()
                .replayed
            }));
        }
        let mut replayed = 0;
        for t in tasks {
            replayed += usize::from(t.await.unwrap());
        }
        assert_eq!(sent.load(Ordering::SeqCst), 1);
        assert_eq!(replayed, 19);
    }

    #[tokio::test]
    async fn lead_timeout_does_not_cancel_the_send() {
        let dedupe = Dedupe::new(1 << 20, 1 << 16, Clock::fake());
        let args = Args::from(json!({}));
        let call = Call::new("bot", None, "t", &args, None);
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        let send = async move {
            let _ = rx.await;
            mk_answer()
        };
        let e = run(
            &dedupe,
            &call,
            WINDOW,
            Duration::from_millis(10),
            || Ok(()),
            send,
        )
        .await
        .unwrap_err();
        assert_eq!((e.code, e.retryable()), (Code::BackendTimeout, false));
        // A duplicate must not send; it times out too while the first still runs...
        let e = duplicate(&dedupe, &call, Duration::from_millis(10))
            .await
            .unwrap_err();
        assert_eq!(e.code, Code::BackendTimeout);
        // ...and gets the answer once the first call completes.
        tx.send(()).unwrap();
        let got = duplicate(&dedupe, &call, Duration::from_secs(5))
            .await
            .unwrap();
        assert!(got.replayed);
        assert!(matches!(&*got.settled, Settled::Answered(_)));
    }

    #[tokio::test]
    async fn a_lead_dropped_mid_send_still_answers_its_duplicates() {
        let dedupe = Dedupe::new(1 << 20, 1 << 16, Clock::fake());
        let args = Args::from(json!({}));
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        let (started_tx, started_rx) = tokio::sync::oneshot::channel::<()>();
        let lead = {
            let dedupe = dedupe.clone();
            let args = args.clone();
            tokio::spawn(async move {
                let call = Call::new("bot", None, "t", &args, None);
                let send = async move {
                    let _ = started_tx.send(());
                    let _ = rx.await;
                    mk_answer()
                };
                run(&dedupe, &call, WINDOW, WINDOW, || Ok(()), send).await
            })
        };
        // The first request goes away (its client hung up) while its send runs.
        started_rx.await.unwrap();
        lead.abort();
        assert!(lead.await.unwrap_err().is_cancelled());
        tx.send(()).unwrap();
        let call = Call::new("bot", None, "t", &args, None);
        let got = duplicate(&dedupe, &call, Duration::from_secs(5))
            .await
            .unwrap();
        assert!(got.replayed, "the send was not cut short with its request");
        assert!(matches!(&*got.settled, Settled::Answered(_)));
    }

    #[tokio::test]
    async fn a_refused_lead_is_not_sent_and_is_forgotten() {
        let dedupe = Dedupe::new(1 << 20, 1 << 16, Clock::fake());
        let args = Args::from(json!({}));
        let call = Call::new("bot", Some("s"), "t", &args, None);
        let refuse = || Err(Reject::new(Code::BudgetExhausted, "spent"));
        let e = run(
            &dedupe,
            &call,
            WINDOW,
            Duration::from_secs(1),
            refuse,
            never(),
        )
        .await
        .unwrap_err();
        assert_eq!(e.code, Code::BudgetExhausted);
        let got = run(
            &dedupe,
            &call,
            WINDOW,
            Duration::from_secs(1),
            || Ok(()),
            async { mk_answer() },
        )
        .await
        .unwrap();
        assert!(
            !got.replayed,
            "the refused call did not run, so this one leads"
        );
    }
}
