//! Anonymous floods stay cheap (DESIGN §14): requests answered before any agent is
//! identified (`UNAUTHENTICATED`, malformed framing, bad paths, …) are limited per
//! client address, so a client without a credential can't fill the audit disk — and,
//! with `audit.onFailure: fail_closed`, stop every call once it is full.
//!
//! Each address has an allowance of `limits.unauthenticatedPerSecond` such answers a
//! second, bursting to twice that (a GCRA on the sidecar's limits clock). Past it, the
//! answer becomes `RATE_LIMITED` (429, with `Retry-After`) and leaves no audit record of
//! its own: the address's count goes up instead, and once a second each address with a
//! count gets one `suppressed` record carrying it. An answer that names an agent is
//! never screened here.
//!
//! Invariants:
//! - Memory is bounded whatever the number of addresses: allowances live in a bounded
//!   [`Table`] (least recently used go first; a full allowance is forgotten), and the
//!   counts waiting for their record are at most [`MAX_COUNTED`] addresses, the rest
//!   counted together under [`OTHERS`].
//! - An IPv6 client is one /64 (what one host can hand itself), an IPv4-mapped IPv6
//!   address is its IPv4 address.

use std::collections::HashMap;
use std::net::{IpAddr, Ipv6Addr};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use http::Response;

use crate::audit::record::{now, Suppressed};
use crate::audit::AuditLog;
use crate::limits::canonical::Key;
use crate::limits::table::{Op, Table, MIN_SHARD_ENTRIES};
use crate::limits::Clock;
use crate::proxy::body::Body;
use crate::proxy::outcome::Outcome;
use crate::proxy::render::into_response;
use crate::proxy::server::ClientAddress;
use crate::vocab::{Code, Reject};

/// Addresses whose allowance is remembered; past this the least recently seen go.
pub const MAX_ADDRESSES: u64 = 16_384;
/// Addresses whose suppressed count waits for its record; the rest share one.
pub const MAX_COUNTED: usize = 1024;
/// The `clientAddress` of the record for addresses beyond [`MAX_COUNTED`].
pub const OTHERS: &str = "other";
/// How often the counts become records.
const EVERY: Duration = Duration::from_secs(1);

/// The allowance of requests that name no agent, per client address.
pub struct Anonymous {
    /// Per address: the GCRA's theoretical arrival time, on `clock`.
    allowances: Table<Duration>,
    clock: Clock,
    /// Time between two requests at the sustained rate.
    emission: Duration,
    /// How far ahead of now the arrival time may run: the burst.
    tolerance: Duration,
    counts: Mutex<Counts>,
    audit: AuditLog,
}

/// Requests suppressed since the last records were written.
#[derive(Debug, Default)]
struct Counts {
    by_client: HashMap<Client, u64>,
    /// Those of addresses beyond [`MAX_COUNTED`].
    others: u64,
}

/// A client address as it is limited: an IPv4 address or an IPv6 /64.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
struct Client(IpAddr);

impl Client {
    fn of(address: IpAddr) -> Client {
        match address {
            IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
                Some(v4) => Client(IpAddr::V4(v4)),
                None => {
                    let prefix = u128::from(v6) & !((1u128 << 64) - 1);
                    Client(IpAddr::V6(Ipv6Addr::from(prefix)))
                }
            },
            v4 => Client(v4),
        }
    }

    fn key(self) -> Key {
        match self.0 {
            IpAddr::V4(v4) => v4.to_ipv6_mapped().octets(),
            IpAddr::V6(v6) => v6.octets(),
        }
    }

    fn name(self) -> String {
        match self.0 {
            IpAddr::V4(v4) => v4.to_string(),
            IpAddr::V6(v6) => format!("{v6}/64"),
        }
    }
}

impl Anonymous {
    /// `per_second` (at least 1) sustained, twice that in a burst.
    pub fn new(per_second: u32, clock: Clock, audit: AuditLog) -> Anonymous {
        let per_second = per_second.max(1);
        let emission = Duration::from_secs(1) / per_second;
        Anonymous {
            allowances: Table::new(MAX_ADDRESSES, MIN_SHARD_ENTRIES),
            clock,
            emission,
            tolerance: emission * (2 * per_second - 1),
            counts: Mutex::default(),
            audit,
        }
    }

    /// The answer to send instead of the pipeline's, when `outcome` names no agent and
    /// its client is past its allowance: `RATE_LIMITED`, with the outcome marked so it
    /// leaves no record of its own. `None`: send the pipeline's answer.
    pub fn screen(
        &self,
        client: Option<ClientAddress>,
        outcome: &mut Outcome,
    ) -> Option<Response<Body>> {
        if !outcome.is_anonymous() {
            return None;
        }
        let client = Client::of(client?.0);
        let wait = self.spend(client).err()?;
        self.count(client);
        let ms = u64::try_from(wait.as_millis()).unwrap_or(u64::MAX).max(1);
        let reject = Reject::new(
            Code::RateLimited,
            format!(
                "too many requests without a valid credential from this address; retry in {ms} ms"
            ),
        )
        .with_retry_after(ms);
        outcome.refused(&reject);
        outcome.suppress();
        Some(into_response(&reject, outcome.trace_id()))
    }

