//! The Helm chart, with the real `helm` and `kubernetes-validate`: it lints strictly,
//! renders with default and non-default values into objects Kubernetes accepts, every pod
//! it creates meets the restricted Pod Security profile, the injector's and the
//! controller's rendered settings load in the binary, and its CRDs, sidecar Role and
//! controller RBAC are the repository's.
//!
//! `TOOLGATE_BLESS=1 cargo test --test chart` copies `crds/` into the chart.

mod common;

use common::kube_tools::{self, helm_command};
use common::pod_security::{restricted_violations, toolgate_container_violations};
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::process::Command;

use toolgate::controller::settings::ControllerSettings;
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
/// Secret, state in Redis with a password Secret, several namespaces (one with named
/// ServiceAccounts), and every injector knob.
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
  state: {backend: redis, redis: {url: "rediss://redis.platform:6380/0", passwordSecret: toolgate-redis}}
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
controller:
  namespace: shop
  logLevel: debug
  resources: {requests: {cpu: 20m, memory: 48Mi}, limits: {memory: 256Mi}}
  leaderElection: {leaseDurationSeconds: 30, renewDeadlineMs: 20000, retryPeriodMs: 4000}
validation:
  timeoutSeconds: 2
certManager:
  enabled: true
"#;

/// A cert-manager variant: an existing ClusterIssuer, a single replica (no PDB), and
/// neither the controller nor the validating webhook.
const CLUSTER_ISSUER: &str = r#"
namespaces: [{name: default}, {name: team-b, serviceAccounts: [bot]}]
injector: {replicas: 1}
controller: {enabled: false}
validation: {enabled: false}
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
    // `kubectl debug` containers are reviewed too: they must not mount the sidecar's volumes.
    assert_eq!(
        hook["rules"][1]["resources"],
        json!(["pods/ephemeralcontainers"])
    );
    assert_eq!(hook["rules"][1]["operations"], json!(["UPDATE"]));
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
    for role in sidecar_roles(&objects) {
        assert_eq!(
            role["rules"], rbac["rules"],
            "{what}: the sidecar Role is deploy/rbac.yaml's"
        );
    }
    check_controller(&objects, what);
    check_validation(&objects, what);
    objects
}

fn component<'a>(objects: &'a [Value], kind: &str, component: &str) -> Vec<&'a Value> {
    of_kind(objects, kind)
        .into_iter()
        .filter(|o| o["metadata"]["labels"]["app.kubernetes.io/component"] == component)
        .collect()
}

fn sidecar_roles(objects: &[Value]) -> Vec<&Value> {
    component(objects, "Role", "sidecar")
}

/// The controller container, when rendered: its settings load, it alone holds an API
/// token, no readiness probe ties the injector's Service to the API server, and its RBAC
/// is deploy/controller-rbac.yaml's, bound to the pods' ServiceAccount.
fn check_controller(objects: &[Value], what: &str) {
    let pod = &one(objects, "Deployment")["spec"]["template"]["spec"];
    let containers = pod["containers"].as_array().unwrap();
    let Some(controller) = containers.iter().find(|c| c["name"] == "controller") else {
        assert!(
            component(objects, "ClusterRole", "controller").is_empty(),
            "{what}"
        );
        assert!(
            component(objects, "Role", "controller").is_empty(),
            "{what}"
        );
        let config = &one(objects, "ConfigMap")["data"];
        assert!(config.get("controller.yaml").is_none(), "{what}");
        return;
    };
    assert_eq!(
        controller["args"],
        json!([
            "controller",
            "--config",
            "/etc/toolgate/inject/controller.yaml"
        ])
    );
    let text = one(objects, "ConfigMap")["data"]["controller.yaml"]
        .as_str()
        .unwrap();
    let identity = &controller["env"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["name"] == "TOOLGATE_CONTROLLER_LEADER_ELECTION_IDENTITY")
        .unwrap();
    assert_eq!(
        identity["valueFrom"]["fieldRef"]["fieldPath"],
        "metadata.name"
    );
    let vars = vec![(
        "TOOLGATE_CONTROLLER_LEADER_ELECTION_IDENTITY".to_string(),
        "toolgate-injector-7c9-x".to_string(),
    )];
    let settings = ControllerSettings::parse("chart", text, vars)
        .unwrap_or_else(|e| panic!("{what}: the rendered controller settings don't load: {e}"));
    assert_eq!(settings.leader_election.lease_name, "toolgate-controller");
    assert_eq!(
        settings.listen.port(),
        controller["ports"][0]["containerPort"].as_u64().unwrap() as u16
    );
    assert_eq!(controller["livenessProbe"]["httpGet"]["path"], "/healthz");
    assert!(
        controller.get("readinessProbe").is_none(),
        "{what}: an API outage must not unready the injector"
    );
    let token_mounts = |c: &Value| {
        c["volumeMounts"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|m| m["mountPath"] == "/var/run/secrets/kubernetes.io/serviceaccount")
            .count()
    };
    assert_eq!(token_mounts(controller), 1, "{what}");
    assert_eq!(
        token_mounts(&containers[0]),
        0,
        "{what}: the injector holds no token"
    );
    assert_eq!(pod["automountServiceAccountToken"], false);

    let rbac =
        documents(&std::fs::read_to_string(root().join("deploy/controller-rbac.yaml")).unwrap());
    let (objects_rules, lease_rules) = (&rbac[0]["rules"], &rbac[1]["rules"]);
    let kind = if settings.kubernetes.namespace.is_empty() {
        "ClusterRole"
    } else {
        "Role"
    };
    let role = component(objects, kind, "controller")
        .into_iter()
        .find(|r| r["rules"][0]["apiGroups"][0] == "toolgate.dev")
        .unwrap_or_else(|| panic!("{what}: the controller's {kind}"));
    assert_eq!(&role["rules"], objects_rules, "{what}");
    if kind == "Role" {
        assert_eq!(
            role["metadata"]["namespace"],
            settings.kubernetes.namespace.as_str()
        );
    }
    let lease = component(objects, "Role", "controller")
        .into_iter()
        .find(|r| r["rules"][0]["apiGroups"][0] == "coordination.k8s.io")
        .unwrap();
    assert_eq!(&lease["rules"], lease_rules, "{what}");
    assert_eq!(
        lease["metadata"]["namespace"], NAMESPACE,
        "the Lease is in the release namespace"
    );
    let account = json!([{"kind": "ServiceAccount", "name": pod["serviceAccountName"], "namespace": NAMESPACE}]);
    let bindings: Vec<&Value> = ["ClusterRoleBinding", "RoleBinding"]
        .iter()
        .flat_map(|k| component(objects, k, "controller"))
        .collect();
    assert_eq!(bindings.len(), 2, "{what}");
    for binding in bindings {
        assert_eq!(binding["subjects"], account, "{what}");
    }
}

