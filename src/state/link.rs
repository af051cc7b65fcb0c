//! The connection to Redis: one multiplexed, self-reconnecting connection per sidecar
//! (a standalone server through redis' `ConnectionManager`, a cluster through its
//! cluster connection), every round trip bounded by `state.redis.timeoutMs`.
//!
//! Invariants:
//! - Starting never waits for Redis: a sidecar whose Redis is down at start serves at
//!   once, under the failure policy of `state` (docs/state.md), and connects when Redis
//!   comes back. `/readyz` never asks Redis.
//! - Every round trip ends within the timeout, with an answer or an [`Unavailable`]; the
//!   caller decides whether that fails open or closed.
//! - Redis' errors are logged with what to check (address, password, TLS), at most once
//!   per outage, so a dead Redis doesn't flood the log at the call rate.
//! - An [`Unavailable`] says what went wrong and which setting to check, never where
//!   Redis is: its text may reach an agent in a `STATE_UNAVAILABLE` refusal, and an
//!   agent has no business learning internal hosts. The address is in the log line.
//! - `toolgate_state_up` is 0 from the start until Redis answers, and follows every round
//!   trip after. A probe (`PING`, every [`PROBE_EVERY`]) keeps it true on an idle
//!   sidecar, so an alert on it fires for an outage with no call to notice it, and
//!   never for a quiet pod whose Redis is fine.

use arc_swap::ArcSwapOption;
use redis::aio::{ConnectionLike, ConnectionManager, ConnectionManagerConfig};
use redis::cluster::ClusterClientBuilder;
use redis::cluster_async::ClusterConnection;
use redis::{Cmd, IntoConnectionInfo, Pipeline, RedisFuture, Value};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::config::Redis as Settings;
use crate::input::file::{read_text, Bound};
use crate::input::quiet;
use crate::input::url::shown;
use crate::telemetry::metrics::{Metrics, StateSeries};

/// Redis could not be asked in time, or answered with an error. Its text names no host.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{0}")]
pub struct Unavailable(pub String);

/// Which round trip it was, for `toolgate_state_errors_total{op}` and the duration.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    /// A call's limits and, for a non-idempotent call, its claim: one script.
    Admit,
    /// Reading a session's call count for rules that read `session.calls`.
    Session,
    /// Storing a claimed call's result.
    Settle,
    /// A duplicate reading the result of a call another pod runs.
    Follow,
    /// MCP session ownership.
    Owner,
    /// Human approvals: requested, taken, decided, listed.
    Approval,
    /// The call history `requires` reads: a call's read, a successful call's write.
    History,
    /// The link's own `PING`, while no call asks anything.
    Probe,
}

/// How often the link pings Redis, whatever the traffic.
pub const PROBE_EVERY: Duration = Duration::from_secs(5);

impl Op {
    pub const ALL: [Op; 8] = [
        Op::Admit,
        Op::Session,
        Op::Settle,
        Op::Follow,
        Op::Owner,
        Op::Approval,
        Op::History,
        Op::Probe,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Op::Admit => "admit",
            Op::Session => "session",
            Op::Settle => "settle",
            Op::Follow => "follow",
            Op::Owner => "owner",
            Op::Approval => "approval",
            Op::History => "history",
            Op::Probe => "probe",
        }
    }
}

/// A cheap clone of the shared connection, handed to one round trip.
#[derive(Clone)]
pub enum Conn {
    Single(ConnectionManager),
    Cluster(ClusterConnection),
}

impl ConnectionLike for Conn {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        match self {
            Conn::Single(c) => c.req_packed_command(cmd),
            Conn::Cluster(c) => c.req_packed_command(cmd),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        cmd: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        match self {
            Conn::Single(c) => c.req_packed_commands(cmd, offset, count),
            Conn::Cluster(c) => c.req_packed_commands(cmd, offset, count),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            Conn::Single(c) => c.get_db(),
            Conn::Cluster(c) => c.get_db(),
        }
    }
}

