//! Where an issuer's keys come from (`jwks`, `discovery`): a JWKS file, a JWKS URL, or the
//! issuer's OpenID configuration. Every kind of issuer (agent JWTs, task tokens,
//! approvers, and so the OAuth mode) reads its keys through this one reading.
//!
//! Invariants: a URL is fetched only over `https://`, or plain `http://` to a loopback
//! address (`127.0.0.0/8`, `::1`, `localhost`), since a key set fetched in clear text over
//! a network could be swapped on the way and every token signed by whoever swapped it
//! would pass. The rule holds for a `jwks` URL and a discovery issuer when settings load,
//! and for the `jwks_uri` a discovery document names when it is fetched
//! ([`fetchable`] is the one check). Any other scheme is an error; text without a scheme
//! is a file path.

use http::Uri;
use serde::{Deserialize, Serialize};
use std::net::IpAddr;
use std::path::PathBuf;

/// A `jwks` setting: a file, or a URL (checked by [`fetchable`] when read).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub enum Jwks {
    File(PathBuf),
    Url(String),
}

impl TryFrom<String> for Jwks {
    type Error = String;

    fn try_from(text: String) -> Result<Jwks, String> {
        if !has_scheme(&text) {
            return Ok(Jwks::File(PathBuf::from(text)));
        }
        fetchable(&text)?;
        Ok(Jwks::Url(text))
    }
}

impl From<Jwks> for String {
    fn from(jwks: Jwks) -> String {
        match jwks {
            Jwks::File(path) => path.to_string_lossy().into_owned(),
            Jwks::Url(url) => url,
        }
    }
}

impl From<PathBuf> for Jwks {
    fn from(path: PathBuf) -> Jwks {
        Jwks::File(path)
    }
}

impl From<&std::path::Path> for Jwks {
    fn from(path: &std::path::Path) -> Jwks {
        Jwks::File(path.to_path_buf())
    }
}

/// Where one issuer's keys are read, once its settings are checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KeySource {
    File(PathBuf),
    Url(Uri),
    /// `jwks_uri` of `<issuer>/.well-known/openid-configuration`.
    Discovery(Uri),
}

/// The key source of an issuer whose settings say `jwks` and `discovery`: exactly one of
/// them. `Err` says what to set.
pub fn key_source(issuer: &str, jwks: Option<&Jwks>, discovery: bool) -> Result<KeySource, String> {
    match (jwks, discovery) {
        (Some(_), true) => Err(
            "set either jwks (a file or URL) or discovery: true, not both".into(),
        ),
        (None, false) => Err(
            "jwks is required: a JWKS file or URL, or set discovery: true to read jwks_uri from the issuer's OpenID configuration".into(),
        ),
        (Some(Jwks::File(path)), false) => Ok(KeySource::File(path.clone())),
        (Some(Jwks::Url(url)), false) => fetchable(url).map(KeySource::Url),
        (None, true) => fetchable(issuer)
            .and_then(|_| discovery_url(issuer))
            .map(KeySource::Discovery)
            .map_err(|e| format!("discovery: true reads <issuer>/.well-known/openid-configuration, so the issuer must be a URL: {e}")),
    }
}

/// Checks the key source of every issuer in `settings` (read from `origin`), naming the
/// field of the first that can't be read.
pub fn check(settings: &super::Settings, origin: &str) -> Result<(), super::SettingsError> {
    let identity = &settings.identity;
    let agents = identity.jwt.iter().enumerate().map(|(i, j)| {
        (
            format!("identity.jwt[{i}]"),
            &j.issuer,
            j.jwks.as_ref(),
            j.discovery,
        )
    });
    let tasks = identity.task_issuers.iter().enumerate().map(|(i, t)| {
        (
            format!("identity.taskIssuers[{i}]"),
            &t.issuer,
            t.jwks.as_ref(),
            t.discovery,
        )
    });
    let approvers = settings
        .approvals
        .approvers
        .jwt
        .iter()
        .enumerate()
        .map(|(i, a)| {
            (
                format!("approvals.approvers.jwt[{i}]"),
                &a.issuer,
                a.jwks.as_ref(),
                a.discovery,
            )
        });
    // Tokens are matched to their issuer by `iss`: a second entry of a list naming an
    // issuer again would never be used (its audience, its keys, its `requireAgent`).
    // (Agent issuers are checked with the other agent sources, `config::sources`.)
    let lists = [
        (
            "identity.taskIssuers",
            identity
                .task_issuers
                .iter()
                .map(|t| &t.issuer)
                .collect::<Vec<_>>(),
        ),
        (
            "approvals.approvers.jwt",
            settings
                .approvals
                .approvers
                .jwt
                .iter()
                .map(|a| &a.issuer)
                .collect(),
        ),
    ];
    for (list, issuers) in lists {
        for (i, issuer) in issuers.iter().enumerate() {
            if let Some(first) = issuers[..i].iter().position(|other| other == issuer) {
                return Err(super::file::invalid(
                    origin,
                    format!("{list}[{i}].issuer"),
                    format!("is listed twice (as {list}[{first}] too): list each issuer once"),
                ));
            }
        }
    }
    for (field, issuer, jwks, discovery) in agents.chain(tasks).chain(approvers) {
        if let Err(message) = key_source(issuer, jwks, discovery) {
            let key = if discovery { "discovery" } else { "jwks" };
            return Err(super::file::invalid(
                origin,
                format!("{field}.{key}"),
                message,
            ));
        }
    }
    Ok(())
}

