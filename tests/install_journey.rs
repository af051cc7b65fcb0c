//! docs/install.md, run as written (DESIGN §15, "Everything the sidecar reads is
//! mountable from the chart"): every values example in it (the blocks titled
//! `values-*.yaml`, each but the platform's on top of the platform's, as the doc's
//! `helm upgrade -f … -f …` says) is rendered with the real `helm`; the injector's
//! settings are taken from the rendered ConfigMap; the injector's own patch is run on the
//! doc's `orders` pod; and the sidecar container it adds is run here, with its env, args
//! and volume mounts mapped to temporary folders (`kubelet.rs`: Secrets and ConfigMaps
//! written as the kubelet writes them, the API server the stand-in of
//! `common::fake_apiserver`, the Jaeger collector a local one), through to an allowed
//! and a refused call from an agent holding the credential the doc says it gets. Every
//! file setting of the running sidecar must lie in one of its mounts, so no documented
//! value names a file nothing mounts.
//!
//! Then the journey's shown output is checked against what the code prints: the calls'
//! answers, the audit lines, the metrics, the span, `toolgate check`, the refused
//! `kubectl apply`, the chart's NOTES, and what `kubectl get` lists.

mod common;
#[path = "common/kubelet.rs"]
mod kubelet;

use common::collector::{attr, Collector};
use common::fake_apiserver::FakeApiServer;
use common::keys::{jwks, now, SigningKey};
use common::kube_tools::helm_command;
use common::pod_security::restricted_violations;
use common::{Backend, Seen};
use kubelet::{Cluster, Container, Network};
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use toolgate::config::{Jwks, Settings};
use toolgate::identity::tokens::digest_hex;
use toolgate::inject::patch::{patch, Decision};
use toolgate::inject::settings::InjectSettings;

const NAMESPACE: &str = "toolgate-system";
/// The doc's workload: its namespace, and the pod name its commands show.
const SHOP: &str = "shop";
const POD: &str = "orders-7c9f8d6b5d-x2x9q";
const CLUSTER_ISSUER: &str = "https://kubernetes.default.svc.cluster.local";
/// What the kubelet projects as the sidecar's own ServiceAccount token.
const SIDECAR_TOKEN: &str = "orders-serviceaccount-token";
/// The static token of values-agent-tokens.yaml's agent, and the approver's of
/// values-approvers.yaml.
const CI_TOKEN: &str = "ci-bot-token-from-the-secret";
const ALICE_TOKEN: &str = "alice-approver-token";
/// What the doc's `orders` app answers `GET /logs/orders`.
const LOGS: &str = r#"{"lines":[{"ts":"2026-11-30T09:14:02Z","msg":"order 17 shipped"}]}"#;

fn doc() -> String {
    std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/install.md")).unwrap()
}

/// A fenced block of the doc: its info string and text.
struct Block {
    info: String,
    text: String,
}

impl Block {
    fn title(&self) -> Option<&str> {
        self.info
            .split_whitespace()
            .find_map(|word| word.strip_prefix("title="))
    }
}

fn blocks(doc: &str) -> Vec<Block> {
    let mut out = Vec::new();
    let mut open: Option<Block> = None;
    for line in doc.lines() {
        match (&mut open, line.strip_prefix("```")) {
            (None, Some(info)) => {
                open = Some(Block {
                    info: info.trim().to_string(),
                    text: String::new(),
                })
            }
            (Some(_), Some(_)) => out.extend(open.take()),
            (Some(block), None) => {
                block.text.push_str(line);
                block.text.push('\n');
            }
            (None, None) => {}
        }
    }
    out
}

fn titled(doc: &str, title: &str) -> String {
    blocks(doc)
        .into_iter()
        .find(|b| b.title() == Some(title))
        .unwrap_or_else(|| panic!("docs/install.md has no block titled {title}"))
        .text
}

/// The output the doc shows under the first `$ ` command (of a console block) that
/// contains `command`, line by line.
fn shown(doc: &str, command: &str) -> Vec<String> {
    for block in blocks(doc).iter().filter(|b| b.info == "console") {
        let mut lines = block.text.lines().peekable();
        while let Some(line) = lines.next() {
            let Some(mut cmd) = line.strip_prefix("$ ").map(String::from) else {
                continue;
            };
            while cmd.ends_with('\\') {
                cmd.push_str(lines.next().unwrap_or(""));
            }
            let mut output = Vec::new();
            while let Some(next) = lines.peek().filter(|l| !l.starts_with("$ ")) {
                output.push(next.to_string());
                lines.next();
            }
            if cmd.contains(command) {
                return output;
            }
        }
    }
    panic!("docs/install.md shows no command with {command:?}")
}

fn documents(yaml: &str) -> Vec<Value> {
    serde_yaml::Deserializer::from_str(yaml)
        .map(|doc| serde::Deserialize::deserialize(doc).unwrap())
        .filter(|v: &Value| !v.is_null())
        .collect()
}

