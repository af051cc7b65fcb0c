//! Approvals in the sidecar's memory (`state.backend: memory`): they live in the pod that
//! issued them, so they are decided through that pod's admin port.
//!
//! Bounded in count (`approvals.maxPending`), in bytes of arguments
//! (`approvals.maxPendingBytes`) and by time: an approval is kept until its expiry plus
//! [`KEEP_AFTER_MS`] (so a late lookup still finds it, expired), then dropped. When a new
//! approval would pass a bound, those past their keep go first, then those no longer
//! live (expired, used); if it still doesn't fit, the new approval is refused rather
//! than a live one dropped, so no approval a person is looking at vanishes.

use std::collections::HashMap;
use std::sync::Mutex;

use super::backlog::Backlog;
use super::page::{page_of, Page, Query};
use super::{Approval, DecideError, Decision, Requested, Status};

/// How long an approval is kept past its expiry, for listings and late lookups.
pub const KEEP_AFTER_MS: u64 = 3600 * 1000;

#[derive(Default)]
struct Inner {
    by_id: HashMap<String, Approval>,
    by_binding: HashMap<String, String>,
    /// The arguments' bytes of every approval in `by_id`.
    bytes: u64,
}

impl Inner {
    /// Drops the approvals `keep` refuses, with their bindings and bytes.
    fn retain(&mut self, keep: impl Fn(&Approval) -> bool) {
        let Inner {
            by_id,
            by_binding,
            bytes,
        } = self;
        by_id.retain(|_, a| {
            let kept = keep(a);
            if !kept {
                *bytes -= a.weight();
            }
            kept
        });
        by_binding.retain(|_, id| by_id.contains_key(id));
    }

    fn fits(&self, bounds: &Bounds, weight: u64) -> Result<(), Full> {
        if self.by_id.len() as u64 >= bounds.count {
            return Err(Full::Count);
        }
        if self.bytes.saturating_add(weight) > bounds.bytes {
            return Err(Full::Bytes);
        }
        Ok(())
    }
}

/// What the store may hold.
#[derive(Debug, Clone, Copy)]
pub struct Bounds {
    /// Approvals, any status.
    pub count: u64,
    /// Bytes of arguments, all approvals together.
    pub bytes: u64,
}

pub struct MemoryStore {
    inner: Mutex<Inner>,
    bounds: Bounds,
}

/// The store is full: a new approval can't be kept.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Full {
    /// `approvals.maxPending` approvals are kept.
    Count,
    /// The new approval's arguments would pass `approvals.maxPendingBytes`.
    Bytes,
}

