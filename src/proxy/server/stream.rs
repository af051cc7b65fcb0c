//! A connection's socket as hyper sees it: bytes pass unchanged, and on the way
//! - inbound bytes feed the framing [`Tracker`] (ambiguous framing, unfinished messages),
//! - writes report to the connection's write [`Progress`] (the write timeout),
//! - when hyper is done with the connection, the socket is handed back ([`Reclaimed`])
//!   instead of closed, so the server can close it lingering when the client may still
//!   be sending.

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::sync::oneshot;

use super::framing::{Tally, Tracker};
use super::stall::Progress;

/// The socket once hyper has dropped it, and whether the client may still be sending.
pub struct Reclaimed<S> {
    pub stream: S,
    /// An HTTP/1 message was under way and the client had not closed its side.
    pub unfinished: bool,
}

/// A stream watched on the way through; see the module doc.
pub struct Watched<S> {
    /// Always `Some` until dropped (taken out only by `Drop`).
    inner: Option<S>,
    tracker: Tracker,
    progress: Arc<Progress>,
    reclaim: Option<oneshot::Sender<Reclaimed<S>>>,
}

impl<S> Watched<S> {
    /// Watches `inner`; the receiver gets it back when hyper drops it.
    pub fn new(
        inner: S,
        tally: Arc<Tally>,
        progress: Arc<Progress>,
    ) -> (Watched<S>, oneshot::Receiver<Reclaimed<S>>) {
        let (reclaim, reclaimed) = oneshot::channel();
        let watched = Watched {
            inner: Some(inner),
            tracker: Tracker::new(tally),
            progress,
            reclaim: Some(reclaim),
        };
        (watched, reclaimed)
    }

    fn inner(&mut self) -> io::Result<Pin<&mut S>>
    where
        S: Unpin,
    {
        self.inner
            .as_mut()
            .map(Pin::new)
            .ok_or_else(|| io::Error::from(io::ErrorKind::NotConnected))
    }

    /// Reports a write's result to the connection's progress.
    fn wrote(&self, polled: Poll<io::Result<usize>>) -> Poll<io::Result<usize>> {
        match &polled {
            Poll::Pending => self.progress.write_blocked(),
            Poll::Ready(Ok(n)) if *n > 0 => self.progress.wrote(),
            Poll::Ready(_) => {}
        }
        polled
    }

    /// Reports a flush's (or shutdown's) result: done means nothing waits in the socket
    /// any more, but it is no progress of its own (on TCP a flush is a no-op).
    fn flushed(&self, polled: Poll<io::Result<()>>) -> Poll<io::Result<()>> {
        match &polled {
            Poll::Pending => self.progress.write_blocked(),
            Poll::Ready(_) => self.progress.flushed(),
        }
        polled
    }
}

impl<S> Drop for Watched<S> {
    fn drop(&mut self) {
        if let (Some(stream), Some(reclaim)) = (self.inner.take(), self.reclaim.take()) {
            let unfinished = self.tracker.unfinished();
            // The server may have gone already (a cut-off connection): then it just closes.
            let _ = reclaim.send(Reclaimed { stream, unfinished });
        }
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for Watched<S> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let before = buf.filled().len();
        let room = buf.remaining() > 0;
        let polled = this.inner()?.poll_read(cx, buf);
        if let Poll::Ready(Ok(())) = polled {
            match &buf.filled()[before..] {
                [] if room => this.tracker.end(),
                bytes => this.tracker.feed(bytes),
            }
        }
        polled
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Watched<S> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let polled = this.inner()?.poll_write(cx, buf);
        this.wrote(polled)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let polled = this.inner()?.poll_write_vectored(cx, bufs);
        this.wrote(polled)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.as_ref().is_some_and(S::is_write_vectored)
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let polled = this.inner()?.poll_flush(cx);
        this.flushed(polled)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let polled = this.inner()?.poll_shutdown(cx);
        this.flushed(polled)
    }
}