/// The ValidatingWebhookConfiguration, when rendered: the injector's Service and CA, the
/// two kinds (not their status), and a failure policy that never blocks.
fn check_validation(objects: &[Value], what: &str) {
    let found = of_kind(objects, "ValidatingWebhookConfiguration");
    let Some(config) = found.first() else {
        return;
    };
    assert_eq!(found.len(), 1);
    let hook = &config["webhooks"][0];
    let mutating = &one(objects, "MutatingWebhookConfiguration")["webhooks"][0];
    assert_eq!(hook["failurePolicy"], "Ignore", "{what}");
    assert_eq!(hook["sideEffects"], "None");
    assert_eq!(hook["clientConfig"]["service"]["path"], "/validate");
    assert_eq!(
        hook["clientConfig"]["service"]["name"],
        mutating["clientConfig"]["service"]["name"]
    );
    assert_eq!(
        hook["clientConfig"].get("caBundle"),
        mutating["clientConfig"].get("caBundle"),
        "{what}: the same certificate"
    );
    assert_eq!(
        config["metadata"]["annotations"],
        one(objects, "MutatingWebhookConfiguration")["metadata"]["annotations"]
    );
    let rule = &hook["rules"][0];
    assert_eq!(rule["apiGroups"], json!(["toolgate.dev"]));
    assert_eq!(rule["resources"], json!(["toolcontracts", "agentpolicies"]));
    assert_eq!(rule["operations"], json!(["CREATE", "UPDATE"]));
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
    let binding = component(&objects, "RoleBinding", "sidecar")[0];
    assert_eq!(
        binding["subjects"],
        json!([{"kind": "Group", "apiGroup": "rbac.authorization.k8s.io", "name": "system:serviceaccounts:default"}])
    );
    assert_eq!(of_kind(&objects, "PodDisruptionBudget").len(), 1);
    // Status and validation are on by default, the controller reading every namespace.
    assert_eq!(
        one(&objects, "ValidatingWebhookConfiguration")["webhooks"][0]["timeoutSeconds"],
        5
    );
    assert_eq!(component(&objects, "ClusterRole", "controller").len(), 1);
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
    assert_eq!(settings.sidecar.redis_password_secret, None);
    assert!(
        settings.sidecar.env.is_empty(),
        "{:?}",
        settings.sidecar.env
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
        settings.sidecar.redis_password_secret.as_deref(),
        Some("toolgate-redis")
    );
    assert_eq!(settings.sidecar.env["TOOLGATE_STATE_BACKEND"], "redis");
    assert_eq!(
        settings.sidecar.image,
        "registry.example.com/platform/toolgate:0.1.0-rc1"
    );
    assert_eq!(settings.sidecar.resources.limits["cpu"], "1");
    // Sidecars that read a ConfigMap get no API token, so no RBAC either.
    assert!(sidecar_roles(&objects).is_empty());
    // The controller reads one namespace: a Role there, no ClusterRole.
    assert!(of_kind(&objects, "ClusterRole").is_empty());
    let text = one(&objects, "ConfigMap")["data"]["controller.yaml"]
        .as_str()
        .unwrap();
    let vars = vec![("HOSTNAME".to_string(), "p".to_string())];
    let controller = ControllerSettings::parse("chart", text, vars).unwrap();
    assert_eq!(controller.kubernetes.namespace, "shop");
    assert_eq!(controller.leader_election.lease_duration_seconds, 30);
    assert_eq!(controller.leader_election.retry_period_ms, 4000);
    let validating = one(&objects, "ValidatingWebhookConfiguration");
    assert_eq!(validating["webhooks"][0]["timeoutSeconds"], 2);
    assert!(
        validating["webhooks"][0]["clientConfig"]
            .get("caBundle")
            .is_none(),
        "cainjector fills it"
    );
    let deployment = one(&objects, "Deployment");
    assert_eq!(deployment["spec"]["replicas"], 3);
    assert_eq!(
        deployment["spec"]["template"]["spec"]["priorityClassName"],
        "system-cluster-critical"
    );
    check_cert_manager(&objects, "Issuer");
}