impl MemoryStore {
    pub fn new(bounds: Bounds) -> MemoryStore {
        MemoryStore {
            inner: Mutex::default(),
            bounds: Bounds {
                count: bounds.count.max(1),
                bytes: bounds.bytes.max(1),
            },
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The live approval of `fresh`'s binding (pending, approved or denied, not expired),
    /// or `fresh` itself, now stored, with the approval it replaces if that one expired
    /// unused.
    pub fn request(&self, fresh: Approval, now_ms: u64) -> Result<Requested, Full> {
        let mut inner = self.lock();
        let mut expired = None;
        if let Some(current) = inner
            .by_binding
            .get(&fresh.binding)
            .and_then(|id| inner.by_id.get(id))
        {
            if current.is_live(now_ms) {
                return Ok(Requested {
                    current: current.clone(),
                    expired: None,
                });
            }
            if current.status_at(now_ms) == Status::Expired {
                expired = Some(current.clone());
            }
        }
        let weight = fresh.weight();
        if inner.fits(&self.bounds, weight).is_err() {
            inner.retain(|a| now_ms < a.expires_ms.saturating_add(KEEP_AFTER_MS));
        }
        if inner.fits(&self.bounds, weight).is_err() {
            // Kept only to be looked at: make room before refusing a live call.
            inner.retain(|a| a.is_live(now_ms));
        }
        inner.fits(&self.bounds, weight)?;
        inner.bytes += weight;
        inner
            .by_binding
            .insert(fresh.binding.clone(), fresh.id.clone());
        inner.by_id.insert(fresh.id.clone(), fresh.clone());
        Ok(Requested {
            current: fresh,
            expired,
        })
    }

    /// Marks an approved, unexpired approval used; `false` if it is not (any more).
    pub fn take(&self, id: &str, now_ms: u64) -> bool {
        let mut inner = self.lock();
        match inner.by_id.get_mut(id) {
            Some(a) if a.status_at(now_ms) == Status::Approved => {
                a.status = Status::Used;
                true
            }
            _ => false,
        }
    }

    pub fn get(&self, id: &str) -> Option<Approval> {
        self.lock().by_id.get(id).cloned()
    }

    /// One page of the approvals `query` asks for, as summaries (nothing of their
    /// arguments is copied).
    pub fn page(&self, query: &Query, now_ms: u64) -> Page {
        page_of(self.lock().by_id.values(), query, now_ms)
    }

    /// Bytes of arguments held.
    pub fn bytes(&self) -> u64 {
        self.lock().bytes
    }

    /// The approvals still waiting for a decision at `now_ms`, counted under the lock
    /// without a copy.
    pub fn backlog(&self, now_ms: u64) -> Backlog {
        let mut backlog = Backlog::default();
        for approval in self.lock().by_id.values() {
            if approval.status_at(now_ms) == Status::Pending {
                backlog.add(approval.created_ms);
            }
        }
        backlog
    }

    pub fn decide(
        &self,
        id: &str,
        decision: &Decision,
        now_ms: u64,
    ) -> Result<Approval, DecideError> {
        let mut inner = self.lock();
        let approval = inner.by_id.get_mut(id).ok_or(DecideError::NotFound)?;
        if approval.status_at(now_ms) != Status::Pending {
            let mut current = approval.clone();
            current.status = current.status_at(now_ms);
            return Err(DecideError::NotPending(Box::new(current)));
        }
        approval.status = if decision.approve {
            Status::Approved
        } else {
            Status::Denied
        };
        approval.decided_by = Some(decision.by.clone());
        approval.reason = decision.reason.clone();
        Ok(approval.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mk_store(count: u64) -> MemoryStore {
        MemoryStore::new(Bounds {
            count,
            bytes: 1 << 20,
        })
    }

    fn mk(binding: &str, id: &str, expires_ms: u64) -> Approval {
        Approval {
            id: id.into(),
            status: Status::Pending,
            tool: "refund".into(),
            agent: "ops-bot".into(),
            session: None,
            arguments: r#"{"amount":500}"#.into(),
            condition: "args.amount > 100".into(),
            approvers: vec!["finance".into()],
            created_ms: 0,
            expires_ms,
            decided_by: None,
            reason: None,
            binding: binding.into(),
        }
    }

    fn decision(approve: bool) -> Decision {
        Decision {
            approve,
            by: "alice".into(),
            reason: Some("ok".into()),
        }
    }

    #[test]
    fn a_binding_has_one_live_approval() {
        let store = mk_store(10);
        assert_eq!(store.request(mk("b", "1", 100), 0).unwrap().current.id, "1");
        assert_eq!(
            store.request(mk("b", "2", 100), 50).unwrap().current.id,
            "1"
        );
        // Expired: a new one, naming the one it replaces.
        let requested = store.request(mk("b", "3", 300), 100).unwrap();
        assert_eq!(requested.current.id, "3");
        assert_eq!(requested.expired.unwrap().id, "1");
        assert_eq!(store.get("1").unwrap().status_at(100), Status::Expired);
    }

    #[test]
    fn approve_once_take_once() {
        let store = mk_store(10);
        store.request(mk("b", "1", 100), 0).unwrap();
        assert!(!store.take("1", 1), "pending can't be taken");
        let decided = store.decide("1", &decision(true), 1).unwrap();
        assert_eq!(decided.status, Status::Approved);
        assert!(matches!(
            store.decide("1", &decision(false), 2),
            Err(DecideError::NotPending(_))
        ));
        assert!(store.take("1", 2));
        assert!(!store.take("1", 3), "used once");
        // Used: the next identical call asks anew.
        let requested = store.request(mk("b", "2", 200), 4).unwrap();
        assert_eq!(requested.current.id, "2");
        assert!(
            requested.expired.is_none(),
            "a used approval did not expire"
        );
        assert!(matches!(
            store.decide("x", &decision(true), 1),
            Err(DecideError::NotFound)
        ));
    }

    #[test]
    fn denied_stays_denied_until_it_expires_and_approved_expires() {
        let store = mk_store(10);
        store.request(mk("b", "1", 100), 0).unwrap();
        store.decide("1", &decision(false), 1).unwrap();
        let again = store.request(mk("b", "2", 200), 2).unwrap();
        assert_eq!(again.current.status, Status::Denied);
        store.request(mk("c", "3", 100), 0).unwrap();
        store.decide("3", &decision(true), 1).unwrap();
        assert!(!store.take("3", 100), "an expired approval runs nothing");
    }

    #[test]
    fn full_refuses_new_rather_than_dropping_live_ones() {
        let store = mk_store(2);
        store.request(mk("a", "1", 100), 0).unwrap();
        store.request(mk("b", "2", 100), 0).unwrap();
        assert_eq!(
            store.request(mk("c", "3", 100), 0).unwrap_err(),
            Full::Count
        );
        // Expired ones make room.
        assert!(store.request(mk("c", "3", 1000), 100).is_ok());
        assert!(store.get("3").is_some());
        assert_eq!(store.lock().by_id.len(), 1);
    }

    #[test]
    fn bytes_of_arguments_are_bounded_too() {
        let store = MemoryStore::new(Bounds {
            count: 100,
            bytes: 1000,
        });
        let big = |binding: &str, id: &str, bytes: usize| Approval {
            arguments: format!(r#"{{"note":"{}"}}"#, "x".repeat(bytes - 11)),
            ..mk(binding, id, 100)
        };
        store.request(big("a", "1", 600), 0).unwrap();
        assert_eq!(store.bytes(), 600);
        assert_eq!(
            store.request(big("b", "2", 500), 0).unwrap_err(),
            Full::Bytes
        );
        // The same call while pending is the same approval, however large.
        assert_eq!(
            store.request(big("a", "9", 600), 1).unwrap().current.id,
            "1"
        );
        store.request(big("b", "2", 400), 0).unwrap();
        assert_eq!(store.bytes(), 1000);
        // Used, it no longer needs its room.
        store.decide("1", &decision(true), 1).unwrap();
        assert!(store.take("1", 2));
        store.request(big("c", "3", 600), 3).unwrap();
        assert_eq!(store.bytes(), 1000);
        assert!(store.get("1").is_none());
    }
}
