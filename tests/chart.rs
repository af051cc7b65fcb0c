//! The Helm chart, with the real `helm` and `kubernetes-validate`: it lints strictly,
//! renders with default and non-default values into objects Kubernetes accepts, every pod
//! it creates meets the restricted Pod Security profile, the injector's rendered settings
//! load in the binary, and its CRDs and sidecar Role are the repository's.
//!
//! `TOOLGATE_BLESS=1 cargo test --test chart` copies `crds/` into the chart.

mod common;

use common::kube_tools::{self, helm_command};
use common::pod_security::{restricted_violations, toolgate_container_violations};
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::process::Command;

use toolgate::inject::settings::InjectSettings;
use toolgate::inject::UID;

const NAMESPACE: &str = "toolgate-system";

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn chart() -> PathBuf {
    root().join("charts/toolgate")
}

fn run(command: &mut Command) -> Result<String, String> {
    let output = command.output().unwrap();
    let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    if output.status.success() {
        Ok(text(&output.stdout))
    } else {
        Err(format!("{}{}", text(&output.stdout), text(&output.stderr)))
    }
}

/// The values the non-default renders use: cert-manager, a policy ConfigMap, an audit key
/// Secret, several namespaces (one with named ServiceAccounts), and every injector knob.
const CUSTOM: &str = r#"
image: {repository: registry.example.com/platform/toolgate, tag: "0.1.0-rc1", pullPolicy: Always}
imagePullSecrets: [{name: registry-creds}]
namespaces:
  - {name: shop, serviceAccounts: [orders, payments]}
  - {name: search}
  - {name: ops-agents}
sidecar:
  resources: {requests: {cpu: 50m, memory: 64Mi}, limits: {cpu: 1, memory: 256Mi}}
  policiesConfigMap: agent-policies
  auditKeySecret: toolgate-audit-key
  env: {TOOLGATE_TELEMETRY_OTLP_ENDPOINT: "http://jaeger-collector.observability:4317"}
injector:
  replicas: 3
  logLevel: debug
  priorityClassName: system-cluster-critical
  nodeSelector: {kubernetes.io/os: linux}
  tolerations: [{key: dedicated, operator: Equal, value: platform, effect: NoSchedule}]
  podAnnotations: {example.com/team: platform}
webhook:
  failurePolicy: Ignore
  timeoutSeconds: 3
  objectSelector: {matchExpressions: [{key: toolgate.dev/skip, operator: DoesNotExist}]}
certManager:
  enabled: true
"#;

/// A cert-manager variant: an existing ClusterIssuer, a single replica (no PDB).
const CLUSTER_ISSUER: &str = r#"
namespaces: [{name: default}, {name: team-b, serviceAccounts: [bot]}]
injector: {replicas: 1}
certManager: {enabled: true, issuerRef: {kind: ClusterIssuer, name: internal-ca}}
"#;

fn values_file(dir: &Path, name: &str, text: &str) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    path
}

fn template(values: Option<&Path>) -> Result<String, String> {
    let mut command = helm_command();
    command.args(["template", "toolgate"]).arg(chart()).args([
        "--namespace",
        NAMESPACE,
        "--include-crds",
    ]);
    if let Some(values) = values {
        command.arg("--values").arg(values);
    }
    run(&mut command)
}

fn documents(yaml: &str) -> Vec<Value> {
    serde_yaml::Deserializer::from_str(yaml)
        .map(|doc| serde::Deserialize::deserialize(doc).unwrap())
        .filter(|v: &Value| !v.is_null())
        .collect()
}

fn of_kind<'a>(objects: &'a [Value], kind: &str) -> Vec<&'a Value> {
    objects.iter().filter(|o| o["kind"] == kind).collect()
}

fn one<'a>(objects: &'a [Value], kind: &str) -> &'a Value {
    let found = of_kind(objects, kind);
    assert_eq!(found.len(), 1, "expected one {kind}");
    found[0]
}

