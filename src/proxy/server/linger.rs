//! Lingering close, as nginx does it: when the server answers before it has read the
//! request's body (a refusal: too large, not authenticated, too slow), the client is
//! often still sending. Closing the socket with its bytes unread makes the kernel send a
//! reset, and the client sees `EPIPE` or `ECONNRESET` — and may lose the answer that
//! was already in its receive buffer. So the server first shuts down its sending side
//! (the client sees the answer, then end of stream), then keeps reading and discarding
//! what still arrives until the client closes, bounded in bytes and in time, and only
//! then closes.

use std::time::Duration;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::time::Instant;

/// How long and how much a lingering close reads before it closes regardless.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Linger {
    /// Time from the answer to the close, at most.
    pub time: Duration,
    /// Longest silence from the client while lingering.
    pub idle: Duration,
    /// Bytes read and discarded, at most.
    pub bytes: u64,
}

impl Linger {
    /// For a listener whose bodies are at most `max_body` bytes and must arrive within
    /// `body_time`: a client gets as long to finish sending as it had to send the body,
    /// and may send a few bodies' worth (at least 1 MiB, at most 64 MiB) before the close.
    pub fn for_body(max_body: u64, body_time: Duration) -> Linger {
        let time = body_time.clamp(Duration::from_secs(1), Duration::from_secs(30));
        Linger {
            time,
            idle: time.min(Duration::from_secs(2)),
            bytes: max_body.saturating_mul(4).clamp(1 << 20, 64 << 20),
        }
    }
}

/// The read buffer; bytes are thrown away as they come.
const CHUNK: usize = 16 * 1024;

/// Shuts the sending side, then reads and discards until the client closes, falls
/// silent for `limit.idle`, or `limit` runs out. Returns the bytes discarded.
pub async fn linger<S: AsyncRead + AsyncWrite + Unpin>(mut stream: S, limit: Linger) -> u64 {
    let deadline = Instant::now() + limit.time;
    // hyper has usually shut it down already; a second shutdown is harmless.
    let _ = tokio::time::timeout(limit.idle, stream.shutdown()).await;
    let mut chunk = vec![0u8; CHUNK];
    let mut discarded = 0u64;
    while discarded < limit.bytes {
        let wait = deadline
            .saturating_duration_since(Instant::now())
            .min(limit.idle);
        match tokio::time::timeout(wait, stream.read(&mut chunk)).await {
            Ok(Ok(n)) if n > 0 => discarded += n as u64,
            // The client closed, the connection broke, or the time is up.
            _ => break,
        }
    }
    discarded
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::duplex;

    fn mk_linger(bytes: u64) -> Linger {
        Linger {
            time: Duration::from_secs(5),
            idle: Duration::from_millis(100),
            bytes,
        }
    }

    #[tokio::test]
    async fn reads_until_the_client_closes_and_the_client_sees_the_end() {
        let (server, mut client) = duplex(1024);
        let lingering = tokio::spawn(linger(server, mk_linger(1 << 20)));
        // The client is still sending a body the server will never read.
        for _ in 0..64 {
            client.write_all(&[b'x'; 1000]).await.unwrap();
        }
        let mut rest = Vec::new();
        client.read_to_end(&mut rest).await.unwrap();
        assert!(rest.is_empty(), "the server sends nothing more");
        drop(client);
        assert_eq!(lingering.await.unwrap(), 64_000);
    }

    #[tokio::test]
    async fn bounded_in_bytes_and_in_silence() {
        let (server, mut client) = duplex(64 * 1024);
        client.write_all(&[b'x'; 50_000]).await.unwrap();
        assert!(linger(server, mk_linger(10_000)).await >= 10_000);
        let (server, _client) = duplex(1024);
        let started = Instant::now();
        assert_eq!(linger(server, mk_linger(1 << 20)).await, 0);
        let took = started.elapsed();
        assert!(took >= Duration::from_millis(100), "{took:?}");
        assert!(
            took < Duration::from_secs(2),
            "one idle wait, not the whole time: {took:?}"
        );
    }
}
