//! Resident memory with many active sessions: a [`Ledger`] sized to hold them all (the
//! default `limits.maxSessions` is 50,000), `count` sessions each with an admitted call,
//! and one rate limiter per agent (an agent per 10 sessions). Prints `VmRSS` before and
//! after, and the bytes per session.

use serde_json::json;
use toolgate::config::Limits;
use toolgate::crd::{RateLimit, SessionLimits};
use toolgate::limits::{Call, Capacity, Clock, Ledger};
use toolgate::policy::quota::Quota;
use toolgate::vocab::args::Args;

#[path = "../../examples/common/rss.rs"]
mod rss;

use rss::rss_kib;

pub fn run(count: u64) -> anyhow::Result<()> {
    let settings = Limits {
        max_sessions: count,
        max_rate_limiters: count,
        ..Limits::default()
    };
    let ledger = Ledger::new(Capacity::from_settings(&settings), Clock::real());
    let quota = Quota::compile(
        "rateLimit",
        &RateLimit {
            per_second: Some(100),
            per_minute: None,
            burst: Some(100),
        },
    )
    .map_err(|e| anyhow::anyhow!("{}: {}", e.field, e.message))?;
    let limits = SessionLimits {
        max_calls: Some(200),
        max_repeats: Some(3),
        ..SessionLimits::default()
    };
    let before = rss_kib();
    for i in 0..count {
        let agent = format!("agent-{}", i / 10);
        let session = format!("session-{i}");
        let args =
            Args::from(json!({"service": "orders", "query": "status:shipped", "limit": 100}));
        let refused = |r: toolgate::vocab::Reject| anyhow::anyhow!(r.message);
        ledger
            .check_rate(&agent, "search_logs", Some(&quota), None)
            .map_err(refused)?;
        let call = Call::new(&agent, Some(&session), "search_logs", &args, None);
        ledger.admit(&call, Some(&limits)).map_err(refused)?;
    }
    let sizes = ledger.sizes();
    let after = rss_kib();
    let delta = after.saturating_sub(before);
    println!(
        "sessions={} rate_limiters={} rss_before_kib={before} rss_after_kib={after} delta_kib={delta} bytes_per_session={}",
        sizes.sessions,
        sizes.rate_limiters,
        delta * 1024 / count.max(1)
    );
    Ok(())
}
