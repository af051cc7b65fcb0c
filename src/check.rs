//! `toolgate check`: lints manifests offline with the same parser and snapshot build the
//! sidecar uses, so what passes here loads there. It reads files as the sidecar does:
//! regular files only, bounded, without following symlinks to folders (`check /proc`
//! ends at once with an error instead of walking every process's filesystem).

use std::path::PathBuf;

use crate::control::files;
use crate::crd::ManifestError;
use crate::input::file::DEFAULT_MAX_POLICY_FILE_BYTES;
use crate::policy::{BuildOptions, Snapshot};

/// What a check found.
pub struct Report {
    pub files: usize,
    pub objects: usize,
    pub errors: Vec<ManifestError>,
    /// Grants for tools no contract in the linted set defines: fine for a policy shared
    /// by several workloads (each sidecar applies the grants it serves), but often a typo.
    pub warnings: Vec<ManifestError>,
}

/// How `check` builds: shadow allowed (it reports problems, not what one sidecar's
/// settings honour) and `workloadSelector` ignored (no pod, so every object applies).
/// The controller and the validating webhook build with the same options.
pub const OPTIONS: BuildOptions = BuildOptions {
    allow_shadow: true,
    pod_labels: None,
};

pub fn check(paths: &[PathBuf]) -> Report {
    compile(paths).1
}

/// The manifests at `paths` compiled as `check` lints them, and what it found: for a tool
/// that needs the compiled policy too (`toolgate replay`).
pub fn compile(paths: &[PathBuf]) -> (Snapshot, Report) {
    // What a sidecar with the default `limits.maxPolicyFileBytes` would read.
    let scan = files::scan(paths, DEFAULT_MAX_POLICY_FILE_BYTES);
    let (objects, mut errors) = files::parse(&scan);
    let (mut snapshot, build_errors) = Snapshot::build(&objects, &OPTIONS, 0);
    errors.extend(build_errors);
    let report = Report {
        files: scan.files.len(),
        objects: objects.len(),
        errors,
        warnings: std::mem::take(&mut snapshot.unserved),
    };
    (snapshot, report)
}
