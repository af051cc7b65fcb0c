//! Hostile connections at the socket level: a client that trickles its headers is cut
//! off by the header-read timeout; a client that trickles its body gets a refusal.

mod common;

use common::*;
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

#[tokio::test]
async fn slow_headers_are_cut_off() {
    let backend = Backend::example().await;
    let h = Harness::start(
        backend.addr,
        Options {
            tweak: Box::new(|s| s.limits.header_read_timeout_ms = 300),
            ..Options::default()
        },
    )
    .await;
    let addr = h.sidecar.as_ref().unwrap().agent_addr;
    let mut stream = TcpStream::connect(addr).await.unwrap();
    let started = Instant::now();
    stream
        .write_all(b"GET /logs/orders HTTP/1.1\r\nHost: x\r\n")
        .await
        .unwrap();
    // One header byte every 100 ms: never completes within the timeout.
    let mut closed_after = None;
    for _ in 0..30 {
        tokio::time::sleep(Duration::from_millis(100)).await;
        if stream.write_all(b"X").await.is_err() {
            closed_after = Some(started.elapsed());
            break;
        }
        let mut buf = [0u8; 512];
        if let Ok(Ok(n)) =
            tokio::time::timeout(Duration::from_millis(1), stream.read(&mut buf)).await
        {
            // Either a 408 or EOF: the server gave up on us.
            let _ = n;
            closed_after = Some(started.elapsed());
            break;
        }
    }
    let took = closed_after.expect("the server kept a slow-header connection open for 3 s");
    assert!(
        took < Duration::from_millis(1500),
        "cut off only after {took:?}"
    );
    assert_eq!(backend.count(), 0);
    h.stop().await;
}

#[tokio::test]
async fn slow_body_is_refused() {
    let backend = Backend::example().await;
    let h = Harness::start(
        backend.addr,
        Options {
            tweak: Box::new(|s| s.limits.body_read_timeout_ms = 300),
            ..Options::default()
        },
    )
    .await;
    let addr = h.sidecar.as_ref().unwrap().agent_addr;
    let mut stream = TcpStream::connect(addr).await.unwrap();
    let head = format!(
        "POST /issues HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {OPS_TOKEN}\r\nContent-Length: 100\r\nContent-Type: application/json\r\n\r\n{{"
    );
    stream.write_all(head.as_bytes()).await.unwrap();
    let mut response = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(3), stream.read_to_end(&mut response)).await;
    let text = String::from_utf8_lossy(&response);
    assert!(text.starts_with("HTTP/1.1 400"), "{text}");
    assert!(text.contains("MALFORMED_REQUEST"), "{text}");
    assert_eq!(backend.count(), 0);
    h.stop().await;
}

// --- Slow readers (DESIGN §14): a client that does not read the answers it asked for
// is cut off after `limits.writeTimeoutMs`, and its connection slot freed. ---

/// A connection whose client writes `request` over and over (pipelined) and never
/// reads an answer, with a small receive buffer so the answers back up soon. The task
/// ends when a write fails: the server closed the connection.
async fn slow_reader(addr: std::net::SocketAddr, request: Vec<u8>) -> tokio::task::JoinHandle<()> {
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.set_recv_buffer_size(4096).unwrap();
    let stream = socket.connect(addr).await.unwrap();
    tokio::spawn(async move {
        let (_unread, mut writer) = stream.into_split();
        let batch = request.repeat(64);
        while writer.write_all(&batch).await.is_ok() {}
    })
}

/// A counter's value on the admin `/metrics`.
async fn counter(h: &Harness, series: &str) -> f64 {
    let (_, text) = h.get_admin("/metrics").await;
    text.lines()
        .find_map(|l| l.strip_prefix(series)?.trim().parse().ok())
        .unwrap_or_else(|| panic!("no {series} in\n{text}"))
}

const WRITE_TIMEOUTS: &str = "toolgate_connections_closed_total{reason=\"write_timeout\"}";

