//! Who may write status: the decision of one leader-election round, without I/O.
//!
//! The rules are client-go's, so a platform engineer's expectations of a Lease hold:
//! - a missing Lease is created with us as holder; a Lease we hold is renewed;
//! - a released Lease (no holder) is taken at once;
//! - another holder's Lease is taken over only when it has not changed for its
//!   `leaseDurationSeconds`, measured on *our* clock from when we first saw that
//!   version — never by comparing its `renewTime` with our clock, which may be skewed;
//! - a leader that could not renew for the renew deadline stops writing (in
//!   [`super::lease`]), which is shorter than the lease, so two replicas never write
//!   at once.

use k8s_openapi::api::coordination::v1::Lease;
use std::time::{Duration, Instant};

/// What to do with the Lease this round.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    Create,
    Renew,
    /// Released, or its holder stopped renewing: take it, counting a transition.
    TakeOver,
    /// Someone else holds it and is renewing.
    Follow {
        holder: String,
    },
}

/// One replica's view of the Lease across rounds.
#[derive(Debug)]
pub struct Candidate {
    pub identity: String,
    /// Used when the Lease doesn't say its own duration.
    pub lease_duration: Duration,
    seen: Option<Seen>,
}

#[derive(Debug)]
struct Seen {
    version: String,
    since: Instant,
}

impl Candidate {
    pub fn new(identity: String, lease_duration: Duration) -> Candidate {
        Candidate {
            identity,
            lease_duration,
            seen: None,
        }
    }

    /// What to do, given the Lease as just read (`None`: there is none) at `now`.
    pub fn step(&mut self, lease: Option<&Lease>, now: Instant) -> Step {
        let Some(lease) = lease else {
            self.seen = None;
            return Step::Create;
        };
        let version = lease.metadata.resource_version.clone().unwrap_or_default();
        let changed = self.seen.as_ref().is_none_or(|s| s.version != version);
        if changed {
            self.seen = Some(Seen {
                version,
                since: now,
            });
        }
        let spec = lease.spec.as_ref();
        let holder = spec
            .and_then(|s| s.holder_identity.clone())
            .filter(|h| !h.is_empty());
        let Some(holder) = holder else {
            return Step::TakeOver;
        };
        if holder == self.identity {
            return Step::Renew;
        }
        let duration = spec
            .and_then(|s| s.lease_duration_seconds)
            .and_then(|s| u64::try_from(s).ok())
            .map_or(self.lease_duration, Duration::from_secs);
        let since = self.seen.as_ref().map_or(now, |s| s.since);
        if now.duration_since(since) >= duration {
            Step::TakeOver
        } else {
            Step::Follow { holder }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::coordination::v1::LeaseSpec;
    use kube::api::ObjectMeta;

    fn mk_lease(holder: Option<&str>, version: &str, seconds: i32) -> Lease {
        Lease {
            metadata: ObjectMeta {
                resource_version: Some(version.into()),
                ..ObjectMeta::default()
            },
            spec: Some(LeaseSpec {
                holder_identity: holder.map(String::from),
                lease_duration_seconds: Some(seconds),
                ..LeaseSpec::default()
            }),
        }
    }

    fn mk_candidate(name: &str) -> Candidate {
        Candidate::new(name.into(), Duration::from_secs(15))
    }

    #[test]
    fn create_renew_and_take_a_released_lease() {
        let now = Instant::now();
        let mut a = mk_candidate("a");
        assert_eq!(a.step(None, now), Step::Create);
        assert_eq!(
            a.step(Some(&mk_lease(Some("a"), "1", 15)), now),
            Step::Renew
        );
        assert_eq!(a.step(Some(&mk_lease(None, "2", 1)), now), Step::TakeOver);
        assert_eq!(
            a.step(Some(&mk_lease(Some(""), "3", 1)), now),
            Step::TakeOver
        );
    }

    /// A holder that keeps renewing is followed however long it holds; one that stops
    /// is taken over a full lease after we first saw its last version.
    #[test]
    fn take_over_only_after_the_holder_stops_renewing() {
        let t0 = Instant::now();
        let mut b = mk_candidate("b");
        let follow = Step::Follow { holder: "a".into() };
        assert_eq!(b.step(Some(&mk_lease(Some("a"), "1", 10)), t0), follow);
        let t1 = t0 + Duration::from_secs(8);
        assert_eq!(
            b.step(Some(&mk_lease(Some("a"), "2", 10)), t1),
            follow,
            "renewed"
        );
        let t2 = t1 + Duration::from_secs(9);
        assert_eq!(
            b.step(Some(&mk_lease(Some("a"), "2", 10)), t2),
            follow,
            "not 10 s since version 2"
        );
        let t3 = t1 + Duration::from_secs(10);
        assert_eq!(
            b.step(Some(&mk_lease(Some("a"), "2", 10)), t3),
            Step::TakeOver
        );
    }

    /// Our own clock decides: a lease first seen long after its holder's last renewal
    /// still gets its full duration (renewTime is never compared with our clock).
    #[test]
    fn a_newcomer_waits_a_full_lease() {
        let t0 = Instant::now();
        let mut c = mk_candidate("c");
        let stale = mk_lease(Some("a"), "7", 5);
        assert!(matches!(c.step(Some(&stale), t0), Step::Follow { .. }));
        assert!(matches!(
            c.step(Some(&stale), t0 + Duration::from_secs(4)),
            Step::Follow { .. }
        ));
        assert_eq!(
            c.step(Some(&stale), t0 + Duration::from_secs(5)),
            Step::TakeOver
        );
    }
}
