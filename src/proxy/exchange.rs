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

use bytes::Bytes;
use http::{HeaderMap, Method, Response, StatusCode};
use hyper::body::Incoming;
use std::time::{Duration, Instant};

use crate::limits::backoff::Backoff;
use crate::limits::dedupe::{Buffered, Ran, Settled};
use crate::proxy::body::{read_limited, ReadError};
use crate::proxy::headers::{strip_hop_by_hop, strip_toolgate};
use crate::proxy::reject::{Code, Recovery, Reject};
use crate::proxy::upstream::{failure_reject, status_reject, Failure, Upstream};

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
pub async fn send_retrying(
    upstream: &Upstream,
    exchange: &Exchange,
    budget: Duration,
) -> Result<Response<Incoming>, Failure> {
    let deadline = Instant::now() + budget;
    let mut backoff = Backoff::default();
    loop {
        let remaining = deadline.saturating_duration_since(Instant::now());
        if remaining.is_zero() {
            return Err(Failure::TimedOut);
        }
        let result = exchange.send(upstream, remaining).await;
        let retryable = match &result {
            Ok(response) => response.status() == StatusCode::SERVICE_UNAVAILABLE,
            Err(failure) => matches!(failure, Failure::Unavailable | Failure::Broken),
        };
        if !retryable {
            return result;
        }
        // No room for another attempt: the last answer stands.
        let Some(delay) = backoff
            .next_delay()
            .filter(|d| *d < deadline.saturating_duration_since(Instant::now()))
        else {
            return result;
        };
        tracing::debug!(
            delay_ms = delay.as_millis() as u64,
            "retrying an idempotent call"
        );
        drop(result);
        tokio::time::sleep(delay).await;
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
) -> Settled {
    let started = Instant::now();
    let response = match exchange.send(&upstream, deadline).await {
        Ok(response) => response,
        Err(failure) => {
            let ran = match failure {
                Failure::Unavailable => Ran::No,
                Failure::Broken | Failure::TimedOut => Ran::Maybe,
            };
            return Settled::Failed {
                reject: failure_reject(failure, false, deadline),
                ran,
            };
        }
    };
    let status = response.status();
    if status == StatusCode::SERVICE_UNAVAILABLE {
        // The backend refused the call before running it: a retry may run it.
        return Settled::Failed {
            reject: status_reject(status)
                .unwrap_or_else(|| Reject::new(Code::BackendUnavailable, "")),
            ran: Ran::No,
        };
    }
    let (mut parts, incoming) = response.into_parts();
    strip_hop_by_hop(&mut parts.headers);
    strip_toolgate(&mut parts.headers);
    parts.headers.remove(http::header::CONTENT_LENGTH);
    if !status.is_success() {
        // An error body never reaches the agent, so it isn't kept either.
        return Settled::Answered(Buffered {
            status,
            headers: parts.headers,
            body: Bytes::new(),
        });
    }
    let remaining = deadline
        .saturating_sub(started.elapsed())
        .max(Duration::from_millis(1));
    match read_limited(incoming, max_bytes, remaining).await {
        Ok(body) => Settled::Answered(Buffered {
            status,
            headers: parts.headers,
            body,
        }),
        Err(ReadError::TooLarge(n)) => Settled::Failed {
            reject: Reject::new(
                Code::OutputContractViolation,
                format!("the tool's result is larger than {n} bytes"),
            ),
            ran: Ran::Yes,
        },
        Err(ReadError::TimedOut) => Settled::Failed {
            reject: failure_reject(Failure::TimedOut, false, deadline),
            ran: Ran::Maybe,
        },
        Err(ReadError::Broken(_)) => Settled::Failed {
            reject: Reject::new(
                Code::BackendUnavailable,
                "the backend connection broke mid-response; the call may have run",
            )
            .with_retryable(false)
            .with_recovery(Recovery::Stop),
            ran: Ran::Yes,
        },
    }
}