    /// Spends one of `client`'s allowance; `Err` with the wait for the next one.
    fn spend(&self, client: Client) -> Result<(), Duration> {
        let now = self.clock.now();
        self.allowances.compute(client.key(), now, |arrival| {
            let arrival = arrival.copied().unwrap_or(now).max(now);
            let ahead = arrival - now;
            if ahead > self.tolerance {
                return (Op::Keep, Err(ahead - self.tolerance));
            }
            let next = arrival + self.emission;
            // Once `next` has passed, the allowance is whole again: forgetting it
            // changes no answer.
            let put = Op::Put {
                value: next,
                weight: 1,
                expires_at: next,
            };
            (put, Ok(()))
        })
    }

    fn count(&self, client: Client) {
        let mut counts = self.counts.lock().unwrap_or_else(PoisonError::into_inner);
        let Counts { by_client, others } = &mut *counts;
        if by_client.len() < MAX_COUNTED || by_client.contains_key(&client) {
            *by_client.entry(client).or_insert(0) += 1;
        } else {
            *others += 1;
        }
    }

    /// Writes one `suppressed` record per address counted since the last time.
    pub async fn flush(&self) {
        let counts =
            std::mem::take(&mut *self.counts.lock().unwrap_or_else(PoisonError::into_inner));
        let others = (counts.others > 0).then(|| (OTHERS.to_string(), counts.others));
        let named = counts.by_client.into_iter().map(|(c, n)| (c.name(), n));
        for (client_address, count) in named.chain(others) {
            let suppressed = Suppressed {
                ts: now(),
                client_address,
                count,
            };
            self.audit.record_suppressed(suppressed).await;
        }
    }

    /// Flushes the counts once a second, until the task is dropped.
    pub async fn run(self: Arc<Self>) {
        let mut ticks = tokio::time::interval(EVERY);
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            ticks.tick().await;
            self.flush().await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Audit;
    use crate::telemetry::metrics::Metrics;

    fn mk_anonymous(per_second: u32, clock: &Clock) -> Anonymous {
        let off = Audit {
            path: "off".into(),
            ..Audit::default()
        };
        let audit = AuditLog::start(&off, String::new(), Arc::new(Metrics::new())).unwrap();
        Anonymous::new(per_second, clock.clone(), audit)
    }

    fn v4(text: &str) -> Client {
        Client::of(text.parse().unwrap())
    }

    #[tokio::test]
    async fn bursts_twice_the_rate_then_refills_at_the_rate() {
        let clock = Clock::fake();
        let anonymous = mk_anonymous(20, &clock);
        let client = v4("203.0.113.7");
        for i in 0..40 {
            assert!(anonymous.spend(client).is_ok(), "request {i} of the burst");
        }
        let wait = anonymous.spend(client).unwrap_err();
        assert!(wait <= Duration::from_millis(50), "{wait:?}");
        assert!(
            anonymous.spend(v4("203.0.113.8")).is_ok(),
            "another address"
        );
        clock.advance(Duration::from_millis(50));
        assert!(anonymous.spend(client).is_ok());
        assert!(anonymous.spend(client).is_err());
        clock.advance(Duration::from_secs(2));
        for _ in 0..40 {
            assert!(anonymous.spend(client).is_ok(), "a whole burst again");
        }
    }

    #[test]
    fn an_ipv6_host_is_its_slash_64_and_a_mapped_ipv4_its_ipv4() {
        let a = Client::of("2001:db8:1:2::1".parse().unwrap());
        let b = Client::of("2001:db8:1:2:ffff::9".parse().unwrap());
        let c = Client::of("2001:db8:1:3::1".parse().unwrap());
        assert_eq!(a, b);
        assert_ne!(a, c);
        assert_eq!(a.name(), "2001:db8:1:2::/64");
        assert_eq!(
            Client::of("::ffff:192.0.2.1".parse().unwrap()),
            v4("192.0.2.1")
        );
        assert_ne!(
            v4("0.0.0.0").key(),
            Client::of("::1".parse().unwrap()).key()
        );
    }

    #[tokio::test]
    async fn memory_is_bounded_whatever_the_number_of_addresses() {
        let clock = Clock::fake();
        let anonymous = mk_anonymous(1, &clock);
        for i in 0..100_000u32 {
            let client = Client(IpAddr::V4(i.into()));
            let _ = anonymous.spend(client);
            anonymous.count(client);
        }
        assert!(anonymous.allowances.len() as u64 <= MAX_ADDRESSES);
        let counts = anonymous.counts.lock().unwrap();
        assert_eq!(counts.by_client.len(), MAX_COUNTED);
        assert!(counts.by_client.values().all(|&n| n == 1));
        assert_eq!(counts.others, 100_000 - MAX_COUNTED as u64);
    }
}
