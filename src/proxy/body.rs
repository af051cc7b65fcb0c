//! Body types and bounded reading: a body is read against a byte limit and a deadline
//! while it arrives, never buffered first and checked after.

use bytes::Bytes;
use http_body::Body as HttpBody;
use http_body_util::{combinators::BoxBody, BodyExt, Empty, Full, LengthLimitError, Limited};
use std::time::Duration;

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
