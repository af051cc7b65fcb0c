//! JWT verification against a JWKS, shared by agent JWTs, task tokens, approvers and
//! workload identity. The keys come from a file (reloaded when it changes) or are fetched
//! and kept fresh ([`super::remote`]).
//!
//! Only asymmetric algorithms are accepted (RS*, PS*, ES256/384, EdDSA): `none` doesn't
//! parse and HS* is refused outright, so a public key can never be used as an HMAC secret
//! (key confusion). A key is tried only when its family (and `alg`, if the JWK names one)
//! matches the token header. `exp` and `iss` are required, `nbf` checked, 30 s leeway.
//!
//! A token whose `kid` no key has is [`JwtError::UnknownKey`]: for fetched keys,
//! [`Issuer::verify_fresh`] then waits (briefly, rate-limited) for a refresh and tries
//! once more, so a key the provider just rotated in is accepted on its first use.

use arc_swap::ArcSwap;
use jsonwebtoken::{decode, decode_header, Algorithm, Validation};
use serde_json::{Map, Value};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

pub use super::keyset::KeySet;
use super::remote::{Fetcher, Origin, Remote};
use crate::config::KeySource;
use crate::input::file::{read, read_text, Bound};

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
    #[error("no key has the token's kid (or no keys were fetched yet)")]
    UnknownKey,
    #[error("invalid token: {0}")]
    Invalid(String),
}

/// One trusted issuer and its keys.
pub struct Issuer {
    /// The `iss` tokens must carry (for workload identity: the name its records show,
    /// `kubernetes`; the `iss` is the one discovery found).
    pub issuer: String,
    /// Whether `iss` is [`Issuer::issuer`] or the one the fetched keys name.
    fixed_iss: bool,
    /// Empty: `aud` is not checked (task issuers without an audience).
    audiences: Vec<String>,
    keys: Arc<ArcSwap<KeySet>>,
    source: Source,
}

enum Source {
    /// Re-read by [`Issuer::watch`] when the file changes.
    File(PathBuf),
    /// Fetched and refreshed by its own task.
    Remote(Remote),
}

impl Issuer {
    /// An issuer whose keys are in the JWKS file at `path`.
    pub fn load_file(issuer: &str, audience: Option<&str>, path: &Path) -> Result<Issuer, String> {
        let keys = read_keys(path)?;
        Ok(Issuer {
            issuer: issuer.to_string(),
            fixed_iss: true,
            audiences: audience.map(str::to_string).into_iter().collect(),
            keys: Arc::new(ArcSwap::from_pointee(keys)),
            source: Source::File(path.to_path_buf()),
        })
    }

    /// An issuer whose keys are where `source` says: a file is read now; a URL or a
    /// discovery document is fetched by a task started here (inside the tokio runtime),
    /// and until its first answer no token of this issuer verifies.
    pub fn load(
        issuer: &str,
        audience: Option<&str>,
        source: &KeySource,
        fetcher: &Fetcher,
    ) -> Result<Issuer, String> {
        let origin = match source {
            KeySource::File(path) => return Issuer::load_file(issuer, audience, path),
            KeySource::Url(url) => fetcher.url(url)?,
            KeySource::Discovery(url) => fetcher.discovery(url, issuer)?,
        };
        let audiences = audience.map(str::to_string).into_iter().collect();
        Issuer::fetched(issuer, true, audiences, origin, fetcher)
    }

    /// An issuer whose keys `origin` fetches. With `fixed_iss` false the `iss` to expect
    /// is the one the fetched keys carry (workload identity), and `name` only labels it.
    pub fn fetched(
        name: &str,
        fixed_iss: bool,
        audiences: Vec<String>,
        origin: Origin,
        fetcher: &Fetcher,
    ) -> Result<Issuer, String> {
        let keys = Arc::new(ArcSwap::from_pointee(KeySet::empty()));
        let remote = Remote::start(name, keys.clone(), origin, fetcher)?;
        Ok(Issuer {
            issuer: name.to_string(),
            fixed_iss,
            audiences,
            keys,
            source: Source::Remote(remote),
        })
    }

