//! The validating webhook (`POST /validate` on `toolgate inject`): every `AdmissionReview`
//! in `tests/fixtures/validate/` must get exactly the `response` in the `.response.json`
//! beside it, from the pure function and, over TLS (HTTP/1.1 and HTTP/2), from the real
//! server that also serves `/inject`.
//!
//! `TOOLGATE_BLESS=1 cargo test --test validate_webhook` rewrites the `.response.json`
//! files; review the diff before committing it.

mod common;

use bytes::Bytes;
use common::keys::Pki;
use http_body_util::{BodyExt, Full};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName};
use serde_json::Value;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use tokio::net::TcpStream;

use toolgate::inject::server::Injector;
use toolgate::inject::settings::InjectSettings;
use toolgate::inject::validate::validate;

const HOST: &str = "toolgate-injector.toolgate-system.svc";

fn fixtures() -> Vec<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/validate");
    let mut reviews: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| {
            let name = p.file_name().unwrap().to_string_lossy();
            name.ends_with(".json") && !name.ends_with(".response.json")
        })
        .collect();
    reviews.sort();
    reviews
}

fn golden(review: &Path) -> Value {
    let path = review.with_extension("response.json");
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|_| panic!("{} is missing: run with TOOLGATE_BLESS=1", path.display()));
    serde_json::from_str(&text).unwrap()
}

#[test]
fn reviews_produce_the_golden_responses() {
    let bless = std::env::var_os("TOOLGATE_BLESS").is_some();
    let (mut denied, mut allowed) = (0, 0);
    for path in fixtures() {
        let answer = validate(&std::fs::read(&path).unwrap());
        assert_eq!(answer.status, 200, "{}", path.display());
        let response = answer.body["response"].clone();
        if bless {
            let text = serde_json::to_string_pretty(&response).unwrap() + "\n";
            std::fs::write(path.with_extension("response.json"), text).unwrap();
        }
        assert_eq!(response, golden(&path), "{}", path.display());
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        // The fixtures' names say what they expect: a broken spec created or changed is
        // refused, everything else is let through.
        let refused =
            name.contains("bad-") || name.contains("unknown-field") || name.contains("twice");
        assert_eq!(response["allowed"], !refused, "{name}");
        if refused {
            denied += 1;
            let message = response["status"]["message"].as_str().unwrap();
            let object = if name.starts_with("contract") {
                "ToolContract"
            } else {
                "AgentPolicy"
            };
            assert!(
                message.starts_with(&format!("{object}/")),
                "{name}: {message}"
            );
            assert!(
                message.contains(": spec."),
                "{name}: the field path: {message}"
            );
        } else {
            allowed += 1;
        }
    }
    assert!(
        denied >= 5 && allowed >= 4,
        "{denied} denied, {allowed} allowed"
    );
}

/// A serving certificate for the Service's name, and an injector using it.
async fn start(pki: &Pki, dir: &Path) -> Injector {
    let (cert, key) = pki.issue(&[HOST], &[], false);
    let (cert_path, key_path) = (dir.join("tls.crt"), dir.join("tls.key"));
    std::fs::write(&cert_path, cert).unwrap();
    std::fs::write(&key_path, key).unwrap();
    let text = format!(
        "listen: 127.0.0.1:0\ntls: {{cert: {}, key: {}}}\nsidecar: {{image: toolgate:0.1.0}}\n",
        cert_path.display(),
        key_path.display()
    );
    let settings = InjectSettings::parse("test", &text, Vec::new()).unwrap();
    Injector::start(settings).await.unwrap()
}

