//! Reference pages generated from the code's own tables, so the docs can't drift from
//! what toolgate does: `docs/errors.md` from the error table ([`errors`]), and
//! `docs/telemetry.md` from the telemetry registry ([`telemetry`]). A test
//! compares each page with its file (`TOOLGATE_BLESS=1 cargo test --test reference`
//! rewrites them), as `tests/crds.rs` does for `crds/`.

pub mod errors;
pub mod telemetry;
