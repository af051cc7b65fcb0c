//! The seam between the one call sequence (`proxy::call::run`) and the sockets: how a
//! permitted call reaches its backend, and how an at-most-once answer is kept.
//!
//! The sidecar's backend is [`Upstream`], the pooled HTTP/1.1 client. A caller that
//! decides without sockets (`tests/golden.rs`) passes its own, so it runs the same
//! sequence the sidecar runs. The seam is a generic, not a trait object: `call::run`
//! and `proxy::forward` are compiled for `Upstream`, and the sidecar's path is what it
//! would be without the seam (no boxing, no dynamic call).

use http::Response;
use hyper::body::Incoming;
use serde_json::Value;
use std::future::Future;
use std::time::Duration;

use super::exchange::{send_buffered, send_retrying, Exchange, Received, MAX_BUFFERED_BYTES};
use super::relay::Tap;
use super::upstream::Upstream;
use super::Failure;

/// How an at-most-once answer is read and kept for the call's duplicates.
pub enum Keep {
    /// The body whole, at most [`MAX_BUFFERED_BYTES`] (a REST call).
    Body,
    /// The JSON-RPC response to `id`, an event stream collected to it, with the rest of
    /// such a stream relayed to `tap` while the call runs (an MCP `tools/call`).
    Answer { id: Value, tap: Option<Tap> },
}

/// Where a permitted call is sent.
pub trait Backend: Sync {
    /// The body of a response handed back live (hyper's `Incoming` for the sidecar).
    type Body: Send + 'static;

    /// Where calls go, for the client span (`server.address`, `url.full`).
    fn upstream(&self) -> &Upstream;

    /// Sends an idempotent call within `timeout`, retried where `retry` allows (a failed
    /// connect, a 503); the response comes back live.
    fn send(
        &self,
        exchange: Exchange,
        timeout: Duration,
        retry: bool,
    ) -> impl Future<Output = Result<Response<Self::Body>, Failure>> + Send;

    /// Sends an at-most-once call once and reads its answer as `keep` says, within
    /// `window` and `max` bytes. It runs detached from the request that leads it.
    fn buffer(
        &self,
        exchange: Exchange,
        keep: Keep,
        window: Duration,
        max: usize,
    ) -> impl Future<Output = Received> + Send + 'static;
}

impl Backend for Upstream {
    type Body = Incoming;

    fn upstream(&self) -> &Upstream {
        self
    }

    async fn send(
        &self,
        exchange: Exchange,
        timeout: Duration,
        retry: bool,
    ) -> Result<Response<Incoming>, Failure> {
        match retry {
            true => send_retrying(self, &exchange, timeout).await,
            false => exchange.send_once(self, timeout).await,
        }
    }

    fn buffer(
        &self,
        exchange: Exchange,
        keep: Keep,
        window: Duration,
        max: usize,
    ) -> impl Future<Output = Received> + Send + 'static {
        let upstream = self.clone();
        async move {
            match keep {
                Keep::Body => {
                    send_buffered(upstream, exchange, window, max.min(MAX_BUFFERED_BYTES)).await
                }
                Keep::Answer { id, tap } => {
                    super::collect::send_collected(upstream, exchange, id, window, max, tap).await
                }
            }
        }
    }
}
