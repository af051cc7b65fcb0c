//! TLS on the agent listener, and mTLS where the client certificate's SPIFFE ID is the
//! agent. Certificates are made per test; the server certificate is reloaded from disk.

mod common;

use bytes::Bytes;
use common::keys::Pki;
use common::*;
use http_body_util::{BodyExt, Empty};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpStream;

const SPIFFE: &str = "spiffe://example.org/ns/agents/sa/ops-bot";

fn policy() -> String {
    format!(
        "{CONTRACTS}---\napiVersion: toolgate.dev/v1alpha1\nkind: AgentPolicy\nmetadata: {{name: mesh-bot}}\nspec:\n  agents: [\"{SPIFFE}\"]\n  tools: [{{name: read_logs}}]\n"
    )
}

/// One HTTPS GET through a fresh TLS connection; `Err` when the handshake or request fails.
async fn get(
    addr: std::net::SocketAddr,
    ca_pem: &str,
    client: Option<&(String, String)>,
    path: &str,
) -> Result<(u16, String), String> {
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(ca_pem.as_bytes()) {
        roots.add(cert.unwrap()).unwrap();
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots);
    let config = match client {
        Some((cert, key)) => builder
            .with_client_auth_cert(
                CertificateDer::pem_slice_iter(cert.as_bytes())
                    .map(Result::unwrap)
                    .collect(),
                PrivateKeyDer::from_pem_slice(key.as_bytes()).unwrap(),
            )
            .unwrap(),
        None => builder.with_no_client_auth(),
    };
    let tcp = TcpStream::connect(addr).await.map_err(|e| e.to_string())?;
    let tls = tokio_rustls::TlsConnector::from(Arc::new(config))
        .connect(ServerName::try_from("localhost").unwrap(), tcp)
        .await
        .map_err(|e| e.to_string())?;
    let (mut sender, conn) =
        hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(tls))
            .await
            .map_err(|e| e.to_string())?;
    tokio::spawn(conn);
    let request = http::Request::get(path)
        .header("host", "localhost")
        .body(Empty::<Bytes>::new())
        .unwrap();
    let response = sender
        .send_request(request)
        .await
        .map_err(|e| e.to_string())?;
    let status = response.status().as_u16();
    let body = response
        .into_body()
        .collect()
        .await
        .map_err(|e| e.to_string())?
        .to_bytes();
    Ok((status, String::from_utf8_lossy(&body).into_owned()))
}

#[tokio::test]
async fn client_certificate_names_the_agent() {
    let pki = Pki::new("test-ca");
    let server = pki.issue(&["localhost"], &[], false);
    let client = pki.issue(&[], &[SPIFFE], true);
    let other_pki = Pki::new("rogue-ca");
    let rogue = other_pki.issue(&[], &[SPIFFE], true);
    let files = tempfile::tempdir().unwrap();
    let (cert, key, ca) = (
        files.path().join("tls.crt"),
        files.path().join("tls.key"),
        files.path().join("ca.crt"),
    );
    std::fs::write(&cert, &server.0).unwrap();
    std::fs::write(&key, &server.1).unwrap();
    std::fs::write(&ca, &pki.ca_pem).unwrap();
    let backend = Backend::example().await;
    let h = Harness::start(
        backend.addr,
        Options {
            policies: policy(),
            tweak: Box::new(move |s| {
                s.tls = Some(toolgate::config::Tls {
                    cert,
                    key,
                    client_ca: Some(ca),
                    agent_san: Default::default(),
                });
            }),
            ..Options::default()
        },
    )
    .await;
    let addr = h.sidecar.as_ref().unwrap().agent_addr;
    let (status, body) = get(addr, &pki.ca_pem, Some(&client), "/logs/orders")
        .await
        .unwrap();
    assert_eq!(status, 200, "{body}");
    assert_eq!(backend.last().headers["x-toolgate-agent"], SPIFFE);
    assert!(
        get(addr, &pki.ca_pem, None, "/logs/orders").await.is_err(),
        "no client certificate, no call"
    );
    assert!(
        get(addr, &pki.ca_pem, Some(&rogue), "/logs/orders")
            .await
            .is_err(),
        "a certificate from another CA is refused"
    );
    assert_eq!(backend.count(), 1);
    h.stop().await;
}

#[tokio::test]
async fn server_certificate_is_reloaded_from_disk() {
    let first = Pki::new("first-ca");
    let second = Pki::new("second-ca");
    let files = tempfile::tempdir().unwrap();
    let (cert, key) = (files.path().join("tls.crt"), files.path().join("tls.key"));
    let issued = first.issue(&["localhost"], &[], false);
    std::fs::write(&cert, &issued.0).unwrap();
    std::fs::write(&key, &issued.1).unwrap();
    let backend = Backend::example().await;
    let (c, k) = (cert.clone(), key.clone());
    let h = Harness::start(
        backend.addr,
        Options {
            tweak: Box::new(move |s| {
                s.tls = Some(toolgate::config::Tls {
                    cert: c,
                    key: k,
                    client_ca: None,
                    agent_san: Default::default(),
                })
            }),
            ..Options::default()
        },
    )
    .await;
    let addr = h.sidecar.as_ref().unwrap().agent_addr;
    let path = "/logs/orders";
    // Plain TLS: no client certificate needed; without a token the pipeline refuses.
    let (status, _) = get(addr, &first.ca_pem, None, path).await.unwrap();
    assert_eq!(
        status, 401,
        "TLS without a token reaches the pipeline and is refused there"
    );
    let issued = second.issue(&["localhost"], &[], false);
    std::fs::write(&key, &issued.1).unwrap();
    std::fs::write(&cert, &issued.0).unwrap();
    let mut reloaded = false;
    for _ in 0..40 {
        tokio::time::sleep(Duration::from_millis(100)).await;
        if get(addr, &second.ca_pem, None, path).await.is_ok() {
            reloaded = true;
            break;
        }
    }
    assert!(reloaded, "the new certificate was never served");
    assert!(get(addr, &first.ca_pem, None, path).await.is_err());
    h.stop().await;
}