/// `<issuer>/.well-known/openid-configuration` (OpenID Connect Discovery 1.0, §4).
fn discovery_url(issuer: &str) -> Result<Uri, String> {
    let url = format!(
        "{}/.well-known/openid-configuration",
        issuer.trim_end_matches('/')
    );
    fetchable(&url)
}

/// A URL toolgate may fetch keys from: `https://`, or `http://` to a loopback address.
/// The error never repeats the URL (it may carry a credential in its userinfo or query).
pub fn fetchable(url: &str) -> Result<Uri, String> {
    let scheme = url.split_once("://").map(|(s, _)| s.to_ascii_lowercase());
    if !matches!(scheme.as_deref(), Some("https" | "http")) {
        return Err("only https:// URLs (or http:// to a loopback address) are fetched".into());
    }
    let uri: Uri = url
        .parse()
        .map_err(|_| "not a valid URL (scheme://host[:port]/path)".to_string())?;
    let host = uri
        .host()
        .filter(|h| !h.is_empty())
        .ok_or("the URL has no host")?;
    if uri.authority().is_some_and(|a| a.as_str().contains('@')) {
        return Err(
            "the URL holds credentials (user:password@): key documents are public, remove them"
                .into(),
        );
    }
    match uri.scheme_str().map(str::to_ascii_lowercase).as_deref() {
        Some("https") => Ok(uri),
        Some("http") if loopback(host) => Ok(uri),
        Some("http") => Err("plain http:// is allowed only to a loopback address (127.0.0.0/8, [::1], localhost): keys fetched in clear text over a network could be replaced on the way; use https://".into()),
        _ => Err("only https:// URLs (or http:// to a loopback address) are fetched".into()),
    }
}

fn loopback(host: &str) -> bool {
    let bare = host.trim_start_matches('[').trim_end_matches(']');
    match bare.parse::<IpAddr>() {
        Ok(ip) => ip.is_loopback(),
        Err(_) => bare.eq_ignore_ascii_case("localhost"),
    }
}

/// Whether `text` starts like a URL (`scheme://`), rather than a file path.
fn has_scheme(text: &str) -> bool {
    text.split_once("://").is_some_and(|(scheme, _)| {
        !scheme.is_empty()
            && scheme.starts_with(|c: char| c.is_ascii_alphabetic())
            && scheme
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.'))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn https_anywhere_and_http_only_to_loopback() {
        for ok in [
            "https://idp.example/jwks",
            "HTTPS://idp.example:8443/keys?tenant=a",
            "http://127.0.0.1:8080/jwks",
            "http://127.9.9.9/jwks",
            "http://[::1]:9000/jwks",
            "http://localhost/jwks",
            "http://LOCALHOST:1/jwks",
        ] {
            assert!(fetchable(ok).is_ok(), "{ok}");
        }
        for (bad, why) in [
            ("http://idp.example/jwks", "loopback"),
            ("http://127.0.0.1.evil.example/jwks", "loopback"),
            ("http://localhost.evil.example/jwks", "loopback"),
            ("http://10.0.0.1/jwks", "loopback"),
            ("http://[::ffff:10.0.0.1]/jwks", "loopback"),
            ("file:///etc/jwks.json", "only https"),
            ("ftp://idp.example/jwks", "only https"),
            ("https:///jwks", "valid URL"),
        ] {
            let err = fetchable(bad).unwrap_err();
            assert!(err.contains(why), "{bad}: {err}");
        }
    }

    #[test]
    fn errors_never_repeat_the_url() {
        for url in [
            "http://user:s3cret@idp.example/jwks?key=s3cret",
            "https://user:s3cret@idp.example/jwks",
            "ftp://idp.example/s3cret",
        ] {
            let err = fetchable(url).unwrap_err();
            assert!(!err.contains("s3cret"), "{err}");
        }
    }

    #[test]
    fn text_without_a_scheme_is_a_file() {
        for path in ["/etc/toolgate/jwks.json", "jwks.json", "./https:/x", "C:x"] {
            assert_eq!(
                Jwks::try_from(path.to_string()),
                Ok(Jwks::File(path.into())),
                "{path}"
            );
        }
        assert!(Jwks::try_from("https://idp.example/k".to_string()).is_ok());
        assert!(Jwks::try_from("http://idp.example/k".to_string()).is_err());
    }

    #[test]
    fn one_of_jwks_or_discovery() {
        let file = Jwks::File("/j.json".into());
        assert!(key_source("https://idp", Some(&file), true)
            .unwrap_err()
            .contains("not both"));
        assert!(key_source("https://idp", None, false)
            .unwrap_err()
            .contains("jwks is required"));
        assert_eq!(
            key_source("https://idp.example/tenant/", None, true).unwrap(),
            KeySource::Discovery(
                "https://idp.example/tenant/.well-known/openid-configuration"
                    .parse()
                    .unwrap()
            )
        );
        let err = key_source("orchestrator", None, true).unwrap_err();
        assert!(err.contains("issuer must be a URL"), "{err}");
        assert!(key_source("http://idp.example", None, true).is_err());
    }
}