#[test]
fn the_chart_lints_strictly() {
    let dir = tempfile::tempdir().unwrap();
    let custom = values_file(dir.path(), "custom.yaml", CUSTOM);
    for values in [None, Some(&custom)] {
        let mut command = helm_command();
        command
            .args(["lint", "--strict", "--namespace", NAMESPACE])
            .arg(chart());
        if let Some(values) = values {
            command.arg("--values").arg(values);
        }
        if let Err(e) = run(&mut command) {
            panic!("helm lint --strict failed:\n{e}");
        }
    }
}

/// Checks one render: valid objects, restricted pods, loadable settings, a webhook that
/// can't select its own namespace, and the Role of deploy/rbac.yaml.
fn check_render(yaml: &str, what: &str) -> Vec<Value> {
    let objects = documents(yaml);
    // kubernetes-validate skips custom resources; cert-manager's are checked below.
    let builtin: Vec<String> = objects
        .iter()
        .filter(|o| {
            !o["apiVersion"]
                .as_str()
                .unwrap()
                .starts_with("cert-manager.io/")
        })
        .map(|o| serde_yaml::to_string(o).unwrap())
        .collect();
    kube_tools::validate(&builtin.join("---\n"), what);
    assert_eq!(
        of_kind(&objects, "CustomResourceDefinition").len(),
        2,
        "{what}"
    );

    for workload in objects
        .iter()
        .filter(|o| o["spec"]["template"]["spec"].is_object())
    {
        let name = format!(
            "{what}: {} {}",
            workload["kind"], workload["metadata"]["name"]
        );
        let spec = &workload["spec"]["template"]["spec"];
        assert_eq!(restricted_violations(spec), Vec::<String>::new(), "{name}");
        for container in spec["containers"].as_array().unwrap() {
            assert_eq!(
                toolgate_container_violations(container, UID),
                Vec::<String>::new(),
                "{name}"
            );
        }
        assert_eq!(
            spec["securityContext"]["runAsUser"], UID,
            "{name}: the image's UID"
        );
    }

    let config = one(&objects, "ConfigMap");
    let settings = InjectSettings::parse(
        "chart",
        config["data"]["inject.yaml"].as_str().unwrap(),
        Vec::new(),
    )
    .unwrap_or_else(|e| panic!("{what}: the rendered injector settings don't load: {e}"));
    assert_eq!(settings.listen.port(), toolgate::inject::WEBHOOK_PORT);

    let deployment = one(&objects, "Deployment");
    let pod = &deployment["spec"]["template"]["spec"];
    let injector = &pod["containers"][0];
    assert_eq!(
        injector["args"],
        json!(["inject", "--config", "/etc/toolgate/inject/inject.yaml"])
    );
    assert_eq!(injector["ports"][0]["containerPort"], 15443);
    assert_eq!(injector["readinessProbe"]["httpGet"]["scheme"], "HTTPS");
    assert_eq!(
        pod["automountServiceAccountToken"], false,
        "the injector needs no API access"
    );
    let mounted = |volume: &str| {
        injector["volumeMounts"]
            .as_array()
            .unwrap()
            .iter()
            .find(|m| m["name"] == volume)
            .unwrap()["mountPath"]
            .clone()
    };
    assert_eq!(mounted("tls"), "/etc/toolgate/webhook");
    assert_eq!(
        Path::new(&settings.tls.cert).parent().unwrap(),
        Path::new("/etc/toolgate/webhook")
    );

    let webhook = one(&objects, "MutatingWebhookConfiguration");
    let hook = &webhook["webhooks"][0];
    assert_eq!(hook["clientConfig"]["service"]["path"], "/inject");
    assert_eq!(hook["clientConfig"]["service"]["namespace"], NAMESPACE);
    assert_eq!(hook["rules"][0]["resources"], json!(["pods"]));
    assert_eq!(hook["rules"][0]["operations"], json!(["CREATE"]));
    let excluded = &hook["namespaceSelector"]["matchExpressions"][1];
    assert_eq!(excluded["operator"], "NotIn");
    assert!(
        excluded["values"]
            .as_array()
            .unwrap()
            .contains(&json!(NAMESPACE)),
        "{what}: own namespace excluded"
    );
    let service = one(&objects, "Service");
    assert_eq!(
        service["metadata"]["name"],
        hook["clientConfig"]["service"]["name"]
    );

    let rbac: Value =
        serde_yaml::from_str(&std::fs::read_to_string(root().join("deploy/rbac.yaml")).unwrap())
            .unwrap();
    for role in of_kind(&objects, "Role") {
        assert_eq!(
            role["rules"], rbac["rules"],
            "{what}: the sidecar Role is deploy/rbac.yaml's"
        );
    }
    objects
}

