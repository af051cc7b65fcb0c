//! A raw-TCP HTTP/1.1 client for requests no well-behaved client would send: bytes are
//! written as given (in steps, with pauses for slowloris shapes), the answer is read
//! with a deadline, and whether the server then closed the connection is reported.

use std::net::SocketAddr;
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// One step of what a client sends.
#[derive(Debug, Clone)]
pub enum Step {
    Send(Vec<u8>),
    /// Bytes made when they are sent, so a large row takes memory only while it runs.
    Make(fn() -> Vec<u8>),
    Pause(Duration),
    /// The bytes one at a time, with a pause between them.
    Trickle(Vec<u8>, Duration),
}

/// What came back.
#[derive(Debug, Default)]
pub struct RawReply {
    /// `None` when the connection ended without a response head.
    pub status: Option<u16>,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
    /// The server closed the connection after its answer (or instead of one).
    pub closed: bool,
    pub elapsed: Duration,
}

impl RawReply {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    pub fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body).unwrap_or(serde_json::Value::Null)
    }

    pub fn text(&self) -> String {
        let cut = self.body.len().min(2000);
        String::from_utf8_lossy(&self.body[..cut]).into_owned()
    }
}

/// A request head and body as bytes: `Host` and `Content-Length` are added unless
/// `headers` names them (or `Transfer-Encoding`) itself.
pub fn request(method: &str, target: &str, headers: &[(&str, &str)], body: &[u8]) -> Vec<u8> {
    let mut out = format!("{method} {target} HTTP/1.1\r\n").into_bytes();
    let names = |n: &str| headers.iter().any(|(k, _)| k.eq_ignore_ascii_case(n));
    if !names("host") {
        out.extend_from_slice(b"Host: toolgate.test\r\n");
    }
    for (k, v) in headers {
        out.extend_from_slice(format!("{k}: {v}\r\n").as_bytes());
    }
    if !names("content-length") && !names("transfer-encoding") && !body.is_empty() {
        out.extend_from_slice(format!("Content-Length: {}\r\n", body.len()).as_bytes());
    }
    out.extend_from_slice(b"\r\n");
    out.extend_from_slice(body);
    out
}

/// Sends `steps` on a fresh connection and reads one answer within `deadline`. Writing
/// runs beside reading, so a server that answers before the body is in (and closes) is
/// seen answering.
pub async fn exchange(addr: SocketAddr, steps: Vec<Step>, deadline: Duration) -> RawReply {
    exchange_nth(addr, steps, deadline, 1, false).await
}

/// As [`exchange`], for the `nth` answer (1-based) of pipelined requests; with
/// `probe_close`, a complete answer is followed by a short wait to see whether the
/// server closes the connection (else `closed` reports only an end already seen).
pub async fn exchange_nth(
    addr: SocketAddr,
    steps: Vec<Step>,
    deadline: Duration,
    nth: usize,
    probe_close: bool,
) -> RawReply {
    let started = Instant::now();
    let stream = TcpStream::connect(addr)
        .await
        .expect("connect to the sidecar");
    let (mut reader, mut writer) = stream.into_split();
    let writing = tokio::spawn(async move {
        for step in steps {
            let sent = match step {
                Step::Send(bytes) => writer.write_all(&bytes).await,
                Step::Make(make) => writer.write_all(&make()).await,
                Step::Pause(pause) => {
                    tokio::time::sleep(pause).await;
                    Ok(())
                }
                Step::Trickle(bytes, every) => {
                    let mut sent = Ok(());
                    for b in bytes {
                        sent = writer.write_all(&[b]).await;
                        if sent.is_err() {
                            break;
                        }
                        tokio::time::sleep(every).await;
                    }
                    sent
                }
            };
            if sent.is_err() {
                return writer;
            }
        }
        writer
    });
    let mut buf = Vec::new();
    let mut reply = RawReply::default();
    for _ in 0..nth.max(1) {
        reply = read_answer(&mut reader, &mut buf, started + deadline, probe_close).await;
        if reply.status.is_none() || reply.closed {
            break;
        }
    }
    writing.abort();
    reply.elapsed = started.elapsed();
    reply
}

