//! Write stalls: a connection whose client does not read the answers it asked for.
//!
//! A client that sends requests (pipelined or not, HTTP/1.1 or h2c) and never reads the
//! answers makes the server's writes wait forever: TCP fills the socket buffers, then
//! hyper stops reading the connection and holds it, and its connection slot, with no
//! timeout of its own. Twenty such clients filled a sidecar's `maxConnections: 20` and
//! kept an authenticated call waiting in the backlog.
//!
//! A connection's [`Progress`] sees both places where a write waits for the client:
//! - the socket: a write or flush that returned `Pending` ([`Progress::write_blocked`]),
//!   until one makes progress again ([`Progress::wrote`]);
//! - a response body ([`Delivered`]): it handed hyper a frame and hyper has not come
//!   back for the next one. That is where HTTP/2 waits when the client grants no flow
//!   control window: the socket is idle, the answers are queued, nothing is read.
//!
//! [`watch`] resolves once the connection has waited like that, with no progress at all,
//! for the write timeout; the server then closes it and frees its slot. A body that is
//! waiting for the backend (`Pending` from the body itself) is not a stall: the client
//! is not the one holding it up.
//!
//! Cost: two relaxed atomics per write and per body frame, and one timer tick per
//! quarter timeout per connection.

use bytes::Buf;
use http_body::{Body, Frame, SizeHint};
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering::Relaxed};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::time::{Instant, MissedTickBehavior};

/// What a connection's writes have been doing, shared by its socket and its bodies.
#[derive(Debug, Default)]
pub struct Progress {
    /// Bumped each time a write makes progress or hyper comes back for more of a body.
    moved: AtomicU64,
    /// The last socket write or flush returned `Pending`: it waits for the client.
    blocked: AtomicBool,
    /// Response bodies that handed hyper a frame it has not come back after.
    handed: AtomicUsize,
}

impl Progress {
    /// A socket write took bytes (or a flush finished).
    pub fn wrote(&self) {
        self.moved.fetch_add(1, Relaxed);
        self.blocked.store(false, Relaxed);
    }

    /// Everything written so far has left (a flush finished): nothing waits in the
    /// socket. hyper flushes only once its own writes went through.
    pub fn flushed(&self) {
        self.blocked.store(false, Relaxed);
    }

    /// A socket write or flush has to wait for the client to read.
    pub fn write_blocked(&self) {
        self.blocked.store(true, Relaxed);
    }

    /// Something is waiting for the client.
    fn waiting(&self) -> bool {
        self.blocked.load(Relaxed) || self.handed.load(Relaxed) > 0
    }
}

pin_project_lite::pin_project! {
    /// A response body that tells the connection's [`Progress`] when it waits for hyper
    /// (so, for the client) rather than for its own data.
    pub struct Delivered<B> {
        #[pin]
        inner: B,
        progress: Arc<Progress>,
        handed: bool,
    }

    impl<B> PinnedDrop for Delivered<B> {
        fn drop(this: Pin<&mut Self>) {
            let this = this.project();
            if *this.handed {
                this.progress.handed.fetch_sub(1, Relaxed);
            }
        }
    }
}

impl<B> Delivered<B> {
    pub fn new(inner: B, progress: Arc<Progress>) -> Delivered<B> {
        Delivered {
            inner,
            progress,
            handed: false,
        }
    }
}

impl<B: Body> Body for Delivered<B>
where
    B::Data: Buf,
{
    type Data = B::Data;
    type Error = B::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<B::Data>, B::Error>>> {
        let this = self.project();
        if std::mem::take(this.handed) {
            this.progress.handed.fetch_sub(1, Relaxed);
        }
        this.progress.moved.fetch_add(1, Relaxed);
        let polled = this.inner.poll_frame(cx);
        if let Poll::Ready(Some(Ok(_))) = &polled {
            // Until hyper asks for the next frame (or drops the body, done), this answer
            // waits on the way to the client.
            *this.handed = true;
            this.progress.handed.fetch_add(1, Relaxed);
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

/// Resolves once `progress` has been waiting for the client, without any progress, for
/// `limit`; never otherwise. Checked four times per `limit`, so a stall is cut off
/// between `limit` and `1.25 × limit` after it began.
pub async fn watch(progress: &Progress, limit: Duration) {
    let tick = (limit / 4).max(Duration::from_millis(5));
    let mut ticks = tokio::time::interval(tick);
    ticks.set_missed_tick_behavior(MissedTickBehavior::Delay);
    let mut last = progress.moved.load(Relaxed);
    let mut since: Option<Instant> = None;
    loop {
        let now = ticks.tick().await;
        let moved = progress.moved.load(Relaxed);
        // Stuck: waiting now, and nothing moved since the previous tick.
        let stuck = progress.waiting() && moved == last;
        last = moved;
        if !stuck {
            since = None;
            continue;
        }
        let began = *since.get_or_insert(now);
        if now.duration_since(began) >= limit {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;
    use http_body_util::{BodyExt, Full, StreamBody};
    use std::convert::Infallible;

    #[tokio::test]
    async fn a_blocked_socket_is_cut_off_after_the_limit_and_progress_restarts_the_clock() {
        let limit = Duration::from_millis(200);
        let progress = Arc::new(Progress::default());
        progress.write_blocked();
        let started = Instant::now();
        watch(&progress, limit).await;
        let took = started.elapsed();
        assert!(took >= limit && took <= limit * 2, "{took:?}");

        // A client that reads now and then is never cut off.
        let reader = progress.clone();
        let reads = tokio::spawn(async move {
            for _ in 0..8 {
                tokio::time::sleep(limit / 2).await;
                reader.wrote();
                reader.write_blocked();
            }
        });
        let cut = tokio::time::timeout(limit * 4, watch(&progress, limit));
        assert!(cut.await.is_err(), "a reading client was cut off");
        reads.await.unwrap();
        // Nothing waiting is never a stall.
        progress.flushed();
        let cut = tokio::time::timeout(limit * 3, watch(&progress, limit));
        assert!(cut.await.is_err());
    }

    #[tokio::test]
    async fn a_body_waits_for_hyper_only_between_a_frame_and_the_next_poll() {
        let progress = Arc::new(Progress::default());
        let chunks = futures_util::stream::iter(
            ["a", "b"].map(|c| Ok::<_, Infallible>(Frame::data(Bytes::from(c)))),
        );
        let mut body = std::pin::pin!(Delivered::new(StreamBody::new(chunks), progress.clone()));
        assert!(!progress.waiting());
        body.frame().await.unwrap().unwrap();
        assert!(
            progress.waiting(),
            "a frame handed over and not yet followed"
        );
        body.frame().await.unwrap().unwrap();
        assert!(progress.waiting());
        assert!(body.frame().await.is_none());
        assert!(!progress.waiting(), "the end is no frame to wait on");

        let dropped = Delivered::new(Full::new(Bytes::from("x")), progress.clone());
        let mut dropped = Box::pin(dropped);
        dropped.frame().await.unwrap().unwrap();
        assert!(progress.waiting());
        drop(dropped);
        assert!(!progress.waiting(), "hyper dropping a body ends its wait");
    }
}