/// The injector's settings of a render with `values`.
fn injector_settings(values: &str) -> InjectSettings {
    let dir = tempfile::tempdir().unwrap();
    let values = values_file(dir.path(), "values.yaml", values);
    let objects = documents(&template(Some(&values)).unwrap());
    let config = one(&objects, "ConfigMap")["data"]["inject.yaml"]
        .as_str()
        .unwrap()
        .to_string();
    InjectSettings::parse("chart", &config, Vec::new()).unwrap()
}

/// `sidecar.state` reaches every sidecar as the `TOOLGATE_STATE_*` variables its own
/// settings load (chart, then injector, then sidecar), the password as a mounted file.
#[test]
fn redis_state_reaches_every_sidecar() {
    use toolgate::config::{Settings, StateBackend};
    use toolgate::inject::sidecar::{self, PodFacts};

    let settings = injector_settings(
        r#"
sidecar:
  state:
    backend: redis
    redis: {url: "redis://redis.toolgate:6379/0", cluster: true, keyPrefix: "shop:", timeoutMs: 120, passwordSecret: toolgate-redis}
  env: {TOOLGATE_TELEMETRY_OTLP_ENDPOINT: "http://jaeger:4317"}
"#,
    );
    let state: Vec<(&str, &str)> = settings
        .sidecar
        .env
        .iter()
        .filter(|(name, _)| name.starts_with("TOOLGATE_STATE_"))
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect();
    assert_eq!(
        state,
        [
            ("TOOLGATE_STATE_BACKEND", "redis"),
            ("TOOLGATE_STATE_REDIS_CLUSTER", "true"),
            ("TOOLGATE_STATE_REDIS_KEY_PREFIX", "shop:"),
            ("TOOLGATE_STATE_REDIS_TIMEOUT_MS", "120"),
            ("TOOLGATE_STATE_REDIS_URL", "redis://redis.toolgate:6379/0"),
        ]
    );
    assert_eq!(
        settings.sidecar.env["TOOLGATE_TELEMETRY_OTLP_ENDPOINT"],
        "http://jaeger:4317"
    );
    assert_eq!(
        settings.sidecar.redis_password_secret.as_deref(),
        Some("toolgate-redis")
    );

    let pod = PodFacts {
        upstream_port: 8080,
        service_name: None,
    };
    let vars = sidecar::container(&settings.sidecar, &pod)
        .env
        .unwrap()
        .into_iter()
        .filter_map(|e| Some((e.name, e.value?)));
    let sidecar_settings = Settings::parse("sidecar", "", vars).unwrap();
    let state = &sidecar_settings.state;
    assert_eq!(state.backend, StateBackend::Redis);
    assert_eq!(state.redis.url, "redis://redis.toolgate:6379/0");
    assert!(state.redis.cluster);
    assert_eq!(state.redis.key_prefix, "shop:");
    assert_eq!(state.redis.timeout_ms, 120);
    assert_eq!(
        state.redis.password_file.as_deref(),
        Some(Path::new(sidecar::REDIS_PASSWORD_FILE))
    );

    // Only the URL is needed: the rest stays the sidecar's defaults.
    let settings = injector_settings(
        "sidecar: {state: {backend: redis, redis: {url: 'rediss://redis:6380'}}}",
    );
    let names: Vec<&String> = settings.sidecar.env.keys().collect();
    assert_eq!(
        names,
        ["TOOLGATE_STATE_BACKEND", "TOOLGATE_STATE_REDIS_URL"]
    );
    assert_eq!(settings.sidecar.redis_password_secret, None);
}

