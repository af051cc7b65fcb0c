//! The one way toolgate reads a file: only a regular file, and only up to a bound.
//!
//! A path toolgate is told to read (a policy, the settings, agent or approver tokens, a
//! JWKS, a key, a certificate, the pod's labels) may name something that is not a file:
//! a FIFO, whose `open` blocks until a writer comes (a reload that never ends); a
//! device, whose read never ends (`/dev/zero`); a socket. Or a file far larger than any
//! real one. Invariants:
//! - the path is `stat`ed first, so a FIFO, device or socket is refused without being
//!   opened; then opened non-blocking (a FIFO swapped in after the `stat` still can't
//!   block the `open`) and the *handle* is `fstat`ed, so what is read is what was
//!   checked — there is no window between the check and the read;
//! - a symlink to a regular file is read (Kubernetes builds ConfigMap and Secret volumes
//!   from them); the check is on what it resolves to;
//! - at most the bound plus one byte is ever read, so a file that grows while being read
//!   (or a `/proc` file that claims size 0) can't grow memory past it.

use std::fs::{Metadata, OpenOptions};
use std::io::Read;
use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
use std::path::Path;

/// How much of a file may be read, and what to tell the user when it is larger.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Bound {
    pub bytes: u64,
    /// The setting or rule that sets the bound, named in the error.
    pub why: &'static str,
}

impl Bound {
    /// Keys, tokens, JWKS, certificates, settings and label files: none is near 1 MiB.
    pub const SMALL: Bound = Bound {
        bytes: 1 << 20,
        why: "key, token, certificate and settings files are read up to 1 MiB",
    };

    /// A policy manifest file (`limits.maxPolicyFileBytes`).
    pub fn policy(bytes: u64) -> Bound {
        Bound {
            bytes,
            why: "limits.maxPolicyFileBytes",
        }
    }
}

/// The default of `limits.maxPolicyFileBytes`.
pub const DEFAULT_MAX_POLICY_FILE_BYTES: u64 = 4 << 20;

/// Why a file was not read: its path and the [`Reason`], never its content.
#[derive(Debug, thiserror::Error)]
#[error("{path}: {reason}")]
pub struct ReadError {
    pub path: String,
    pub reason: Reason,
}

#[derive(Debug, thiserror::Error)]
pub enum Reason {
    #[error("cannot read: {0}")]
    Unreadable(std::io::Error),
    #[error(
        "not a regular file but a {0}; toolgate reads only regular files (or symlinks to them)"
    )]
    NotRegular(&'static str),
    #[error("larger than {} bytes ({})", .0.bytes, .0.why)]
    TooLarge(Bound),
    #[error("not UTF-8 text")]
    NotText,
}

impl ReadError {
    /// Why, without the path: for a message that names the path already.
    pub fn reason(&self) -> String {
        self.reason.to_string()
    }

    /// The file (or a folder on its path) does not exist.
    pub fn is_missing(&self) -> bool {
        matches!(&self.reason, Reason::Unreadable(e) if e.kind() == std::io::ErrorKind::NotFound)
    }
}

/// The bytes of the regular file at `path`, at most `bound` of them.
pub fn read(path: &Path, bound: Bound) -> Result<Vec<u8>, ReadError> {
    let fail = |reason| ReadError {
        path: path.display().to_string(),
        reason,
    };
    let before = std::fs::metadata(path).map_err(|e| fail(Reason::Unreadable(e)))?;
    check(&before, bound).map_err(fail)?;
    let file = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY)
        .open(path)
        .map_err(|e| fail(Reason::Unreadable(e)))?;
    let opened = file.metadata().map_err(|e| fail(Reason::Unreadable(e)))?;
    check(&opened, bound).map_err(fail)?;
    // The size is a hint (it may change, or be 0 for /proc files); `take` is the bound.
    let mut bytes = Vec::with_capacity(opened.len().min(bound.bytes) as usize);
    file.take(bound.bytes + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| fail(Reason::Unreadable(e)))?;
    if bytes.len() as u64 > bound.bytes {
        return Err(fail(Reason::TooLarge(bound)));
    }
    Ok(bytes)
}

