//! OpenID Connect discovery (`discovery: true`): the issuer's
//! `/.well-known/openid-configuration` names its `jwks_uri`, which is then fetched.
//!
//! Invariants: the document must name the configured issuer exactly (OpenID Connect
//! Discovery §4.3), so a configuration served for another issuer can't hand over its
//! keys; its `jwks_uri` must be fetchable by the same rule as a configured URL (https,
//! or http to loopback); both documents are read through the same bounded fetch. The
//! configuration is read again at every refresh, so a moved `jwks_uri` is followed.

use http::Uri;
use serde::Deserialize;

use super::fetch::{FetchError, HttpClient, Shown};
use super::jwks::KeySet;
use super::remote::Fetched;
use crate::config::jwks::fetchable;

/// The fields of an OpenID configuration toolgate reads.
#[derive(Deserialize)]
pub struct Configuration {
    pub issuer: String,
    pub jwks_uri: Option<String>,
}

impl Configuration {
    /// Parses a configuration document; the error never quotes it.
    pub fn parse(shown: &Shown, body: &[u8]) -> Result<Configuration, FetchError> {
        serde_json::from_slice(body).map_err(|e| {
            FetchError::Unusable(
                shown.clone(),
                format!(
                    "not an OpenID configuration with an issuer (line {}, column {})",
                    e.line(),
                    e.column()
                ),
            )
        })
    }
}

/// The keys of `issuer`, found through the configuration at `url`.
pub async fn fetch(http: &HttpClient, url: &Uri, issuer: &str) -> Result<Fetched, FetchError> {
    let shown = Shown::of(url);
    let document = http.get(url).await?;
    let configuration = Configuration::parse(&shown, &document.body)?;
    if configuration.issuer != issuer {
        return Err(FetchError::Unusable(
            shown,
            "the configuration names another issuer than the one configured; set issuer to the provider's exact issuer URL".into(),
        ));
    }
    let jwks_uri = configuration.jwks_uri.ok_or_else(|| {
        FetchError::Unusable(shown.clone(), "the configuration has no jwks_uri".into())
    })?;
    let jwks_uri = fetchable(&jwks_uri).map_err(|e| {
        FetchError::Unusable(shown.clone(), format!("its jwks_uri can't be fetched: {e}"))
    })?;
    let keys = http.get(&jwks_uri).await?;
    let set = KeySet::parse_published(&keys.body)
        .map_err(|e| FetchError::Unusable(Shown::of(&jwks_uri), e))?;
    Ok(Fetched {
        keys: set,
        max_age: keys.max_age,
    })
}
