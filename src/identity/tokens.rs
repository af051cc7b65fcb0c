//! Static bearer tokens: a YAML map of agent id → hex SHA-256 of the agent's token.
//!
//! Only digests are stored, so the file is not a secret. A presented token is hashed,
//! looked up by digest, and the digest compared again with `subtle`'s constant-time
//! equality. The lookup itself can only leak how much of SHA-256(guess) matches a stored
//! digest, which says nothing about any token.

use arc_swap::ArcSwap;
use sha2::{Digest, Sha256};
use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;
use subtle::ConstantTimeEq;

use crate::input::file::{read, read_text, Bound};
use crate::input::quiet;

#[derive(Debug, Default)]
pub struct TokenTable {
    by_digest: HashMap<[u8; 32], Arc<str>>,
    /// The agents the file names, looked up on every call of an unprefixed JWT issuer.
    agents: HashSet<Arc<str>>,
}

impl TokenTable {
    /// Whether the file names `agent`: such an id is the token file's, and a JWT issuer
    /// without a prefix may not assert it.
    pub fn names(&self, agent: &str) -> bool {
        self.agents.contains(agent)
    }
}

impl TokenTable {
    pub fn parse(text: &str) -> Result<TokenTable, String> {
        let map: HashMap<String, String> = if text.trim().is_empty() {
            HashMap::new()
        } else {
            serde_yaml::from_str(text).map_err(|e| {
                format!(
                    "expected a map of agent id to SHA-256: {}",
                    quiet::error(&e)
                )
            })?
        };
        let mut by_digest = HashMap::new();
        for (agent, digest) in map {
            let hex_digest = digest.strip_prefix("sha256:").unwrap_or(&digest);
            let bytes: [u8; 32] = hex::decode(hex_digest)
                .ok()
                .and_then(|b| b.try_into().ok())
                .ok_or_else(|| format!("{agent}: not a hex SHA-256 digest"))?;
            if by_digest.insert(bytes, Arc::from(agent.as_str())).is_some() {
                return Err(format!("{agent}: the same token digest is listed twice"));
            }
        }
        let agents = by_digest.values().cloned().collect();
        Ok(TokenTable { by_digest, agents })
    }

    /// The agent whose token this is.
    pub fn agent(&self, token: &str) -> Option<Arc<str>> {
        let digest: [u8; 32] = Sha256::digest(token.as_bytes()).into();
        let (stored, agent) = self.by_digest.get_key_value(&digest)?;
        bool::from(stored.ct_eq(&digest)).then(|| agent.clone())
    }
}

/// The token table, reloaded when its file changes.
pub struct Tokens {
    table: ArcSwap<TokenTable>,
    /// Why the file's latest content was not taken, while it isn't (`/config`).
    failed: std::sync::Mutex<Option<String>>,
}

impl Tokens {
    pub fn new(table: TokenTable) -> Tokens {
        Tokens {
            table: ArcSwap::from_pointee(table),
            failed: std::sync::Mutex::new(None),
        }
    }

    pub fn load(path: &Path) -> Result<Tokens, String> {
        let text = read_text(path, Bound::SMALL).map_err(|e| e.to_string())?;
        Ok(Tokens::new(
            TokenTable::parse(&text).map_err(|e| format!("{}: {e}", path.display()))?,
        ))
    }

    pub fn agent(&self, token: &str) -> Option<Arc<str>> {
        self.table.load().agent(token)
    }

    /// The agent ids the file names now.
    pub fn agents(&self) -> Vec<Arc<str>> {
        self.table.load().agents.iter().cloned().collect()
    }

    /// Why the file as it is now was not loaded (the previous tokens still serve), or
    /// `None` when the tokens in use are the file's: a revocation that failed to load
    /// must be visible, not only logged.
    pub fn reload_error(&self) -> Option<String> {
        self.failed.lock().ok().and_then(|f| f.clone())
    }

    fn note(&self, error: Option<String>) {
        if let Ok(mut failed) = self.failed.lock() {
            *failed = error;
        }
    }

    /// Whether the current file names `agent`.
    pub fn names(&self, agent: &str) -> bool {
        self.table.load().names(agent)
    }

    /// Re-reads the file when it changes; a bad edit keeps the previous table.
    pub async fn watch(self: Arc<Self>, path: PathBuf) {
        let mut last = read(&path, Bound::SMALL).ok();
        loop {
            tokio::time::sleep(Duration::from_millis(500)).await;
            let now = read(&path, Bound::SMALL).ok();
            if now == last {
                continue;
            }
            last = now;
            match Tokens::load(&path) {
                Ok(fresh) => {
                    self.table.store(fresh.table.load_full());
                    self.note(None);
                    tracing::info!(path = %path.display(), "agent tokens reloaded");
                }
                Err(error) => {
                    tracing::error!(%error, "agent tokens not reloaded; keeping the previous ones");
                    self.note(Some(error));
                }
            }
        }
    }
}

/// Hex SHA-256 of a token, the form the tokens file stores.
pub fn digest_hex(token: &str) -> String {
    hex::encode(Sha256::digest(token.as_bytes()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_the_agent_by_token() {
        let text = format!(
            "ops-bot: {}\nother: sha256:{}\n",
            digest_hex("s3cret"),
            digest_hex("x")
        );
        let table = TokenTable::parse(&text).unwrap();
        assert_eq!(table.agent("s3cret").as_deref(), Some("ops-bot"));
        assert_eq!(table.agent("x").as_deref(), Some("other"));
        assert!(table.agent("s3cre").is_none());
    }

    #[test]
    fn rejects_a_bad_digest() {
        assert!(TokenTable::parse("a: 1234").is_err());
    }
}
