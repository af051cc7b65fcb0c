//! A connection whose task wakes itself while it is being polled is polled again at once,
//! instead of going through the scheduler.
//!
//! When a handler takes an HTTP/1 request body, hyper's body channel wakes the waker its
//! sender registered, and the sender is the connection's own dispatcher: the connection's
//! task wakes itself from inside its own poll on every request that has a body. Tokio
//! treats such a task as one that yielded: it goes to the back of the run queue and an
//! idle worker is woken to come and steal it. At 1,000 requests/s that was a futex wake,
//! a wake-up and a park on the other core and a second, empty poll of the connection per
//! call (docs/bench-history.md, item 17); the bare proxy, whose body is read by the client
//! connection's task, never pays it.
//!
//! [`inline_wakes`] gives the connection a waker of its own. A wake from the thread that
//! is polling the connection, during that poll, only marks it, and the poll runs again
//! before returning; any other wake goes straight to the task. The re-polls are bounded,
//! so a future that yields on purpose (hyper after 16 pipelined requests, Tokio's
//! cooperative budget) still yields to the scheduler.

use std::cell::Cell;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker};

/// Polls in a row, within one poll by the scheduler, before a self-wake is handed to the
/// scheduler after all.
const MAX_POLLS: usize = 3;

thread_local! {
    /// The [`Inline`] (its address) whose connection this thread is polling, or 0.
    static POLLING: Cell<usize> = const { Cell::new(0) };
}

/// The connection's waker: the task's, plus what a self-wake needs.
struct Inline {
    task: Waker,
    /// A wake arrived from inside the current poll.
    woken: AtomicBool,
}

impl Inline {
    fn key(self: &Arc<Self>) -> usize {
        Arc::as_ptr(self) as usize
    }
}

impl Wake for Inline {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        // POLLING can only hold this key on the thread inside this connection's poll, so
        // a wake seen here comes from that poll and the loop below will act on it.
        if POLLING.with(Cell::get) == self.key() {
            self.woken.store(true, Ordering::Relaxed);
        } else {
            self.task.wake_by_ref();
        }
    }
}

/// Restores the thread's POLLING mark however the poll ends, unwinding included.
struct Polling(usize);

impl Polling {
    fn enter(key: usize) -> Polling {
        Polling(POLLING.with(|p| p.replace(key)))
    }
}

impl Drop for Polling {
    fn drop(&mut self) {
        POLLING.with(|p| p.set(self.0));
    }
}

pin_project_lite::pin_project! {
    /// A future (a connection) whose self-wakes are served inline (see the module doc).
    pub struct InlineWakes<F> {
        #[pin]
        future: F,
        own: Option<(Arc<Inline>, Waker)>,
    }
}

/// Wraps a connection's future; spawn the result in its place.
pub fn inline_wakes<F: Future>(future: F) -> InlineWakes<F> {
    InlineWakes { future, own: None }
}

impl<F: Future> Future for InlineWakes<F> {
    type Output = F::Output;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        let mut this = self.project();
        // A task's waker doesn't change between polls; should it, wakes registered with
        // the old one still reach the old waker, which is what they were registered for.
        let (inline, waker) = match this.own {
            Some((inline, waker)) if inline.task.will_wake(cx.waker()) => (&*inline, &*waker),
            _ => {
                let inline = Arc::new(Inline {
                    task: cx.waker().clone(),
                    woken: AtomicBool::new(false),
                });
                let waker = Waker::from(inline.clone());
                let (inline, waker) = this.own.insert((inline, waker));
                (&*inline, &*waker)
            }
        };
        let mut inner = Context::from_waker(waker);
        let _polling = Polling::enter(inline.key());
        for _ in 0..MAX_POLLS {
            inline.woken.store(false, Ordering::Relaxed);
            match this.future.as_mut().poll(&mut inner) {
                Poll::Ready(output) => return Poll::Ready(output),
                Poll::Pending if inline.woken.load(Ordering::Relaxed) => continue,
                Poll::Pending => return Poll::Pending,
            }
        }
        // Still waking itself: a deliberate yield, which the scheduler should see.
        cx.waker().wake_by_ref();
        Poll::Pending
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::future::poll_fn;
    use std::pin::pin;
    use std::sync::atomic::AtomicUsize;

    /// Counts the wakes that reach the task.
    #[derive(Default)]
    struct Count(AtomicUsize);

    impl Wake for Count {
        fn wake(self: Arc<Self>) {
            self.wake_by_ref();
        }
        fn wake_by_ref(self: &Arc<Self>) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    fn poll_once<F: Future>(future: Pin<&mut F>, task: &Arc<Count>) -> Poll<F::Output> {
        let waker = Waker::from(task.clone());
        future.poll(&mut Context::from_waker(&waker))
    }

    #[test]
    fn a_self_wake_is_a_poll_again_not_a_task_wake() {
        let polls = Cell::new(0);
        let future = inline_wakes(poll_fn(|cx| {
            polls.set(polls.get() + 1);
            if polls.get() == 1 {
                cx.waker().wake_by_ref();
                return Poll::Pending;
            }
            Poll::Ready("done")
        }));
        let task = Arc::new(Count::default());
        assert_eq!(poll_once(pin!(future), &task), Poll::Ready("done"));
        assert_eq!(polls.get(), 2);
        assert_eq!(task.0.load(Ordering::SeqCst), 0);
    }

    #[test]
    fn a_future_that_keeps_yielding_still_yields_to_the_scheduler() {
        let polls = Cell::new(0);
        let mut future = pin!(inline_wakes(poll_fn(|cx| {
            polls.set(polls.get() + 1);
            cx.waker().wake_by_ref();
            Poll::<()>::Pending
        })));
        let task = Arc::new(Count::default());
        assert_eq!(poll_once(future.as_mut(), &task), Poll::Pending);
        assert_eq!(polls.get(), MAX_POLLS);
        assert_eq!(task.0.load(Ordering::SeqCst), 1);
    }

    #[test]
    fn wakes_from_outside_the_poll_reach_the_task() {
        let kept: Cell<Option<Waker>> = Cell::new(None);
        let mut future = pin!(inline_wakes(poll_fn(|cx| {
            kept.set(Some(cx.waker().clone()));
            Poll::<()>::Pending
        })));
        let task = Arc::new(Count::default());
        assert_eq!(poll_once(future.as_mut(), &task), Poll::Pending);
        assert_eq!(task.0.load(Ordering::SeqCst), 0);
        let waker = kept.take().expect("the future kept its waker");
        // After the poll, on this thread, and from another thread.
        waker.wake_by_ref();
        assert_eq!(task.0.load(Ordering::SeqCst), 1);
        std::thread::spawn(move || waker.wake()).join().unwrap();
        assert_eq!(task.0.load(Ordering::SeqCst), 2);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_connection_on_a_runtime_runs_to_the_end() {
        let (tx, mut rx) = tokio::sync::mpsc::channel::<u32>(1);
        let sum = tokio::spawn(inline_wakes(async move {
            let mut sum = 0;
            while let Some(n) = rx.recv().await {
                sum += n;
                tokio::task::yield_now().await;
            }
            sum
        }));
        // A wake lost by the wrapper would leave the connection parked: fail, don't hang.
        let feed = async {
            for n in 1..=100 {
                tx.send(n).await.unwrap();
            }
            drop(tx);
            sum.await.unwrap()
        };
        let sum = tokio::time::timeout(std::time::Duration::from_secs(10), feed).await;
        assert_eq!(sum.expect("every wake reached the connection"), 5050);
    }
}