/// The UTF-8 text of the regular file at `path`, at most `bound` bytes of it.
pub fn read_text(path: &Path, bound: Bound) -> Result<String, ReadError> {
    String::from_utf8(read(path, bound)?).map_err(|_| ReadError {
        path: path.display().to_string(),
        reason: Reason::NotText,
    })
}

fn check(meta: &Metadata, bound: Bound) -> Result<(), Reason> {
    if let Some(kind) = not_regular(meta) {
        return Err(Reason::NotRegular(kind));
    }
    if meta.len() > bound.bytes {
        return Err(Reason::TooLarge(bound));
    }
    Ok(())
}

/// What the file is when it is not a regular file.
pub fn not_regular(meta: &Metadata) -> Option<&'static str> {
    let kind = meta.file_type();
    if kind.is_file() {
        None
    } else if kind.is_dir() {
        Some("directory")
    } else if kind.is_fifo() {
        Some("FIFO")
    } else if kind.is_socket() {
        Some("socket")
    } else if kind.is_char_device() {
        Some("character device")
    } else if kind.is_block_device() {
        Some("block device")
    } else {
        Some("special file")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, Instant};

    fn mkfifo(path: &Path) {
        let status = std::process::Command::new("mkfifo")
            .arg(path)
            .status()
            .unwrap();
        assert!(status.success());
    }

    #[test]
    fn reads_regular_files_and_symlinks_to_them() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("a.yaml");
        std::fs::write(&file, "x: 1\n").unwrap();
        let link = dir.path().join("b.yaml");
        std::os::unix::fs::symlink(&file, &link).unwrap();
        assert_eq!(read_text(&file, Bound::SMALL).unwrap(), "x: 1\n");
        assert_eq!(read_text(&link, Bound::SMALL).unwrap(), "x: 1\n");
    }

    #[test]
    fn fifos_devices_sockets_and_folders_are_refused_at_once() {
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("p.yaml");
        mkfifo(&fifo);
        let socket = dir.path().join("s.yaml");
        let _listener = std::os::unix::net::UnixListener::bind(&socket).unwrap();
        let via_link = dir.path().join("l.yaml");
        std::os::unix::fs::symlink(&fifo, &via_link).unwrap();
        let started = Instant::now();
        for (path, kind) in [
            (fifo.as_path(), "FIFO"),
            (via_link.as_path(), "FIFO"),
            (socket.as_path(), "socket"),
            (Path::new("/dev/zero"), "character device"),
            (dir.path(), "directory"),
        ] {
            let err = read(path, Bound::SMALL).unwrap_err();
            assert!(
                matches!(err.reason, Reason::NotRegular(k) if k == kind),
                "{}: {err}",
                path.display()
            );
        }
        assert!(started.elapsed() < Duration::from_secs(1));
    }

    #[test]
    fn a_file_over_the_bound_is_refused_with_its_setting() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("big.yaml");
        std::fs::write(&file, vec![b'x'; 101]).unwrap();
        let bound = Bound {
            bytes: 100,
            why: "limits.maxPolicyFileBytes",
        };
        let err = read(&file, bound).unwrap_err().to_string();
        assert!(err.contains("larger than 100 bytes"), "{err}");
        assert!(err.contains("limits.maxPolicyFileBytes"), "{err}");
        std::fs::write(&file, vec![b'x'; 100]).unwrap();
        assert_eq!(read(&file, bound).unwrap().len(), 100);
    }

    #[test]
    fn proc_files_are_read_up_to_the_bound() {
        // Size 0 in stat, content when read: the bound still holds.
        let text = read_text(Path::new("/proc/self/status"), Bound::SMALL).unwrap();
        assert!(text.contains("VmRSS") || text.contains("Name"), "{text}");
        let tiny = Bound { bytes: 8, why: "t" };
        let err = read(Path::new("/proc/self/status"), tiny).unwrap_err();
        assert!(matches!(err.reason, Reason::TooLarge(_)), "{err}");
    }

    #[test]
    fn errors_name_the_path_not_the_content() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("secret");
        std::fs::write(&file, b"hunter2\xff").unwrap();
        let err = read_text(&file, Bound::SMALL).unwrap_err().to_string();
        assert!(err.contains("secret") && !err.contains("hunter2"), "{err}");
        let missing = read(&dir.path().join("missing"), Bound::SMALL).unwrap_err();
        assert!(missing.is_missing(), "{missing}");
    }
}
