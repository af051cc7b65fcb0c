//! Fuzz entry points: one function per `cargo fuzz` target (`fuzz/fuzz_targets/`), each
//! taking the fuzzer's raw bytes, deriving the structured input from them by plain byte
//! splitting, calling the real internal function and checking the invariants a user
//! relies on.
//!
//! A broken invariant panics: that is how a fuzzer, and the corpus replay in
//! `tests/fuzz_corpus.rs`, learns of it. These functions are not API; the module is
//! hidden and exists so stable `cargo test` and nightly `cargo fuzz` run the same checks.

mod admission;
mod audit;
pub(crate) mod classify;
mod jsonrpc;
mod manifest;
mod sse;

pub use admission::admission;
pub use audit::audit_verify;
pub use classify::classify;
pub use jsonrpc::jsonrpc;
pub use manifest::manifest;
pub use sse::sse;