/// The values files of the doc, each as the doc installs it: the platform's alone, any
/// other on top of it.
fn values_examples(doc: &str) -> Vec<(String, Vec<String>)> {
    let platform = titled(doc, "values-platform.yaml");
    let examples: Vec<(String, Vec<String>)> = blocks(doc)
        .into_iter()
        .filter_map(|b| {
            let title = b.title()?.to_string();
            (title.starts_with("values-") && title.ends_with(".yaml")).then_some((title, b.text))
        })
        .map(|(title, text)| {
            let layers = if title == "values-platform.yaml" {
                vec![text]
            } else {
                vec![platform.clone(), text]
            };
            (title, layers)
        })
        .collect();
    assert!(
        examples.len() >= 6,
        "the doc's values examples went missing: {:?}",
        examples.iter().map(|e| &e.0).collect::<Vec<_>>()
    );
    examples
}

/// `helm template` of the chart with `layers` (values files, in order).
fn render(layers: &[String]) -> Vec<Value> {
    let dir = tempfile::tempdir().unwrap();
    let mut command = helm_command();
    command
        .args(["template", "toolgate"])
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("charts/toolgate"))
        .args(["--namespace", NAMESPACE]);
    for (i, layer) in layers.iter().enumerate() {
        let file = dir.path().join(format!("values-{i}.yaml"));
        std::fs::write(&file, layer).unwrap();
        command.arg("--values").arg(file);
    }
    let output = command.output().unwrap();
    assert!(
        output.status.success(),
        "helm template failed:\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    documents(&String::from_utf8(output.stdout).unwrap())
}

fn injector_settings(objects: &[Value]) -> InjectSettings {
    let config = objects
        .iter()
        .find(|o| o["kind"] == "ConfigMap" && o["data"]["inject.yaml"].is_string())
        .expect("the chart renders the injector's settings");
    InjectSettings::parse(
        "the rendered ConfigMap",
        config["data"]["inject.yaml"].as_str().unwrap(),
        Vec::new(),
    )
    .unwrap_or_else(|e| panic!("{e}"))
}

