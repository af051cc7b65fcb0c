//! `toolgate contracts draft`: `ToolContract` YAML drafted from what a backend already
//! describes — an MCP server's `tools/list` ([`mcp`]) or an OpenAPI 3.0/3.1 document
//! ([`openapi`]) — for a person to review before it governs anything (DESIGN §16).
//!
//! Each source turns into plain [`Draft`]s; [`name`] gives them unique object names,
//! [`verify`] compiles them with the sidecar's own parser and snapshot build (what
//! `toolgate check` runs), and [`render`] prints them.
//!
//! Invariants: the output is deterministic (the same input prints the same bytes: MCP
//! tools in listing order, OpenAPI operations by path then method, schema keys sorted); every printed object passes `toolgate check`
//! (one the compiler refuses is printed commented out, with why); what a person must
//! decide is a `# review:` comment; nothing secret is printed (no token, no URL userinfo
//! or query), and text from the source reaches a comment only as one sanitized line.

pub mod dialect;
pub mod draft;
pub mod error;
pub mod mcp;
pub mod name;
pub mod openapi;
pub mod render;
pub mod verify;

pub use draft::{Binding, Draft, Drafted, Note};
pub use error::DraftError;
