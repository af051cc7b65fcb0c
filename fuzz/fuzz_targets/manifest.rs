//! Fuzz target `manifest`: the input derivation and invariants live in
//! `toolgate::fuzzing::manifest`, shared with the corpus replay in `tests/fuzz_corpus.rs`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| toolgate::fuzzing::manifest(data));
