//! The injector end to end, as the API server meets it: `toolgate inject` over TLS with a
//! generated certificate, real `AdmissionReview` requests from a rustls client (HTTP/1.1
//! and HTTP/2), the returned JSON patch applied to the pod, and the result validated as a
//! Pod by `kubernetes-validate --strict` and against the restricted Pod Security profile.
//! The patch for other settings (an audit key Secret, a Redis password Secret) is checked
//! the same way, from the review function the server runs.

mod common;

use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine as _;
use bytes::Bytes;
use common::keys::Pki;
use common::kube_tools;
use common::pod_security::{restricted_violations, toolgate_container_violations};
use http_body_util::{BodyExt, Full};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName};
use serde_json::{json, Value};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::net::TcpStream;

use toolgate::inject::server::Injector;
use toolgate::inject::settings::InjectSettings;
use toolgate::inject::UID;

const HOST: &str = "toolgate-injector.toolgate-system.svc";

fn fixture(name: &str) -> Vec<u8> {
    std::fs::read(
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fixtures/inject")
            .join(name),
    )
    .unwrap()
}

/// A serving certificate for the webhook's Service name, written where settings point.
fn write_cert(pki: &Pki, dir: &Path) -> (PathBuf, PathBuf) {
    let (cert, key) = pki.issue(&[HOST, "localhost"], &[], false);
    let (cert_path, key_path) = (dir.join("tls.crt"), dir.join("tls.key"));
    // Write to a temporary name and rename, as the kubelet's atomic Secret update does.
    for (path, text) in [(&cert_path, cert), (&key_path, key)] {
        let tmp = path.with_extension("tmp");
        std::fs::write(&tmp, text).unwrap();
        std::fs::rename(&tmp, path).unwrap();
    }
    (cert_path, key_path)
}

async fn start(pki: &Pki, dir: &Path) -> Injector {
    let (cert, key) = write_cert(pki, dir);
    let text = format!(
        "listen: 127.0.0.1:0\ntls: {{cert: {}, key: {}}}\nsidecar: {{image: toolgate:0.1.0}}\n",
        cert.display(),
        key.display()
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
) -> Result<(u16, Vec<u8>), String> {
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
    let tcp = TcpStream::connect(addr).await.map_err(|e| e.to_string())?;
    let tls = tokio_rustls::TlsConnector::from(Arc::new(config))
        .connect(ServerName::try_from(HOST).unwrap(), tcp)
        .await
        .map_err(|e| e.to_string())?;
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
                .map_err(|e| e.to_string())?;
        tokio::spawn(conn);
        sender.send_request(request).await
    } else {
        let (mut sender, conn) = hyper::client::conn::http1::handshake(io)
            .await
            .map_err(|e| e.to_string())?;
        tokio::spawn(conn);
        sender.send_request(request).await
    }
    .map_err(|e| e.to_string())?;
    let status = response.status().as_u16();
    let body = response
        .into_body()
        .collect()
        .await
        .map_err(|e| e.to_string())?;
    Ok((status, body.to_bytes().to_vec()))
}

/// Posts a review and returns the `response` of the answer.
async fn admit(addr: SocketAddr, ca: &str, h2: bool, review: &[u8]) -> Value {
    let (status, body) = send(addr, ca, h2, "POST", "/inject", review.to_vec())
        .await
        .unwrap();
    assert_eq!(status, 200, "{}", String::from_utf8_lossy(&body));
    let answer: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(answer["apiVersion"], "admission.k8s.io/v1");
    assert_eq!(answer["kind"], "AdmissionReview");
    let sent: Value = serde_json::from_slice(review).unwrap();
    assert_eq!(
        answer["response"]["uid"], sent["request"]["uid"],
        "uid echoed"
    );
    answer["response"].clone()
}

/// The review's pod with the answer's patch applied (the API server's part).
fn apply(review: &[u8], response: &Value) -> Value {
    assert_eq!(response["patchType"], "JSONPatch");
    let patch = BASE64.decode(response["patch"].as_str().unwrap()).unwrap();
    let patch: json_patch::Patch = serde_json::from_slice(&patch).unwrap();
    let review: Value = serde_json::from_slice(review).unwrap();
    let mut pod = review["request"]["object"].clone();
    json_patch::patch(&mut pod, &patch).unwrap();
    // What the API server would add or drop before storing: a name, no status.
    pod["metadata"]["name"] = json!("orders-7c9f8d6b5d-x2x9q");
    pod.as_object_mut().unwrap().remove("status");
    pod
}

