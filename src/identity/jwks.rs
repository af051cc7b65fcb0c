//! JWT verification against a JWKS file, shared by agent JWTs and task tokens.
//!
//! Only asymmetric algorithms are accepted (RS*, PS*, ES256/384, EdDSA): `none` doesn't
//! parse and HS* is refused outright, so a public key can never be used as an HMAC secret
//! (key confusion). A key is tried only when its family (and `alg`, if the JWK names one)
//! matches the token header. `exp` and `iss` are required, `nbf` checked, 30 s leeway.

use arc_swap::ArcSwap;
use jsonwebtoken::jwk::JwkSet;
use jsonwebtoken::{decode, decode_header, Algorithm, DecodingKey, Validation};
use serde_json::{Map, Value};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use crate::input::file::{read, read_text, Bound};
use crate::input::quiet;

/// Accepted signing algorithms.
const ASYMMETRIC: [Algorithm; 9] = [
    Algorithm::RS256,
    Algorithm::RS384,
    Algorithm::RS512,
    Algorithm::PS256,
    Algorithm::PS384,
    Algorithm::PS512,
    Algorithm::ES256,
    Algorithm::ES384,
    Algorithm::EdDSA,
];
const LEEWAY_SECONDS: u64 = 30;
/// Tokens longer than this are refused before any parsing.
pub const MAX_TOKEN_BYTES: usize = 16 * 1024;

struct Key {
    kid: Option<String>,
    alg: Option<Algorithm>,
    decoding: DecodingKey,
}

/// The keys of one JWKS document.
pub struct KeySet {
    keys: Vec<Key>,
}

impl KeySet {
    pub fn parse(json: &str) -> Result<KeySet, String> {
        let set: JwkSet = serde_json::from_str(json)
            .map_err(|e| format!("not a JWKS document: {}", quiet::error(&e)))?;
        let mut keys = Vec::new();
        for jwk in &set.keys {
            let decoding = DecodingKey::from_jwk(jwk)
                .map_err(|e| format!("unusable key {:?}: {e}", jwk.common.key_id))?;
            let alg = jwk
                .common
                .key_algorithm
                .and_then(|a| a.to_string().parse::<Algorithm>().ok());
            keys.push(Key {
                kid: jwk.common.key_id.clone(),
                alg,
                decoding,
            });
        }
        if keys.is_empty() {
            return Err("the JWKS has no keys".into());
        }
        Ok(KeySet { keys })
    }
}

/// Why a token was not accepted. Shown only in logs; the agent learns only that its
/// credential is not valid.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum JwtError {
    #[error("malformed token: {0}")]
    Malformed(String),
    #[error("algorithm {0:?} is not accepted")]
    Algorithm(Algorithm),
    #[error("no key matches the token")]
    NoKey,
    #[error("invalid token: {0}")]
    Invalid(String),
}

/// One trusted issuer and its keys (reloaded when the JWKS file changes).
pub struct Issuer {
    pub issuer: String,
    audience: Option<String>,
    keys: ArcSwap<KeySet>,
    path: PathBuf,
}

impl Issuer {
    pub fn load(issuer: &str, audience: Option<&str>, path: &Path) -> Result<Issuer, String> {
        let keys = read_keys(path)?;
        Ok(Issuer {
            issuer: issuer.to_string(),
            audience: audience.map(str::to_string),
            keys: ArcSwap::from_pointee(keys),
            path: path.to_path_buf(),
        })
    }

    /// Verifies signature and claims; returns the claims.
    pub fn verify(&self, token: &str) -> Result<Map<String, Value>, JwtError> {
        let header = decode_header(token).map_err(|e| JwtError::Malformed(e.to_string()))?;
        if !ASYMMETRIC.contains(&header.alg) {
            return Err(JwtError::Algorithm(header.alg));
        }
        let mut validation = Validation::new(header.alg);
        validation.leeway = LEEWAY_SECONDS;
        validation.validate_nbf = true;
        validation.set_issuer(&[&self.issuer]);
        let mut required = vec!["exp", "iss"];
        match &self.audience {
            Some(audience) => {
                validation.set_audience(&[audience]);
                required.push("aud");
            }
            None => validation.validate_aud = false,
        }
        validation.set_required_spec_claims(&required);
        let keys = self.keys.load();
        let mut last = JwtError::NoKey;
        for key in keys.keys.iter().filter(|k| match (&header.kid, &k.kid) {
            (Some(want), Some(have)) => want == have,
            _ => true,
        }) {
            if key.decoding.family() != header.alg.family()
                || key.alg.is_some_and(|a| a != header.alg)
            {
                continue;
            }
            match decode::<Map<String, Value>>(token, &key.decoding, &validation) {
                Ok(data) => return Ok(data.claims),
                Err(e) => last = JwtError::Invalid(e.to_string()),
            }
        }
        Err(last)
    }

    /// Re-reads the JWKS file when it changes; a bad edit keeps the previous keys.
    pub async fn watch(self: Arc<Self>) {
        let mut last = read(&self.path, Bound::SMALL).ok();
        loop {
            tokio::time::sleep(Duration::from_secs(1)).await;
            let now = read(&self.path, Bound::SMALL).ok();
            if now == last {
                continue;
            }
            last = now;
            match read_keys(&self.path) {
                Ok(keys) => {
                    self.keys.store(Arc::new(keys));
                    tracing::info!(issuer = %self.issuer, "JWKS reloaded");
                }
                Err(error) => {
                    tracing::error!(issuer = %self.issuer, %error, "JWKS not reloaded; keeping the previous keys")
                }
            }
        }
    }
}

fn read_keys(path: &Path) -> Result<KeySet, String> {
    let text = read_text(path, Bound::SMALL).map_err(|e| e.to_string())?;
    KeySet::parse(&text).map_err(|e| format!("{}: {e}", path.display()))
}

/// The `iss` claim of a token, read without verification, to pick the issuer to verify
/// it with. Nothing else is trusted from an unverified token.
pub fn peek_issuer(token: &str) -> Option<String> {
    if token.len() > MAX_TOKEN_BYTES {
        return None;
    }
    let claims: Map<String, Value> = jsonwebtoken::dangerous::insecure_decode_claims(token).ok()?;
    claims.get("iss")?.as_str().map(str::to_string)
}

/// Seconds since the epoch.
pub fn now_seconds() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}
