//! A small, bounded cache of verified tokens. Asymmetric verification costs tens of
//! microseconds; an agent reuses one token for many calls. Entries live at most
//! [`TTL`] and never past the token's own `exp`, so caching can't extend a token's life.
//!
//! Tokens are looked up by a digest, so the cache holds no bearer credential itself.

use serde_json::{Map, Value};
use std::sync::Arc;
use std::time::Duration;

use super::jwks::now_seconds;
use crate::limits::canonical::{Key, KeyBuilder};
use crate::limits::table::{Op, Table, MIN_SHARD_ENTRIES};
use crate::limits::Clock;

pub const TTL: Duration = Duration::from_secs(60);
pub const CAPACITY: u64 = 10_000;

type Claims = Arc<Map<String, Value>>;

pub struct Verified {
    cache: Table<Claims>,
    clock: Clock,
}

impl Default for Verified {
    fn default() -> Self {
        Verified {
            cache: Table::new(CAPACITY, MIN_SHARD_ENTRIES),
            clock: Clock::real(),
        }
    }
}

impl Verified {
    /// The claims of a token verified before and not expired since.
    pub fn get(&self, token: &str) -> Option<Claims> {
        self.lookup(&key(token))
    }

    pub fn get_or_verify<E>(
        &self,
        token: &str,
        verify: impl FnOnce() -> Result<Map<String, Value>, E>,
    ) -> Result<Claims, E> {
        let key = key(token);
        if let Some(claims) = self.lookup(&key) {
            return Ok(claims);
        }
        // Verified outside the table's lock: two first uses of one token may both verify.
        let claims = Arc::new(verify()?);
        let now = self.clock.now();
        self.cache.insert(key, now, claims.clone(), 1, now + TTL);
        Ok(claims)
    }

    /// Keeps the claims of a token just verified; returns them, shared.
    pub fn insert(&self, token: &str, claims: Map<String, Value>) -> Claims {
        let claims = Arc::new(claims);
        let now = self.clock.now();
        self.cache
            .insert(key(token), now, claims.clone(), 1, now + TTL);
        claims
    }

    fn lookup(&self, key: &Key) -> Option<Claims> {
        self.cache
            .compute(*key, self.clock.now(), |current| match current {
                Some(claims) if expired(claims) => (Op::Remove, None),
                Some(claims) => (Op::Keep, Some(claims.clone())),
                None => (Op::Keep, None),
            })
    }
}

fn key(token: &str) -> Key {
    KeyBuilder::new("verified-token").text(token).finish()
}

fn expired(claims: &Map<String, Value>) -> bool {
    claims
        .get("exp")
        .and_then(Value::as_u64)
        .is_none_or(|exp| exp <= now_seconds())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn claims(exp: u64) -> Map<String, Value> {
        json!({"sub": "ops-bot", "exp": exp})
            .as_object()
            .unwrap()
            .clone()
    }

    #[test]
    fn verifies_once_then_serves_from_the_cache() {
        let verified = Verified::default();
        let mut runs = 0;
        for _ in 0..3 {
            let got = verified.get_or_verify("t1", || {
                runs += 1;
                Ok::<_, ()>(claims(now_seconds() + 300))
            });
            assert_eq!(got.unwrap()["sub"], "ops-bot");
        }
        assert_eq!(runs, 1);
        assert!(verified.get("t2").is_none(), "another token");
    }

    #[test]
    fn an_expired_token_is_not_served() {
        let verified = Verified::default();
        let _ = verified.get_or_verify("t", || Ok::<_, ()>(claims(now_seconds() - 1)));
        assert!(verified.get("t").is_none());
        let err = verified.get_or_verify("t", || Err::<Map<String, Value>, _>("expired"));
        assert_eq!(err.unwrap_err(), "expired");
    }
}
