//! One HTTP/1.1 request on a connection of its own, read to the end and classified: for
//! shutdown tests, where what matters is exactly how far a request got. A pooled client
//! would hide it (a refused connect, a reset before any byte and a cut body all look
//! like "error" there, and it may retry).
#![allow(dead_code)]

use std::net::SocketAddr;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// How far one request got.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Exchange {
    /// The connection was refused: the listener was already closed.
    Refused,
    /// Connected, then reset before a single response byte: what a client sees when the
    /// listener closes with its connection still in the accept backlog.
    Reset,
    /// Connected, but the connection ended cleanly (or timed out) before a single
    /// response byte.
    NoResponse(String),
    /// Some of a response, not all of it.
    Partial(String),
    /// A whole response.
    Answered { status: u16, body: String },
}

/// Sends `request` (a whole HTTP/1.1 request with `connection: close`) to `addr` and
/// reads the answer, giving up after `timeout`.
pub async fn exchange(addr: SocketAddr, request: &[u8], timeout: Duration) -> Exchange {
    let mut stream = match TcpStream::connect(addr).await {
        Ok(stream) => stream,
        Err(_) => return Exchange::Refused,
    };
    let mut received = Vec::new();
    let read = tokio::time::timeout(timeout, async {
        stream.write_all(request).await?;
        stream.read_to_end(&mut received).await
    })
    .await;
    let ended = match read {
        Err(_) => "timed out".to_string(),
        Ok(Err(e)) if received.is_empty() && e.kind() == std::io::ErrorKind::ConnectionReset => {
            return Exchange::Reset;
        }
        Ok(Err(e)) => e.to_string(),
        Ok(Ok(_)) => "closed".to_string(),
    };
    if received.is_empty() {
        return Exchange::NoResponse(ended);
    }
    match parse(&received) {
        Some((status, body)) => Exchange::Answered { status, body },
        None => Exchange::Partial(format!(
            "{ended} after {} bytes: {}",
            received.len(),
            String::from_utf8_lossy(&received)
        )),
    }
}

/// A complete response's status and body; `None` if it is cut short.
fn parse(bytes: &[u8]) -> Option<(u16, String)> {
    let head_end = bytes.windows(4).position(|w| w == b"\r\n\r\n")? + 4;
    let head = std::str::from_utf8(&bytes[..head_end]).ok()?;
    let status: u16 = head.split_whitespace().nth(1)?.parse().ok()?;
    let header = |name: &str| {
        head.lines()
            .filter_map(|l| l.split_once(':'))
            .find(|(k, _)| k.trim().eq_ignore_ascii_case(name))
            .map(|(_, v)| v.trim().to_ascii_lowercase())
    };
    let rest = &bytes[head_end..];
    let body = if let Some(length) = header("content-length") {
        let length: usize = length.parse().ok()?;
        if rest.len() != length {
            return None;
        }
        rest.to_vec()
    } else if header("transfer-encoding").is_some_and(|v| v.contains("chunked")) {
        dechunk(rest)?
    } else {
        // Delimited by the close itself.
        rest.to_vec()
    };
    Some((status, String::from_utf8_lossy(&body).into_owned()))
}

/// A chunked body, only if its last chunk arrived.
fn dechunk(mut rest: &[u8]) -> Option<Vec<u8>> {
    let mut body = Vec::new();
    loop {
        let line_end = rest.windows(2).position(|w| w == b"\r\n")?;
        let size_text = std::str::from_utf8(&rest[..line_end]).ok()?;
        let size = usize::from_str_radix(size_text.split(';').next()?.trim(), 16).ok()?;
        rest = &rest[line_end + 2..];
        if size == 0 {
            return Some(body);
        }
        if rest.len() < size + 2 {
            return None;
        }
        body.extend_from_slice(&rest[..size]);
        rest = &rest[size + 2..];
    }
}