#[tokio::test]
async fn pipelining_clients_that_never_read_are_cut_off_and_free_their_slots() {
    let backend = Backend::example().await;
    let h = Harness::start(
        backend.addr,
        Options {
            tweak: Box::new(|s| {
                s.limits.max_connections = 4;
                s.limits.write_timeout_ms = 500;
            }),
            ..Options::default()
        },
    )
    .await;
    let addr = h.sidecar.as_ref().unwrap().agent_addr;
    // Every slot held by an unauthenticated client that never reads.
    let unauthenticated = b"GET /logs/orders HTTP/1.1\r\nHost: x\r\n\r\n".to_vec();
    let mut readers = Vec::new();
    for _ in 0..4 {
        readers.push(slow_reader(addr, unauthenticated.clone()).await);
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    // An agent's call waits in the backlog only until the slow readers are cut off.
    let started = Instant::now();
    let call = h.call("GET", "/logs/orders", Some(OPS_TOKEN), &[], "");
    let answered = tokio::time::timeout(Duration::from_secs(10), call).await;
    let reply = answered.expect("the agent's call waited more than 10 s behind slow readers");
    assert_eq!(reply.status, 200, "{}", reply.text);
    for reader in readers {
        tokio::time::timeout(Duration::from_secs(5), reader)
            .await
            .expect("a slow reader's connection was never closed")
            .unwrap();
    }
    assert!(counter(&h, WRITE_TIMEOUTS).await >= 4.0);
    eprintln!("the agent's call waited {:?}", started.elapsed());
    h.stop().await;
}

/// A contract whose answer streams through unshaped, and ops-bot's grant of it.
const EXPORT_POLICIES: &str = "apiVersion: toolgate.dev/v1alpha1
kind: ToolContract
metadata: {name: export}
spec:
  tool: export
  http: {method: GET, path: /export}
---
apiVersion: toolgate.dev/v1alpha1
kind: AgentPolicy
metadata: {name: ops-bot}
spec:
  agents: [ops-bot]
  tools: [{name: export}]
";

/// Reads what is left on `stream` until it ends; `true` if it ended (EOF or reset)
/// within `deadline`, with the bytes read.
async fn drain(stream: &mut TcpStream, deadline: Duration) -> (bool, usize) {
    let mut total = 0;
    let mut buf = vec![0u8; 64 * 1024];
    let ended = tokio::time::timeout(deadline, async {
        loop {
            match stream.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(n) => total += n,
            }
        }
    })
    .await;
    (ended.is_ok(), total)
}

#[tokio::test]
async fn a_client_that_never_reads_one_large_answer_is_cut_off() {
    const ANSWER: usize = 32 << 20;
    let backend = Backend::start(std::sync::Arc::new(|_: &Seen| {
        (200, vec![], "x".repeat(ANSWER), Duration::ZERO)
    }))
    .await;
    let h = Harness::start(
        backend.addr,
        Options {
            policies: EXPORT_POLICIES.into(),
            tweak: Box::new(|s| s.limits.write_timeout_ms = 500),
            ..Options::default()
        },
    )
    .await;
    let addr = h.sidecar.as_ref().unwrap().agent_addr;
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.set_recv_buffer_size(4096).unwrap();
    let mut stream = socket.connect(addr).await.unwrap();
    let head =
        format!("GET /export HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {OPS_TOKEN}\r\n\r\n");
    stream.write_all(head.as_bytes()).await.unwrap();
    // One request, not pipelined, whose answer the client never reads.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let (ended, read) = drain(&mut stream, Duration::from_secs(3)).await;
    assert!(ended, "the connection stayed open");
    assert!(read < ANSWER, "the whole answer was delivered: {read}");
    assert!(counter(&h, WRITE_TIMEOUTS).await >= 1.0);
    h.stop().await;
}