/// One HTTPS request on a fresh connection, verifying the server against `ca_pem`.
async fn send(
    addr: SocketAddr,
    ca_pem: &str,
    h2: bool,
    method: &str,
    path: &str,
    body: Vec<u8>,
) -> (u16, Vec<u8>) {
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(ca_pem.as_bytes()) {
        roots.add(cert.unwrap()).unwrap();
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    if h2 {
        config.alpn_protocols = vec![b"h2".to_vec()];
    }
    let tcp = TcpStream::connect(addr).await.unwrap();
    let tls = tokio_rustls::TlsConnector::from(Arc::new(config))
        .connect(ServerName::try_from(HOST).unwrap(), tcp)
        .await
        .unwrap();
    let io = hyper_util::rt::TokioIo::new(tls);
    let request = http::Request::builder()
        .method(method)
        .uri(format!("https://{HOST}{path}"))
        .header("content-type", "application/json")
        .body(Full::new(Bytes::from(body)))
        .unwrap();
    let response = if h2 {
        let (mut sender, conn) =
            hyper::client::conn::http2::handshake(hyper_util::rt::TokioExecutor::new(), io)
                .await
                .unwrap();
        tokio::spawn(conn);
        sender.send_request(request).await.unwrap()
    } else {
        let (mut sender, conn) = hyper::client::conn::http1::handshake(io).await.unwrap();
        tokio::spawn(conn);
        sender.send_request(request).await.unwrap()
    };
    let status = response.status().as_u16();
    let body = response.into_body().collect().await.unwrap().to_bytes();
    (status, body.to_vec())
}

#[tokio::test]
async fn the_server_answers_validation_reviews_over_tls() {
    let dir = tempfile::tempdir().unwrap();
    let pki = Pki::new("toolgate webhook CA");
    let injector = start(&pki, dir.path()).await;
    for (i, path) in fixtures().into_iter().enumerate() {
        let review = std::fs::read(&path).unwrap();
        let (status, body) = send(
            injector.addr,
            &pki.ca_pem,
            i % 2 == 1,
            "POST",
            "/validate",
            review.clone(),
        )
        .await;
        assert_eq!(status, 200, "{}", String::from_utf8_lossy(&body));
        let answer: Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(answer["apiVersion"], "admission.k8s.io/v1");
        assert_eq!(answer["kind"], "AdmissionReview");
        let sent: Value = serde_json::from_slice(&review).unwrap();
        assert_eq!(answer["response"]["uid"], sent["request"]["uid"]);
        assert_eq!(answer["response"], golden(&path), "{}", path.display());
    }
    // Same server, same TLS: /inject still answers pods; /validate wants a POST.
    let pod_review = std::fs::read(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/inject/annotated.json"),
    )
    .unwrap();
    let (status, body) = send(
        injector.addr,
        &pki.ca_pem,
        false,
        "POST",
        "/inject",
        pod_review,
    )
    .await;
    assert_eq!(status, 200);
    let answer: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(answer["response"]["patchType"], "JSONPatch");
    let (status, _) = send(
        injector.addr,
        &pki.ca_pem,
        false,
        "GET",
        "/validate",
        Vec::new(),
    )
    .await;
    assert_eq!(status, 405);
    let (status, body) = send(
        injector.addr,
        &pki.ca_pem,
        true,
        "POST",
        "/validate",
        b"{\"apiVersion\": 7".to_vec(),
    )
    .await;
    assert_eq!(status, 400, "{}", String::from_utf8_lossy(&body));
    // A hostile rule (deeply nested) is refused, not a crash, and the server goes on.
    let hostile = std::fs::read_to_string(
        fixtures()
            .iter()
            .find(|p| p.ends_with("policy-bad-rule-create.json"))
            .unwrap(),
    )
    .unwrap()
    .replace(
        "args.window_minutes <= taks.window_minutes",
        &format!("{}1{}", "(".repeat(5000), ")".repeat(5000)),
    );
    let (status, body) = send(
        injector.addr,
        &pki.ca_pem,
        false,
        "POST",
        "/validate",
        hostile.into_bytes(),
    )
    .await;
    assert_eq!(status, 200);
    let answer: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(answer["response"]["allowed"], false);
    let (status, _) = send(
        injector.addr,
        &pki.ca_pem,
        false,
        "GET",
        "/healthz",
        Vec::new(),
    )
    .await;
    assert_eq!(status, 200);
    injector.shutdown().await;
}

/// docs/install.md shows a refused `kubectl apply`: the webhook's message for the policy
/// it names is the one shown (the API server prefixes the webhook's name).
#[test]
fn the_install_doc_shows_the_webhook_s_message() {
    let doc =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/install.md"))
            .unwrap();
    let shown = doc
        .lines()
        .find_map(|l| {
            l.split_once("admission webhook \"validate.toolgate.dev\" denied the request: ")
        })
        .expect("docs/install.md shows a refused apply")
        .1;
    let path = fixtures()
        .into_iter()
        .find(|p| p.ends_with("policy-bad-rule-create.json"))
        .unwrap();
    let response = validate(&std::fs::read(path).unwrap()).body["response"].clone();
    assert_eq!(response["status"]["message"], shown);
}
