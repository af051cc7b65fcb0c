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
