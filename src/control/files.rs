//! The file source: manifests from files and folders, re-read when their content changes.
//!
//! Polling by content hash rather than inotify: it sees ConfigMap updates (an atomic
//! symlink swap of `..data`), editors that replace files, and network filesystems alike,
//! and a policy folder is small enough to hash every [`POLL_INTERVAL`] (well inside the
//! 1 s enforcement budget).
//!
//! Invariants:
//! - every file is read through [`crate::input::file`]: regular files only (a FIFO named
//!   `*.yaml` is an error, never opened for reading), each bounded by
//!   `limits.maxPolicyFileBytes`;
//! - a folder's symlinks to folders are not followed (a link to `.` or `/` can't turn a
//!   scan into a walk of the filesystem), its symlinks to files are (a ConfigMap volume's
//!   `name.yaml -> ..data/name.yaml`); hidden entries (`..data`) are skipped;
//! - the walk is bounded in depth ([`MAX_DEPTH`]), entries ([`MAX_ENTRIES`]) and bytes
//!   (16 files' worth): past a bound the scan is an error, not a hang;
//! - a reload runs on the blocking pool, one at a time; one that has not finished after
//!   [`RELOAD_DEADLINE`] marks the source stalled (`toolgate_policy_synchronized` 0, the
//!   reason in `/config`) until it does.

use sha2::{Digest, Sha256};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::publish::{Control, Strictness, Update};
use crate::crd::{parse_documents, ManifestError, Object};
use crate::input::file::{self, Bound};

pub const SOURCE: &str = "files";
pub const POLL_INTERVAL: Duration = Duration::from_millis(250);
/// A reload (scan, parse, build) that takes longer than this is reported as stalled.
pub const RELOAD_DEADLINE: Duration = Duration::from_secs(5);
/// Folders nested deeper than this under a configured folder are an error.
pub const MAX_DEPTH: usize = 8;
/// Directory entries a scan looks at, over all configured paths.
pub const MAX_ENTRIES: usize = 10_000;
/// The files of a scan together hold at most this many times the per-file bound.
const TOTAL_FILES_FACTOR: u64 = 16;

/// The contents of every manifest file under the configured paths.
#[derive(Debug, Default)]
pub struct Scan {
    pub files: Vec<(PathBuf, String)>,
    pub errors: Vec<ManifestError>,
    pub fingerprint: [u8; 32],
}

