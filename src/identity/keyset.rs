//! The keys of one JWKS document, as verification uses them: each key's id, its
//! algorithm if the JWK names one, and its decoding key.
//!
//! Two readings: a JWKS file must be usable whole ([`KeySet::parse`], so a typo is an
//! error rather than a missing key), while a published set ([`KeySet::parse_published`])
//! keeps the keys toolgate can use and skips the rest (encryption keys, symmetric keys,
//! unknown types), as every relying party does. Neither error quotes the document.

use jsonwebtoken::jwk::{AlgorithmParameters, Jwk, JwkSet, PublicKeyUse};
use jsonwebtoken::{Algorithm, DecodingKey};
use serde_json::Value;

pub(super) struct Key {
    pub(super) kid: Option<String>,
    pub(super) alg: Option<Algorithm>,
    pub(super) decoding: DecodingKey,
}

/// The keys of one JWKS document, and the issuer a discovery document named for them.
pub struct KeySet {
    keys: Vec<Key>,
    /// Set for keys whose issuer is learnt, not configured (workload identity).
    issuer: Option<String>,
}

impl KeySet {
    /// A JWKS file: every key must be usable, so a typo is an error, not a missing key.
    pub fn parse(json: &str) -> Result<KeySet, String> {
        let set: JwkSet = serde_json::from_str(json)
            .map_err(|e| format!("not a JWKS document: {}", crate::input::quiet::error(&e)))?;
        let mut keys = Vec::new();
        for jwk in &set.keys {
            keys.push(
                Key::of(jwk).map_err(|e| format!("unusable key {:?}: {e}", jwk.common.key_id))?,
            );
        }
        if keys.is_empty() {
            return Err("the JWKS has no keys".into());
        }
        Ok(KeySet { keys, issuer: None })
    }

    /// A JWKS an identity provider publishes: keys toolgate can't use (encryption keys,
    /// symmetric keys, other key types) are skipped, as every relying party does, but at
    /// least one must be usable. The error never quotes the document.
    pub fn parse_published(body: &[u8]) -> Result<KeySet, String> {
        #[derive(serde::Deserialize)]
        struct Published {
            keys: Vec<Value>,
        }
        let set: Published = serde_json::from_slice(body).map_err(|e| {
            format!(
                "not a JWKS document (line {}, column {})",
                e.line(),
                e.column()
            )
        })?;
        let keys: Vec<Key> = set
            .keys
            .into_iter()
            .filter_map(|value| serde_json::from_value::<Jwk>(value).ok())
            .filter(|jwk| !matches!(jwk.common.public_key_use, Some(PublicKeyUse::Encryption)))
            .filter(|jwk| !matches!(jwk.algorithm, AlgorithmParameters::OctetKey(_)))
            .filter_map(|jwk| Key::of(&jwk).ok())
            .collect();
        if keys.is_empty() {
            return Err("the JWKS has no usable signing key".into());
        }
        Ok(KeySet { keys, issuer: None })
    }

    /// No keys yet: every token is [`super::jwks::JwtError::UnknownKey`] until the first fetch.
    pub fn empty() -> KeySet {
        KeySet {
            keys: Vec::new(),
            issuer: None,
        }
    }

    /// These keys, vouched for by `issuer` (a discovery document's `issuer`).
    pub fn with_issuer(mut self, issuer: String) -> KeySet {
        self.issuer = Some(issuer);
        self
    }

    pub fn len(&self) -> usize {
        self.keys.len()
    }

    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }

    pub(super) fn keys(&self) -> &[Key] {
        &self.keys
    }

    /// The issuer a discovery document named for these keys, if they came with one.
    pub fn issuer(&self) -> Option<&str> {
        self.issuer.as_deref()
    }

    /// The key ids, for logs that say what changed.
    pub fn kids(&self) -> Vec<&str> {
        self.keys.iter().filter_map(|k| k.kid.as_deref()).collect()
    }

    /// Whether some key may verify a token naming `kid`: one with that kid, or one that
    /// names none (tried for every token).
    pub(super) fn knows(&self, kid: &str) -> bool {
        self.keys
            .iter()
            .any(|k| k.kid.as_deref().is_none_or(|have| have == kid))
    }
}

impl Key {
    fn of(jwk: &Jwk) -> Result<Key, String> {
        let decoding = DecodingKey::from_jwk(jwk).map_err(|e| e.to_string())?;
        let alg = jwk
            .common
            .key_algorithm
            .and_then(|a| a.to_string().parse::<Algorithm>().ok());
        Ok(Key {
            kid: jwk.common.key_id.clone(),
            alg,
            decoding,
        })
    }
}