pub struct Link {
    /// Empty until the first connection is made (a cluster's needs the cluster up).
    conn: ArcSwapOption<Conn>,
    timeout: Duration,
    metrics: Arc<Metrics>,
    /// Each operation's series, in the order of [`Op::ALL`].
    series: Vec<StateSeries>,
    /// Whether the last round trip failed: logs and `toolgate_state_up` change on edges.
    down: AtomicBool,
    /// What to show in logs: the URL without its credentials.
    target: String,
}

impl Link {
    /// Sets up the connection without waiting for Redis; a cluster (or a server down at
    /// start) is connected in the background.
    pub fn start(settings: &Settings, metrics: Arc<Metrics>) -> anyhow::Result<Arc<Link>> {
        let mut info = settings.url.as_str().into_connection_info().map_err(|e| {
            anyhow::anyhow!(
                "state.redis.url {}: {}",
                shown(&settings.url),
                quiet::error(&e)
            )
        })?;
        if let Some(file) = &settings.password_file {
            let password = read_text(file, Bound::SMALL)
                .map_err(|e| anyhow::anyhow!("state.redis.passwordFile: {e}"))?;
            let redis = info
                .redis_settings()
                .clone()
                .set_password(password.trim_end_matches(['\r', '\n']));
            info = info.set_redis_settings(redis);
        }
        let timeout = Duration::from_millis(settings.timeout_ms);
        let link = Arc::new(Link {
            conn: ArcSwapOption::empty(),
            timeout,
            series: Op::ALL
                .iter()
                .map(|op| metrics.state_series(op.as_str()))
                .collect(),
            metrics,
            down: AtomicBool::new(false),
            target: format!("{}", info.addr()),
        });
        link.metrics.state_up.set(0);
        if settings.cluster {
            let builder = ClusterClientBuilder::new(vec![info])
                .connection_timeout(timeout)
                .response_timeout(timeout)
                .retries(1);
            let client = builder
                .build()
                .map_err(|e| anyhow::anyhow!("state.redis: {e}"))?;
            let connecting = link.clone();
            tokio::spawn(async move {
                let mut wait = Duration::from_millis(100);
                loop {
                    match client.get_async_connection().await {
                        Ok(conn) => {
                            connecting.conn.store(Some(Arc::new(Conn::Cluster(conn))));
                            tracing::info!(target = %connecting.target, "connected to the Redis Cluster");
                            return;
                        }
                        Err(e) => {
                            connecting.failed(&Unavailable(describe(&e)), &e.to_string());
                            tokio::time::sleep(wait).await;
                            wait = (wait * 2).min(Duration::from_secs(5));
                        }
                    }
                }
            });
        } else {
            let client =
                redis::Client::open(info).map_err(|e| anyhow::anyhow!("state.redis: {e}"))?;
            let config = ConnectionManagerConfig::new()
                .set_connection_timeout(Some(timeout))
                .set_response_timeout(Some(timeout))
                .set_number_of_retries(1)
                .set_max_delay(Duration::from_secs(2));
            let manager = ConnectionManager::new_lazy_with_config(client, config)
                .map_err(|e| anyhow::anyhow!("state.redis: {e}"))?;
            link.conn.store(Some(Arc::new(Conn::Single(manager))));
        }
        tokio::spawn(probe(Arc::downgrade(&link)));
        Ok(link)
    }

