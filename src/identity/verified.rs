//! A small, bounded cache of verified tokens. Asymmetric verification costs tens of
//! microseconds; an agent reuses one token for many calls. Entries live at most
//! [`TTL`] and never past the token's own `exp`, so caching can't extend a token's life.

use moka::sync::Cache;
use serde_json::{Map, Value};
use std::sync::Arc;
use std::time::Duration;

use super::jwks::now_seconds;

pub const TTL: Duration = Duration::from_secs(60);
pub const CAPACITY: u64 = 10_000;

pub struct Verified {
    cache: Cache<String, Arc<Map<String, Value>>>,
}

impl Default for Verified {
    fn default() -> Self {
        Verified {
            cache: Cache::builder()
                .max_capacity(CAPACITY)
                .time_to_live(TTL)
                .build(),
        }
    }
}

impl Verified {
    /// The claims of a token verified before and not expired since.
    pub fn get(&self, token: &str) -> Option<Arc<Map<String, Value>>> {
        let claims = self.cache.get(token)?;
        if expired(&claims) {
            self.cache.invalidate(token);
            return None;
        }
        Some(claims)
    }

    pub fn get_or_verify<E>(
        &self,
        token: &str,
        verify: impl FnOnce() -> Result<Map<String, Value>, E>,
    ) -> Result<Arc<Map<String, Value>>, E> {
        if let Some(claims) = self.get(token) {
            return Ok(claims);
        }
        let claims = Arc::new(verify()?);
        self.cache.insert(token.to_string(), claims.clone());
        Ok(claims)
    }
}

fn expired(claims: &Map<String, Value>) -> bool {
    claims
        .get("exp")
        .and_then(Value::as_u64)
        .is_none_or(|exp| exp <= now_seconds())
}
