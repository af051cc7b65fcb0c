//! The file source: manifests from files and folders, re-read when their content changes.
//!
//! Polling by content hash rather than inotify: it sees ConfigMap updates (an atomic
//! symlink swap of `..data`), editors that replace files, and network filesystems alike,
//! and a policy folder is small enough to hash every [`POLL_INTERVAL`] (well inside the
//! 1 s enforcement budget).

use sha2::{Digest, Sha256};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use super::publish::{Control, Strictness, Update};
use crate::crd::{parse_documents, ManifestError, Object};

pub const SOURCE: &str = "files";
pub const POLL_INTERVAL: Duration = Duration::from_millis(250);

/// The contents of every manifest file under the configured paths.
#[derive(Debug, Default)]
pub struct Scan {
    pub files: Vec<(PathBuf, String)>,
    pub errors: Vec<ManifestError>,
    pub fingerprint: [u8; 32],
}

/// Reads the YAML files of `paths`: a file as given, a folder's `*.yaml`/`*.yml` files
/// (recursively, skipping hidden entries such as a ConfigMap's `..data`), in name order.
pub fn scan(paths: &[PathBuf]) -> Scan {
    let mut scan = Scan::default();
    for path in paths {
        collect(path, 0, &mut scan);
    }
    scan.files.sort();
    let mut hash = Sha256::new();
    for (path, text) in &scan.files {
        hash.update(path.to_string_lossy().as_bytes());
        hash.update([0]);
        hash.update(text.as_bytes());
        hash.update([0]);
    }
    for e in &scan.errors {
        hash.update(e.to_string().as_bytes());
    }
    scan.fingerprint = hash.finalize().into();
    scan
}

fn collect(path: &Path, depth: usize, scan: &mut Scan) {
    let unreadable = |e: std::io::Error| ManifestError {
        origin: path.display().to_string(),
        object: None,
        field: None,
        message: format!("cannot read: {e}"),
    };
    if path.is_dir() {
        if depth > 8 {
            return;
        }
        let entries = match std::fs::read_dir(path) {
            Ok(entries) => entries,
            Err(e) => return scan.errors.push(unreadable(e)),
        };
        for entry in entries.flatten() {
            let child = entry.path();
            let name = entry.file_name();
            let name = name.to_string_lossy();
            if name.starts_with('.') {
                continue;
            }
            if child.is_dir() || name.ends_with(".yaml") || name.ends_with(".yml") {
                collect(&child, depth + 1, scan);
            }
        }
    } else {
        match std::fs::read_to_string(path) {
            Ok(text) => scan.files.push((path.to_path_buf(), text)),
            Err(e) => scan.errors.push(unreadable(e)),
        }
    }
}

/// Parses a scan into objects, with every parse error.
pub fn parse(scan: &Scan) -> (Vec<Object>, Vec<ManifestError>) {
    let mut objects = Vec::new();
    let mut errors = scan.errors.clone();
    for (path, text) in &scan.files {
        let (mut o, mut e) = parse_documents(&path.display().to_string(), text);
        objects.append(&mut o);
        errors.append(&mut e);
    }
    (objects, errors)
}

/// Loads the files once, then applies every change until the task is dropped.
pub async fn watch(paths: Vec<PathBuf>, control: Arc<Control>) {
    let mut last = None;
    loop {
        let scan_paths = paths.clone();
        let scan = match tokio::task::spawn_blocking(move || scan(&scan_paths)).await {
            Ok(scan) => scan,
            Err(e) => {
                tracing::error!(error = %e, "policy scan failed");
                tokio::time::sleep(POLL_INTERVAL).await;
                continue;
            }
        };
        if last != Some(scan.fingerprint) {
            last = Some(scan.fingerprint);
            let (objects, errors) = parse(&scan);
            control.update(
                SOURCE,
                Update::Replace(objects),
                errors,
                Strictness::AllOrNothing,
            );
        }
        tokio::time::sleep(POLL_INTERVAL).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scans_folders_and_skips_hidden_entries() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("a.yaml"), "x: 1").unwrap();
        std::fs::write(dir.path().join("notes.txt"), "x").unwrap();
        std::fs::create_dir(dir.path().join("..data")).unwrap();
        std::fs::write(dir.path().join("..data/b.yaml"), "x: 1").unwrap();
        let s = scan(&[dir.path().to_path_buf()]);
        assert_eq!(s.files.len(), 1);
        assert!(s.errors.is_empty());
        let before = s.fingerprint;
        std::fs::write(dir.path().join("a.yaml"), "x: 2").unwrap();
        assert_ne!(scan(&[dir.path().to_path_buf()]).fingerprint, before);
    }

    #[test]
    fn missing_path_is_an_error() {
        let s = scan(&[PathBuf::from("/nonexistent/toolgate")]);
        assert_eq!(s.errors.len(), 1);
    }
}