    /// Whether tokens carrying `iss` are certainly not this issuer's (for a learnt issuer,
    /// only once it is learnt: until then any `iss` may be).
    pub fn rules_out_iss(&self, iss: &str) -> bool {
        if self.fixed_iss {
            return self.issuer != iss;
        }
        self.keys
            .load()
            .issuer()
            .is_some_and(|learnt| learnt != iss)
    }

    /// For fetched keys: waits at most `bound` for the first fetch. Whether keys are in.
    pub async fn first_fetch(&self, bound: Duration) -> bool {
        match &self.source {
            Source::File(_) => true,
            Source::Remote(remote) => {
                remote.first_fetch(bound).await;
                !self.keys.load().is_empty()
            }
        }
    }

    /// Whether the keys are fetched (and so a token may wait for a refresh).
    pub fn is_fetched(&self) -> bool {
        matches!(self.source, Source::Remote(_))
    }

    /// [`Issuer::verify`]; when the token names a key this issuer doesn't have and its
    /// keys are fetched, waits (bounded, at most one refresh per interval) for fresh keys
    /// and verifies once more.
    pub async fn verify_fresh(&self, token: &str) -> Result<Map<String, Value>, JwtError> {
        match (self.verify(token), &self.source) {
            (Err(JwtError::UnknownKey), Source::Remote(remote)) => {
                if remote.refresh_for_unknown_key().await {
                    self.verify(token)
                } else {
                    Err(JwtError::UnknownKey)
                }
            }
            (verdict, _) => verdict,
        }
    }

    /// Whether `token` names a key this issuer doesn't have (fetched keys only): a cheap
    /// look at the header, no signature check.
    pub fn lacks_key_of(&self, token: &str) -> bool {
        if !self.is_fetched() {
            return false;
        }
        let keys = self.keys.load();
        match decode_header(token).ok().and_then(|h| h.kid) {
            Some(kid) => !keys.knows(&kid),
            None => keys.is_empty(),
        }
    }

    /// For fetched keys: waits (bounded, rate-limited) for a refresh. Whether one ran.
    pub async fn refresh_for_unknown_key(&self) -> bool {
        match &self.source {
            Source::File(_) => false,
            Source::Remote(remote) => remote.refresh_for_unknown_key().await,
        }
    }

    /// Verifies signature and claims against the keys in hand; returns the claims.
    pub fn verify(&self, token: &str) -> Result<Map<String, Value>, JwtError> {
        let header = decode_header(token).map_err(|e| JwtError::Malformed(e.to_string()))?;
        if !ASYMMETRIC.contains(&header.alg) {
            return Err(JwtError::Algorithm(header.alg));
        }
        let keys = self.keys.load();
        if keys.is_empty() || header.kid.as_deref().is_some_and(|kid| !keys.knows(kid)) {
            return Err(JwtError::UnknownKey);
        }
        let iss = match (self.fixed_iss, keys.issuer()) {
            (true, _) => self.issuer.as_str(),
            (false, Some(learnt)) => learnt,
            (false, None) => return Err(JwtError::UnknownKey),
        };
        let mut validation = Validation::new(header.alg);
        validation.leeway = LEEWAY_SECONDS;
        validation.validate_nbf = true;
        validation.set_issuer(&[iss]);
        let mut required = vec!["exp", "iss"];
        if self.audiences.is_empty() {
            validation.validate_aud = false;
        } else {
            validation.set_audience(&self.audiences);
            required.push("aud");
        }
        validation.set_required_spec_claims(&required);
        let mut last = JwtError::NoKey;
        for key in keys.keys().iter().filter(|k| match (&header.kid, &k.kid) {
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
    /// Fetched keys are kept fresh by their own task: for them this ends at once.
    pub async fn watch(self: Arc<Self>) {
        let Source::File(path) = &self.source else {
            return;
        };
        let mut last = read(path, Bound::SMALL).ok();
        loop {
            tokio::time::sleep(Duration::from_secs(1)).await;
            let now = read(path, Bound::SMALL).ok();
            if now == last {
                continue;
            }
            last = now;
            match read_keys(path) {
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