#[tokio::test]
async fn the_webhook_injects_over_tls_and_the_pod_stays_valid_and_restricted() {
    let dir = tempfile::tempdir().unwrap();
    let pki = Pki::new("toolgate webhook CA");
    let injector = start(&pki, dir.path()).await;
    let addr = injector.addr;

    let mut patched = Vec::new();
    for (name, h2) in [
        ("annotated.json", false),
        ("annotated-no-token.json", true),
        ("annotated-upstream-port.json", false),
    ] {
        let review = fixture(name);
        let response = admit(addr, &pki.ca_pem, h2, &review).await;
        assert_eq!(response["allowed"], true, "{name}");
        let pod = apply(&review, &response);
        let spec = &pod["spec"];
        let sidecar = &spec["initContainers"][0];
        assert_eq!(sidecar["name"], "toolgate", "{name}");
        assert_eq!(
            sidecar["restartPolicy"], "Always",
            "{name}: a native sidecar"
        );
        assert_eq!(
            toolgate_container_violations(sidecar, UID),
            Vec::<String>::new(),
            "{name}"
        );
        assert_eq!(restricted_violations(spec), Vec::<String>::new(), "{name}");
        patched.push(serde_yaml::to_string(&pod).unwrap());
    }
    kube_tools::validate(&patched.join("---\n"), "the injected pods");

    // Left alone: no annotation, opted out, already injected — allowed, no patch.
    for name in [
        "unannotated.json",
        "opted-out.json",
        "already-injected.json",
    ] {
        let response = admit(addr, &pki.ca_pem, false, &fixture(name)).await;
        assert_eq!(response["allowed"], true, "{name}");
        assert!(response.get("patch").is_none(), "{name}: {response}");
    }

    // Garbage gets a 400 with a message, and the webhook keeps serving.
    for garbage in [&b"{\"apiVersion\": 7"[..], b"\xff\xfe", b"[]", b""] {
        let (status, body) = send(
            addr,
            &pki.ca_pem,
            false,
            "POST",
            "/inject",
            garbage.to_vec(),
        )
        .await
        .unwrap();
        assert_eq!(status, 400);
        let body: Value = serde_json::from_slice(&body).unwrap();
        assert!(body["message"]
            .as_str()
            .unwrap()
            .contains("AdmissionReview"));
    }
    let (status, _) = send(
        addr,
        &pki.ca_pem,
        false,
        "POST",
        "/inject",
        vec![b' '; 9 << 20],
    )
    .await
    .unwrap();
    assert_eq!(status, 413, "bodies are bounded");
    let (status, _) = send(addr, &pki.ca_pem, true, "GET", "/healthz", vec![])
        .await
        .unwrap();
    assert_eq!(status, 200);
    let (status, _) = send(addr, &pki.ca_pem, false, "GET", "/inject", vec![])
        .await
        .unwrap();
    assert_eq!(status, 405);
    let again = admit(addr, &pki.ca_pem, false, &fixture("annotated.json")).await;
    assert!(
        again["patch"].is_string(),
        "still injecting after the garbage"
    );
    injector.shutdown().await;
}

#[tokio::test]
async fn a_refused_pod_is_denied_with_a_message() {
    let dir = tempfile::tempdir().unwrap();
    let pki = Pki::new("toolgate webhook CA");
    let injector = start(&pki, dir.path()).await;
    let mut review: Value = serde_json::from_slice(&fixture("annotated.json")).unwrap();
    review["request"]["object"]["metadata"]["annotations"]["toolgate.dev/upstream-port"] =
        json!("http");
    let response = admit(
        injector.addr,
        &pki.ca_pem,
        false,
        &serde_json::to_vec(&review).unwrap(),
    )
    .await;
    assert_eq!(response["allowed"], false);
    assert_eq!(response["status"]["code"], 400);
    let message = response["status"]["message"].as_str().unwrap();
    assert!(message.contains("toolgate.dev/upstream-port"), "{message}");
    injector.shutdown().await;
}

/// The sidecar's volumes stay its own, over the wire as in the golden fixtures: a pod
/// whose app container pre-declares a mount of one is refused, and so is a `kubectl
/// debug` container (an update of `pods/ephemeralcontainers`) that names one.
#[tokio::test]
async fn pods_and_debug_containers_that_borrow_the_sidecars_volumes_are_denied() {
    let dir = tempfile::tempdir().unwrap();
    let pki = Pki::new("toolgate webhook CA");
    let injector = start(&pki, dir.path()).await;
    for (fixture_name, container) in [
        ("borrowed/app-mounts-audit-key.json", "\"app\""),
        ("borrowed/init-mounts-redis-password.json", "\"migrate\""),
        ("borrowed/ephemeral-mounts-token.json", "\"debugger\""),
        (
            "borrowed/debug-container-mounts-audit-key.json",
            "\"debugger-x7q\"",
        ),
    ] {
        for h2 in [false, true] {
            let response = admit(injector.addr, &pki.ca_pem, h2, &fixture(fixture_name)).await;
            assert_eq!(response["allowed"], false, "{fixture_name}: {response}");
            assert!(response.get("patch").is_none(), "{fixture_name}");
            let message = response["status"]["message"].as_str().unwrap();
            assert!(
                message.contains(container) && message.contains("toolgate-"),
                "{fixture_name}: {message}"
            );
        }
    }
    // A debug container that mounts nothing of the sidecar's is let through, unchanged.
    let response = admit(
        injector.addr,
        &pki.ca_pem,
        false,
        &fixture("borrowed/debug-container.json"),
    )
    .await;
    assert_eq!(response["allowed"], true, "{response}");
    assert!(response.get("patch").is_none(), "{response}");
    injector.shutdown().await;
}