#[test]
fn default_values_render_a_valid_restricted_install() {
    let objects = check_render(&template(None).unwrap(), "default values");
    let hook = &one(&objects, "MutatingWebhookConfiguration")["webhooks"][0];
    assert_eq!(hook["failurePolicy"], "Fail");
    assert_eq!(hook["timeoutSeconds"], 5);
    assert_eq!(
        hook["namespaceSelector"]["matchExpressions"][0]["values"],
        json!(["default"])
    );
    // The generated CA is the webhook's caBundle and signed the serving certificate.
    let secret = one(&objects, "Secret");
    assert_eq!(secret["type"], "kubernetes.io/tls");
    assert_eq!(hook["clientConfig"]["caBundle"], secret["data"]["ca.crt"]);
    assert_signed(&secret["data"], "toolgate-injector.toolgate-system.svc");
    let binding = one(&objects, "RoleBinding");
    assert_eq!(
        binding["subjects"],
        json!([{"kind": "Group", "apiGroup": "rbac.authorization.k8s.io", "name": "system:serviceaccounts:default"}])
    );
    assert_eq!(of_kind(&objects, "PodDisruptionBudget").len(), 1);
    let settings = InjectSettings::parse(
        "chart",
        one(&objects, "ConfigMap")["data"]["inject.yaml"]
            .as_str()
            .unwrap(),
        Vec::new(),
    )
    .unwrap();
    assert_eq!(
        settings.sidecar.audit_key_secret, None,
        "unkeyed by default"
    );
}

/// The Secret's certificate chains to its CA and is valid for the Service's name, as the
/// API server checks it (webpki, via rustls).
fn assert_signed(data: &Value, dns: &str) {
    use base64::Engine as _;
    use rustls::client::danger::ServerCertVerifier as _;
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
    let der = |key: &str| {
        let pem = base64::engine::general_purpose::STANDARD
            .decode(data[key].as_str().unwrap())
            .unwrap();
        CertificateDer::from_pem_slice(&pem).unwrap()
    };
    let mut roots = rustls::RootCertStore::empty();
    roots.add(der("ca.crt")).unwrap();
    let provider = std::sync::Arc::new(rustls::crypto::ring::default_provider());
    let verifier =
        rustls::client::WebPkiServerVerifier::builder_with_provider(roots.into(), provider)
            .build()
            .unwrap();
    verifier
        .verify_server_cert(
            &der("tls.crt"),
            &[],
            &ServerName::try_from(dns).unwrap(),
            &[],
            UnixTime::now(),
        )
        .expect("tls.crt is signed by ca.crt and names the Service");
}