/// `sidecar.telemetry` reaches every sidecar as the `TOOLGATE_TELEMETRY_*` variables its
/// own settings load; values left empty or null stay the sidecar's defaults.
#[test]
fn telemetry_values_reach_every_sidecar() {
    use toolgate::config::{MetricsExport, Settings, TraceSampler};
    use toolgate::inject::sidecar::{self, PodFacts};

    let settings = injector_settings(
        r#"
sidecar:
  telemetry:
    otlpEndpoint: "http://otel-collector.observability:4317"
    sampler: parentbased_traceidratio
    samplerRatio: 0.1
    sampleDenials: false
    metricsExport: otlp
    metricsIntervalMs: 15000
"#,
    );
    let telemetry: Vec<(&str, &str)> = settings
        .sidecar
        .env
        .iter()
        .filter(|(name, _)| name.starts_with("TOOLGATE_TELEMETRY_"))
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect();
    assert_eq!(
        telemetry,
        [
            ("TOOLGATE_TELEMETRY_METRICS_EXPORT", "otlp"),
            ("TOOLGATE_TELEMETRY_METRICS_INTERVAL_MS", "15000"),
            (
                "TOOLGATE_TELEMETRY_OTLP_ENDPOINT",
                "http://otel-collector.observability:4317"
            ),
            ("TOOLGATE_TELEMETRY_SAMPLER", "parentbased_traceidratio"),
            ("TOOLGATE_TELEMETRY_SAMPLER_RATIO", "0.1"),
            ("TOOLGATE_TELEMETRY_SAMPLE_DENIALS", "false"),
        ]
    );
    let pod = PodFacts {
        upstream_port: 8080,
        service_name: None,
    };
    let vars = sidecar::container(&settings.sidecar, &pod)
        .env
        .unwrap()
        .into_iter()
        .filter_map(|e| Some((e.name, e.value?)));
    let telemetry = Settings::parse("sidecar", "", vars).unwrap().telemetry;
    assert_eq!(telemetry.sampler, TraceSampler::ParentbasedTraceidratio);
    assert_eq!(telemetry.sampler_ratio, 0.1);
    assert!(!telemetry.sample_denials);
    assert_eq!(telemetry.metrics_export, MetricsExport::Otlp);
    assert_eq!(telemetry.metrics_interval_ms, 15_000);

    // A ratio out of range is refused by the chart, before any pod.
    let dir = tempfile::tempdir().unwrap();
    let bad = values_file(
        dir.path(),
        "bad.yaml",
        "sidecar: {telemetry: {samplerRatio: 2}}",
    );
    let error = template(Some(&bad)).unwrap_err();
    assert!(error.contains("samplerRatio"), "{error}");
}

/// `sidecar.limits` and `sidecar.approvals` reach every sidecar as the `TOOLGATE_*`
/// variables its own settings load; null values stay the sidecar's defaults.
#[test]
fn connection_and_approval_bounds_reach_every_sidecar() {
    use toolgate::config::Settings;
    use toolgate::inject::sidecar::{self, PodFacts};

    let settings = injector_settings(
        "sidecar: {limits: {writeTimeoutMs: 2500, unauthenticatedPerSecond: 5}, approvals: {maxPendingBytes: 16777216}}",
    );
    let pod = PodFacts {
        upstream_port: 8080,
        service_name: None,
    };
    let vars = sidecar::container(&settings.sidecar, &pod)
        .env
        .unwrap()
        .into_iter()
        .filter_map(|e| Some((e.name, e.value?)));
    let loaded = Settings::parse("sidecar", "", vars).unwrap();
    assert_eq!(loaded.limits.write_timeout_ms, 2500);
    assert_eq!(loaded.limits.unauthenticated_per_second, 5);
    assert_eq!(loaded.approvals.max_pending_bytes, 16 << 20);
    let defaults = injector_settings("sidecar: {limits: {writeTimeoutMs: null}}");
    assert!(defaults
        .sidecar
        .env
        .keys()
        .all(|k| !k.starts_with("TOOLGATE_LIMITS_")));
    // A zero timeout is refused by the chart, before any pod.
    let dir = tempfile::tempdir().unwrap();
    let bad = values_file(
        dir.path(),
        "bad.yaml",
        "sidecar: {limits: {writeTimeoutMs: 0}}",
    );
    let error = template(Some(&bad)).unwrap_err();
    assert!(error.contains("writeTimeoutMs"), "{error}");
}

