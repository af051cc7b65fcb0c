//! Who is calling, and for which task: bearer tokens, agent JWTs, client certificates,
//! workload identity (projected ServiceAccount tokens) and orchestrator-signed task
//! tokens; which ids each source may assert; where issuers' keys come from (files, URLs,
//! discovery, the API server) and how fetched ones stay fresh.

pub mod credential;
pub mod discovery;
pub mod fetch;
pub mod jwks;
pub mod jwt;
pub mod keyset;
pub mod kubernetes;
pub mod namespace;
pub mod origin;
pub mod remote;
pub mod task;
pub mod tokens;
pub mod verified;

pub use tokens::Tokens;
