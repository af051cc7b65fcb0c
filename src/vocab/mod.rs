//! The vocabulary every layer shares: refusal codes and their table, recovery hints,
//! details, [`Reject`], the [`Decision`], a call's [`Args`] and the calling [`Agent`],
//! and the JSON readings every layer must agree on (strict parsing, canonical text).
//!
//! It sits at the bottom: it imports nothing of the proxy, the policy model or the
//! control plane, so `crd`, `policy`, `control` and `limits` speak of refusals and
//! arguments without reaching up into the data plane. How a refusal is rendered (HTTP,
//! JSON-RPC) is the data plane's business (`proxy::render`, `proxy::mcp::reply`).

pub mod agent;
pub mod args;
pub mod canonical_json;
pub mod code;
pub mod decision;
pub mod json_strict;
pub mod reject;
pub mod shown_url;

pub use agent::Agent;
pub use args::Args;
pub use code::{Code, Recovery};
pub use decision::Decision;
pub use reject::{Detail, Reject};
