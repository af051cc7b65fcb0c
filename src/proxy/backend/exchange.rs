//! One backend exchange as owned data, and the two ways a call runs it:
//!
//! - [`send_retrying`] for idempotent tools: the response streams back; a failed connect,
//!   a broken connection or a 503 is retried with jittered backoff ([`Backoff`]) as long
//!   as the next attempt can still start inside the tool's `timeoutMs`. Running such a
//!   call twice is harmless by contract, so a retry costs nothing but time.
//! - [`send_buffered`] for non-idempotent tools: sent exactly once, never retried, and
//!   the response read whole (at most [`MAX_BUFFERED_BYTES`]) so duplicates can replay
//!   it. The result says whether the call ran, which decides if a retry may run it.
//!
//! Both speak plain HTTP to the backend, so the MCP path can use them as REST does.
//!
//! The one call sequence (`proxy::call::run`) sends through [`Backend`], which
//! [`Upstream`] implements with the two above; a caller that decides without sockets
//! (`tests/golden.rs`) passes its own. It is a generic, not a trait object: `call::run`
//! and `proxy::forward` are compiled for `Upstream`, so the sidecar's path is what it
//! would be without the seam (no boxing, no dynamic call). [`Keep`] says how an
//! at-most-once answer is kept: the body whole (REST), or the JSON-RPC answer to the
//! call (MCP, `backend::collect`).

use bytes::Bytes;
use http::{HeaderMap, Method, Response, StatusCode};
use hyper::body::Incoming;
use serde_json::Value;
use std::future::Future;
use std::time::{Duration, Instant};

use super::failure::{status_settled, Asked, Failure};
use super::relay::Tap;
use super::upstream::Upstream;
use crate::limits::backoff::Backoff;
use crate::limits::dedupe::{Buffered, Settled};
use crate::proxy::body::read_limited;
use crate::proxy::headers::{strip_hop_by_hop, strip_toolgate};

/// Largest non-idempotent result kept for replay; such results are small JSON, and every
/// byte kept counts against `limits.dedupeMaxBytes` for the whole dedupe window.
pub const MAX_BUFFERED_BYTES: usize = 1 << 20;

#[derive(Debug, Clone)]
pub struct Exchange {
    pub method: Method,
    pub path_and_query: String,
    pub headers: HeaderMap,
    pub body: Bytes,
}

impl Exchange {
    /// Sends the exchange once, handing its parts to the client without copying them.
    pub async fn send_once(
        self,
        upstream: &Upstream,
        timeout: Duration,
    ) -> Result<Response<Incoming>, Failure> {
        upstream
            .send(
                self.method,
                &self.path_and_query,
                self.headers,
                self.body,
                timeout,
            )
            .await
    }

    async fn send(
        &self,
        upstream: &Upstream,
        timeout: Duration,
    ) -> Result<Response<Incoming>, Failure> {
        upstream
            .send(
                self.method.clone(),
                &self.path_and_query,
                self.headers.clone(),
                self.body.clone(),
                timeout,
            )
            .await
    }
}

/// Sends an idempotent call, retrying what is safe to retry within `budget`.
///
/// A retry starts only if, after its backoff, there is still as much time left as the
/// last attempt took: one that would likely be cut off is not worth the backend's load.
/// When a retry is cut off anyway, the answer is "unavailable" (what the backend last
/// said), not a timeout of the one attempt. The failure says a call may have run if any
/// attempt may have: one that broke before its answer, then a refused connect, is not
/// "unreachable" (which would say nothing ran, and give back its spend).
pub async fn send_retrying(
    upstream: &Upstream,
    exchange: &Exchange,
    budget: Duration,
) -> Result<Response<Incoming>, Failure> {
    let deadline = Instant::now() + budget;
    let mut backoff = Backoff::default();
    let mut retried = false;
    let mut maybe_ran = false;
    loop {
        let started = Instant::now();
        let result = exchange
            .send(upstream, deadline.saturating_duration_since(started))
            .await;
        let retryable = match &result {
            Ok(response) => response.status() == StatusCode::SERVICE_UNAVAILABLE,
            Err(failure) => matches!(failure, Failure::Unreachable | Failure::NoHead),
        };
        maybe_ran |= matches!(result, Err(Failure::NoHead));
        let unavailable = match maybe_ran {
            true => Failure::NoHead,
            false => Failure::Unreachable,
        };
        if !retryable {
            return match result {
                Err(Failure::NoHeadInTime) if retried => Err(unavailable),
                other => other,
            };
        }
        let took = started.elapsed();
        let Some(delay) = backoff
            .next_delay()
            .filter(|d| *d + took < deadline.saturating_duration_since(Instant::now()))
        else {
            return match result {
                Err(Failure::Unreachable) => Err(unavailable),
                other => other,
            };
        };
        tracing::debug!(
            delay_ms = delay.as_millis() as u64,
            "retrying an idempotent call"
        );
        drop(result);
        retried = true;
        tokio::time::sleep(delay).await;
    }
}

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

