//! A call that finishes even when its client leaves.
//!
//! hyper drops a request's future when the client disconnects. A tool call must not stop
//! half-way there: the backend may be mid-call and the audit record not yet written. A
//! [`Detached`] call runs inline in the connection's task (no task spawned, no wake-up
//! across workers for the common case) and, if dropped before it completes, hands the
//! rest of itself to a new task that runs it to the end and discards the response.
//!
//! Such tasks are counted in [`Stragglers`], so shutdown waits for them (within the
//! drain timeout) before it flushes the audit log: a call the backend ran is recorded
//! even when its agent hung up just before a SIGTERM.

use std::future::Future;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use tokio::sync::Notify;

/// Calls still running after their client left.
#[derive(Clone, Default)]
pub struct Stragglers(Arc<Count>);

#[derive(Default)]
struct Count {
    running: AtomicUsize,
    idle: Notify,
}

/// One running straggler; dropping it counts it out.
struct Straggler(Stragglers);

impl Stragglers {
    fn enter(&self) -> Straggler {
        self.0.running.fetch_add(1, Ordering::SeqCst);
        Straggler(self.clone())
    }

    pub fn running(&self) -> usize {
        self.0.running.load(Ordering::SeqCst)
    }

    /// Waits until no straggler runs. Bound it with a timeout.
    pub async fn wait(&self) {
        loop {
            let idle = self.0.idle.notified();
            if self.running() == 0 {
                return;
            }
            idle.await;
        }
    }
}

impl Drop for Straggler {
    fn drop(&mut self) {
        if self.0 .0.running.fetch_sub(1, Ordering::SeqCst) == 1 {
            self.0 .0.idle.notify_waiters();
        }
    }
}

/// A boxed call: movable while pinned, so it can leave for a task of its own when dropped.
pub type Call<T> = Pin<Box<dyn Future<Output = T> + Send>>;

pub struct Detached<T: Send + 'static, F: FnOnce() -> T + Unpin> {
    call: Option<Call<T>>,
    /// The answer when the call panicked: only a bug gets there.
    on_panic: Option<F>,
    /// Where a call that outlives its client is counted.
    stragglers: Option<Stragglers>,
}

impl<T: Send + 'static, F: FnOnce() -> T + Unpin> Detached<T, F> {
    pub fn new(call: Call<T>, on_panic: F) -> Detached<T, F> {
        Detached {
            call: Some(call),
            on_panic: Some(on_panic),
            stragglers: None,
        }
    }

    /// Counts the call in `stragglers` if it has to finish on its own.
    pub fn counted_in(mut self, stragglers: &Stragglers) -> Detached<T, F> {
        self.stragglers = Some(stragglers.clone());
        self
    }
}

impl<T: Send + 'static, F: FnOnce() -> T + Unpin> Future for Detached<T, F> {
    type Output = T;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<T> {
        // Every field is Unpin (the call is boxed), so the wrapper needs no pin projection.
        let this = self.get_mut();
        let Some(call) = this.call.as_mut() else {
            panic!("Detached polled after it completed");
        };
        match catch_unwind(AssertUnwindSafe(|| call.as_mut().poll(cx))) {
            Ok(Poll::Pending) => Poll::Pending,
            Ok(Poll::Ready(out)) => {
                this.call = None;
                Poll::Ready(out)
            }
            Err(_) => {
                this.call = None;
                tracing::error!("a call panicked; answering with a generic error");
                let answer = this.on_panic.take().expect("on_panic is used once");
                Poll::Ready(answer())
            }
        }
    }
}

impl<T: Send + 'static, F: FnOnce() -> T + Unpin> Drop for Detached<T, F> {
    fn drop(&mut self) {
        let Some(call) = self.call.take() else {
            return;
        };
        // Dropped mid-call: the client is gone, the call is not. Counted before this
        // returns, so a shutdown that waited for the connection sees it.
        let straggler = self.stragglers.as_ref().map(Stragglers::enter);
        match tokio::runtime::Handle::try_current() {
            Ok(runtime) => {
                runtime.spawn(async move {
                    let _ = call.await;
                    drop(straggler);
                });
            }
            Err(_) => tracing::warn!("a call was cut short: no runtime to finish it on"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;
    use std::time::Duration;

    #[tokio::test]
    async fn answers_inline() {
        let call = Detached::new(Box::pin(async { 7 }), || 0);
        assert_eq!(call.await, 7);
    }

    #[tokio::test]
    async fn a_dropped_call_still_runs_to_its_end() {
        let finished = Arc::new(AtomicBool::new(false));
        let done = finished.clone();
        let (started_tx, started_rx) = tokio::sync::oneshot::channel();
        let call = Detached::new(
            Box::pin(async move {
                let _ = started_tx.send(());
                tokio::time::sleep(Duration::from_millis(50)).await;
                done.store(true, Ordering::SeqCst);
                1
            }),
            || 0,
        );
        // The client leaves once the call is under way.
        let client = tokio::spawn(call);
        started_rx.await.unwrap();
        client.abort();
        assert!(client.await.unwrap_err().is_cancelled());
        assert!(!finished.load(Ordering::SeqCst));
        tokio::time::sleep(Duration::from_millis(200)).await;
        assert!(finished.load(Ordering::SeqCst), "the call ran to its end");
    }

    #[tokio::test]
    async fn stragglers_are_counted_until_they_finish() {
        let stragglers = Stragglers::default();
        let (started_tx, started_rx) = tokio::sync::oneshot::channel();
        let call = Detached::new(
            Box::pin(async move {
                let _ = started_tx.send(());
                tokio::time::sleep(Duration::from_millis(50)).await;
                1
            }),
            || 0,
        )
        .counted_in(&stragglers);
        let client = tokio::spawn(call);
        started_rx.await.unwrap();
        client.abort();
        let _ = client.await;
        assert_eq!(stragglers.running(), 1);
        tokio::time::timeout(Duration::from_secs(2), stragglers.wait())
            .await
            .expect("the straggler finished");
        assert_eq!(stragglers.running(), 0);
    }

    #[tokio::test]
    async fn a_panic_becomes_the_fallback_answer() {
        let call = Detached::new(
            Box::pin(async {
                if std::hint::black_box(true) {
                    panic!("bug");
                }
                1
            }),
            || 503,
        );
        assert_eq!(call.await, 503);
    }
}