/// The doc's `orders` Deployment, as one of its pods at admission.
fn orders_pod(doc: &str) -> Value {
    let objects = documents(&titled(doc, "orders.yaml"));
    let deployment = objects.iter().find(|o| o["kind"] == "Deployment").unwrap();
    let template = &deployment["spec"]["template"];
    let mut metadata = template["metadata"].clone();
    metadata["name"] = json!(POD);
    metadata["namespace"] = deployment["metadata"]["namespace"].clone();
    let mut spec = template["spec"].clone();
    spec["serviceAccountName"] = json!("default");
    json!({"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec})
}

/// The pod as the injector's patch leaves it.
fn injected(pod: &Value, settings: &InjectSettings) -> Value {
    let typed = serde_json::from_value(pod.clone()).unwrap();
    let Decision::Inject(ops) = patch(&typed, &settings.sidecar) else {
        panic!("the doc's orders pod was not injected");
    };
    let mut pod = pod.clone();
    json_patch::patch(&mut pod, &ops).unwrap();
    assert_eq!(
        restricted_violations(&pod["spec"]),
        Vec::<String>::new(),
        "the injected pod breaks Pod Security \"restricted\""
    );
    pod
}

/// Keys and Secrets the doc tells its users to create, with what they hold here.
struct Material {
    cluster_key: SigningKey,
    login_key: SigningKey,
    orchestrator_key: SigningKey,
    audit_key: String,
}

impl Material {
    fn new() -> Material {
        Material {
            cluster_key: SigningKey::rsa("cluster-sa-1"),
            login_key: SigningKey::ec("login-1"),
            orchestrator_key: SigningKey::ed("orchestrator-1"),
            audit_key: "bm90LWEtcmVhbC1rZXktYnV0LTMyLWJ5dGVzLWxvbmch".into(),
        }
    }

    /// The namespace's Secrets and ConfigMaps, as the doc's `kubectl create` commands
    /// make them.
    fn cluster(&self) -> Cluster {
        let item = |k: &str, v: String| BTreeMap::from([(k.to_string(), v)]);
        let secret = |k: &str, v: String| BTreeMap::from([(k.to_string(), v.into_bytes())]);
        Cluster {
            secrets: BTreeMap::from([
                (
                    "agent-tokens".into(),
                    secret("tokens.yaml", format!("ci-bot: {}\n", digest_hex(CI_TOKEN))),
                ),
                (
                    "approver-tokens".into(),
                    secret(
                        "tokens.yaml",
                        format!(
                            "alice: {{sha256: {}, groups: [finance-leads]}}\n",
                            digest_hex(ALICE_TOKEN)
                        ),
                    ),
                ),
                (
                    "toolgate-audit-key".into(),
                    secret("key", self.audit_key.clone()),
                ),
            ]),
            config_maps: BTreeMap::from([
                (
                    "kube-root-ca.crt".into(),
                    item("ca.crt", "-----BEGIN CERTIFICATE-----\n".into()),
                ),
                (
                    "login-jwks".into(),
                    item("jwks.json", jwks(&[&self.login_key])),
                ),
                (
                    "orchestrator-jwks".into(),
                    item("jwks.json", jwks(&[&self.orchestrator_key])),
                ),
            ]),
            service_account_token: SIDECAR_TOKEN.into(),
        }
    }
}

/// Two free loopback ports, held together so they differ.
fn free_ports() -> (u16, u16) {
    let a = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let b = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    (
        a.local_addr().unwrap().port(),
        b.local_addr().unwrap().port(),
    )
}

async fn http(method: &str, url: &str, token: Option<&str>) -> (u16, http::HeaderMap, String) {
    try_http(method, url, token)
        .await
        .unwrap_or_else(|e| panic!("{method} {url}: {e}"))
}

async fn try_http(
    method: &str,
    url: &str,
    token: Option<&str>,
) -> Result<(u16, http::HeaderMap, String), String> {
    use http_body_util::{BodyExt, Full};
    let client = hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
        .build_http::<Full<bytes::Bytes>>();
    let mut request = http::Request::builder().method(method).uri(url);
    if let Some(token) = token {
        request = request.header("authorization", format!("Bearer {token}"));
    }
    let response = client
        .request(request.body(Full::new(bytes::Bytes::new())).unwrap())
        .await
        .map_err(|e| format!("{e:?}"))?;
    let status = response.status().as_u16();
    let headers = response.headers().clone();
    let body = response
        .into_body()
        .collect()
        .await
        .map_err(|e| e.to_string())?
        .to_bytes();
    Ok((status, headers, String::from_utf8_lossy(&body).into_owned()))
}

/// One example's run: the sidecar container the injector adds, running here.
struct Run {
    container: Container,
    child: std::process::Child,
    settings: Settings,
    agent: String,
    admin: String,
    backend: Backend,
    collector: Collector,
    _api: FakeApiServer,
}

impl Run {
    async fn start(doc: &str, layers: &[String], material: &Material) -> Run {
        let objects = render(layers);
        let settings = injector_settings(&objects);
        let pod = injected(&orders_pod(doc), &settings);

        let backend = Backend::start(Arc::new(|seen: &Seen| {
            let json = ("content-type", "application/json".to_string());
            match seen.uri.split('?').next() {
                Some("/logs/orders") => (200, vec![json], LOGS.into(), Duration::ZERO),
                _ => (404, vec![], String::new(), Duration::ZERO),
            }
        }))
        .await;
        let (collector, endpoint, _task) = Collector::grpc().await;
        let api = FakeApiServer::start().await;
        api.serve_issuer(
            CLUSTER_ISSUER,
            &jwks(&[&material.cluster_key]),
            SIDECAR_TOKEN,
        );
        api.apply(SHOP, &cluster_policies(doc));

        let (agent_port, admin_port) = free_ports();
        let app_port = orders_port(&pod);
        let network = Network {
            ports: BTreeMap::from([
                (15100, agent_port),
                (15101, admin_port),
                (app_port, backend.addr.port()),
            ]),
            services: BTreeMap::from([(
                "jaeger-collector.observability:4317".to_string(),
                endpoint.trim_start_matches("http://").to_string(),
            )]),
        };
        let container = Container::prepare(&pod, "toolgate", &material.cluster(), &network)
            .unwrap_or_else(|e| panic!("{e}"));
        let settings = Settings::parse("the injected sidecar", "", container.env.clone())
            .unwrap_or_else(|e| panic!("{e}"));
        check_files(&container, &settings);
        let mut extra = vec![("HOME", container.dir.path().to_string_lossy().into_owned())];
        // The in-cluster API client, pointed at the stand-in with the token the kubelet
        // projected into the sidecar's own token volume.
        if let Some(token) =
            container.host_path("/var/run/secrets/kubernetes.io/serviceaccount/token")
        {
            let kubeconfig = container.write_private(
                "kubeconfig",
                &format!(
                    "apiVersion: v1\nkind: Config\ncurrent-context: in-cluster\n\
                     clusters: [{{name: c, cluster: {{server: 'http://{}'}}}}]\n\
                     users: [{{name: u, user: {{tokenFile: '{}'}}}}]\n\
                     contexts: [{{name: in-cluster, context: {{cluster: c, user: u}}}}]\n",
                    api.addr,
                    token.display()
                ),
            );
            extra.push(("KUBECONFIG", kubeconfig.to_string_lossy().into_owned()));
        }
        let child = container.spawn(env!("CARGO_BIN_EXE_toolgate"), &extra);
        let mut run = Run {
            container,
            child,
            settings,
            agent: format!("http://127.0.0.1:{agent_port}"),
            admin: format!("http://127.0.0.1:{admin_port}"),
            backend,
            collector,
            _api: api,
        };
        run.wait_ready().await;
        run
    }

    async fn wait_ready(&mut self) {
        let url = format!("{}/readyz", self.admin);
        for _ in 0..300 {
            let ready = tokio::time::timeout(Duration::from_secs(1), try_http("GET", &url, None));
            if matches!(ready.await, Ok(Ok((200, _, _)))) {
                return;
            }
            if let Some(status) = self.child.try_wait().unwrap() {
                panic!(
                    "the injected sidecar exited ({status}):\n{}",
                    std::fs::read_to_string(self.container.stderr()).unwrap_or_default()
                );
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        panic!(
            "the injected sidecar never got ready:\n{}",
            std::fs::read_to_string(self.container.stderr()).unwrap_or_default()
        );
    }

    async fn call(&self, window_minutes: u32, token: &str) -> (u16, http::HeaderMap, String) {
        let url = format!("{}/logs/orders?window_minutes={window_minutes}", self.agent);
        http("GET", &url, Some(token)).await
    }

    /// Stops the sidecar as the kubelet does (SIGTERM) and returns its audit log.
    fn stop(mut self) -> (String, Container) {
        let _ = std::process::Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status();
        let status = self.child.wait().unwrap();
        assert!(
            status.success(),
            "the sidecar exited with {status}:\n{}",
            std::fs::read_to_string(self.container.stderr()).unwrap_or_default()
        );
        let path = match self.settings.audit.path.as_str() {
            "stdout" => self.container.stdout(),
            file => PathBuf::from(file),
        };
        let log =
            std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        (log, self.container)
    }
}

/// The app's port in the injected pod: where the sidecar forwards.
fn orders_port(pod: &Value) -> u16 {
    pod["metadata"]["annotations"]["toolgate.dev/upstream-port"]
        .as_str()
        .map(|p| p.parse().unwrap())
        .unwrap_or_else(|| {
            pod["spec"]["containers"][0]["ports"][0]["containerPort"]
                .as_u64()
                .unwrap() as u16
        })
}

/// The doc's `policies.yaml`, its policy also naming the agents of the other examples
/// (`ci-bot`'s static token, `report-bot` of the identity provider).
fn cluster_policies(doc: &str) -> String {
    documents(&titled(doc, "policies.yaml"))
        .into_iter()
        .map(|mut object| {
            if object["kind"] == "AgentPolicy" {
                let agents = object["spec"]["agents"].as_array_mut().unwrap();
                agents.extend([json!("ci-bot"), json!("report-bot")]);
            }
            serde_yaml::to_string(&object).unwrap()
        })
        .collect::<Vec<_>>()
        .join("---\n")
}

/// Every file the running sidecar reads lies in one of its mounts and is there; the one
/// it writes lies in a writable mount.
fn check_files(container: &Container, settings: &Settings) {
    let read = |what: &str, path: &Path| {
        let mount = container
            .mount_of(path)
            .unwrap_or_else(|| panic!("{what} is {}, a file nothing mounts", path.display()));
        assert!(
            path.exists(),
            "{what}: {} is not in {}",
            path.display(),
            mount.volume
        );
    };
    let identity = &settings.identity;
    let approvers = &settings.approvals.approvers;
    let files = [
        ("identity.tokens", identity.tokens.as_deref()),
        ("approvals.approvers.tokens", approvers.tokens.as_deref()),
        ("audit.keyFile", settings.audit.key_file.as_deref()),
        (
            "state.redis.passwordFile",
            settings.state.redis.password_file.as_deref(),
        ),
    ];
    for (what, path) in files {
        if let Some(path) = path {
            read(what, path);
        }
    }
    let jwks = identity
        .jwt
        .iter()
        .map(|j| &j.jwks)
        .chain(identity.task_issuers.iter().map(|t| &t.jwks))
        .chain(approvers.jwt.iter().map(|j| &j.jwks));
    for source in jwks.flatten() {
        if let Jwks::File(path) = source {
            read("an issuer's jwks", path);
        }
    }
    for path in &settings.policies.files {
        read("policies.files", path);
    }
    if settings.policies.kubernetes.enabled {
        read(
            "policies.kubernetes.podLabelsFile",
            &settings.policies.kubernetes.pod_labels_file,
        );
    }
    if !["stdout", "off"].contains(&settings.audit.path.as_str()) {
        let path = Path::new(&settings.audit.path);
        let mount = container.mount_of(path).unwrap_or_else(|| {
            panic!(
                "audit.path is {}, in no volume: the root filesystem is read-only",
                path.display()
            )
        });
        assert!(
            !mount.read_only,
            "audit.path is on the read-only {}",
            mount.volume
        );
        assert!(
            !settings.audit.path.contains("$("),
            "{}",
            settings.audit.path
        );
    }
}

/// A projected ServiceAccount token as the kubelet writes it for the doc's agent pod.
fn agent_token(doc: &str, material: &Material) -> String {
    let section = doc.split("### The agent's identity").nth(1).unwrap();
    let yaml = section
        .split("```yaml\n")
        .nth(1)
        .unwrap()
        .split("```")
        .next()
        .unwrap();
    let objects = documents(yaml);
    let account = &objects[0]["metadata"];
    let spec = &objects[1]["spec"]["template"]["spec"];
    let projection = &spec["volumes"][0]["projected"]["sources"][0]["serviceAccountToken"];
    let (namespace, name) = (
        account["namespace"].as_str().unwrap(),
        account["name"].as_str().unwrap(),
    );
    material.cluster_key.sign(&json!({
        "iss": CLUSTER_ISSUER,
        "sub": format!("system:serviceaccount:{namespace}:{name}"),
        "aud": [projection["audience"]],
        "iat": now(), "nbf": now(),
        "exp": now() + projection["expirationSeconds"].as_u64().unwrap(),
        "kubernetes.io": {
            "namespace": namespace,
            "pod": {"name": format!("{name}-5d8c7b9f4-q2lzn"), "uid": "7d1c0e6a-agent-pod"},
            "serviceaccount": {"name": name, "uid": "2b9d4f1e-agent-sa"},
        },
    }))
}

/// Each credential an agent holds in this example, the way the doc says it gets it, with
/// the agent id the sidecar must name.
fn credentials(doc: &str, settings: &Settings, material: &Material) -> Vec<(String, String)> {
    let mut out = Vec::new();
    if settings.identity.kubernetes.enabled {
        out.push((
            agent_token(doc, material),
            "system:serviceaccount:agents:ops-bot".to_string(),
        ));
    }
    if settings.identity.tokens.is_some() {
        out.push((CI_TOKEN.to_string(), "ci-bot".to_string()));
    }
    if let Some(issuer) = settings.identity.jwt.first() {
        let claims = json!({"iss": issuer.issuer, "aud": issuer.audience, "sub": "report-bot", "exp": now() + 300});
        out.push((material.login_key.sign(&claims), "report-bot".to_string()));
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_values_example_in_the_docs_runs_to_a_governed_call() {
    let doc = doc();
    let material = Material::new();
    for (title, layers) in values_examples(&doc) {
        let run = Run::start(&doc, &layers, &material).await;
        let credentials = credentials(&doc, &run.settings, &material);
        assert!(!credentials.is_empty(), "{title}: no agent can call");
        let mut expected = Vec::new();
        for (token, agent) in &credentials {
            let (status, _, body) = run.call(30, token).await;
            assert_eq!((status, body.as_str()), (200, LOGS), "{title}: {agent}");
            assert_eq!(
                run.backend.last().headers["x-toolgate-agent"],
                agent.as_str(),
                "{title}"
            );
            let (status, headers, body) = run.call(120, token).await;
            assert_eq!(status, 403, "{title}: {agent}: {body}");
            assert_eq!(headers["x-toolgate-code"], "POLICY_DENIED", "{title}");
            expected.extend([(agent.clone(), "allow"), (agent.clone(), "deny")]);
        }
        if run.settings.approvals.approvers.tokens.is_some() {
            let url = format!("{}/approvals", run.admin);
            let (status, _, body) = http("GET", &url, Some(ALICE_TOKEN)).await;
            assert_eq!(status, 200, "{title}: alice: {body}");
            let (status, _, _) = http("GET", &url, Some(CI_TOKEN)).await;
            assert_eq!(status, 401, "{title}: an agent's token is no approver's");
        }
        let key =
            run.settings.audit.key_file.as_ref().map(|_| {
                toolgate::audit::AuditKey::from_bytes(material.audit_key.as_bytes()).unwrap()
            });
        let file_log = run.settings.audit.path != "stdout";
        let (log, container) = run.stop();
        if file_log {
            verify_as_shown(&doc, &run_audit_path(&container), key.is_some());
        }
        let summary = toolgate::audit::verify::verify(&log, key.as_ref())
            .unwrap_or_else(|b| panic!("{title}: audit broken at {}: {}", b.line, b.reason));
        let calls: Vec<(String, &str)> = log
            .lines()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .filter(|r| r["kind"] == "call")
            .map(|r| {
                let decision = if r["decision"] == "allow" {
                    "allow"
                } else {
                    "deny"
                };
                (r["agent"].as_str().unwrap_or("").to_string(), decision)
            })
            .collect();
        assert_eq!(calls, expected, "{title}");
        assert_eq!(summary.calls as usize, expected.len(), "{title}");
    }
}

/// The host path of the pod's audit file.
fn run_audit_path(container: &Container) -> PathBuf {
    container
        .host_path(&format!("/var/log/toolgate/{POD}.log"))
        .expect("the audit volume is mounted")
}

/// `toolgate audit verify` on the file prints what the doc shows (the counts, which the
/// doc's run and this one share: a start, a policy and two decisions).
fn verify_as_shown(doc: &str, file: &Path, keyed: bool) {
    assert!(!keyed, "the doc verifies an unkeyed file");
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_toolgate"))
        .args(["audit", "verify"])
        .arg(file)
        .output()
        .unwrap();
    assert!(out.status.success());
    let printed = String::from_utf8(out.stdout).unwrap();
    let shown = shown(
        doc,
        &format!("toolgate audit verify /var/log/toolgate/{POD}.log"),
    );
    let (head, tail) = shown[0].split_once('…').unwrap();
    assert!(
        printed.starts_with(head) && printed.trim_end().ends_with(tail),
        "{printed} is not {shown:?}"
    );
}

/// The order a JSON object's keys are written in.
fn keys_in_order(line: &str) -> Vec<String> {
    let value: Value = serde_json::from_str(line).unwrap();
    let mut keys: Vec<String> = value.as_object().unwrap().keys().cloned().collect();
    keys.sort_by_key(|k| line.find(&format!("\"{k}\":")).unwrap());
    keys
}

/// The journey of the doc, on the platform's values: the answers the agent gets, the
/// audit lines, the metrics and the span the SRE sees are what the doc shows.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_journey_shows_what_the_sidecar_prints() {
    let doc = doc();
    let material = Material::new();
    let platform = titled(&doc, "values-platform.yaml");
    let run = Run::start(&doc, &[platform], &material).await;
    let token = agent_token(&doc, &material);

    // The agent's two calls: the answer and the status line curl prints.
    let (status, _, body) = run.call(30, &token).await;
    assert_eq!(
        shown(&doc, "window_minutes=30"),
        [body, format!("HTTP {status}")]
    );
    let (status, _, body) = run.call(120, &token).await;
    let refusal: Value = serde_json::from_str(&body).unwrap();
    let shown_refusal = shown(&doc, "window_minutes=120");
    assert_eq!(shown_refusal[1], format!("HTTP {status}"));
    let mut doc_refusal: Value = serde_json::from_str(&shown_refusal[0]).unwrap();
    let doc_trace = doc_refusal["error"]["traceId"]
        .as_str()
        .unwrap()
        .to_string();
    assert_eq!(doc_trace.len(), 32, "a trace id");
    doc_refusal["error"]["traceId"] = refusal["error"]["traceId"].clone();
    assert_eq!(doc_refusal, refusal, "the refusal the doc shows");
    assert_eq!(
        keys_in_order(&shown_refusal[0]),
        keys_in_order(&body),
        "in the sidecar's order"
    );

    // Metrics: every line the doc shows is on /metrics as shown.
    let (_, _, metrics) = http("GET", &format!("{}/metrics", run.admin), None).await;
    for line in shown(&doc, "grep '^toolgate_calls_total'") {
        assert!(
            metrics.lines().any(|l| l == line),
            "/metrics has no line {line:?}:\n{metrics}"
        );
    }

    // The span: named and attributed as the doc says, in the service the doc names.
    let span = run
        .collector
        .wait_for(|s| attr(s, "toolgate.decision").as_deref() == Some("deny"))
        .await;
    assert_eq!(span.name, "GET /logs/{service}");
    let section = doc.split("**The span**").nth(1).unwrap();
    let section = section.split("\n\n").next().unwrap();
    for key in [
        "toolgate.decision",
        "toolgate.code",
        "toolgate.rule",
        "toolgate.agent.id",
    ] {
        let value = attr(&span, key).unwrap_or_else(|| panic!("the span has no {key}"));
        assert!(
            section.contains(&format!("`{key}={value}`")),
            "the doc's span lacks `{key}={value}`:\n{section}"
        );
    }
    assert!(section.contains(&format!("span `{}`", span.name)));
    let service = run
        .container
        .var("TOOLGATE_TELEMETRY_SERVICE_NAME")
        .unwrap();
    assert!(
        section.contains(&format!("the service `{service}`")),
        "{section}"
    );
    assert!(section.contains(&format!("trace\n`{doc_trace}`")) || section.contains(&doc_trace));

    // The audit lines: the sidecar's records of the two calls, field for field (but the
    // times, hashes, trace ids and latencies, which differ per run).
    let (log, _container) = run.stop();
    let records: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("\"tool\":\"read_logs\""))
        .collect();
    let lines = shown(&doc, "grep '\"tool\":\"read_logs\"'");
    assert_eq!(lines.len(), records.len(), "{log}");
    for (line, record) in lines.iter().zip(&records) {
        assert_eq!(keys_in_order(line), keys_in_order(record), "{record}");
        let (shown, actual): (Value, Value) = (
            serde_json::from_str(line).unwrap(),
            serde_json::from_str(record).unwrap(),
        );
        for key in [
            "seq",
            "kind",
            "agent",
            "issuer",
            "session",
            "tool",
            "argsDigest",
            "decision",
            "code",
            "rule",
            "policyVersion",
            "upstreamStatus",
        ] {
            assert_eq!(shown[key], actual[key], "{key} of {record}");
        }
    }
    // The doc's one refused call is one trace, wherever it shows it.
    let deny: Value = serde_json::from_str(&lines[1]).unwrap();
    assert_eq!(deny["traceId"], doc_trace.as_str());
}

/// NOTES.txt as `helm install` prints it with `layers` (helm renders it only on install;
/// here through `tpl` in a copy of the chart).
fn notes(layers: &[String]) -> String {
    let dir = tempfile::tempdir().unwrap();
    let chart = Path::new(env!("CARGO_MANIFEST_DIR")).join("charts/toolgate");
    let copy = dir.path().join("toolgate");
    let status = std::process::Command::new("cp")
        .arg("-r")
        .arg(&chart)
        .arg(&copy)
        .status()
        .unwrap();
    assert!(status.success());
    std::fs::copy(copy.join("templates/NOTES.txt"), copy.join("notes.txt")).unwrap();
    std::fs::write(
        copy.join("templates/zz-notes.yaml"),
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: notes}\ndata:\n  notes: |\n{{ tpl (.Files.Get \"notes.txt\") . | indent 4 }}\n",
    )
    .unwrap();
    let mut command = helm_command();
    command.args(["template", "toolgate"]).arg(&copy).args([
        "--namespace",
        NAMESPACE,
        "--show-only",
        "templates/zz-notes.yaml",
    ]);
    for (i, layer) in layers.iter().enumerate() {
        let file = dir.path().join(format!("values-{i}.yaml"));
        std::fs::write(&file, layer).unwrap();
        command.arg("--values").arg(file);
    }
    let output = command.output().unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let rendered: Value = serde_yaml::from_slice(&output.stdout).unwrap();
    rendered["data"]["notes"].as_str().unwrap().to_string()
}

/// The rows `kubectl get` prints under its header, split into cells.
fn rows(lines: &[String]) -> Vec<Vec<String>> {
    lines
        .iter()
        .filter(|l| !l.trim().is_empty() && !l.starts_with("NAME "))
        .map(|l| l.split_whitespace().map(String::from).collect())
        .collect()
}

/// What the platform team and the service owner see before any call: helm's NOTES, the
/// injector's pods, the CRDs, the injected pod, `toolgate check`, the refused apply and
/// the printer columns, each as the doc shows it.
#[test]
fn the_journey_s_commands_print_what_the_doc_shows() {
    let doc = doc();
    let platform = titled(&doc, "values-platform.yaml");
    let objects = render(std::slice::from_ref(&platform));

    // helm install: the NOTES begin as shown.
    let install = shown(&doc, "helm install toolgate charts/toolgate");
    let at = install.iter().position(|l| l == "NOTES:").unwrap();
    let head: Vec<&String> = install[at + 1..]
        .iter()
        .take_while(|l| l.as_str() != "…")
        .collect();
    assert!(!head.is_empty());
    let notes = notes(std::slice::from_ref(&platform));
    let mut notes_lines = notes.lines();
    for line in head {
        assert_eq!(Some(line.as_str()), notes_lines.next(), "NOTES:\n{notes}");
    }

    // The injector's pods: one row per replica, every container ready.
    let deployment = objects.iter().find(|o| o["kind"] == "Deployment").unwrap();
    let containers = deployment["spec"]["template"]["spec"]["containers"]
        .as_array()
        .unwrap()
        .len();
    let pods = rows(&shown(&doc, "-n toolgate-system get pods"));
    assert_eq!(
        pods.len() as u64,
        deployment["spec"]["replicas"].as_u64().unwrap()
    );
    let name = deployment["metadata"]["name"].as_str().unwrap();
    for pod in &pods {
        assert!(pod[0].starts_with(&format!("{name}-")), "{pod:?}");
        assert_eq!(pod[1], format!("{containers}/{containers}"));
    }
    assert!(shown(&doc, "rollout status deployment/")[0].contains(&format!("\"{name}\"")));
    let crds: Vec<String> = rows(&shown(&doc, "kubectl get crd "))
        .into_iter()
        .map(|r| r[0].clone())
        .collect();
    let mut chart_crds: Vec<String> =
        std::fs::read_dir(Path::new(env!("CARGO_MANIFEST_DIR")).join("charts/toolgate/crds"))
            .unwrap()
            .map(|e| {
                documents(&std::fs::read_to_string(e.unwrap().path()).unwrap())[0]["metadata"]
                    ["name"]
                    .as_str()
                    .unwrap()
                    .to_string()
            })
            .collect();
    chart_crds.sort();
    let mut sorted = crds.clone();
    sorted.sort();
    assert_eq!(sorted, chart_crds);

    // The orders pods: the app and the sidecar, both counted ready; the sidecar first
    // among the init containers, and the image the platform's values name.
    let pod = injected(&orders_pod(&doc), &injector_settings(&objects));
    let total = pod["spec"]["containers"].as_array().unwrap().len()
        + pod["spec"]["initContainers"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|c| c["restartPolicy"] == "Always")
            .count();
    let orders = rows(&shown(&doc, "get pods -l app.kubernetes.io/name=orders"));
    let deployment = documents(&titled(&doc, "orders.yaml"))
        .into_iter()
        .find(|o| o["kind"] == "Deployment")
        .unwrap();
    assert_eq!(
        orders.len() as u64,
        deployment["spec"]["replicas"].as_u64().unwrap()
    );
    assert!(orders.iter().any(|r| r[0] == POD));
    assert!(orders.iter().all(|r| r[1] == format!("{total}/{total}")));
    let jsonpath = shown(&doc, "{.spec.initContainers[0].name}");
    assert_eq!(
        jsonpath,
        [format!(
            "{} {}",
            pod["spec"]["initContainers"][0]["name"].as_str().unwrap(),
            pod["metadata"]["annotations"]["toolgate.dev/injected"]
                .as_str()
                .unwrap()
        )]
    );
    let values: Value = serde_yaml::from_str(&platform).unwrap();
    assert_eq!(
        pod["metadata"]["annotations"]["toolgate.dev/injected"],
        format!(
            "{}:{}",
            values["image"]["repository"].as_str().unwrap(),
            values["image"]["tag"].as_str().unwrap()
        )
    );

    // toolgate check, on the doc's policies.
    let dir = tempfile::tempdir().unwrap();
    let policies = dir.path().join("policies.yaml");
    std::fs::write(&policies, titled(&doc, "policies.yaml")).unwrap();
    let check = std::process::Command::new(env!("CARGO_BIN_EXE_toolgate"))
        .args(["check", "--strict"])
        .arg(&policies)
        .output()
        .unwrap();
    assert!(check.status.success());
    assert_eq!(
        shown(&doc, "toolgate check policies.yaml"),
        [String::from_utf8(check.stdout)
            .unwrap()
            .trim_end()
            .to_string()]
    );

    // The refused apply: the validating webhook's answer to the doc's broken.yaml.
    let broken = documents(&titled(&doc, "broken.yaml")).remove(0);
    let review = json!({
        "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
        "request": {
            "uid": "0b7f3c2e-1d4a-4b8e-9c6f-5a2d1e0f9b83",
            "kind": {"group": "toolgate.dev", "version": "v1alpha1", "kind": "AgentPolicy"},
            "resource": {"group": "toolgate.dev", "version": "v1alpha1", "resource": "agentpolicies"},
            "name": broken["metadata"]["name"], "namespace": SHOP, "operation": "CREATE",
            "userInfo": {"username": "owner@example.com"},
            "object": broken,
        },
    });
    let answer = toolgate::inject::validate::validate(review.to_string().as_bytes());
    let message = answer.body["response"]["status"]["message"]
        .as_str()
        .unwrap();
    let refused = shown(&doc, "apply -f broken.yaml");
    assert_eq!(
        refused,
        [format!("Error from server (Invalid): error when creating \"broken.yaml\": admission webhook \"validate.toolgate.dev\" denied the request: {message}")]
    );

    // kubectl get: the printer columns of the chart's CRDs, with the objects' values.
    let listed = shown(&doc, "get toolcontracts,agentpolicies");
    let manifests = documents(&titled(&doc, "policies.yaml"));
    for (kind, crd) in [
        ("ToolContract", "toolcontracts.yaml"),
        ("AgentPolicy", "agentpolicies.yaml"),
    ] {
        let crd = documents(
            &std::fs::read_to_string(
                Path::new(env!("CARGO_MANIFEST_DIR"))
                    .join("charts/toolgate/crds")
                    .join(crd),
            )
            .unwrap(),
        )
        .remove(0);
        let columns = crd["spec"]["versions"][0]["additionalPrinterColumns"]
            .as_array()
            .unwrap();
        let header: Vec<String> = std::iter::once("NAME".to_string())
            .chain(
                columns
                    .iter()
                    .map(|c| c["name"].as_str().unwrap().to_uppercase()),
            )
            .collect();
        let object = manifests.iter().find(|o| o["kind"] == kind).unwrap();
        let plural = crd["spec"]["names"]["plural"].as_str().unwrap();
        let singular = crd["spec"]["names"]["singular"].as_str().unwrap();
        let at = listed
            .iter()
            .position(|l| l.split_whitespace().eq(header.iter().map(String::as_str)))
            .unwrap_or_else(|| panic!("no {header:?} header in {listed:?}"));
        let row: Vec<&str> = listed[at + 1].split_whitespace().collect();
        assert_eq!(
            row[0],
            format!(
                "{singular}.toolgate.dev/{}",
                object["metadata"]["name"].as_str().unwrap()
            ),
            "{plural}"
        );
        for (column, cell) in columns.iter().zip(&row[1..]) {
            let expected = match column["jsonPath"].as_str().unwrap() {
                ".spec.tool" => object["spec"]["tool"].as_str().unwrap().to_string(),
                ".spec.http.method" => object["spec"]["http"]["method"]
                    .as_str()
                    .unwrap()
                    .to_string(),
                ".spec.http.path" => object["spec"]["http"]["path"].as_str().unwrap().to_string(),
                ".spec.agents" => object["spec"]["agents"].to_string(),
                // The CRD's defaults, filled in by the API server.
                path @ (".spec.mode" | ".spec.enabled") => {
                    let field = path.trim_start_matches(".spec.");
                    let schema = &crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
                        ["properties"]["spec"]["properties"][field];
                    match &object["spec"][field] {
                        Value::Null => schema["default"].to_string().trim_matches('"').to_string(),
                        set => set.to_string().trim_matches('"').to_string(),
                    }
                }
                // `check --strict` passed above: the controller says Valid.
                path if path.ends_with(".status") => "True".into(),
                path if path.ends_with(".reason") => "Valid".into(),
                _ => continue,
            };
            assert_eq!(*cell, expected, "{plural}: {}", column["name"]);
        }
    }
}

/// The pitfall the doc's "When something is wrong" lists: a POST whose arguments come
/// only in the query is checked with them, and reaches the app as it came, without a
/// body (and without the schema's defaults); with a JSON body, the app gets the body.
#[tokio::test]
async fn a_post_with_query_arguments_reaches_the_app_without_a_body() {
    let doc = doc();
    assert!(doc.contains(
        "a `POST` whose arguments come only in the query string reaches the app with **no body**"
    ));
    let backend = Backend::example().await;
    let h = common::Harness::start(backend.addr, common::Options::default()).await;
    let r = h
        .call(
            "POST",
            "/issues?project_key=OPS&title=disk%20full",
            Some(common::OPS_TOKEN),
            &[],
            "",
        )
        .await;
    assert_eq!(r.status, 201, "{}", r.text);
    let seen = backend.last();
    assert_eq!(seen.uri, "/issues?project_key=OPS&title=disk%20full");
    assert!(seen.body.is_empty(), "{:?}", seen.body);
    let r = h
        .call(
            "POST",
            "/issues",
            Some(common::OPS_TOKEN),
            &[("idempotency-key", "second")],
            r#"{"project_key":"OPS","title":"disk full"}"#,
        )
        .await;
    assert_eq!(r.status, 201, "{}", r.text);
    let body: Value = serde_json::from_slice(&backend.last().body).unwrap();
    assert_eq!(
        body,
        json!({"project_key": "OPS", "title": "disk full", "priority": "low"})
    );
    h.stop().await;
}
