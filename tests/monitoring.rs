//! The chart's monitoring pack against real sidecars and the real `promtool` (Debian's
//! `prometheus` package, which `scripts/test.sh` installs):
//!
//! - every alert of the `PrometheusRule` fires on series scraped from a real sidecar
//!   driven into its condition (a policy that stops loading, an audit sink on a full
//!   disk, Redis gone, a burst of refusals, an approval nobody decides, a collector that
//!   is gone), and none fires on a healthy sidecar: `promtool test rules`;
//! - every dashboard query parses (`promtool check rules` on each as a recording rule)
//!   and names only metrics and labels a sidecar exposes;
//! - the `PodMonitor` and `PrometheusRule` have the Prometheus Operator's shape (field
//!   names checked here: `kubernetes-validate` skips custom resources), the PodMonitor's
//!   port is the one the injector names, and every runbook link lands on a runbook.
//!
//! Without `promtool` the promtool parts say so loudly and pass without running.

#[path = "common/mcp_backend.rs"]
mod backend;
mod common;

use backend::McpBackend;
use common::collector::Collector;
use common::kube_tools::{self, helm_command};
use common::scrape::{Scrape, Timeline};
use common::*;
use serde_json::{json, Value};
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

const ALERTS: [&str; 6] = [
    "ToolgatePolicyUnsynchronized",
    "ToolgateAuditUnavailable",
    "ToolgateStateDown",
    "ToolgateRefusalRatioHigh",
    "ToolgateApprovalBacklog",
    "ToolgateTelemetryExportFailing",
];

/// Everything of the pack on, the namespaces a PodMonitor selects from.
const VALUES: &str = r#"
namespaces: [{name: shop}, {name: search}]
monitoring:
  scrapeAnnotations: true
  podMonitor: {enabled: true, labels: {release: kube-prometheus-stack}}
  prometheusRule: {enabled: true, alertLabels: {team: platform}}
  dashboard: {enabled: true, annotations: {grafana_folder: toolgate}}
"#;

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// `promtool`, or `None` after saying loudly that the checks needing it did not run.
fn promtool() -> Option<PathBuf> {
    let found = Command::new("promtool")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !found {
        eprintln!(
            "\n!!! SKIPPED: promtool is not installed (scripts/test.sh installs Debian's \
             prometheus package); the alert and dashboard checks did not run !!!\n"
        );
    }
    found.then(|| PathBuf::from("promtool"))
}

fn render(values: &str) -> Vec<Value> {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("values.yaml");
    std::fs::write(&file, values).unwrap();
    let output = helm_command()
        .args(["template", "toolgate"])
        .arg(root().join("charts/toolgate"))
        .args(["--namespace", "toolgate-system", "--values"])
        .arg(&file)
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    serde_yaml::Deserializer::from_str(&String::from_utf8_lossy(&output.stdout))
        .map(|doc| serde::Deserialize::deserialize(doc).unwrap())
        .filter(|v: &Value| !v.is_null())
        .collect()
}

fn one<'a>(objects: &'a [Value], kind: &str) -> &'a Value {
    let found: Vec<&Value> = objects.iter().filter(|o| o["kind"] == kind).collect();
    assert_eq!(found.len(), 1, "one {kind}");
    found[0]
}

/// The keys of `object` are among `allowed` (field names of the Prometheus Operator's
/// v1 API), and `required` are there.
fn fields(object: &Value, what: &str, allowed: &[&str], required: &[&str]) {
    let map = object
        .as_object()
        .unwrap_or_else(|| panic!("{what} is an object: {object}"));
    for key in map.keys() {
        assert!(
            allowed.contains(&key.as_str()),
            "{what}.{key} is not a field"
        );
    }
    for key in required {
        assert!(map.contains_key(*key), "{what}.{key} is required");
    }
}

fn is_duration(text: &str) -> bool {
    let re_ok = !text.is_empty()
        && text.split_inclusive(['s', 'm', 'h']).all(|part| {
            let digits = part.trim_end_matches(['s', 'm', 'h']);
            !digits.is_empty() && digits.chars().all(|c| c.is_ascii_digit())
        });
    re_ok
}