/// Reads one response (or the end of the connection) and then whether the connection
/// closes right after.
async fn read_answer(
    reader: &mut tokio::net::tcp::OwnedReadHalf,
    buf: &mut Vec<u8>,
    until: Instant,
    probe_close: bool,
) -> RawReply {
    let mut reply = RawReply::default();
    let head_end = loop {
        if let Some(end) = find(buf, b"\r\n\r\n") {
            break end;
        }
        match fill(reader, buf, until).await {
            Fill::More => {}
            Fill::End => {
                reply.closed = true;
                return reply;
            }
            Fill::Waited => return reply,
        }
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).into_owned();
    let mut lines = head.split("\r\n");
    reply.status = lines
        .next()
        .and_then(|l| l.split(' ').nth(1))
        .and_then(|s| s.parse().ok());
    reply.headers = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
        .collect();
    let mut rest = buf.split_off(head_end + 4);
    buf.clear();
    let length = reply
        .header("content-length")
        .and_then(|v| v.parse::<usize>().ok());
    let chunked = reply
        .header("transfer-encoding")
        .is_some_and(|v| v.eq_ignore_ascii_case("chunked"));
    let mut last = Fill::More;
    if let Some(length) = length {
        while rest.len() < length && last == Fill::More {
            last = fill(reader, &mut rest, until).await;
        }
        // What follows belongs to the next answer.
        *buf = rest.split_off(length.min(rest.len()));
        reply.body = rest;
    } else if chunked {
        loop {
            match dechunk(&rest) {
                Some(body) => {
                    reply.body = body;
                    break;
                }
                None if last != Fill::More => break,
                None => last = fill(reader, &mut rest, until).await,
            }
        }
    } else {
        // Delimited by the end of the connection.
        let mut end = Fill::More;
        while end == Fill::More {
            end = fill(reader, &mut rest, until).await;
        }
        reply.body = rest;
        reply.closed = end == Fill::End;
        return reply;
    }
    // Closed right after the answer? A short wait tells: EOF or a reset means yes.
    let linger = Instant::now() + Duration::from_millis(300);
    reply.closed = match last {
        Fill::More if buf.is_empty() && probe_close => fill(reader, buf, linger).await == Fill::End,
        Fill::More => false,
        other => other == Fill::End,
    };
    reply
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fill {
    More,
    /// EOF or a reset: the server closed the connection.
    End,
    /// Nothing came before the deadline.
    Waited,
}

/// Reads more into `buf`, waiting at most until `until`.
async fn fill(
    reader: &mut tokio::net::tcp::OwnedReadHalf,
    buf: &mut Vec<u8>,
    until: Instant,
) -> Fill {
    let mut chunk = vec![0u8; 64 * 1024];
    let left = until.saturating_duration_since(Instant::now());
    match tokio::time::timeout(left, reader.read(&mut chunk)).await {
        Ok(Ok(0)) | Ok(Err(_)) => Fill::End,
        Ok(Ok(n)) => {
            buf.extend_from_slice(&chunk[..n]);
            Fill::More
        }
        Err(_) => Fill::Waited,
    }
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

/// The body of a complete chunked encoding, or `None` while incomplete.
fn dechunk(mut data: &[u8]) -> Option<Vec<u8>> {
    let mut body = Vec::new();
    loop {
        let line_end = find(data, b"\r\n")?;
        let size_text = String::from_utf8_lossy(&data[..line_end]);
        let size = usize::from_str_radix(size_text.split(';').next()?.trim(), 16).ok()?;
        data = &data[line_end + 2..];
        if size == 0 {
            // Trailers are not expected from the sidecar; the final CRLF ends it.
            return data.starts_with(b"\r\n").then_some(body);
        }
        if data.len() < size + 2 {
            return None;
        }
        body.extend_from_slice(&data[..size]);
        data = &data[size + 2..];
    }
}
