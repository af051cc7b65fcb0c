//! TLS and mTLS for a listener (rustls, ring provider). The certificate, key and client
//! CA are re-read when their files change; a bad edit keeps the previous configuration.
//! They are read as every file is (regular files, at most 1 MiB), and a PEM error never
//! quotes the file.
//!
//! With a client CA, a client certificate is required and its SAN names the agent: the
//! SPIFFE URI by default (`tls.agentSan`), so workload identity needs no bearer token.

use arc_swap::ArcSwap;
use rustls::pki_types::pem::{self, PemObject};
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::WebPkiClientVerifier;
use rustls::{RootCertStore, ServerConfig, ServerConnection};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;
use tokio_rustls::TlsAcceptor;
use x509_parser::extensions::GeneralName;

use crate::config::{AgentSan, Tls};
use crate::input::file::{read, Bound};

/// The agent a verified client certificate names; put in request extensions.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PeerIdentity {
    pub agent: String,
}

pub struct TlsConfig {
    current: ArcSwap<ServerConfig>,
    settings: Tls,
}

impl TlsConfig {
    pub fn load(settings: &Tls) -> Result<TlsConfig, String> {
        Ok(TlsConfig {
            current: ArcSwap::from_pointee(build(settings)?),
            settings: settings.clone(),
        })
    }

    pub fn acceptor(&self) -> TlsAcceptor {
        TlsAcceptor::from(self.current.load_full())
    }

    pub fn requires_client_cert(&self) -> bool {
        self.settings.client_ca.is_some()
    }

    /// The agent named by the connection's client certificate, if there is one.
    pub fn peer_identity(&self, connection: &ServerConnection) -> Option<PeerIdentity> {
        let leaf = connection.peer_certificates()?.first()?;
        agent_from_cert(leaf, self.settings.agent_san).map(|agent| PeerIdentity { agent })
    }

    /// Rebuilds the configuration when any of its files change.
    pub async fn watch(self: Arc<Self>) {
        let read_all = |s: &Tls| {
            [Some(&s.cert), Some(&s.key), s.client_ca.as_ref()]
                .into_iter()
                .flatten()
                .map(|p| read(p, Bound::SMALL).ok())
                .collect::<Vec<_>>()
        };
        let mut last = read_all(&self.settings);
        loop {
            tokio::time::sleep(Duration::from_secs(1)).await;
            let now = read_all(&self.settings);
            if now == last {
                continue;
            }
            last = now;
            match build(&self.settings) {
                Ok(config) => {
                    self.current.store(Arc::new(config));
                    tracing::info!("TLS certificate reloaded");
                }
                Err(error) => {
                    tracing::error!(%error, "TLS files not reloaded; keeping the previous certificate")
                }
            }
        }
    }
}

fn build(settings: &Tls) -> Result<ServerConfig, String> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let certs = read_certs(&settings.cert)?;
    let key = read(&settings.key, Bound::SMALL).map_err(|e| e.to_string())?;
    let key = PrivateKeyDer::from_pem_slice(&key)
        .map_err(|e| format!("{}: {}", settings.key.display(), pem_error(&e)))?;
    let builder = ServerConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?;
    let builder = match &settings.client_ca {
        Some(ca) => {
            let mut roots = RootCertStore::empty();
            for cert in read_certs(ca)? {
                roots
                    .add(cert)
                    .map_err(|e| format!("{}: {e}", ca.display()))?;
            }
            let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider)
                .build()
                .map_err(|e| format!("client CA: {e}"))?;
            builder.with_client_cert_verifier(verifier)
        }
        None => builder.with_no_client_auth(),
    };
    let mut config = builder
        .with_single_cert(certs, key)
        .map_err(|e| format!("certificate and key: {e}"))?;
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(config)
}

fn read_certs(path: &Path) -> Result<Vec<CertificateDer<'static>>, String> {
    let pem = read(path, Bound::SMALL).map_err(|e| e.to_string())?;
    let certs = CertificateDer::pem_slice_iter(&pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| format!("{}: {}", path.display(), pem_error(&e)))?;
    if certs.is_empty() {
        return Err(format!("{}: no certificate", path.display()));
    }
    Ok(certs)
}

/// What was wrong with a PEM file, without the line it quotes (the key file's own).
fn pem_error(error: &pem::Error) -> &'static str {
    match error {
        pem::Error::NoItemsFound => "no PEM section of the expected kind",
        pem::Error::SectionTooLarge => "a PEM section is too large",
        pem::Error::Base64Decode(_) => "a PEM section is not valid base64",
        _ => "not a well-formed PEM file",
    }
}

/// The SAN of the configured kind: the first SPIFFE URI, URI or DNS name.
pub fn agent_from_cert(der: &[u8], kind: AgentSan) -> Option<String> {
    let (_, cert) = x509_parser::parse_x509_certificate(der).ok()?;
    let san = cert.subject_alternative_name().ok()??;
    san.value
        .general_names
        .iter()
        .find_map(|name| match (kind, name) {
            (AgentSan::Spiffe, GeneralName::URI(uri)) if uri.starts_with("spiffe://") => {
                Some(uri.to_string())
            }
            (AgentSan::Uri, GeneralName::URI(uri)) => Some(uri.to_string()),
            (AgentSan::Dns, GeneralName::DNSName(dns)) => Some(dns.to_string()),
            _ => None,
        })
}