#[tokio::test]
async fn an_h2c_client_that_grants_no_window_is_cut_off() {
    use http_body_util::Empty;
    use hyper::client::conn::http2;
    use hyper_util::rt::{TokioExecutor, TokioIo};

    let backend = Backend::example().await;
    let h = Harness::start(
        backend.addr,
        Options {
            tweak: Box::new(|s| s.limits.write_timeout_ms = 500),
            ..Options::default()
        },
    )
    .await;
    let addr = h.sidecar.as_ref().unwrap().agent_addr;
    let stream = TcpStream::connect(addr).await.unwrap();
    let (mut send, connection) = http2::Builder::new(TokioExecutor::new())
        .initial_stream_window_size(65_535)
        .initial_connection_window_size(65_535)
        .handshake::<_, Empty<bytes::Bytes>>(TokioIo::new(stream))
        .await
        .unwrap();
    let driver = tokio::spawn(connection);
    // Answers are taken and never read: their data soon fills the window the client
    // granted, and the server's writes wait for a window update that never comes.
    let mut held = Vec::new();
    let started = Instant::now();
    while held.len() < 2000 && started.elapsed() < Duration::from_secs(10) {
        let request = http::Request::get(format!("http://{addr}/logs/orders"))
            .body(Empty::new())
            .unwrap();
        // A stream slot or an answer that never comes ends the loop, too.
        let sent = tokio::time::timeout(Duration::from_secs(2), send.send_request(request));
        match sent.await {
            Ok(Ok(response)) => held.push(response),
            _ => break,
        }
    }
    let ended = tokio::time::timeout(Duration::from_secs(5), driver).await;
    assert!(
        ended.is_ok(),
        "the h2c connection stayed open ({} answers held)",
        held.len()
    );
    assert!(counter(&h, WRITE_TIMEOUTS).await >= 1.0);
    // The sidecar still serves.
    let reply = h
        .call("GET", "/logs/orders", Some(OPS_TOKEN), &[], "")
        .await;
    assert_eq!(reply.status, 200, "{}", reply.text);
    h.stop().await;
}

