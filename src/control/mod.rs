//! The control plane: sources (files, the cluster) feed an index, the index builds an
//! immutable compiled [`Snapshot`](crate::policy::Snapshot), and [`Control`] publishes it;
//! the data plane reads it through a [`SnapshotReader`](crate::policy::SnapshotReader).

pub mod cluster;
pub mod files;
pub mod index;
pub mod publish;

pub use publish::{Control, Strictness, Update};