/// What a buffered send came to: the outcome its duplicates share, and the HTTP status
/// the backend answered with, if it answered at all (a 503 settles as a failure, yet was
/// an answer: the client span and metric name its status).
pub struct Received {
    pub settled: Settled,
    pub status: Option<u16>,
}

impl Received {
    /// A send that got no answer: what it means follows from how it failed alone.
    pub fn unanswered(failure: Failure, deadline: Duration) -> Received {
        Received {
            settled: failure.settled(Asked::call(false, deadline)),
            status: None,
        }
    }
}

/// Sends a non-idempotent call once and buffers its answer. `deadline` bounds the whole
/// exchange; it runs detached from the request, so give it the dedupe window, not the
/// tool's timeout.
pub async fn send_buffered(
    upstream: Upstream,
    exchange: Exchange,
    deadline: Duration,
    max_bytes: usize,
) -> Received {
    let started = Instant::now();
    let response = match exchange.send(&upstream, deadline).await {
        Ok(response) => response,
        Err(failure) => return Received::unanswered(failure, deadline),
    };
    let status = response.status();
    Received {
        settled: settle(response, started, deadline, max_bytes).await,
        status: Some(status.as_u16()),
    }
}

/// The outcome of an answer the backend began: kept whole, or why not.
async fn settle(
    response: Response<Incoming>,
    started: Instant,
    deadline: Duration,
    max_bytes: usize,
) -> Settled {
    let status = response.status();
    if status == StatusCode::SERVICE_UNAVAILABLE {
        // The backend refused the call before running it: a retry may run it.
        return status_settled(status);
    }
    let (mut parts, incoming) = response.into_parts();
    strip_hop_by_hop(&mut parts.headers);
    strip_toolgate(&mut parts.headers);
    parts.headers.remove(http::header::CONTENT_LENGTH);
    let headers = compact(&parts.headers);
    if !status.is_success() {
        // An error body never reaches the agent, so it isn't kept either.
        return Settled::Answered(Buffered {
            status,
            headers,
            body: Bytes::new(),
            interim: false,
        });
    }
    let remaining = deadline
        .saturating_sub(started.elapsed())
        .max(Duration::from_millis(1));
    match read_limited(incoming, max_bytes, remaining).await {
        Ok(body) => Settled::Answered(Buffered {
            status,
            headers,
            // A copy: the received bytes may be a slice of the connection's whole read
            // buffer, which would stay allocated for the dedupe window.
            body: Bytes::copy_from_slice(&body),
            interim: false,
        }),
        Err(error) => Failure::from(error).settled(Asked::call(false, deadline)),
    }
}

