//! Approval notifications over real sockets: real HTTP receivers that answer, fail, hang
//! or aren't there, and what `Notifier` does about each — without ever making the caller
//! wait.

mod common;

use common::{Backend, Seen};
use serde_json::{json, Value};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::io::AsyncReadExt;
use tokio::net::TcpListener;
use toolgate::approvals::notify::Notifier;

fn mk_approval(id: &str) -> Value {
    json!({
        "id": id,
        "status": "pending",
        "tool": "refund",
        "agent": "ops-bot",
        "session": "s-1",
        "arguments": {"amount": 250},
        "condition": "args.amount > 100",
        "createdAt": "2025-01-01T00:00:00Z",
        "expiresAt": "2025-01-01T00:15:00Z",
        "decidedBy": null,
        "reason": null
    })
}

/// A receiver that answers every POST with `status` after `delay`.
async fn mk_receiver(status: u16, delay: Duration) -> Backend {
    Backend::start(Arc::new(move |_: &Seen| {
        (status, vec![], String::new(), delay)
    }))
    .await
}

/// Polls `done` every 20 ms until it holds or `within` passes.
async fn wait_for(within: Duration, done: impl Fn() -> bool) -> bool {
    let start = Instant::now();
    while start.elapsed() < within {
        if done() {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    done()
}

/// Runs `f` and asserts it returned within `limit`.
fn quickly<T>(limit: Duration, what: &str, f: impl FnOnce() -> T) -> T {
    let start = Instant::now();
    let out = f();
    assert!(start.elapsed() < limit, "{what} took {:?}", start.elapsed());
    out
}

#[tokio::test]
async fn each_pending_approval_is_posted_once_as_json() {
    let receiver = mk_receiver(200, Duration::ZERO).await;
    let notifier =
        Notifier::start(&format!("http://{}/hooks/page?team=finance", receiver.addr)).unwrap();
    let approvals: Vec<Value> = (1..=3).map(|i| mk_approval(&format!("ap-{i}"))).collect();
    for approval in &approvals {
        notifier.pending(approval.clone());
    }
    assert!(
        wait_for(Duration::from_secs(3), || notifier.delivered() == 3).await,
        "{notifier:?}"
    );
    // Nothing more arrives later: one POST per approval.
    tokio::time::sleep(Duration::from_millis(100)).await;
    let seen = receiver.seen.lock().unwrap().clone();
    assert_eq!(seen.len(), 3);
    for (seen, approval) in seen.iter().zip(&approvals) {
        assert_eq!(seen.method, "POST");
        assert_eq!(seen.uri, "/hooks/page?team=finance");
        assert_eq!(seen.headers["content-type"], "application/json");
        let body: Value = serde_json::from_slice(&seen.body).unwrap();
        assert_eq!(
            body,
            json!({"event": "approval.pending", "approval": approval})
        );
    }
    assert_eq!((notifier.failed(), notifier.dropped()), (0, 0));
}

#[tokio::test]
async fn userinfo_becomes_basic_credentials() {
    let receiver = mk_receiver(204, Duration::ZERO).await;
    let notifier = Notifier::start(&format!("http://bot:pw@{}/", receiver.addr)).unwrap();
    notifier.pending(mk_approval("ap-1"));
    assert!(
        wait_for(Duration::from_secs(3), || notifier.delivered() == 1).await,
        "{notifier:?}"
    );
    // base64("bot:pw")
    assert_eq!(receiver.last().headers["authorization"], "Basic Ym90OnB3");
}

#[tokio::test]
async fn a_receiver_back_after_two_503s_gets_it_on_the_third_attempt() {
    let calls = Arc::new(AtomicUsize::new(0));
    let counter = calls.clone();
    let receiver = Backend::start(Arc::new(move |_: &Seen| {
        let status = if counter.fetch_add(1, Ordering::SeqCst) < 2 {
            503
        } else {
            200
        };
        (status, vec![], String::new(), Duration::ZERO)
    }))
    .await;
    let notifier = Notifier::start(&format!("http://{}/", receiver.addr)).unwrap();
    notifier.pending(mk_approval("ap-1"));
    assert!(
        wait_for(Duration::from_secs(4), || notifier.delivered() == 1).await,
        "{notifier:?}"
    );
    assert_eq!(receiver.count(), 3);
    assert_eq!(notifier.failed(), 0);
}

#[tokio::test]
async fn a_receiver_that_always_answers_503_gets_three_attempts_then_gives_up() {
    let receiver = mk_receiver(503, Duration::ZERO).await;
    let notifier = Notifier::start(&format!("http://{}/", receiver.addr)).unwrap();
    notifier.pending(mk_approval("ap-1"));
    assert!(
        wait_for(Duration::from_secs(4), || notifier.failed() == 1).await,
        "{notifier:?}"
    );
    // No fourth attempt follows.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(receiver.count(), 3);
    assert_eq!(notifier.delivered(), 0);
}

#[tokio::test]
async fn a_4xx_is_not_retried() {
    let receiver = mk_receiver(404, Duration::ZERO).await;
    let notifier = Notifier::start(&format!("http://{}/", receiver.addr)).unwrap();
    notifier.pending(mk_approval("ap-1"));
    assert!(
        wait_for(Duration::from_secs(2), || notifier.failed() == 1).await,
        "{notifier:?}"
    );
    tokio::time::sleep(Duration::from_millis(400)).await;
    assert_eq!(receiver.count(), 1);
}

#[tokio::test]
async fn a_hanging_receiver_never_slows_the_caller() {
    let receiver = mk_receiver(200, Duration::from_secs(600)).await;
    let notifier = Notifier::start(&format!("http://{}/", receiver.addr)).unwrap();
    for i in 0..10 {
        quickly(Duration::from_millis(5), "pending()", || {
            notifier.pending(mk_approval(&format!("ap-{i}")))
        });
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // The first approval reached the receiver and is still waiting for its answer.
    assert!(wait_for(Duration::from_secs(2), || receiver.count() == 1).await);
    assert_eq!(
        (notifier.delivered(), notifier.failed(), notifier.dropped()),
        (0, 0, 0)
    );
    drop(notifier);
}

#[tokio::test]
async fn nothing_listening_fails_for_good_after_the_retries() {
    let addr = common::closed_port().await;
    let notifier = Notifier::start(&format!("http://{addr}/")).unwrap();
    let start = Instant::now();
    quickly(Duration::from_millis(5), "pending()", || {
        notifier.pending(mk_approval("ap-1"))
    });
    assert!(
        wait_for(Duration::from_secs(4), || notifier.failed() == 1).await,
        "{notifier:?}"
    );
    // It waited between attempts (200 ms, then 1 s) rather than giving up at once.
    assert!(
        start.elapsed() >= Duration::from_millis(1200),
        "{:?}",
        start.elapsed()
    );
    assert_eq!(notifier.delivered(), 0);
}

#[tokio::test]
async fn a_full_queue_drops_and_counts_instead_of_waiting() {
    let receiver = mk_receiver(200, Duration::from_secs(600)).await;
    let notifier = Notifier::start(&format!("http://{}/", receiver.addr)).unwrap();
    let approvals: Vec<Value> = (0..2000).map(|i| mk_approval(&format!("ap-{i}"))).collect();
    quickly(Duration::from_millis(500), "2,000 pending()", || {
        for approval in approvals {
            notifier.pending(approval);
        }
    });
    // 1,024 queued and at most one in flight at the hanging receiver; the rest dropped.
    let dropped = notifier.dropped();
    assert!((975..=976).contains(&dropped), "dropped {dropped}");
    assert_eq!(notifier.delivered() + notifier.failed(), 0);
}

#[tokio::test]
async fn start_refuses_urls_it_cannot_post_to() {
    for url in [
        "ftp://hooks.example/page",
        "not a url",
        "",
        "http://",
        "hooks.example/page",
    ] {
        let err = Notifier::start(url)
            .err()
            .unwrap_or_else(|| panic!("{url:?} accepted"));
        assert!(err.contains("approvals.notifyUrl"), "{url:?}: {err}");
    }
}

/// A TCP listener that records the first byte of each connection, then hangs up.
async fn mk_first_bytes_listener() -> (std::net::SocketAddr, Arc<Mutex<Vec<u8>>>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let firsts = Arc::new(Mutex::new(Vec::new()));
    let record = firsts.clone();
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            let mut byte = [0u8; 1];
            if stream.read_exact(&mut byte).await.is_ok() {
                record.lock().unwrap().push(byte[0]);
            }
        }
    });
    (addr, firsts)
}

#[tokio::test]
async fn https_speaks_tls_and_a_receiver_that_cannot_finish_the_handshake_fails() {
    let (addr, firsts) = mk_first_bytes_listener().await;
    let notifier = Notifier::start(&format!("https://{addr}/")).unwrap();
    notifier.pending(mk_approval("ap-1"));
    assert!(
        wait_for(Duration::from_secs(4), || notifier.failed() == 1).await,
        "{notifier:?}"
    );
    // Three connections, each opened with a TLS handshake record (0x16), never plain HTTP.
    assert_eq!(*firsts.lock().unwrap(), vec![0x16; 3]);
}