#[test]
fn non_default_values_render_a_valid_restricted_install() {
    let dir = tempfile::tempdir().unwrap();
    let custom = values_file(dir.path(), "custom.yaml", CUSTOM);
    let objects = check_render(&template(Some(&custom)).unwrap(), "custom values");
    let hook = &one(&objects, "MutatingWebhookConfiguration");
    assert_eq!(
        hook["metadata"]["annotations"]["cert-manager.io/inject-ca-from"],
        format!("{NAMESPACE}/toolgate-injector")
    );
    let hook = &hook["webhooks"][0];
    assert!(
        hook["clientConfig"].get("caBundle").is_none(),
        "cainjector fills it"
    );
    assert_eq!(hook["failurePolicy"], "Ignore");
    assert_eq!(hook["timeoutSeconds"], 3);
    assert_eq!(
        hook["objectSelector"]["matchExpressions"][0]["key"],
        "toolgate.dev/skip"
    );
    assert_eq!(
        hook["namespaceSelector"]["matchExpressions"][0]["values"],
        json!(["shop", "search", "ops-agents"])
    );
    assert!(
        of_kind(&objects, "Secret").is_empty(),
        "cert-manager writes the Secret"
    );
    let settings = InjectSettings::parse(
        "chart",
        one(&objects, "ConfigMap")["data"]["inject.yaml"]
            .as_str()
            .unwrap(),
        Vec::new(),
    )
    .unwrap();
    assert_eq!(
        settings.sidecar.policies_config_map.as_deref(),
        Some("agent-policies")
    );
    assert_eq!(
        settings.sidecar.audit_key_secret.as_deref(),
        Some("toolgate-audit-key")
    );
    assert_eq!(
        settings.sidecar.image,
        "registry.example.com/platform/toolgate:0.1.0-rc1"
    );
    assert_eq!(settings.sidecar.resources.limits["cpu"], "1");
    // Sidecars that read a ConfigMap get no API token, so no RBAC either.
    assert!(of_kind(&objects, "Role").is_empty());
    let deployment = one(&objects, "Deployment");
    assert_eq!(deployment["spec"]["replicas"], 3);
    assert_eq!(
        deployment["spec"]["template"]["spec"]["priorityClassName"],
        "system-cluster-critical"
    );
    check_cert_manager(&objects, "Issuer");
}

#[test]
fn an_existing_issuer_and_named_service_accounts() {
    let dir = tempfile::tempdir().unwrap();
    let values = values_file(dir.path(), "issuer.yaml", CLUSTER_ISSUER);
    let objects = check_render(&template(Some(&values)).unwrap(), "cluster issuer");
    assert!(
        of_kind(&objects, "Issuer").is_empty(),
        "no self-signed Issuer"
    );
    assert!(
        of_kind(&objects, "PodDisruptionBudget").is_empty(),
        "one replica: no PDB"
    );
    check_cert_manager(&objects, "ClusterIssuer");
    let bindings = of_kind(&objects, "RoleBinding");
    assert_eq!(bindings.len(), 2);
    let team_b = bindings
        .iter()
        .find(|b| b["metadata"]["namespace"] == "team-b")
        .unwrap();
    assert_eq!(
        team_b["subjects"],
        json!([{"kind": "ServiceAccount", "name": "bot", "namespace": "team-b"}])
    );
    assert_eq!(of_kind(&objects, "Role").len(), 2);
}

/// cert-manager objects (which kubernetes-validate skips): the fields cert-manager v1
/// requires, the Service's names, and the Secret the Deployment mounts.
fn check_cert_manager(objects: &[Value], issuer_kind: &str) {
    let certificate = one(objects, "Certificate");
    assert_eq!(certificate["apiVersion"], "cert-manager.io/v1");
    let spec = &certificate["spec"];
    let secret = &one(objects, "Deployment")["spec"]["template"]["spec"]["volumes"][1]["secret"]
        ["secretName"];
    assert_eq!(&spec["secretName"], secret);
    assert!(spec["dnsNames"]
        .as_array()
        .unwrap()
        .contains(&json!("toolgate-injector.toolgate-system.svc")));
    assert_eq!(spec["issuerRef"]["kind"], issuer_kind);
    assert!(spec["issuerRef"]["name"]
        .as_str()
        .is_some_and(|n| !n.is_empty()));
    let allowed = [
        "secretName",
        "dnsNames",
        "duration",
        "renewBefore",
        "privateKey",
        "usages",
        "issuerRef",
    ];
    for key in spec.as_object().unwrap().keys() {
        assert!(
            allowed.contains(&key.as_str()),
            "unexpected Certificate field {key}"
        );
    }
    if issuer_kind == "Issuer" {
        assert_eq!(one(objects, "Issuer")["spec"], json!({"selfSigned": {}}));
    }
}

