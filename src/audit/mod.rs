//! The audit log: one hash-chained JSON line per decision (docs/observability.md), keyed with
//! `audit.keyFile`, opened by a `start` record and marked by a `policy` record for each
//! published policy version (§11).
//!
//! Records go through a bounded channel to one writer task that assigns `seq`, links the
//! chain and writes in batches. The log never drops: a full channel makes calls wait,
//! and when the sink can't be written the log turns unavailable so that calls are
//! refused (`AUDIT_UNAVAILABLE`, with `onFailure: fail_closed`) rather than run
//! unrecorded; records it could not write are kept (bounded) and retried.

pub mod key;
pub mod privacy;
pub mod record;
pub mod verify;
mod writer;

pub use key::AuditKey;
pub use record::{Entry, Record};
pub use writer::{AuditLog, Status};

#[cfg(test)]
mod tests;
