//! Body types and bounded reading: a body is read against a byte limit and a deadline
//! while it arrives, never buffered first and checked after.

use bytes::Bytes;
use http_body::Body as HttpBody;
use http_body_util::{combinators::BoxBody, BodyExt, Empty, Full, LengthLimitError, Limited};
use std::time::Duration;

use crate::config::Limits;
use crate::vocab::{Code, Reject};

pub type BoxError = Box<dyn std::error::Error + Send + Sync>;
/// The body of every response toolgate sends.
pub type Body = BoxBody<Bytes, BoxError>;

pub fn full(bytes: impl Into<Bytes>) -> Body {
    Full::new(bytes.into())
        .map_err(|never| match never {})
        .boxed()
}

pub fn empty() -> Body {
    Empty::new().map_err(|never| match never {}).boxed()
}

#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    #[error("the body is larger than {0} bytes")]
    TooLarge(usize),
    #[error("the body did not arrive in time")]
    TimedOut,
    #[error("the body could not be read: {0}")]
    Broken(String),
}

/// Reads a whole body, failing as soon as it passes `limit` bytes or `deadline` elapses.
pub async fn read_limited<B>(body: B, limit: usize, deadline: Duration) -> Result<Bytes, ReadError>
where
    B: HttpBody<Data = Bytes>,
    B::Error: Into<BoxError>,
{
    let collect = Limited::new(body, limit).collect();
    match tokio::time::timeout(deadline, collect).await {
        Err(_) => Err(ReadError::TimedOut),
        Ok(Ok(collected)) => Ok(collected.to_bytes()),
        Ok(Err(e)) if e.downcast_ref::<LengthLimitError>().is_some() => {
            Err(ReadError::TooLarge(limit))
        }
        Ok(Err(e)) => Err(ReadError::Broken(e.to_string())),
    }
}

/// A request body, bounded by `limits.maxBodyBytes` and `limits.bodyReadTimeoutMs`; a
/// declared oversize body is refused before a byte of it is read.
pub async fn read_body(
    limits: &Limits,
    headers: &http::HeaderMap,
    body: hyper::body::Incoming,
) -> Result<Bytes, Reject> {
    let limit = limits.max_body_bytes;
    let too_large = || {
        Reject::new(
            Code::PayloadTooLarge,
            format!("the body is larger than {limit} bytes"),
        )
    };
    // Refuse a declared oversize body before reading a byte of it.
    let declared = headers
        .get(http::header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|n| n > limit as u64) {
        return Err(too_large());
    }
    read_limited(
        body,
        limit,
        Duration::from_millis(limits.body_read_timeout_ms),
    )
    .await
    .map_err(|e| match e {
        ReadError::TooLarge(_) => too_large(),
        ReadError::TimedOut => {
            Reject::new(Code::MalformedRequest, "the body did not arrive in time")
        }
        ReadError::Broken(_) => Reject::new(Code::MalformedRequest, "the body could not be read"),
    })
}