/// `sidecar.mcp.listing` and `.onDrift` reach every sidecar as the variables its settings
/// load; unset, the sidecar keeps its defaults, and a value it doesn't know is refused by
/// the chart.
#[test]
fn listing_settings_reach_every_sidecar() {
    use toolgate::config::{Listing, OnDrift, Settings};
    use toolgate::inject::sidecar::{self, PodFacts};

    let settings = injector_settings("sidecar: {mcp: {listing: backend, onDrift: hide}}");
    let pod = PodFacts {
        upstream_port: 8080,
        service_name: None,
    };
    let vars = sidecar::container(&settings.sidecar, &pod)
        .env
        .unwrap()
        .into_iter()
        .filter_map(|e| Some((e.name, e.value?)));
    let loaded = Settings::parse("sidecar", "", vars).unwrap();
    assert_eq!(loaded.mcp.listing, Listing::Backend);
    assert_eq!(loaded.mcp.on_drift, OnDrift::Hide);
    let defaults = injector_settings("sidecar: {mcp: {listing: null}}");
    assert!(!defaults.sidecar.env.contains_key("TOOLGATE_MCP_LISTING"));
    assert!(!defaults.sidecar.env.contains_key("TOOLGATE_MCP_ON_DRIFT"));
    let dir = tempfile::tempdir().unwrap();
    let bad = values_file(dir.path(), "bad.yaml", "sidecar: {mcp: {onDrift: ignore}}");
    let error = template(Some(&bad)).unwrap_err();
    assert!(error.contains("onDrift"), "{error}");
}