    /// One round trip: `run` is given the connection; the answer must come within the
    /// timeout. Counted and timed under `op`.
    pub async fn call<T, F, Fut>(&self, op: Op, run: F) -> Result<T, Unavailable>
    where
        F: FnOnce(Conn) -> Fut,
        Fut: std::future::Future<Output = redis::RedisResult<T>>,
    {
        let started = Instant::now();
        let Some(conn) = self.conn.load_full() else {
            self.series(op).record(started.elapsed(), false);
            return Err(Unavailable(
                "not connected to Redis yet (state.redis.url)".into(),
            ));
        };
        // Boxed: a round trip's future is kilobytes (redis-rs's exchange), and every caller
        // up to the call's own task would otherwise carry it by value.
        let answer = tokio::time::timeout(self.timeout, Box::pin(run((*conn).clone()))).await;
        let result = match answer {
            Ok(Ok(value)) => Ok(value),
            Ok(Err(e)) => Err((Unavailable(describe(&e)), e.to_string())),
            Err(_) => {
                let why = format!(
                    "Redis did not answer within {} ms (state.redis.timeoutMs)",
                    self.timeout.as_millis()
                );
                Err((Unavailable(why.clone()), why))
            }
        };
        self.series(op).record(started.elapsed(), result.is_ok());
        match result {
            Ok(value) => {
                self.recovered();
                Ok(value)
            }
            Err((error, detail)) => {
                self.failed(&error, &detail);
                Err(error)
            }
        }
    }

    /// Where Redis is (without credentials) and whether its last round trip answered.
    pub fn status(&self) -> (&str, bool) {
        (
            &self.target,
            !self.down.load(Ordering::Relaxed) && self.conn.load().is_some(),
        )
    }

    fn series(&self, op: Op) -> &StateSeries {
        &self.series[op as usize]
    }

    /// `detail` is Redis' own error, which may name hosts: for the log only.
    fn failed(&self, error: &Unavailable, detail: &str) {
        if !self.down.swap(true, Ordering::Relaxed) {
            self.metrics.state_up.set(0);
            tracing::error!(target = %self.target, error = %error, detail, "shared state (Redis) unavailable: rate limits and budgets fail open, non-idempotent calls get STATE_UNAVAILABLE");
        }
    }

    fn recovered(&self) {
        if self.down.swap(false, Ordering::Relaxed) || self.metrics.state_up.get() == 0 {
            self.metrics.state_up.set(1);
            tracing::info!(target = %self.target, "shared state (Redis) available");
        }
    }
}

/// Pings Redis every [`PROBE_EVERY`] until the link is dropped: the round trip sets
/// `toolgate_state_up` (and logs an outage or a recovery) as a call's would.
async fn probe(link: std::sync::Weak<Link>) {
    loop {
        let Some(strong) = link.upgrade() else {
            return;
        };
        let _ = strong
            .call(Op::Probe, |mut conn| async move {
                redis::cmd("PING").query_async::<String>(&mut conn).await
            })
            .await;
        drop(strong);
        tokio::time::sleep(PROBE_EVERY).await;
    }
}

/// What went wrong, by kind, with what an operator should check — not Redis' own
/// text, which may name hosts (a cluster's `MOVED 1234 10.0.0.7:6379`, a DNS failure).
fn describe(e: &redis::RedisError) -> String {
    let what = match e.kind() {
        redis::ErrorKind::AuthenticationFailed => {
            "Redis refused the password (check state.redis.url or state.redis.passwordFile)"
        }
        _ if e.is_connection_refusal() => {
            "Redis refused the connection (is Redis running at state.redis.url?)"
        }
        _ if e.is_timeout() => "Redis did not answer in time (state.redis.timeoutMs)",
        _ if e.to_string().to_ascii_lowercase().contains("tls") => {
            "TLS to Redis failed (rediss:// needs a server that speaks TLS, and a certificate this pod trusts)"
        }
        _ if e.is_io_error() || e.is_connection_dropped() => {
            "the connection to Redis failed (state.redis.url)"
        }
        _ => "Redis answered with an error",
    };
    match e.code() {
        Some(code) if code.chars().all(|c| c.is_ascii_uppercase()) => format!("{what} ({code})"),
        _ => what.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_ops_series_is_found_by_its_place_in_all() {
        for (i, op) in Op::ALL.into_iter().enumerate() {
            assert_eq!(op as usize, i, "{op:?}");
        }
    }
}
