//! Where approvals are kept: the sidecar's memory or the shared state, behind one
//! interface, so the gate and the API don't care which.

use super::memory::{Full, MemoryStore};
use super::page::{Page, Query};
use super::shared::{Refused, SharedApprovals};
use super::{now_ms, Approval, DecideError, Decision, Requested};
use crate::vocab::{Code, Reject};

pub enum Store {
    Memory(MemoryStore),
    Shared(SharedApprovals),
}

impl Store {
    /// The live approval of `fresh`'s binding, or `fresh`, now stored. `Err` when it
    /// can't be kept: the call is refused (nothing runs unapproved).
    pub async fn request(&self, fresh: Approval) -> Result<Requested, Reject> {
        match self {
            Store::Memory(store) => store.request(fresh, now_ms()).map_err(full),
            Store::Shared(shared) => {
                shared
                    .request_approval(&fresh)
                    .await
                    .map_err(|refused| match refused {
                        Refused::Full(why) => full(why),
                        Refused::Unavailable(e) => crate::state::unavailable(&e),
                    })
            }
        }
    }

    /// Marks an approved approval used, so it runs its call once; `false` if it is not
    /// approved (any more).
    pub async fn take(&self, id: &str) -> Result<bool, Reject> {
        match self {
            Store::Memory(store) => Ok(store.take(id, now_ms())),
            Store::Shared(shared) => shared
                .take_approval(id)
                .await
                .map_err(|e| crate::state::unavailable(&e)),
        }
    }

    pub async fn get(&self, id: &str) -> Result<Option<Approval>, String> {
        match self {
            Store::Memory(store) => Ok(store.get(id)),
            Store::Shared(shared) => shared.get_approval(id).await.map_err(|e| e.0),
        }
    }

    /// The approvals waiting for a decision now (a shared store's: the oldest
    /// [`SCAN_LIMIT`](super::backlog::SCAN_LIMIT)).
    pub async fn backlog(&self) -> Result<super::backlog::Backlog, String> {
        match self {
            Store::Memory(store) => Ok(store.backlog(now_ms())),
            Store::Shared(shared) => shared
                .backlog(super::backlog::SCAN_LIMIT)
                .await
                .map_err(|e| e.0),
        }
    }

    /// One page of approvals, newest first, without their arguments.
    pub async fn page(&self, query: &Query) -> Result<Page, String> {
        match self {
            Store::Memory(store) => Ok(store.page(query, now_ms())),
            Store::Shared(shared) => shared.page_approvals(query).await.map_err(|e| e.0),
        }
    }

    pub async fn decide(&self, id: &str, decision: &Decision) -> Result<Approval, DecideError> {
        match self {
            Store::Memory(store) => store.decide(id, decision, now_ms()),
            Store::Shared(shared) => shared.decide_approval(id, decision).await,
        }
    }
}

/// The refusal of a call whose approval can't be kept: retryable, as decisions and
/// expiry make room; the approvals already kept stay.
fn full(why: Full) -> Reject {
    let message = match why {
        Full::Count => "too many approvals are held (approvals.maxPending); retry once some are decided",
        Full::Bytes => "the approvals held would pass approvals.maxPendingBytes with this call's arguments; retry once some are decided",
    };
    Reject::new(Code::StateUnavailable, message)
}
