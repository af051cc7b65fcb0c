//! One Redis round trip as toolgate's own stack makes it: the same client crate and
//! connection (redis-rs' `ConnectionManager`, a multiplexed connection with its driver
//! task) on Tokio's multi-thread runtime, one command at a time, timed around each.
//!
//! `redis-benchmark` gives the C client's figure, timed inside its event loop; this one
//! is what a Rust service on Tokio pays for the same command on an idle machine, so
//! "full + redis stays within one round trip" can be read against both.

use std::time::{Duration, Instant};

/// Commands sent before timing starts: the connection made, the script cached.
const WARM_UP: usize = 1_000;

/// Sends `command` (its words, as `redis-cli` takes them) `requests` times in a row and
/// prints `p50=… mean=…` in milliseconds.
pub async fn run(url: String, requests: usize, command: Vec<String>) -> anyhow::Result<()> {
    let (name, args) = command
        .split_first()
        .ok_or_else(|| anyhow::anyhow!("give the command to time after --"))?;
    let mut cmd = redis::cmd(name);
    for arg in args {
        cmd.arg(arg);
    }
    let client = redis::Client::open(url)?;
    let mut conn = client.get_connection_manager().await?;
    for _ in 0..WARM_UP {
        cmd.query_async::<redis::Value>(&mut conn).await?;
    }
    let mut took = Vec::with_capacity(requests);
    for _ in 0..requests {
        let sent = Instant::now();
        cmd.query_async::<redis::Value>(&mut conn).await?;
        took.push(sent.elapsed());
    }
    took.sort_unstable();
    let p50 = took.get(took.len() / 2).copied().unwrap_or_default();
    let mean = took.iter().sum::<Duration>() / took.len().max(1) as u32;
    println!(
        "p50={:.3} mean={:.3} requests={}",
        p50.as_secs_f64() * 1e3,
        mean.as_secs_f64() * 1e3,
        took.len()
    );
    Ok(())
}