/// Reads the YAML files of `paths`: a file as given, a folder's `*.yaml`/`*.yml` files
/// (recursively, skipping hidden entries such as a ConfigMap's `..data` and symlinks to
/// folders), in name order; each file at most `max_file_bytes`.
pub fn scan(paths: &[PathBuf], max_file_bytes: u64) -> Scan {
    let mut walk = Walk {
        scan: Scan::default(),
        bound: Bound::policy(max_file_bytes),
        entries: 0,
        bytes: 0,
        stopped: false,
    };
    for path in paths {
        walk.root(path);
    }
    let mut scan = walk.scan;
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

struct Walk {
    scan: Scan,
    bound: Bound,
    entries: usize,
    bytes: u64,
    /// A walk bound was passed: the scan is an error and reads nothing more.
    stopped: bool,
}

impl Walk {
    /// A configured path: followed if it is a symlink (it was named on purpose).
    fn root(&mut self, path: &Path) {
        match std::fs::metadata(path) {
            Ok(meta) if meta.is_dir() => self.folder(path, 0),
            // A file named on purpose is read whatever its name; the reader refuses
            // anything but a regular file.
            Ok(_) => self.file(path),
            Err(e) => self.error(path, format!("cannot read: {e}")),
        }
    }

    fn folder(&mut self, dir: &Path, depth: usize) {
        if self.stopped {
            return;
        }
        if depth > MAX_DEPTH {
            return self.stop(
                dir,
                format!("folders nested more than {MAX_DEPTH} deep under a policy folder"),
            );
        }
        let entries = match std::fs::read_dir(dir) {
            Ok(entries) => entries,
            Err(e) => return self.error(dir, format!("cannot read: {e}")),
        };
        let mut children = Vec::new();
        for entry in entries {
            self.entries += 1;
            if self.entries > MAX_ENTRIES {
                return self.stop(
                    dir,
                    format!("more than {MAX_ENTRIES} entries under the policy paths; point policies.files at the manifests' own folder"),
                );
            }
            let entry = match entry {
                Ok(entry) => entry,
                Err(e) => return self.error(dir, format!("cannot read: {e}")),
            };
            let name = entry.file_name().to_string_lossy().into_owned();
            if !name.starts_with('.') {
                // `file_type` does not follow symlinks.
                children.push((name, entry.file_type().ok(), entry.path()));
            }
        }
        children.sort_by(|a, b| a.0.cmp(&b.0));
        for (name, kind, child) in children {
            let manifest = name.ends_with(".yaml") || name.ends_with(".yml");
            match kind {
                Some(kind) if kind.is_dir() => self.folder(&child, depth + 1),
                // A symlink to a folder is not followed; to a file, it is read.
                Some(kind)
                    if kind.is_symlink()
                        && manifest
                        && !std::fs::metadata(&child).is_ok_and(|m| m.is_dir()) =>
                {
                    self.file(&child)
                }
                Some(kind) if kind.is_symlink() => {}
                _ if manifest => self.file(&child),
                _ => {}
            }
        }
    }

    fn file(&mut self, path: &Path) {
        if self.stopped {
            return;
        }
        match file::read_text(path, self.bound) {
            Ok(text) => {
                self.bytes += text.len() as u64;
                let total = self.bound.bytes.saturating_mul(TOTAL_FILES_FACTOR);
                if self.bytes > total {
                    return self.stop(
                        path,
                        format!("the policy files add up to more than {total} bytes ({TOTAL_FILES_FACTOR} × limits.maxPolicyFileBytes)"),
                    );
                }
                self.scan.files.push((path.to_path_buf(), text));
            }
            Err(e) => self.error(path, e.reason()),
        }
    }

    fn error(&mut self, path: &Path, message: String) {
        self.scan.errors.push(ManifestError {
            origin: path.display().to_string(),
            object: None,
            field: None,
            message,
        });
    }

    fn stop(&mut self, path: &Path, message: String) {
        self.error(path, message);
        self.stopped = true;
        // What was read so far is not the policy: nothing of a stopped scan applies.
        self.scan.files.clear();
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
pub async fn watch(paths: Vec<PathBuf>, control: Arc<Control>, max_file_bytes: u64) {
    let last = Mutex::new(None);
    let reload_control = control.clone();
    let reload = move || {
        let scan = scan(&paths, max_file_bytes);
        let mut last = last.lock().unwrap_or_else(|p| p.into_inner());
        if *last == Some(scan.fingerprint) {
            return;
        }
        let (objects, errors) = parse(&scan);
        reload_control.update(
            SOURCE,
            Update::Replace(objects),
            errors,
            Strictness::AllOrNothing,
        );
        // Only once applied: a reload that panicked is tried again.
        *last = Some(scan.fingerprint);
    };
    drive(control, RELOAD_DEADLINE, Arc::new(reload)).await
}

/// Runs `reload` every [`POLL_INTERVAL`] on the blocking pool, one run at a time. A run
/// still going after `deadline` marks the source stalled until it ends; a run that
/// panics leaves it stalled until one succeeds.
async fn drive(control: Arc<Control>, deadline: Duration, reload: Arc<dyn Fn() + Send + Sync>) {
    loop {
        let run = reload.clone();
        let mut job = tokio::task::spawn_blocking(move || run());
        let ended = match tokio::time::timeout(deadline, &mut job).await {
            Ok(ended) => ended,
            Err(_) => {
                let why = format!(
                    "a policy reload has not finished after {} s (a file that never finishes reading?); the last good snapshot keeps serving",
                    deadline.as_secs_f64()
                );
                tracing::error!(source = SOURCE, "{why}");
                control.mark_stalled(SOURCE, why);
                job.await
            }
        };
        match ended {
            Ok(()) => control.mark_resumed(SOURCE),
            Err(e) => {
                tracing::error!(error = %e, "policy reload failed");
                control.mark_stalled(
                    SOURCE,
                    "the last policy reload failed (an internal error, logged); the last good snapshot keeps serving".into(),
                );
            }
        }
        tokio::time::sleep(POLL_INTERVAL).await;
    }
}

#[cfg(test)]
mod tests;
