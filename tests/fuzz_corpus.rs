//! Replays the fuzz corpora and every input that once crashed a fuzz target
//! (`fuzz/corpus/<target>/`, `fuzz/regressions/<target>/`) through the same
//! `toolgate::fuzzing` checks the `cargo fuzz` targets run, so they hold on stable in
//! `cargo test` without nightly or libFuzzer.

use std::path::{Path, PathBuf};

type Target = fn(&[u8]);

const TARGETS: [(&str, Target); 6] = [
    ("classify", toolgate::fuzzing::classify),
    ("jsonrpc", toolgate::fuzzing::jsonrpc),
    ("manifest", toolgate::fuzzing::manifest),
    ("admission", toolgate::fuzzing::admission),
    ("sse", toolgate::fuzzing::sse),
    ("audit_verify", toolgate::fuzzing::audit_verify),
];

/// The files of `fuzz/<kind>/<target>/`, in name order; none when the folder is absent
/// (a target with no regression yet has no folder).
fn inputs(kind: &str, target: &str) -> Vec<PathBuf> {
    let folder = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("fuzz")
        .join(kind)
        .join(target);
    let Ok(entries) = std::fs::read_dir(&folder) else {
        return Vec::new();
    };
    let mut files: Vec<PathBuf> = entries
        .map(|e| e.unwrap().path())
        .filter(|p| p.is_file())
        .collect();
    files.sort();
    files
}

fn replay(kind: &str, target: &str, run: Target) -> usize {
    let files = inputs(kind, target);
    for file in &files {
        let data = std::fs::read(file).unwrap();
        // A panic names the file, so the failing input is one `cargo fuzz run <t> FILE` away.
        let outcome = std::panic::catch_unwind(|| run(&data));
        assert!(outcome.is_ok(), "{target} fails on {}", file.display());
    }
    files.len()
}

#[test]
fn every_corpus_input_passes_its_target() {
    for (target, run) in TARGETS {
        let replayed = replay("corpus", target, run);
        assert!(replayed > 0, "fuzz/corpus/{target} has no inputs");
    }
}

#[test]
fn every_input_that_once_crashed_passes_now() {
    for (target, run) in TARGETS {
        replay("regressions", target, run);
    }
}
