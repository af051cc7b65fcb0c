//! toolgate: a deterministic gateway for AI-agent tool calls.
//!
//! The data plane ([`proxy`]) runs every call through typed stages against an immutable
//! compiled [`policy::Snapshot`]; the control plane ([`control`]) builds snapshots from
//! policy sources; [`audit`] and [`telemetry`] record every decision. [`vocab`] is the
//! vocabulary every layer shares (refusal codes, [`vocab::Reject`], arguments, the agent).
#![forbid(unsafe_code)]

pub mod admin;
pub mod approvals;
pub mod audit;
pub mod check;
pub mod config;
pub mod contracts; // `toolgate contracts draft` (issue 47)
pub mod control;
pub mod controller; // status on the objects (issue 48)
pub mod crd;
pub mod demo;
#[doc(hidden)] // fuzz entry points shared by `fuzz/` and tests/fuzz_corpus.rs; not API
pub mod fuzzing;
pub mod identity;
pub mod inject; // inject (issue 8): the sidecar injector webhook
pub mod input;
pub mod limits;
pub mod policy;
pub mod proxy;
pub mod reference;
pub mod replay;
pub mod sidecar;
pub mod state;
pub mod telemetry;
pub mod tls;
pub mod vocab;
