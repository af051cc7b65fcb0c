//! Approvals in the sidecar's memory (`state.backend: memory`): they live in the pod that
//! issued them, so they are decided through that pod's admin port.
//!
//! Bounded in count (`approvals.maxPending`) and by time: an approval is kept until its
//! expiry plus [`KEEP_AFTER_MS`] (so a late lookup still finds it, expired), then
//! dropped. When full even after dropping those, a new approval is refused rather than
//! an existing one dropped, so no approval a person is looking at vanishes.

use std::collections::HashMap;
use std::sync::Mutex;

use super::backlog::Backlog;
use super::{Approval, DecideError, Decision, Requested, Status};

/// How long an approval is kept past its expiry, for listings and late lookups.
pub const KEEP_AFTER_MS: u64 = 3600 * 1000;

#[derive(Default)]
struct Inner {
    by_id: HashMap<String, Approval>,
    by_binding: HashMap<String, String>,
}

pub struct MemoryStore {
    inner: Mutex<Inner>,
    capacity: usize,
}

/// The store is full: a new approval can't be kept.
#[derive(Debug)]
pub struct Full;

impl MemoryStore {
    pub fn new(capacity: usize) -> MemoryStore {
        MemoryStore {
            inner: Mutex::default(),
            capacity: capacity.max(1),
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
            let status = current.status_at(now_ms);
            let live = matches!(status, Status::Pending | Status::Approved | Status::Denied);
            if live && now_ms < current.expires_ms {
                return Ok(Requested {
                    current: current.clone(),
                    expired: None,
                });
            }
            if status == Status::Expired {
                expired = Some(current.clone());
            }
        }
        if inner.by_id.len() >= self.capacity {
            let Inner { by_id, by_binding } = &mut *inner;
            by_id.retain(|_, a| now_ms < a.expires_ms.saturating_add(KEEP_AFTER_MS));
            by_binding.retain(|_, id| by_id.contains_key(id));
            if by_id.len() >= self.capacity {
                return Err(Full);
            }
        }
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

    /// Approvals, newest first, at most `limit`.
    pub fn list(&self, limit: usize) -> Vec<Approval> {
        let mut all: Vec<Approval> = self.lock().by_id.values().cloned().collect();
        all.sort_by_key(|a| std::cmp::Reverse(a.created_ms));
        all.truncate(limit);
        all
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
    use serde_json::json;

    fn mk(binding: &str, id: &str, expires_ms: u64) -> Approval {
        Approval {
            id: id.into(),
            status: Status::Pending,
            tool: "refund".into(),
            agent: "ops-bot".into(),
            session: None,
            arguments: json!({"amount": 500}),
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
        let store = MemoryStore::new(10);
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
        let store = MemoryStore::new(10);
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
        let store = MemoryStore::new(10);
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
        let store = MemoryStore::new(2);
        store.request(mk("a", "1", 100), 0).unwrap();
        store.request(mk("b", "2", 100), 0).unwrap();
        assert!(store.request(mk("c", "3", 100), 0).is_err());
        // Long expired ones make room.
        let later = KEEP_AFTER_MS + 100;
        assert!(store.request(mk("c", "3", later + 1000), later).is_ok());
    }
}
