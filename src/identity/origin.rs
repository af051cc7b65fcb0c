//! Where an issuer's fetched keys come from ([`Origin`]: a JWKS URL, an OpenID
//! configuration, the Kubernetes API server), and what the fetched sources of a sidecar
//! share ([`Fetcher`]: one HTTPS client, the refresh counter, the timing).
//!
//! The system's CA certificates are read once per process, on the first `https://`
//! source, never per fetch; a sidecar with only key files never reads them. An
//! `https://` source is refused at start when no CA certificate was found, rather than
//! failing every fetch later.

use http::Uri;
use std::sync::OnceLock;
use std::time::Duration;

use super::discovery;
use super::fetch::{FetchError, HttpClient, Shown};
use super::keyset::KeySet;
use super::kubernetes::ApiServer;
use super::remote::{Refreshes, Timing, TIMING};

/// The client of the system's CA certificates, built on first use (so a sidecar with
/// only key files never reads the CA store) and shared by every issuer of the process.
static NATIVE: OnceLock<HttpClient> = OnceLock::new();

/// What the fetched key sources of a sidecar share: the HTTPS client, the refresh
/// counter and the timing.
#[derive(Clone)]
pub struct Fetcher {
    /// `None`: the system's CA certificates ([`NATIVE`]).
    http: Option<HttpClient>,
    refreshes: Refreshes,
    timing: Timing,
}

impl Fetcher {
    pub fn new(refreshes: Refreshes) -> Fetcher {
        Fetcher {
            http: None,
            refreshes,
            timing: TIMING,
        }
    }

    /// A fetcher with its own HTTPS client (e.g. one trusting a test CA).
    pub fn with_http(http: HttpClient, refreshes: Refreshes) -> Fetcher {
        Fetcher {
            http: Some(http),
            refreshes,
            timing: TIMING,
        }
    }

    pub fn with_timing(mut self, timing: Timing) -> Fetcher {
        self.timing = timing;
        self
    }

    pub(super) fn timing(&self) -> Timing {
        self.timing
    }

    pub(super) fn refreshes(&self) -> &Refreshes {
        &self.refreshes
    }

    /// The HTTP client for `url`, refusing an `https://` URL no CA could check.
    fn http_for(&self, url: &Uri) -> Result<HttpClient, String> {
        let http = match &self.http {
            Some(http) => http.clone(),
            None => NATIVE.get_or_init(HttpClient::native).clone(),
        };
        if url.scheme_str() == Some("https") && !http.can_verify() {
            return Err("no CA certificates to check an https:// key source with: install the system's ca-certificates or point SSL_CERT_FILE at a PEM bundle".into());
        }
        Ok(http)
    }

    /// Keys at a JWKS URL.
    pub fn url(&self, url: &Uri) -> Result<Origin, String> {
        Ok(Origin::Url {
            url: url.clone(),
            http: self.http_for(url)?,
        })
    }

    /// Keys at the `jwks_uri` of the OpenID configuration at `url`, for `issuer`.
    pub fn discovery(&self, url: &Uri, issuer: &str) -> Result<Origin, String> {
        Ok(Origin::Discovery {
            url: url.clone(),
            issuer: issuer.to_string(),
            http: self.http_for(url)?,
        })
    }
}

/// Where one issuer's keys are fetched from.
pub enum Origin {
    Url {
        url: Uri,
        http: HttpClient,
    },
    Discovery {
        url: Uri,
        issuer: String,
        http: HttpClient,
    },
    /// The cluster's service-account issuer, through the API server.
    ApiServer(ApiServer),
}

/// A fetched key set and how long it may be kept.
pub struct Fetched {
    pub keys: KeySet,
    pub max_age: Option<Duration>,
}

impl Origin {
    pub(super) async fn fetch(&self) -> Result<Fetched, FetchError> {
        match self {
            Origin::Url { url, http } => {
                let document = http.get(url).await?;
                let keys = KeySet::parse_published(&document.body)
                    .map_err(|e| FetchError::Unusable(Shown::of(url), e))?;
                Ok(Fetched {
                    keys,
                    max_age: document.max_age,
                })
            }
            Origin::Discovery { url, issuer, http } => discovery::fetch(http, url, issuer).await,
            Origin::ApiServer(api) => api.fetch().await,
        }
    }
}
