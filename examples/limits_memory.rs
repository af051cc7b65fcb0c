//! Measures what the limits state costs when a million distinct agents and sessions pass
//! through it: the real rate-limit, session and dedupe tables of a [`Ledger`] built from
//! the default settings.
//!
//! ```text
//! cargo run --release --example limits_memory [-- COUNT]
//! ```
//!
//! Prints resident memory (`VmRSS` from /proc/self/status) before and after, and how many
//! entries each table holds: the tables stay at their capacity however many keys pass.

use serde_json::json;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::{HeaderMap, StatusCode};
use toolgate::config::Limits;
use toolgate::crd::{RateLimit, SessionLimits};
use toolgate::limits::dedupe::{Buffered, Settled, Turn};
use toolgate::limits::{Call, Capacity, Clock, Ledger};
use toolgate::policy::quota::Quota;
use toolgate::vocab::args::Args;

#[path = "common/rss.rs"]
mod rss;

use rss::rss_kib;

fn main() {
    let count: u64 = std::env::args()
        .nth(1)
        .and_then(|n| n.parse().ok())
        .unwrap_or(1_000_000);
    let settings = Limits::default();
    let capacity = Capacity::from_settings(&settings);
    let ledger = Ledger::new(capacity, Clock::real());
    let quota = Quota::compile(
        "rateLimit",
        &RateLimit {
            per_second: None,
            // Refills in an hour: no limiter idles out during the run, so each table's
            // share of the memory is measured whole.
            per_minute: Some(1),
            burst: Some(60),
        },
    )
    .expect("a valid quota");
    let session_limits = SessionLimits {
        max_calls: Some(200),
        max_repeats: Some(3),
        ..SessionLimits::default()
    };
    let window = Duration::from_secs(600);
    // A typical small non-idempotent result.
    let answer = Settled::Answered(Buffered {
        status: StatusCode::CREATED,
        headers: HeaderMap::new(),
        body: Bytes::from(
            r#"{"id":"OPS-123456","status":"created","url":"https://issues.example/OPS-123456"}"#,
        ),
        interim: false,
    });

    println!("capacity: {capacity:?}");
    let before = rss_kib();
    println!("VmRSS before: {before} KiB");
    let started = Instant::now();
    // One table at a time, so each one's share of the memory shows.
    let mut last = before;
    let phase = |name: &str, last: &mut u64| {
        let now = rss_kib();
        println!(
            "  after {name:<13} VmRSS {now} KiB (+{} KiB), {:?}",
            now.saturating_sub(*last),
            ledger.sizes()
        );
        *last = now;
    };
    for i in 0..count {
        let agent = format!("agent-{i}");
        let _ = ledger.check_rate(&agent, "create_issue", Some(&quota), Some(&quota));
    }
    phase("rate limits", &mut last);
    for i in 0..count {
        let session = format!("session-{i}");
        let args = Args::from(json!({"project_key": "OPS", "title": "disk full"}));
        let call = Call::new("ops-bot", Some(&session), "create_issue", &args, None);
        let _ = ledger.admit(&call, Some(&session_limits));
    }
    phase("sessions", &mut last);
    for i in 0..count {
        let session = format!("session-{i}");
        let args = Args::from(json!({"project_key": "OPS", "title": "disk full"}));
        let call = Call::new("ops-bot", Some(&session), "create_issue", &args, None);
        if let Ok(Turn::Lead(lead)) = ledger.dedupe().claim(&call, window) {
            lead.settle(answer.clone());
        }
    }
    phase("dedupe", &mut last);
    let sizes = ledger.sizes();
    let after = rss_kib();
    println!(
        "{count} distinct agents, sessions and calls in {:.1} s",
        started.elapsed().as_secs_f64()
    );
    println!(
        "VmRSS after: {after} KiB (+{} KiB)",
        after.saturating_sub(before)
    );
    println!(
        "entries: rate limiters {}, sessions {}, dedupe flights {} ({} bytes weighed)",
        sizes.rate_limiters, sizes.sessions, sizes.flights, sizes.flight_bytes
    );
}
