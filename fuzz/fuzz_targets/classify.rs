//! Fuzz target `classify`: the input derivation and invariants live in
//! `toolgate::fuzzing::classify`, shared with the corpus replay in `tests/fuzz_corpus.rs`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| toolgate::fuzzing::classify(data));