#[test]
fn the_pod_monitor_scrapes_the_port_the_injector_names() {
    let objects = render(VALUES);
    let monitor = one(&objects, "PodMonitor");
    assert_eq!(monitor["apiVersion"], "monitoring.coreos.com/v1");
    fields(
        &monitor["metadata"],
        "metadata",
        &["name", "namespace", "labels", "annotations"],
        &["name", "namespace"],
    );
    assert_eq!(
        monitor["metadata"]["labels"]["release"],
        "kube-prometheus-stack"
    );
    let spec = &monitor["spec"];
    fields(
        spec,
        "spec",
        &[
            "jobLabel",
            "podTargetLabels",
            "podMetricsEndpoints",
            "selector",
            "namespaceSelector",
            "sampleLimit",
            "targetLimit",
            "labelLimit",
            "labelNameLengthLimit",
            "labelValueLengthLimit",
            "attachMetadata",
        ],
        &["selector", "podMetricsEndpoints"],
    );
    fields(
        &spec["selector"],
        "spec.selector",
        &["matchLabels", "matchExpressions"],
        &[],
    );
    fields(
        &spec["namespaceSelector"],
        "spec.namespaceSelector",
        &["any", "matchNames"],
        &[],
    );
    assert_eq!(
        spec["namespaceSelector"]["matchNames"],
        json!(["shop", "search"])
    );
    let endpoints = spec["podMetricsEndpoints"].as_array().unwrap();
    assert_eq!(endpoints.len(), 1);
    let endpoint = &endpoints[0];
    fields(
        endpoint,
        "podMetricsEndpoints[0]",
        &[
            "port",
            "targetPort",
            "path",
            "scheme",
            "params",
            "interval",
            "scrapeTimeout",
            "honorLabels",
            "honorTimestamps",
            "relabelings",
            "metricRelabelings",
        ],
        &["port"],
    );
    assert_eq!(endpoint["path"], "/metrics");
    for key in ["interval", "scrapeTimeout"] {
        assert!(
            is_duration(endpoint[key].as_str().unwrap()),
            "{key}: {endpoint}"
        );
    }

    // The port it names is the injected sidecar's admin port.
    let config = objects
        .iter()
        .find(|o| o["kind"] == "ConfigMap" && o["data"]["inject.yaml"].is_string())
        .unwrap();
    let settings = toolgate::inject::settings::InjectSettings::parse(
        "chart",
        config["data"]["inject.yaml"].as_str().unwrap(),
        Vec::new(),
    )
    .unwrap();
    assert!(settings.sidecar.scrape_annotations);
    let pod = toolgate::inject::sidecar::PodFacts {
        upstream_port: 8080,
        service_name: None,
    };
    let container = toolgate::inject::sidecar::container(&settings.sidecar, &pod);
    let port = container
        .ports
        .unwrap()
        .into_iter()
        .find(|p| p.name.as_deref() == endpoint["port"].as_str())
        .expect("the sidecar has the PodMonitor's port");
    assert_eq!(port.container_port, toolgate::inject::ADMIN_PORT);

    // And the scrape annotations advertise the same port and path.
    let pod: k8s_openapi::api::core::v1::Pod = serde_json::from_value(json!({
        "metadata": {"name": "orders-1", "namespace": "shop", "annotations": {"toolgate.dev/inject": "true"}},
        "spec": {"containers": [{"name": "app", "image": "orders:1", "ports": [{"containerPort": 8080}]}]},
    }))
    .unwrap();
    let toolgate::inject::patch::Decision::Inject(patch) =
        toolgate::inject::patch::patch(&pod, &settings.sidecar)
    else {
        panic!("the pod is injected");
    };
    let mut doc = serde_json::to_value(&pod).unwrap();
    json_patch::patch(&mut doc, &patch).unwrap();
    let annotations = &doc["metadata"]["annotations"];
    assert_eq!(annotations["prometheus.io/scrape"], "true");
    assert_eq!(annotations["prometheus.io/port"], "15101");
    assert_eq!(annotations["prometheus.io/path"], endpoint["path"]);

    // Off by default: nothing of the pack renders.
    let defaults = render("");
    for kind in ["PodMonitor", "PrometheusRule"] {
        assert!(
            defaults.iter().all(|o| o["kind"] != kind),
            "{kind} is off by default"
        );
    }
    assert!(defaults
        .iter()
        .all(|o| o["metadata"]["labels"]["grafana_dashboard"].is_null()));
}