/// With the memory backend the redis values set nothing: the injector's settings, and so
/// the Deployment's config checksum, are the default render's, and no pod needs the
/// password Secret.
#[test]
fn the_memory_backend_renders_what_the_default_does() {
    let dir = tempfile::tempdir().unwrap();
    let memory = values_file(
        dir.path(),
        "memory.yaml",
        "sidecar: {state: {backend: memory, redis: {url: 'redis://redis:6379', cluster: true, keyPrefix: 'x:', timeoutMs: 9, passwordSecret: toolgate-redis}}}",
    );
    let config = |values: Option<&Path>| {
        let objects = documents(&template(values).unwrap());
        let deployment = one(&objects, "Deployment");
        (
            one(&objects, "ConfigMap")["data"].clone(),
            deployment["spec"]["template"]["metadata"]["annotations"]["checksum/config"].clone(),
        )
    };
    let default = config(None);
    assert_eq!(config(Some(&memory)), default);
    let text = default.0["inject.yaml"].as_str().unwrap();
    assert!(
        !text.contains("TOOLGATE_STATE") && !text.contains("redis"),
        "{text}"
    );
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
    assert_eq!(sidecar_roles(&objects).len(), 2);
    assert!(of_kind(&objects, "ValidatingWebhookConfiguration").is_empty());
    let containers = &one(&objects, "Deployment")["spec"]["template"]["spec"]["containers"];
    assert_eq!(
        containers.as_array().unwrap().len(),
        1,
        "no controller container"
    );
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

/// A sidecar told to use Redis without an address would fall back to its default, a Redis
/// on the pod's loopback, which no chart install has: the schema asks for the URL.
#[test]
fn the_redis_backend_needs_a_url() {
    let dir = tempfile::tempdir().unwrap();
    for bad in [
        "sidecar: {state: {backend: redis}}",
        "sidecar: {state: {backend: redis, redis: {url: ''}}}",
    ] {
        let values = values_file(dir.path(), "bad.yaml", bad);
        let error = template(Some(&values)).expect_err(bad);
        assert!(error.contains("/sidecar/state/redis/url"), "{bad}: {error}");
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
        ("sidecar: {state: {backend: valkey}}", "backend"),
        (
            "sidecar: {state: {redis: {url: 'http://redis:6379'}}}",
            "url",
        ),
        (
            "sidecar: {state: {redis: {keyPrefix: '{toolgate}:'}}}",
            "keyPrefix",
        ),
        ("sidecar: {state: {redis: {timeoutMs: 0}}}", "timeoutMs"),
        (
            "sidecar: {state: {redis: {passwordSecret: Redis_Password}}}",
            "passwordSecret",
        ),
        ("sidecar: {resources: {limits: {memory: 128MB}}}", "memory"),
        ("injector: {replica: 2}", "replica"),
        ("controller: {namespace: Team_A}", "namespace"),
        (
            "controller: {leaderElection: {retryPeriodMs: 0}}",
            "retryPeriodMs",
        ),
        ("validation: {failurePolicy: Fail}", "failurePolicy"),
        ("validation: {timeoutSeconds: 45}", "timeoutSeconds"),
        // Timings the controller would refuse at start, crash-looping in the injector's pod.
        (
            "controller: {leaderElection: {leaseDurationSeconds: 5}}",
            "renewDeadlineMs",
        ),
        (
            "controller: {leaderElection: {retryPeriodMs: 10000}}",
            "retryPeriodMs",
        ),
        // Files nothing would mount, and issuers with no keys or two.
        (
            "sidecar: {identity: {jwt: [{issuer: a, audience: b, jwks: /etc/toolgate/jwks.json}]}}",
            "jwks",
        ),
        (
            "sidecar: {identity: {jwt: [{issuer: a, audience: b}]}}",
            "jwksConfigMap",
        ),
        (
            "sidecar: {identity: {taskIssuers: [{issuer: o, jwks: 'https://o/jwks', jwksConfigMap: k}]}}",
            "oneOf",
        ),
        ("sidecar: {identity: {tokensSecret: Agent_Tokens}}", "tokensSecret"),
        (
            "sidecar: {approvals: {approvers: {jwt: [{issuer: a, audience: b, discovery: true, groupClaim: g}]}}}",
            "groupClaim",
        ),
        ("sidecar: {audit: {volume: {hostPath: {path: /var/log}}}}", "hostPath"),
        (
            "sidecar: {audit: {volume: {emptyDir: {}, persistentVolumeClaim: {claimName: a}}}}",
            "volume",
        ),
        (
            "sidecar: {audit: {volume: {persistentVolumeClaim: {claimName: a, readOnly: true}}}}",
            "readOnly",
        ),
        ("sidecar: {audit: {path: /var/log/audit.log}}", "path"),
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
        "kubectl -n default get toolcontracts,agentpolicies",
        "ACCEPTED and REASON",
        "`kubectl apply` refuses",
        "audience toolgate",
        "agents: [\"serviceaccount:agents/ops-bot\"]",
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
    assert!(!notes.contains("Redis"), "memory by default:\n{notes}");
}

/// With Redis, the notes say what it holds, and how to create the password Secret pods
/// need to start.
#[test]
fn the_notes_tell_how_to_create_the_redis_password_secret() {
    let redis = [
        "--set",
        "sidecar.state.backend=redis",
        "--set",
        "sidecar.state.redis.url=redis://redis.toolgate:6379/0",
    ];
    let notes_without = notes(&redis);
    assert!(
        notes_without.contains("in Redis at\n   redis://redis.toolgate:6379/0"),
        "{notes_without}"
    );
    assert!(!notes_without.contains("secret"), "{notes_without}");
    let notes = notes(
        &[
            &redis[..],
            &["--set", "sidecar.state.redis.passwordSecret=toolgate-redis"],
        ]
        .concat(),
    );
    let command = r#"kubectl -n default create secret generic toolgate-redis --from-literal=password="$REDIS_PASSWORD""#;
    assert!(
        notes.contains(command),
        "NOTES.txt lacks {command:?}:\n{notes}"
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

/// Workload identity is on for every injected sidecar by default: the chart's values reach
/// the injector, its sidecar's variables load into `identity.kubernetes`, the sidecar gets
/// its API token even with file policies, and the sidecars' ServiceAccounts may read the
/// service-account issuer.
#[test]
fn workload_identity_reaches_every_sidecar() {
    use toolgate::config::Settings;
    use toolgate::inject::sidecar::{self, PodFacts};

    let pod = PodFacts {
        upstream_port: 8080,
        service_name: None,
    };
    let sidecar_identity = |settings: &InjectSettings| {
        let vars = sidecar::container(&settings.sidecar, &pod)
            .env
            .unwrap()
            .into_iter()
            .filter_map(|e| Some((e.name, e.value?)));
        Settings::parse("sidecar", "", vars)
            .unwrap()
            .identity
            .kubernetes
    };
    let defaults = injector_settings("{}");
    let identity = sidecar_identity(&defaults);
    assert!(identity.enabled);
    assert_eq!(identity.audiences, ["toolgate"]);
    let custom = injector_settings(
        "sidecar: {policiesConfigMap: agent-policies, workloadIdentity: {audiences: [toolgate, orders.toolgate]}}",
    );
    assert_eq!(
        sidecar_identity(&custom).audiences,
        ["toolgate", "orders.toolgate"]
    );
    let mounts = sidecar::container(&custom.sidecar, &pod)
        .volume_mounts
        .unwrap();
    assert!(mounts.iter().any(|m| m.name == sidecar::TOKEN_VOLUME));
    assert!(
        !sidecar_identity(&injector_settings(
            "sidecar: {workloadIdentity: {enabled: false}}"
        ))
        .enabled
    );

    // The issuer-discovery binding: every ServiceAccount of each namespace, or the named ones.
    let objects = check_render(&template(None).unwrap(), "default values");
    let binding = component(&objects, "ClusterRoleBinding", "sidecar");
    assert_eq!(binding.len(), 1);
    assert_eq!(
        binding[0]["roleRef"],
        json!({"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "system:service-account-issuer-discovery"})
    );
    assert_eq!(
        binding[0]["subjects"],
        json!([{"kind": "Group", "apiGroup": "rbac.authorization.k8s.io", "name": "system:serviceaccounts:default"}])
    );
    let dir = tempfile::tempdir().unwrap();
    let values = values_file(dir.path(), "custom.yaml", CUSTOM);
    let objects = check_render(&template(Some(&values)).unwrap(), "custom values");
    let subjects = &component(&objects, "ClusterRoleBinding", "sidecar")[0]["subjects"];
    assert_eq!(
        subjects,
        &json!([
            {"kind": "ServiceAccount", "name": "orders", "namespace": "shop"},
            {"kind": "ServiceAccount", "name": "payments", "namespace": "shop"},
            {"kind": "Group", "apiGroup": "rbac.authorization.k8s.io", "name": "system:serviceaccounts:search"},
            {"kind": "Group", "apiGroup": "rbac.authorization.k8s.io", "name": "system:serviceaccounts:ops-agents"},
        ])
    );
    for off in [
        "sidecar: {workloadIdentity: {enabled: false}}",
        "sidecar: {workloadIdentity: {discoveryRbac: false}}",
    ] {
        let values = values_file(dir.path(), "off.yaml", off);
        let objects = documents(&template(Some(&values)).unwrap());
        assert!(
            component(&objects, "ClusterRoleBinding", "sidecar").is_empty(),
            "{off}"
        );
    }
    for bad in [
        "sidecar: {workloadIdentity: {audiences: []}}",
        "sidecar: {workloadIdentity: {audiences: ['a,b']}}",
    ] {
        let values = values_file(dir.path(), "bad.yaml", bad);
        assert!(template(Some(&values)).is_err(), "{bad}");
    }
}

/// Everything the sidecar reads besides its policies, named in the values, reaches every
/// sidecar: each Secret, ConfigMap and volume mounted (read-only, but the audit volume),
/// and the sidecar's own settings, loaded from its variables, name files in those mounts.
#[test]
fn files_the_sidecar_reads_are_mounted_from_the_values() {
    use toolgate::config::{Jwks, Settings};
    use toolgate::inject::sidecar::{self, PodFacts};

    let settings = injector_settings(
        r#"
sidecar:
  auditKeySecret: toolgate-audit-key
  identity:
    tokensSecret: agent-tokens
    jwt:
      - {issuer: "https://login.example.com", audience: toolgate, jwksConfigMap: idp-jwks}
      - {issuer: "https://partner.example.com", audience: toolgate, jwks: "https://partner.example.com/jwks.json", agentPrefix: "partner:"}
    taskIssuers: [{issuer: orchestrator, jwksConfigMap: orchestrator-jwks}]
  approvals:
    approvers:
      tokensSecret: approver-tokens
      jwt: [{issuer: "https://login.example.com", audience: toolgate-approvals, jwksConfigMap: idp-jwks, groupsClaim: roles}]
  audit: {volume: {persistentVolumeClaim: {claimName: audit-logs}}}
"#,
    );
    let pod = PodFacts {
        upstream_port: 8080,
        service_name: None,
    };
    let container = sidecar::container(&settings.sidecar, &pod);
    let vars = container
        .env
        .clone()
        .unwrap()
        .into_iter()
        .filter_map(|e| Some((e.name, e.value?)));
    let sidecar_settings = Settings::parse("sidecar", "", vars).unwrap();
    let mounts = container.volume_mounts.unwrap();
    // The mount that holds `path`, if any.
    let holder = |path: &Path| {
        mounts
            .iter()
            .find(|m| path.starts_with(&m.mount_path))
            .unwrap_or_else(|| panic!("{} is in no volume the sidecar mounts", path.display()))
    };
    let identity = &sidecar_settings.identity;
    let approvers = &sidecar_settings.approvals.approvers;
    let mut files = vec![
        identity.tokens.clone().unwrap(),
        approvers.tokens.clone().unwrap(),
        sidecar_settings.audit.key_file.clone().unwrap(),
    ];
    let issuers = identity.jwt.iter().map(|j| &j.jwks);
    let issuers = issuers
        .chain(identity.task_issuers.iter().map(|t| &t.jwks))
        .chain(approvers.jwt.iter().map(|j| &j.jwks));
    let mut urls = 0;
    for jwks in issuers {
        match jwks.clone().unwrap() {
            Jwks::File(path) => files.push(path),
            Jwks::Url(_) => urls += 1,
        }
    }
    assert_eq!((files.len(), urls), (6, 1));
    for file in &files {
        assert_eq!(holder(file).read_only, Some(true), "{}", file.display());
    }
    assert_eq!(approvers.jwt[0].groups_claim, "roles");
    let audit = Path::new(&sidecar_settings.audit.path);
    assert_eq!(audit, Path::new("/var/log/toolgate/$(POD_NAME).log"));
    assert_eq!(
        holder(audit).read_only,
        Some(false),
        "the audit log is written"
    );

    // Each volume is the sidecar's, from what the values name.
    let volumes = sidecar::volumes(&settings.sidecar);
    let volume = |name: &str| {
        serde_json::to_value(volumes.iter().find(|v| v.name == name).unwrap()).unwrap()
    };
    assert_eq!(
        volume("toolgate-agent-tokens")["secret"]["secretName"],
        "agent-tokens"
    );
    assert_eq!(
        volume("toolgate-approver-tokens")["secret"]["secretName"],
        "approver-tokens"
    );
    assert_eq!(
        volume("toolgate-audit")["persistentVolumeClaim"]["claimName"],
        "audit-logs"
    );
    let projected = volume("toolgate-jwks");
    let maps: Vec<&Value> = projected["projected"]["sources"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| &s["configMap"]["name"])
        .collect();
    assert_eq!(maps, [&json!("idp-jwks"), &json!("orchestrator-jwks")]);

    // Nothing named, nothing mounted: the defaults add none of these.
    let defaults = injector_settings("{}");
    let names: Vec<String> = sidecar::volumes(&defaults.sidecar)
        .into_iter()
        .map(|v| v.name)
        .collect();
    assert_eq!(names, ["toolgate-podinfo", "toolgate-token"]);
}

/// A variable the chart sets from a value may not also be set in `sidecar.env`: the
/// injector would refuse it at start, so the chart refuses it before anything rolls.
#[test]
fn sidecar_env_may_not_set_what_a_value_mounts() {
    let dir = tempfile::tempdir().unwrap();
    for (values, variable, value) in [
        (
            "sidecar: {identity: {tokensSecret: agent-tokens}, env: {TOOLGATE_IDENTITY_TOKENS: /etc/tokens.yaml}}",
            "TOOLGATE_IDENTITY_TOKENS",
            "sidecar.identity.tokensSecret",
        ),
        (
            "sidecar: {audit: {volume: {emptyDir: {}}}, env: {TOOLGATE_AUDIT_PATH: /tmp/audit.log}}",
            "TOOLGATE_AUDIT_PATH",
            "sidecar.audit.volume",
        ),
        (
            "sidecar: {auditKeySecret: k, env: {TOOLGATE_AUDIT_KEY_FILE: /k}}",
            "TOOLGATE_AUDIT_KEY_FILE",
            "sidecar.auditKeySecret",
        ),
        (
            "sidecar: {approvals: {approvers: {jwt: [{issuer: a, audience: b, discovery: true}]}}, env: {TOOLGATE_APPROVALS_APPROVERS_JWT: '[]'}}",
            "TOOLGATE_APPROVALS_APPROVERS_JWT",
            "sidecar.approvals.approvers.jwt",
        ),
    ] {
        let file = values_file(dir.path(), "clash.yaml", values);
        let error = template(Some(&file)).expect_err(values);
        assert!(
            error.contains(&format!("sidecar.env.{variable}")) && error.contains(value),
            "{values}: {error}"
        );
    }
    // Without the value, the variable is the user's.
    let file = values_file(
        dir.path(),
        "free.yaml",
        "sidecar: {env: {TOOLGATE_AUDIT_ON_FAILURE: fail_open}}",
    );
    assert!(template(Some(&file)).is_ok());
}

/// Pods don't start without the Secrets and ConfigMaps the values name, so the notes say
/// how to create each.
#[test]
fn the_notes_tell_how_to_create_what_the_sidecar_reads() {
    let dir = tempfile::tempdir().unwrap();
    let values = values_file(
        dir.path(),
        "files.yaml",
        r#"
namespaces: [{name: shop}]
sidecar:
  identity:
    tokensSecret: agent-tokens
    jwt: [{issuer: "https://login.example.com", audience: toolgate, jwksConfigMap: idp-jwks}]
    taskIssuers: [{issuer: orchestrator, jwksConfigMap: orchestrator-jwks}]
  approvals:
    approvers:
      tokensSecret: approver-tokens
      jwt: [{issuer: "https://login.example.com", audience: approvals, jwksConfigMap: idp-jwks}]
  audit: {volume: {emptyDir: {sizeLimit: 1Gi}}}
"#,
    );
    let notes = notes(&["--values", values.to_str().unwrap()]);
    for command in [
        "kubectl -n shop create secret generic agent-tokens --from-file=tokens.yaml",
        "kubectl -n shop create secret generic approver-tokens --from-file=tokens.yaml",
        "kubectl -n shop create configmap orchestrator-jwks --from-file=jwks.json",
        "toolgate audit verify /var/log/toolgate/POD.log",
    ] {
        assert!(
            notes.contains(command),
            "NOTES.txt lacks {command:?}:\n{notes}"
        );
    }
    // Each ConfigMap once, though two issuers share it.
    let idp = "kubectl -n shop create configmap idp-jwks --from-file=jwks.json";
    assert_eq!(notes.matches(idp).count(), 1, "{notes}");
}
