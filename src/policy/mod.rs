//! The compiled policy model: what one [`Snapshot`] enforces. Contracts (schemas, routes,
//! redaction), agent policies (grants, CEL rules, quotas), all compiled once per snapshot
//! and immutable after. It knows nothing of where policies come from (`control`) or of
//! how calls arrive (`proxy`): `proxy → policy ← control`.

pub mod action;
pub mod agent_policy;
pub mod bindings;
pub mod contract;
pub mod fault;
pub mod field_reads;
pub mod parser;
pub mod quota;
pub mod reader;
pub mod redact;
pub mod requires;
pub mod routes;
pub mod rule;
pub mod schema;
pub mod snapshot;
pub mod spend;
pub mod tool_id;

pub use fault::{Fault, FieldError, Finding};
pub use reader::SnapshotReader;
pub use snapshot::{BuildOptions, Snapshot};
pub use tool_id::ToolId;