/// The rendered PrometheusRule: its shape, and its rules as a Prometheus rules file.
fn rule_file(objects: &[Value]) -> Value {
    let rule = one(objects, "PrometheusRule");
    assert_eq!(rule["apiVersion"], "monitoring.coreos.com/v1");
    fields(&rule["spec"], "spec", &["groups"], &["groups"]);
    for group in rule["spec"]["groups"].as_array().unwrap() {
        fields(
            group,
            "spec.groups[]",
            &[
                "name",
                "interval",
                "rules",
                "partial_response_strategy",
                "limit",
            ],
            &["name", "rules"],
        );
        for r in group["rules"].as_array().unwrap() {
            fields(
                r,
                "spec.groups[].rules[]",
                &[
                    "alert",
                    "record",
                    "expr",
                    "for",
                    "keep_firing_for",
                    "labels",
                    "annotations",
                ],
                &["expr"],
            );
        }
    }
    json!({"groups": rule["spec"]["groups"]})
}

fn alerts(rules: &Value) -> Vec<&Value> {
    rules["groups"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|g| g["rules"].as_array().unwrap())
        .filter(|r| r["alert"].is_string())
        .collect()
}

/// GitHub's anchor for a Markdown heading.
fn slug(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter(|c| c.is_alphanumeric() || *c == ' ' || *c == '-' || *c == '_')
        .map(|c| if c == ' ' { '-' } else { c })
        .collect()
}

#[test]
fn every_alert_links_to_its_runbook() {
    let rules = rule_file(&render(VALUES));
    let names: Vec<&str> = alerts(&rules)
        .iter()
        .map(|a| a["alert"].as_str().unwrap())
        .collect();
    assert_eq!(names, ALERTS);
    let doc = std::fs::read_to_string(root().join("docs/observability.md")).unwrap();
    for alert in alerts(&rules) {
        let name = alert["alert"].as_str().unwrap();
        assert_eq!(alert["labels"]["team"], "platform", "{name}: alertLabels");
        assert!(alert["labels"]["severity"].is_string(), "{name}");
        let url = alert["annotations"]["runbook_url"].as_str().unwrap();
        let (base, anchor) = url.split_once('#').expect("a section anchor");
        assert!(base.ends_with("docs/observability.md"), "{url}");
        // The section: from its heading to the next heading of any level.
        let start = doc
            .lines()
            .position(|l| l.starts_with('#') && slug(l.trim_start_matches('#')) == anchor)
            .unwrap_or_else(|| panic!("{name}: no heading for #{anchor} in docs/observability.md"));
        let section: Vec<&str> = doc
            .lines()
            .skip(start + 1)
            .take_while(|l| !l.starts_with('#'))
            .collect();
        let section = section.join("\n");
        for part in [
            "**What it means.**",
            "**How to confirm.**",
            "**What to do.**",
        ] {
            assert!(section.contains(part), "{name}'s runbook lacks {part}");
        }
    }
}

