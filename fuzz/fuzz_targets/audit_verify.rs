//! Fuzz target `audit_verify`: the input derivation and invariants live in
//! `toolgate::fuzzing::audit_verify`, shared with the corpus replay in `tests/fuzz_corpus.rs`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| toolgate::fuzzing::audit_verify(data));