/// The headers, copied out of the connection's read buffer (see the body above).
fn compact(headers: &HeaderMap) -> HeaderMap {
    let mut copy = HeaderMap::with_capacity(headers.len());
    for (name, value) in headers {
        if let Ok(value) = http::HeaderValue::from_bytes(value.as_bytes()) {
            copy.append(name.clone(), value);
        }
    }
    copy
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::limits::dedupe::Ran;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpListener;

    /// A backend that answers the n-th request with `script[n]` (the last one repeats).
    async fn mk_backend(script: &'static [&'static str]) -> (Upstream, Arc<AtomicUsize>) {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let seen = Arc::new(AtomicUsize::new(0));
        let count = seen.clone();
        tokio::spawn(async move {
            while let Ok((mut stream, _)) = listener.accept().await {
                let n = count.fetch_add(1, Ordering::SeqCst);
                let mut buf = vec![0u8; 4096];
                let _ = stream.read(&mut buf).await;
                let reply = script[n.min(script.len() - 1)];
                let _ = stream.write_all(reply.as_bytes()).await;
            }
        });
        (Upstream::new(&format!("http://{addr}")).unwrap(), seen)
    }

    const UNAVAILABLE: &str =
        "HTTP/1.1 503 Service Unavailable\r\ncontent-length: 0\r\nconnection: close\r\n\r\n";
    const FAILED: &str =
        "HTTP/1.1 500 Internal Server Error\r\ncontent-length: 5\r\nconnection: close\r\n\r\noops!";
    const OK: &str = "HTTP/1.1 200 OK\r\ncontent-length: 2\r\nconnection: close\r\nx-toolgate-decision: allow\r\n\r\n{}";

    fn mk_exchange(method: Method) -> Exchange {
        Exchange {
            method,
            path_and_query: "/x".into(),
            headers: HeaderMap::new(),
            body: Bytes::new(),
        }
    }

    #[tokio::test]
    async fn idempotent_calls_retry_a_503_but_not_a_500() {
        let (upstream, seen) = mk_backend(&[UNAVAILABLE, OK]).await;
        let r = send_retrying(&upstream, &mk_exchange(Method::GET), Duration::from_secs(5)).await;
        assert_eq!(r.unwrap().status(), StatusCode::OK);
        assert_eq!(seen.load(Ordering::SeqCst), 2);

        let (upstream, seen) = mk_backend(&[FAILED, OK]).await;
        let r = send_retrying(&upstream, &mk_exchange(Method::GET), Duration::from_secs(5)).await;
        assert_eq!(r.unwrap().status(), StatusCode::INTERNAL_SERVER_ERROR);
        assert_eq!(seen.load(Ordering::SeqCst), 1);
    }

    #[tokio::test]
    async fn retries_stay_inside_the_budget() {
        let (upstream, seen) = mk_backend(&[UNAVAILABLE]).await;
        let started = Instant::now();
        let r = send_retrying(
            &upstream,
            &mk_exchange(Method::GET),
            Duration::from_millis(60),
        )
        .await;
        assert!(started.elapsed() < Duration::from_millis(500));
        assert!(seen.load(Ordering::SeqCst) <= crate::limits::backoff::MAX_ATTEMPTS as usize);
        assert!(r.is_err() || r.unwrap().status() == StatusCode::SERVICE_UNAVAILABLE);
    }

    #[tokio::test]
    async fn non_idempotent_calls_are_sent_once_and_buffered() {
        let (upstream, seen) = mk_backend(&[UNAVAILABLE, OK]).await;
        let settled = send_buffered(
            upstream.clone(),
            mk_exchange(Method::POST),
            Duration::from_secs(5),
            1024,
        )
        .await
        .settled;
        assert!(matches!(settled, Settled::Failed { ran: Ran::No, .. }));
        assert_eq!(seen.load(Ordering::SeqCst), 1);
        let settled = send_buffered(
            upstream,
            mk_exchange(Method::POST),
            Duration::from_secs(5),
            1024,
        )
        .await
        .settled;
        let Settled::Answered(answer) = settled else {
            panic!("expected an answer");
        };
        assert_eq!(answer.body, "{}");
        assert!(answer.headers.get("x-toolgate-decision").is_none());
        assert!(answer.headers.get("content-length").is_none());
    }

    #[tokio::test]
    async fn a_refused_connection_did_not_run_the_call() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        drop(listener);
        let upstream = Upstream::new(&format!("http://{addr}")).unwrap();
        let settled = send_buffered(
            upstream,
            mk_exchange(Method::POST),
            Duration::from_secs(5),
            1024,
        )
        .await
        .settled;
        assert!(matches!(settled, Settled::Failed { ran: Ran::No, .. }));
    }
}
