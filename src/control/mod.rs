//! The control plane: sources (files, the cluster) feed an index, the index builds an
//! immutable compiled [`Snapshot`], and [`Control`] publishes it for the data plane.

pub mod bindings;
pub mod cluster;
pub mod contract;
pub mod files;
pub mod index;
pub mod parser;
pub mod policy;
pub mod publish;
pub mod quota;
pub mod redact;
pub mod routes;
pub mod rule;
pub mod schema;
pub mod snapshot;

pub use publish::{Control, Strictness, Update};
pub use snapshot::{BuildOptions, Snapshot, ToolId};