/// One sidecar driven into one state, scraped before and after.
struct Scenario {
    name: &'static str,
    before: Scrape,
    after: Scrape,
    /// The alert it must fire, and the labels beyond the group's that alert carries.
    fires: Option<(&'static str, Vec<(&'static str, &'static str)>)>,
}

async fn scrape(h: &Harness) -> Scrape {
    let (status, text) = h.get_admin("/metrics").await;
    assert_eq!(status, 200);
    Scrape::parse(&text)
}

/// Polls until `series` has `value` on `h`'s `/metrics`, for up to `secs` seconds.
async fn wait_until(h: &Harness, series: &str, value: f64, secs: u64) {
    for _ in 0..secs * 20 {
        if scrape(h).await.get(series) == Some(value) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!(
        "{series} never became {value}:\n{}",
        h.get_admin("/metrics").await.1
    );
}

async fn allowed_calls(h: &Harness, n: usize) {
    for _ in 0..n {
        let r = h
            .call("GET", "/logs/orders", Some(OPS_TOKEN), &[], "")
            .await;
        assert_eq!(r.status, 200, "{}", r.text);
    }
}

async fn healthy() -> Scenario {
    let (_collector, endpoint, _server) = Collector::grpc().await;
    let backend = Backend::example().await;
    let h = Harness::start(
        backend.addr,
        Options {
            tweak: Box::new(move |s| s.telemetry.otlp_endpoint = Some(endpoint)),
            ..Options::default()
        },
    )
    .await;
    let before = scrape(&h).await;
    allowed_calls(&h, 20).await;
    // The spans left (the export timer is 200 ms), and none failed.
    tokio::time::sleep(Duration::from_millis(600)).await;
    let after = scrape(&h).await;
    h.stop().await;
    Scenario {
        name: "healthy",
        before,
        after,
        fires: None,
    }
}

/// MCP traffic as an agent's SDK sends it: the handshake, the listing, tool calls.
async fn healthy_mcp() -> Scenario {
    let backend = McpBackend::start().await;
    let h = Harness::start(
        backend.addr,
        Options {
            policies: include_str!("fixtures/policies/mcp-backend.yaml").into(),
            ..Options::default()
        },
    )
    .await;
    let before = scrape(&h).await;
    let headers = [("mcp-protocol-version", "2025-11-25")];
    for body in [
        r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{}}"#,
        r#"{"jsonrpc":"2.0","id":2,"method":"tools/list","params":{}}"#,
        r#"{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"read_logs","arguments":{}}}"#,
        r#"{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"name":"read_logs","arguments":{}}}"#,
    ] {
        let r = h
            .call("POST", "/mcp", Some(OPS_TOKEN), &headers, body)
            .await;
        assert_eq!(r.status, 200, "{}", r.text);
    }
    let after = scrape(&h).await;
    h.stop().await;
    Scenario {
        name: "healthy-mcp",
        before,
        after,
        fires: None,
    }
}

async fn policy_unsynchronized() -> Scenario {
    let backend = Backend::example().await;
    let h = Harness::start(backend.addr, Options::default()).await;
    let before = scrape(&h).await;
    std::fs::write(
        h.policy_file(),
        "kind: ToolContract\nspec: [not, a, contract\n",
    )
    .unwrap();
    wait_until(&h, "toolgate_policy_synchronized", 0.0, 10).await;
    allowed_calls(&h, 3).await;
    let after = scrape(&h).await;
    h.stop().await;
    Scenario {
        name: "policy",
        before,
        after,
        fires: Some(("ToolgatePolicyUnsynchronized", vec![])),
    }
}

async fn audit_unavailable() -> Scenario {
    let backend = Backend::example().await;
    let h = Harness::start(
        backend.addr,
        Options {
            // A real full disk: /dev/full opens, and every write fails with ENOSPC.
            tweak: Box::new(|s| s.audit.path = "/dev/full".into()),
            ..Options::default()
        },
    )
    .await;
    let before = scrape(&h).await;
    let r = h
        .call("GET", "/logs/orders", Some(OPS_TOKEN), &[], "")
        .await;
    r.assert_refused("AUDIT_UNAVAILABLE", 503);
    let after = scrape(&h).await;
    assert_eq!(after.get("toolgate_audit_writable"), Some(0.0));
    h.stop().await;
    Scenario {
        name: "audit",
        before,
        after,
        fires: Some(("ToolgateAuditUnavailable", vec![])),
    }
}

async fn state_down() -> Scenario {
    let redis = format!("redis://{}/0", closed_port().await);
    let backend = Backend::example().await;
    let h = Harness::start(
        backend.addr,
        Options {
            tweak: Box::new(move |s| {
                s.state.backend = toolgate::config::StateBackend::Redis;
                s.state.redis.url = redis;
            }),
            ..Options::default()
        },
    )
    .await;
    let before = scrape(&h).await;
    allowed_calls(&h, 3).await;
    let after = scrape(&h).await;
    assert_eq!(after.get("toolgate_state_up"), Some(0.0));
    h.stop().await;
    Scenario {
        name: "state",
        before,
        after,
        fires: Some(("ToolgateStateDown", vec![])),
    }
}

async fn refusals() -> Scenario {
    let backend = Backend::example().await;
    let h = Harness::start(backend.addr, Options::default()).await;
    let before = scrape(&h).await;
    allowed_calls(&h, 2).await;
    for _ in 0..30 {
        let r = h
            .call("GET", "/logs/orders", Some(RETIRED_TOKEN), &[], "")
            .await;
        assert_eq!(r.status, 403, "{}", r.text);
    }
    let after = scrape(&h).await;
    h.stop().await;
    Scenario {
        name: "refusals",
        before,
        after,
        fires: Some(("ToolgateRefusalRatioHigh", vec![])),
    }
}

/// A refund over 100 waits for finance-leads; nobody decides.
async fn approval_backlog() -> Scenario {
    let policies = "apiVersion: toolgate.dev/v1alpha1
kind: ToolContract
metadata: {name: refund}
spec:
  tool: refund
  http: {method: POST, path: /refunds}
  idempotent: false
  input:
    type: object
    required: [order_id, amount]
    properties: {order_id: {type: string}, amount: {type: integer}}
---
apiVersion: toolgate.dev/v1alpha1
kind: AgentPolicy
metadata: {name: ops-bot}
spec:
  agents: [ops-bot]
  tools:
    - name: refund
      approval: {when: 'args.amount > 100', approvers: [finance-leads], ttlSeconds: 86400}
";
    let backend = Backend::example().await;
    let dir = tempfile::tempdir().unwrap();
    let approvers = dir.path().join("approvers.yaml");
    std::fs::write(
        &approvers,
        format!(
            "alice: {{sha256: {}, groups: [finance-leads]}}\n",
            toolgate::identity::tokens::digest_hex("alice-token")
        ),
    )
    .unwrap();
    let h = Harness::start(
        backend.addr,
        Options {
            policies: policies.into(),
            tweak: Box::new(move |s| s.approvals.approvers.tokens = Some(approvers)),
            ..Options::default()
        },
    )
    .await;
    let before = scrape(&h).await;
    let r = h
        .call(
            "POST",
            "/refunds",
            Some(OPS_TOKEN),
            &[("x-toolgate-session", "s1")],
            r#"{"order_id":"o-1","amount":500}"#,
        )
        .await;
    r.assert_refused("APPROVAL_REQUIRED", 202);
    // The backlog is counted every 10 s.
    wait_until(&h, "toolgate_approvals_pending", 1.0, 15).await;
    let after = scrape(&h).await;
    h.stop().await;
    Scenario {
        name: "approvals",
        before,
        after,
        fires: Some(("ToolgateApprovalBacklog", vec![])),
    }
}

async fn export_failing() -> Scenario {
    let endpoint = format!("http://{}", closed_port().await);
    let backend = Backend::example().await;
    let h = Harness::start(
        backend.addr,
        Options {
            tweak: Box::new(move |s| s.telemetry.otlp_endpoint = Some(endpoint)),
            ..Options::default()
        },
    )
    .await;
    let before = scrape(&h).await;
    allowed_calls(&h, 6).await;
    wait_until(&h, "toolgate_spans_dropped_total", 12.0, 10).await;
    let after = scrape(&h).await;
    h.stop().await;
    Scenario {
        name: "telemetry",
        before,
        after,
        fires: Some(("ToolgateTelemetryExportFailing", vec![("signal", "traces")])),
    }
}

/// An alert annotation as Prometheus expands it for `labels` (the rules use no template
/// beyond `{{ $labels.x }}`; anything else fails here, to be taught to this test).
fn expand(template: &str, labels: &[(&str, &str)]) -> String {
    let mut text = template.to_string();
    for (k, v) in labels {
        text = text.replace(&format!("{{{{ $labels.{k} }}}}"), v);
    }
    assert!(
        !text.contains("{{"),
        "a template this test can't expand: {template}"
    );
    text
}

const TIMELINE: Timeline = Timeline { hold: 5, steps: 40 };
const EVAL: &str = "39m";

/// One `promtool` test group for a scenario: its series, and what each alert must do.
fn test_group(scenario: &Scenario, rules: &Value) -> Value {
    let pod = format!("orders-{}", scenario.name);
    let target = [
        ("namespace", "shop"),
        ("pod", pod.as_str()),
        ("container", "toolgate"),
        ("endpoint", "toolgate-admin"),
        ("instance", "10.0.3.7:15101"),
        ("job", "toolgate-system/toolgate-sidecars"),
    ];
    let series: Vec<Value> = TIMELINE
        .input_series(&scenario.before, &scenario.after, &target)
        .into_iter()
        .map(|(series, values)| json!({"series": series, "values": values}))
        .collect();
    let mut tests = Vec::new();
    for alert in alerts(rules) {
        let name = alert["alert"].as_str().unwrap();
        let expected = match &scenario.fires {
            Some((fires, extra)) if *fires == name => {
                let mut labels: Vec<(&str, &str)> = vec![("namespace", "shop"), ("pod", &pod)];
                labels.extend(extra.iter().copied());
                let mut exp_labels = alert["labels"].clone();
                for (k, v) in &labels {
                    exp_labels[*k] = json!(v);
                }
                let annotations: serde_json::Map<String, Value> = alert["annotations"]
                    .as_object()
                    .unwrap()
                    .iter()
                    .map(|(k, v)| (k.clone(), json!(expand(v.as_str().unwrap(), &labels))))
                    .collect();
                json!([{"exp_labels": exp_labels, "exp_annotations": annotations}])
            }
            // Another scenario's alert may fire too (a full disk refuses every call);
            // only the healthy sidecar must fire none.
            Some(_) => continue,
            None => json!([]),
        };
        tests.push(json!({"eval_time": EVAL, "alertname": name, "exp_alerts": expected}));
    }
    json!({
        "name": scenario.name,
        "interval": "1m",
        "input_series": series,
        "alert_rule_test": tests,
    })
}

fn run_promtool(promtool: &Path, dir: &Path, args: &[&str]) {
    let output = Command::new(promtool)
        .args(args)
        .current_dir(dir)
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "promtool {}:\n{}{}",
        args.join(" "),
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_alert_fires_on_a_sidecar_driven_into_it_and_none_on_a_healthy_one() {
    let Some(promtool) = promtool() else {
        return;
    };
    let rules = rule_file(&render(VALUES));
    // Independent sidecars, driven at once (the backlog is counted every 10 s).
    let (a, m, b, c, d, e, f, g) = tokio::join!(
        healthy(),
        healthy_mcp(),
        policy_unsynchronized(),
        audit_unavailable(),
        state_down(),
        refusals(),
        approval_backlog(),
        export_failing(),
    );
    let scenarios = [a, m, b, c, d, e, f, g];
    let fired: BTreeSet<&str> = scenarios
        .iter()
        .filter_map(|s| Some(s.fires.as_ref()?.0))
        .collect();
    assert_eq!(fired, BTreeSet::from(ALERTS), "a scenario for every alert");

    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("rules.yaml"),
        serde_yaml::to_string(&rules).unwrap(),
    )
    .unwrap();
    run_promtool(&promtool, dir.path(), &["check", "rules", "rules.yaml"]);
    let tests = json!({
        "rule_files": ["rules.yaml"],
        "evaluation_interval": "1m",
        "tests": scenarios.iter().map(|s| test_group(s, &rules)).collect::<Vec<_>>(),
    });
    std::fs::write(
        dir.path().join("tests.yaml"),
        serde_yaml::to_string(&tests).unwrap(),
    )
    .unwrap();
    run_promtool(&promtool, dir.path(), &["test", "rules", "tests.yaml"]);

    // The dashboard's queries, on the same sidecars' metrics.
    let mut samples = BTreeSet::new();
    let mut labels = BTreeSet::new();
    for scenario in &scenarios {
        let (s, l) = scenario.after.names();
        samples.extend(s);
        labels.extend(l);
    }
    check_dashboard(&promtool, dir.path(), &samples, &labels);
    check_names(&rules.to_string(), "the rules", &samples, &labels);
}

/// Every query of the dashboard: parsed by promtool (as a recording rule), and naming
/// only what a sidecar exposes.
fn check_dashboard(
    promtool: &Path,
    dir: &Path,
    samples: &BTreeSet<String>,
    labels: &BTreeSet<String>,
) {
    let text =
        std::fs::read_to_string(root().join("charts/toolgate/dashboards/toolgate.json")).unwrap();
    let dashboard: Value = serde_json::from_str(&text).unwrap();
    for key in ["title", "uid", "panels", "templating", "schemaVersion"] {
        assert!(dashboard.get(key).is_some(), "the dashboard has {key}");
    }
    let mut records = Vec::new();
    for panel in dashboard["panels"].as_array().unwrap() {
        for target in panel["targets"].as_array().into_iter().flatten() {
            let expr = target["expr"].as_str().unwrap();
            let id = format!("p{}_{}", panel["id"], target["refId"].as_str().unwrap());
            records.push(json!({"record": format!("toolgate_dashboard:{id}"), "expr": grafana_to_promql(expr)}));
            check_names(
                expr,
                &format!("panel {:?}", panel["title"]),
                samples,
                labels,
            );
        }
    }
    assert!(records.len() >= 20, "{} queries", records.len());
    for variable in dashboard["templating"]["list"].as_array().unwrap() {
        if let Some(query) = variable["definition"].as_str() {
            check_names(
                query,
                &format!("variable {}", variable["name"]),
                samples,
                labels,
            );
        }
    }
    let file = json!({"groups": [{"name": "dashboard", "rules": records}]});
    std::fs::write(
        dir.join("dashboard.yaml"),
        serde_yaml::to_string(&file).unwrap(),
    )
    .unwrap();
    run_promtool(promtool, dir, &["check", "rules", "dashboard.yaml"]);
}

/// Grafana's variables made PromQL: the range interval, and "all" for the selectors.
fn grafana_to_promql(expr: &str) -> String {
    let text = expr
        .replace("$__rate_interval", "5m")
        .replace("\"$namespace\"", "\".*\"")
        .replace("\"$pod\"", "\".*\"");
    assert!(
        !text.contains('$'),
        "a Grafana variable this test can't replace: {expr}"
    );
    text
}

/// Every `toolgate_*`, `http_*` or `mcp_*` word of `text` is a sample or a label name a
/// sidecar exposes: a typo in a query would draw an empty panel or never alert.
fn check_names(text: &str, what: &str, samples: &BTreeSet<String>, labels: &BTreeSet<String>) {
    let words = text.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == ':'));
    for word in words {
        let ours = ["toolgate_", "http_", "mcp_"]
            .iter()
            .any(|p| word.starts_with(p));
        if ours && !word.contains(':') && !samples.contains(word) && !labels.contains(word) {
            panic!("{what} names {word}, which no sidecar exposes");
        }
    }
}

