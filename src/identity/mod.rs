//! Who is calling, and for which task: bearer tokens, agent JWTs, client certificates,
//! and orchestrator-signed task tokens; which ids each source may assert.

pub mod credential;
pub mod jwks;
pub mod jwt;
pub mod namespace;
pub mod task;
pub mod tokens;
pub mod verified;

pub use tokens::Tokens;
