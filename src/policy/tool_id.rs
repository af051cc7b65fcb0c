//! The handle of a tool within one snapshot: what the route table resolves to and what a
//! request keeps instead of borrowing the contract across awaits.

/// Index of a contract in [`Snapshot::contracts`](super::Snapshot::contracts).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ToolId(pub usize);