#[test]
fn the_dashboard_ships_in_a_configmap_the_grafana_sidecar_loads() {
    let objects = render(VALUES);
    let map = objects
        .iter()
        .find(|o| o["kind"] == "ConfigMap" && o["data"]["toolgate.json"].is_string())
        .expect("the dashboard ConfigMap");
    assert_eq!(map["metadata"]["labels"]["grafana_dashboard"], "1");
    assert_eq!(map["metadata"]["annotations"]["grafana_folder"], "toolgate");
    let shipped: Value =
        serde_json::from_str(map["data"]["toolgate.json"].as_str().unwrap()).unwrap();
    let file: Value = serde_json::from_str(
        &std::fs::read_to_string(root().join("charts/toolgate/dashboards/toolgate.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(shipped, file);
    kube_tools::validate(
        &serde_yaml::to_string(map).unwrap(),
        "the dashboard ConfigMap",
    );

    let elsewhere = render("monitoring: {dashboard: {enabled: true, namespace: grafana}}");
    let map = elsewhere
        .iter()
        .find(|o| o["kind"] == "ConfigMap" && o["data"]["toolgate.json"].is_string())
        .unwrap();
    assert_eq!(map["metadata"]["namespace"], "grafana");
}

#[test]
fn the_chart_lints_with_the_pack_on_and_refuses_bad_monitoring_values() {
    let dir = tempfile::tempdir().unwrap();
    let values = dir.path().join("values.yaml");
    std::fs::write(&values, VALUES).unwrap();
    let output = helm_command()
        .args(["lint", "--strict", "--namespace", "toolgate-system"])
        .arg(root().join("charts/toolgate"))
        .arg("--values")
        .arg(&values)
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stdout)
    );
    for bad in [
        "monitoring: {podMonitor: {interval: soon}}",
        "monitoring: {prometheusRule: {groupBy: []}}",
        "monitoring: {prometheusRule: {groupBy: [\"pod name\"]}}",
        "monitoring: {prometheusRule: {thresholds: {refusalRatio: 2}}}",
        "monitoring: {dashbaord: {enabled: true}}",
    ] {
        std::fs::write(&values, bad).unwrap();
        let output = helm_command()
            .args(["template", "toolgate"])
            .arg(root().join("charts/toolgate"))
            .arg("--values")
            .arg(&values)
            .output()
            .unwrap();
        assert!(!output.status.success(), "{bad} was accepted");
    }
    // Grouped otherwise, the alerts carry those labels instead.
    let rules = rule_file(&render(
        "monitoring: {prometheusRule: {enabled: true, groupBy: [cluster, namespace]}}",
    ));
    let first = alerts(&rules)[0];
    assert_eq!(
        first["expr"],
        "max by (cluster, namespace) (toolgate_policy_synchronized) == 0"
    );
    assert!(
        first["annotations"]["summary"]
            .as_str()
            .unwrap()
            .contains("{{ $labels.cluster }}/{{ $labels.namespace }}"),
        "{first}"
    );
}

/// NOTES.txt as `helm install` prints it with `values`: rendered through `tpl` in a copy
/// of the chart (helm renders NOTES only on install).
fn notes(values: &str) -> String {
    let dir = tempfile::tempdir().unwrap();
    let copy = dir.path().join("toolgate");
    let status = Command::new("cp")
        .arg("-r")
        .arg(root().join("charts/toolgate"))
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
    let file = dir.path().join("values.yaml");
    std::fs::write(&file, values).unwrap();
    let output = helm_command()
        .args(["template", "toolgate"])
        .arg(&copy)
        .args([
            "--namespace",
            "toolgate-system",
            "--show-only",
            "templates/zz-notes.yaml",
            "--values",
        ])
        .arg(&file)
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let rendered: Value = serde_yaml::from_str(&String::from_utf8_lossy(&output.stdout)).unwrap();
    rendered["data"]["notes"].as_str().unwrap().to_string()
}

#[test]
fn the_notes_say_where_monitoring_is() {
    let off = notes("");
    assert!(off.contains("monitoring values, off by default"), "{off}");
    assert!(off.contains("sidecar.telemetry.otlpEndpoint"), "{off}");
    let on = notes(VALUES);
    for needle in [
        "PodMonitor toolgate-sidecars",
        "prometheus.io/* annotations",
        "PrometheusRule toolgate (six alerts",
        "ConfigMap toolgate-dashboard",
    ] {
        assert!(on.contains(needle), "missing {needle:?} in\n{on}");
    }
}
