//! The backend: sending a call, reading what comes back, and the one mapping from a
//! backend failure to a refusal and to whether the call ran ([`failure`]).
//!
//! - [`upstream`]: the pooled HTTP/1.1 client; a send fails as a [`Failure`] that says
//!   how far it got (no connection, no response head, no head in time);
//! - [`exchange`]: one exchange as owned data; idempotent calls retried within their
//!   timeout, others sent once and buffered for their duplicates; the [`Backend`] seam
//!   the one call sequence sends through, and [`Keep`], how an at-most-once answer is
//!   read;
//! - [`failure`]: what can go wrong between toolgate and the backend, and the one
//!   function that turns it into a `Reject` and a [`Ran`](crate::limits::dedupe::Ran)
//!   answer. REST and MCP both call it; nothing else decides either;
//! - [`collect`]: an MCP backend's JSON-RPC answer, read whole or collected from an
//!   event stream, and the outcome an at-most-once MCP call keeps;
//! - [`relay`]: an at-most-once call's progress, relayed to its lead while it is
//!   collected;
//! - [`sse`]: the bounded parser of a backend's event stream.
//!
//! Nothing here imports a front door (`proxy::rest`, `proxy::mcp`): they call down into
//! this module, and turn what it hands back into their answers.

pub mod collect;
pub mod exchange;
pub mod failure;
pub mod relay;
pub mod sse;
pub mod upstream;
pub use exchange::{Backend, Keep};
pub use failure::{status_reject, Asked, Failure};