#[test]
fn the_values_schema_rejects_mistakes() {
    let dir = tempfile::tempdir().unwrap();
    for (bad, field) in [
        ("webhook: {failurePolicy: Maybe}", "failurePolicy"),
        ("webhook: {timeoutSeconds: 45}", "timeoutSeconds"),
        ("namespaces: []", "namespaces"),
        ("namespaces: [{name: Shop}]", "name"),
        (
            "sidecar: {policiesConfigMap: Agent_Policies}",
            "policiesConfigMap",
        ),
        ("sidecar: {auditKeySecret: Audit_Key}", "auditKeySecret"),
        ("sidecar: {auditKeySecret: 7}", "auditKeySecret"),
        ("sidecar: {resources: {limits: {memory: 128MB}}}", "memory"),
        ("injector: {replica: 2}", "replica"),
    ] {
        let values = values_file(dir.path(), "bad.yaml", bad);
        let error = template(Some(&values)).expect_err(bad);
        assert!(error.contains(field), "{bad}: {error}");
    }
}

/// NOTES.txt as `helm install` would print it with `extra` arguments (e.g. `--set`).
fn notes(extra: &[&str]) -> String {
    // helm renders NOTES.txt only on install; render it through tpl in a copy instead.
    let dir = tempfile::tempdir().unwrap();
    let copy = dir.path().join("toolgate");
    copy_dir(&chart(), &copy);
    std::fs::copy(chart().join("templates/NOTES.txt"), copy.join("notes.txt")).unwrap();
    std::fs::write(
        copy.join("templates/zz-notes.yaml"),
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: notes}\ndata:\n  notes: |\n{{ tpl (.Files.Get \"notes.txt\") . | indent 4 }}\n",
    )
    .unwrap();
    let rendered = run(helm_command()
        .args(["template", "toolgate"])
        .arg(&copy)
        .args([
            "--namespace",
            NAMESPACE,
            "--show-only",
            "templates/zz-notes.yaml",
        ])
        .args(extra))
    .unwrap();
    let notes: Value = serde_yaml::from_str(&rendered).unwrap();
    notes["data"]["notes"].as_str().unwrap().to_string()
}

#[test]
fn the_notes_tell_how_to_annotate_and_write_a_policy() {
    let notes = notes(&[]);
    for needle in [
        "toolgate.dev/inject",
        "kind: ToolContract",
        "kind: AgentPolicy",
        "targetPort: toolgate",
        "kubectl -n default apply",
    ] {
        assert!(
            notes.contains(needle),
            "NOTES.txt lacks {needle:?}:\n{notes}"
        );
    }
    assert!(
        !notes.contains("secret"),
        "no audit key by default:\n{notes}"
    );
}

/// Pods don't start without the audit key Secret, so the notes say how to create it.
#[test]
fn the_notes_tell_how_to_create_the_audit_key_secret() {
    let notes = notes(&["--set", "sidecar.auditKeySecret=toolgate-audit-key"]);
    let command = "kubectl -n default create secret generic toolgate-audit-key --from-literal=key=$(head -c 32 /dev/urandom | base64)";
    assert!(
        notes.contains(command),
        "NOTES.txt lacks {command:?}:\n{notes}"
    );
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.path().is_dir() {
            copy_dir(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), &target).unwrap();
        }
    }
}

#[test]
fn the_charts_crds_are_the_generated_ones() {
    let ours = root().join("crds");
    let theirs = chart().join("crds");
    let names = |dir: &Path| {
        let mut names: Vec<String> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        names
    };
    if std::env::var_os("TOOLGATE_BLESS").is_some() {
        for name in names(&theirs) {
            std::fs::remove_file(theirs.join(name)).unwrap();
        }
        for name in names(&ours) {
            std::fs::copy(ours.join(&name), theirs.join(&name)).unwrap();
        }
    }
    assert_eq!(
        names(&theirs),
        names(&ours),
        "charts/toolgate/crds/ holds other files than crds/"
    );
    for name in names(&ours) {
        assert!(
            std::fs::read(ours.join(&name)).unwrap() == std::fs::read(theirs.join(&name)).unwrap(),
            "charts/toolgate/crds/{name} drifted from crds/{name}: run TOOLGATE_BLESS=1 cargo test --test chart"
        );
    }
}