#[tokio::test]
async fn the_admin_listener_cuts_off_slow_readers_too() {
    let backend = Backend::example().await;
    let h = Harness::start(
        backend.addr,
        Options {
            tweak: Box::new(|s| s.limits.write_timeout_ms = 500),
            ..Options::default()
        },
    )
    .await;
    let admin = h.sidecar.as_ref().unwrap().admin_addr;
    let reader = slow_reader(admin, b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n".to_vec()).await;
    tokio::time::timeout(Duration::from_secs(10), reader)
        .await
        .expect("the admin listener kept a slow reader's connection open")
        .unwrap();
    assert!(counter(&h, WRITE_TIMEOUTS).await >= 1.0);
    h.stop().await;
}

// --- Lingering close (DESIGN §14): a refusal sent before the request's body was read
// reaches a client that is still sending it, instead of a reset. ---

/// Sends `head` then `body` in 64 KiB pieces, `pause` apart, and only then reads the
/// answer: what a client that writes its whole request before reading sees.
async fn send_all_then_read(
    addr: std::net::SocketAddr,
    head: String,
    body: usize,
    pause: Duration,
) -> Result<String, String> {
    let mut stream = TcpStream::connect(addr).await.unwrap();
    stream
        .write_all(head.as_bytes())
        .await
        .map_err(|e| format!("head: {e}"))?;
    let piece = vec![b' '; 64 * 1024];
    let mut sent = 0;
    while sent < body {
        let n = piece.len().min(body - sent);
        stream
            .write_all(&piece[..n])
            .await
            .map_err(|e| format!("after {sent} body bytes: {e}"))?;
        sent += n;
        tokio::time::sleep(pause).await;
    }
    let mut answer = Vec::new();
    let read = tokio::time::timeout(Duration::from_secs(5), stream.read_to_end(&mut answer)).await;
    match read {
        Ok(Ok(_)) => Ok(String::from_utf8_lossy(&answer).into_owned()),
        Ok(Err(e)) => Err(format!(
            "reading the answer: {e} (got {} bytes)",
            answer.len()
        )),
        Err(_) => Err("the connection stayed open after the answer".into()),
    }
}

#[tokio::test]
async fn a_refusal_before_the_body_reaches_a_client_still_sending_it() {
    let backend = Backend::example().await;
    let h = Harness::start(backend.addr, Options::default()).await;
    let addr = h.sidecar.as_ref().unwrap().agent_addr;
    // Declared larger than limits.maxBodyBytes (1 MiB): refused before a byte is read.
    let body = 3 << 20;
    let head = format!(
        "POST /issues HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {OPS_TOKEN}\r\nContent-Type: application/json\r\nContent-Length: {body}\r\n\r\n"
    );
    let answer = send_all_then_read(addr, head, body, Duration::from_millis(10)).await;
    let answer = answer.expect("the client saw a reset instead of the refusal");
    assert!(answer.starts_with("HTTP/1.1 413"), "{answer}");
    assert!(answer.contains("PAYLOAD_TOO_LARGE"), "{answer}");
    // An unauthenticated MCP batch: 401 before the body is read.
    let body = 2 << 20;
    let head = format!(
        "POST /mcp HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\nContent-Length: {body}\r\n\r\n"
    );
    let answer = send_all_then_read(addr, head, body, Duration::from_millis(5)).await;
    let answer = answer.expect("the client saw a reset instead of the refusal");
    assert!(answer.starts_with("HTTP/1.1 401"), "{answer}");
    assert_eq!(backend.count(), 0);
    let unread = "toolgate_connections_closed_total{reason=\"unread_body\"}";
    assert!(counter(&h, unread).await >= 2.0);
    h.stop().await;
}

#[tokio::test]
async fn lingering_is_bounded_in_bytes_and_time() {
    let backend = Backend::example().await;
    let h = Harness::start(backend.addr, Options::default()).await;
    let addr = h.sidecar.as_ref().unwrap().agent_addr;
    let head = format!(
        "POST /issues HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {OPS_TOKEN}\r\nContent-Length: {}\r\n\r\n",
        1u64 << 40
    );
    // A client that sends an endless body as fast as it can is closed on after the
    // lingering close's byte bound (4 MiB here), not read forever.
    let started = Instant::now();
    let result = send_all_then_read(addr, head.clone(), usize::MAX, Duration::ZERO).await;
    let error = result.expect_err("an endless body was read to the end");
    assert!(error.starts_with("after "), "{error}");
    let sent: usize = error
        .split_whitespace()
        .nth(1)
        .and_then(|n| n.parse().ok())
        .unwrap();
    assert!(sent < 64 << 20, "{sent} bytes were taken");
    // One that sends a byte now and then is closed on after the silence bound.
    let mut stream = TcpStream::connect(addr).await.unwrap();
    stream.write_all(head.as_bytes()).await.unwrap();
    let (ended, _) = drain(&mut stream, Duration::from_secs(5)).await;
    assert!(ended, "a silent client kept the lingering connection");
    assert!(started.elapsed() < Duration::from_secs(20));
    h.stop().await;
}

/// One address can't hold the admin port: past its share (16 connections) its
/// connections are closed at once, so the kubelet's probe from elsewhere gets in while
/// 70 half-sent requests wait out their header timeout.
#[tokio::test]
async fn one_address_cannot_take_every_admin_slot() {
    let backend = Backend::example().await;
    let h = Harness::start(backend.addr, Options::default()).await;
    let admin = h.sidecar.as_ref().unwrap().admin_addr;
    let mut held = Vec::new();
    for _ in 0..70 {
        if let Ok(mut stream) = TcpStream::connect(admin).await {
            let _ = stream
                .write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n")
                .await;
            held.push(stream);
        }
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    // The probe, from another address on the loopback.
    let probe = async {
        let socket = tokio::net::TcpSocket::new_v4().unwrap();
        socket.bind("127.0.0.2:0".parse().unwrap()).unwrap();
        let mut stream = socket.connect(admin).await.unwrap();
        stream
            .write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            .await
            .unwrap();
        let mut answer = Vec::new();
        stream.read_to_end(&mut answer).await.unwrap();
        String::from_utf8_lossy(&answer).into_owned()
    };
    let answer = tokio::time::timeout(Duration::from_secs(1), probe)
        .await
        .expect("the probe waited behind one address's connections");
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    drop(held);
    h.stop().await;
}