#[tokio::test]
async fn a_rotated_certificate_is_served_without_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let old = Pki::new("old CA");
    let injector = start(&old, dir.path()).await;
    let addr = injector.addr;
    send(addr, &old.ca_pem, false, "GET", "/healthz", vec![])
        .await
        .unwrap();

    let new = Pki::new("new CA");
    write_cert(&new, dir.path());
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        match send(addr, &new.ca_pem, false, "GET", "/healthz", vec![]).await {
            Ok((200, _)) => break,
            other => assert!(
                Instant::now() < deadline,
                "the new certificate was not picked up: {other:?}"
            ),
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert!(
        send(addr, &old.ca_pem, false, "GET", "/healthz", vec![])
            .await
            .is_err(),
        "the old certificate is no longer served"
    );
    injector.shutdown().await;
}

/// The real binary: `toolgate inject --config FILE` serves reviews; a bad file exits 2.
#[tokio::test]
async fn the_binary_serves_reviews_and_rejects_bad_settings() {
    let dir = tempfile::tempdir().unwrap();
    let pki = Pki::new("toolgate webhook CA");
    let (cert, key) = write_cert(&pki, dir.path());
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let config = dir.path().join("inject.yaml");
    std::fs::write(
        &config,
        format!(
            "listen: 127.0.0.1:{port}\ntls: {{cert: {}, key: {}}}\nsidecar: {{image: toolgate:0.1.0}}\n",
            cert.display(),
            key.display()
        ),
    )
    .unwrap();
    let child = std::process::Command::new(env!("CARGO_BIN_EXE_toolgate"))
        .args(["inject", "--config"])
        .arg(&config)
        .env("TOOLGATE_LOG", "warn")
        .spawn()
        .unwrap();
    let child = KillOnDrop(child);
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    let deadline = Instant::now() + Duration::from_secs(10);
    while send(addr, &pki.ca_pem, false, "GET", "/readyz", vec![])
        .await
        .is_err()
    {
        assert!(Instant::now() < deadline, "toolgate inject did not come up");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let response = admit(addr, &pki.ca_pem, false, &fixture("annotated.json")).await;
    assert!(response["patch"].is_string());
    drop(child);

    std::fs::write(
        &config,
        "sidecar: {image: toolgate:0.1.0, policiesConfigMap: Bad_Name}\n",
    )
    .unwrap();
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_toolgate"))
        .args(["inject", "--config"])
        .arg(&config)
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("policiesConfigMap"), "{stderr}");

    // The same check holds for a value set by variable, as the chart's users might.
    std::fs::write(&config, "sidecar: {image: toolgate:0.1.0}\n").unwrap();
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_toolgate"))
        .args(["inject", "--config"])
        .arg(&config)
        .env("TOOLGATE_INJECT_SIDECAR_AUDIT_KEY_SECRET", "Audit_Key")
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("auditKeySecret"), "{stderr}");

    let output = std::process::Command::new(env!("CARGO_BIN_EXE_toolgate"))
        .args(["inject", "--config"])
        .arg(&config)
        .env(
            "TOOLGATE_INJECT_SIDECAR_REDIS_PASSWORD_SECRET",
            "Redis_Password",
        )
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("redisPasswordSecret"), "{stderr}");
}

/// With `sidecar.auditKeySecret`, `sidecar.redisPasswordSecret`, or the token Secrets,
/// issuer ConfigMaps and audit volume of `files/`, the patched pod (the golden
/// fixture's) is still a valid, restricted Pod, its volumes included.
#[test]
fn a_pod_with_a_mounted_secret_stays_valid_and_restricted() {
    for folder in ["audit-key", "redis-state", "files"] {
        let settings = InjectSettings::load(
            Some(
                &Path::new(env!("CARGO_MANIFEST_DIR"))
                    .join("tests/fixtures/inject")
                    .join(folder)
                    .join("settings.yaml"),
            ),
            Vec::new(),
        )
        .unwrap();
        assert!(
            settings.sidecar.audit_key_secret.is_some()
                || settings.sidecar.redis_password_secret.is_some()
                || settings.sidecar.audit_volume.is_some(),
            "{folder}"
        );
        let review = fixture(&format!("{folder}/annotated.json"));
        let answer = toolgate::inject::review::review(&review, &settings.sidecar);
        let response = &answer.body["response"];
        assert_eq!(response["allowed"], true, "{folder}: {response}");
        let pod = apply(&review, response);
        let spec = &pod["spec"];
        assert_eq!(
            toolgate_container_violations(&spec["initContainers"][0], UID),
            Vec::<String>::new(),
            "{folder}"
        );
        assert_eq!(
            restricted_violations(spec),
            Vec::<String>::new(),
            "{folder}"
        );
        kube_tools::validate(
            &serde_yaml::to_string(&pod).unwrap(),
            &format!("the pod injected with {folder}/settings.yaml"),
        );
    }
}

/// Ends the child process however the test ends.
struct KillOnDrop(std::process::Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}
