//! The audit chain's key (`audit.keyFile`; docs/observability.md, "The audit log") and the hash every line is
//! sealed with: SHA-256 without a key, HMAC-SHA256 with one.
//!
//! With a key, whoever can write the log but does not hold the key cannot rebuild a
//! chain that verifies after an edit. The key is the file's bytes with surrounding
//! whitespace trimmed (a mounted Secret often ends in a newline); it must be at least
//! [`MIN_KEY_BYTES`] long so it can't be guessed.

use hmac::{Hmac, Mac};
use sha2::{Digest, Sha256};
use std::fmt;
use std::path::Path;

use crate::input::file::{read, Bound};

/// Shortest key accepted: 128 bits.
pub const MIN_KEY_BYTES: usize = 16;

/// The secret the chain is keyed with.
#[derive(Clone)]
pub struct AuditKey {
    bytes: Vec<u8>,
}

impl fmt::Debug for AuditKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Never print the secret, only which one it is.
        write!(f, "AuditKey({})", self.id())
    }
}

#[derive(Debug, thiserror::Error)]
pub enum KeyError {
    #[error("cannot use the audit key file: {0}")]
    Unreadable(#[from] crate::input::file::ReadError),
    #[error("the audit key in {path} is {len} bytes; use at least {MIN_KEY_BYTES} random bytes (e.g. `head -c 32 /dev/urandom | base64`)")]
    TooShort { path: String, len: usize },
}

impl AuditKey {
    pub fn load(path: &Path) -> Result<AuditKey, KeyError> {
        let raw = read(path, Bound::SMALL)?;
        AuditKey::from_bytes(&raw).ok_or_else(|| KeyError::TooShort {
            path: path.display().to_string(),
            len: raw.trim_ascii().len(),
        })
    }

    /// The key in `raw`, trimmed; `None` when it is too short.
    pub fn from_bytes(raw: &[u8]) -> Option<AuditKey> {
        let bytes = raw.trim_ascii();
        (bytes.len() >= MIN_KEY_BYTES).then(|| AuditKey {
            bytes: bytes.to_vec(),
        })
    }

    /// The secret itself, for the keyed digests of `privacy`.
    pub(super) fn secret(&self) -> &[u8] {
        &self.bytes
    }

    /// A public name for the key (the first 8 bytes of its SHA-256, hex), written into
    /// `start` records so an operator knows which key a log needs without seeing it.
    pub fn id(&self) -> String {
        hex::encode(&Sha256::digest(&self.bytes)[..8])
    }
}

/// How lines are sealed: the name `start` records carry in `chain`.
pub fn scheme(key: Option<&AuditKey>) -> &'static str {
    match key {
        Some(_) => "hmac-sha256",
        None => "sha256",
    }
}

/// The hash of a line: over `prev`, a newline, and the line's JSON without its closing
/// brace — keyed when a key is given.
pub fn link_hash(key: Option<&AuditKey>, prev: &str, body_without_brace: &str) -> String {
    match key {
        None => {
            let mut h = Sha256::new();
            h.update(prev.as_bytes());
            h.update(b"\n");
            h.update(body_without_brace.as_bytes());
            hex::encode(h.finalize())
        }
        Some(key) => {
            // new_from_slice accepts any length for HMAC; the error arm can't happen.
            let Ok(mut mac) = Hmac::<Sha256>::new_from_slice(&key.bytes) else {
                return String::new();
            };
            mac.update(prev.as_bytes());
            mac.update(b"\n");
            mac.update(body_without_brace.as_bytes());
            hex::encode(mac.finalize().into_bytes())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keyed_and_plain_hashes_differ_and_depend_on_the_key() {
        let a = AuditKey::from_bytes(b"0123456789abcdef0123\n").unwrap();
        let b = AuditKey::from_bytes(b"0123456789abcdef0124").unwrap();
        let plain = link_hash(None, "p", "{\"x\":1");
        assert_eq!(plain.len(), 64);
        assert_ne!(link_hash(Some(&a), "p", "{\"x\":1"), plain);
        assert_ne!(
            link_hash(Some(&a), "p", "{\"x\":1"),
            link_hash(Some(&b), "p", "{\"x\":1")
        );
        assert_eq!(a.id().len(), 16);
        assert!(!format!("{a:?}").contains("0123456789"));
    }

    #[test]
    fn short_keys_are_refused() {
        assert!(AuditKey::from_bytes(b"  short \n").is_none());
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("k");
        std::fs::write(&path, "tiny\n").unwrap();
        let err = AuditKey::load(&path).unwrap_err().to_string();
        assert!(err.contains("is 4 bytes"), "{err}");
        assert!(AuditKey::load(&dir.path().join("missing")).is_err());
    }
}
