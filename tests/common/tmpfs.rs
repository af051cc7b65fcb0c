//! A small tmpfs mounted for one test: a real filesystem that really fills up, for the
//! audit sink's full-disk fault. Unmounted when dropped, so a failing test doesn't leave
//! a mount behind. Mounting needs root (or CAP_SYS_ADMIN); without it [`Tmpfs::mount`]
//! says why and the caller skips.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::Command;

pub struct Tmpfs {
    dir: tempfile::TempDir,
}

impl Tmpfs {
    /// Mounts a tmpfs of `size` (`mount -o size=`, e.g. `256k`) on a fresh folder.
    pub fn mount(size: &str) -> Result<Tmpfs, String> {
        let dir = tempfile::tempdir().map_err(|e| format!("no temp folder: {e}"))?;
        let out = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(dir.path())
            .output()
            .map_err(|e| format!("cannot run mount: {e}"))?;
        if !out.status.success() {
            return Err(format!(
                "mount -t tmpfs failed ({}): {}",
                out.status,
                String::from_utf8_lossy(&out.stderr).trim()
            ));
        }
        Ok(Tmpfs { dir })
    }

    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    /// Writes `name` until the filesystem is full; returns its path.
    pub fn fill(&self, name: &str) -> PathBuf {
        use std::io::Write;
        let path = self.dir.path().join(name);
        let mut file = std::fs::File::create(&path).expect("filler file");
        let block = vec![0xA5u8; 4096];
        // Block by block, then byte by byte: no page of the filesystem is left free.
        while file.write_all(&block).is_ok() {}
        while file.write_all(&[0xA5]).is_ok() {}
        let _ = file.flush();
        path
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let out = Command::new("umount").arg(self.dir.path()).output();
        if !matches!(&out, Ok(o) if o.status.success()) {
            // Lazily, so the folder can still be removed once nothing holds it.
            let _ = Command::new("umount")
                .arg("-l")
                .arg(self.dir.path())
                .status();
        }
    }
}
