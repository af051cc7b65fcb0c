//! The cluster source end to end: a real sidecar with the real `kube::Client` and kube-rs
//! watchers, against a fake API server speaking the list/watch wire protocol, and a real
//! backend. Each step checks what a user notices: readiness, decisions, the synchronized
//! gauge.

mod common;

use common::fake_apiserver::{FakeApiServer, Seen};
use common::*;
use std::future::Future;
use std::time::{Duration, Instant};

const NS: &str = "team-a";
/// An object change is enforced within 1 s of its watch event (README, "Policies from the cluster").
const ENFORCED: Duration = Duration::from_secs(1);
/// Reconnects wait for kube's backoff (0.8 s doubling, plus up to as much jitter).
const RECOVERED: Duration = Duration::from_secs(20);

struct Fixture {
    api: FakeApiServer,
    h: Harness,
    _backend: Backend,
    _dir: tempfile::TempDir,
}

impl Fixture {
    /// A sidecar watching `NS` of `api`, with the pod labels `app="log-service"`.
    async fn start(api: FakeApiServer, wait_ready: bool) -> Fixture {
        let backend = Backend::example().await;
        let dir = tempfile::tempdir().unwrap();
        let labels = dir.path().join("labels");
        std::fs::write(&labels, "app=\"log-service\"\npod-template-hash=\"7c9\"\n").unwrap();
        let kubeconfig = api.kubeconfig(NS);
        let tweak = move |s: &mut toolgate::config::Settings| {
            s.policies.files = vec![];
            s.policies.kubernetes.enabled = true;
            s.policies.kubernetes.namespace = NS.into();
            s.policies.kubernetes.pod_labels_file = labels;
            s.policies.kubernetes.kubeconfig = Some(kubeconfig);
        };
        let options = Options {
            policies: String::new(),
            tweak: Box::new(tweak),
            wait_ready,
        };
        let h = Harness::start(backend.addr, options).await;
        Fixture {
            api,
            h,
            _backend: backend,
            _dir: dir,
        }
    }

    /// The cluster of most tests: every example contract and the ops-bot policy.
    async fn with_examples() -> Fixture {
        let api = FakeApiServer::start().await;
        api.apply(NS, CONTRACTS);
        api.apply(NS, OPS_POLICY);
        Fixture::start(api, true).await
    }

    async fn read_logs(&self, token: &str) -> Reply {
        self.h
            .call("GET", "/logs/orders", Some(token), &[], "")
            .await
    }

    async fn synchronized(&self) -> i64 {
        let (_, metrics) = self.h.get_admin("/metrics").await;
        metrics
            .lines()
            .find_map(|l| l.strip_prefix("toolgate_policy_synchronized "))
            .and_then(|v| v.trim().parse().ok())
            .expect("the synchronized gauge")
    }

    async fn ready(&self) -> bool {
        self.h.get_admin("/readyz").await.0 == 200
    }

    async fn stop(self) {
        assert_role_allows(&self.api.requests());
        self.h.stop().await;
    }
}

/// Polls `check` until it holds; panics after `limit`. Returns how long it took.
async fn within<F, Fut>(limit: Duration, what: &str, mut check: F) -> Duration
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let start = Instant::now();
    loop {
        if check().await {
            return start.elapsed();
        }
        assert!(start.elapsed() < limit, "{what}: not within {limit:?}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Every request the sidecar made is one `deploy/rbac.yaml` allows.
fn assert_role_allows(requests: &[Seen]) {
    let text = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/deploy/rbac.yaml"));
    let role: serde_json::Value = serde_yaml::from_str(&text.unwrap()).unwrap();
    assert!(!requests.is_empty());
    for r in requests {
        let resource = r.path.rsplit('/').next().unwrap();
        let verb = if r.is_watch() { "watch" } else { "list" };
        let allowed = role["rules"].as_array().unwrap().iter().any(|rule| {
            let has = |field: &str, v: &str| rule[field].as_array().unwrap().iter().any(|x| x == v);
            r.method == "GET"
                && r.path
                    .starts_with(&format!("/apis/toolgate.dev/v1alpha1/namespaces/{NS}/"))
                && has("apiGroups", "toolgate.dev")
                && has("resources", resource)
                && has("verbs", verb)
        });
        assert!(allowed, "the Role does not allow {r:?}");
    }
}

#[tokio::test]
async fn not_ready_until_both_kinds_are_listed() {
    let api = FakeApiServer::start().await;
    api.apply(NS, CONTRACTS);
    api.apply(NS, OPS_POLICY);
    api.hold_list("AgentPolicy", true);
    let f = Fixture::start(api, false).await;
    // Contracts are listed (their watch has started); policies are not.
    within(RECOVERED, "contracts listed", || async {
        !f.api.watches("ToolContract").is_empty()
    })
    .await;
    f.read_logs(OPS_TOKEN)
        .await
        .assert_refused("NOT_READY", 503);
    assert!(!f.ready().await);
    assert_eq!(f.synchronized().await, 0);
    f.api.hold_list("AgentPolicy", false);
    within(ENFORCED, "ready once both kinds listed", || f.ready()).await;
    assert_eq!(f.read_logs(OPS_TOKEN).await.status, 200);
    assert_eq!(f.synchronized().await, 1);
    f.stop().await;
}

#[tokio::test]
async fn added_modified_and_deleted_objects_are_enforced_within_a_second() {
    let f = Fixture::with_examples().await;
    assert_eq!(f.read_logs(OPS_TOKEN).await.status, 200);
    f.read_logs(STRANGER_TOKEN)
        .await
        .assert_refused("TOOL_NOT_ALLOWED", 403);

    // ADDED
    f.api.apply(NS, STRANGER_POLICY);
    within(ENFORCED, "added policy", || async {
        f.read_logs(STRANGER_TOKEN).await.status == 200
    })
    .await;
    // MODIFIED: the kill switch.
    f.api
        .apply(NS, &OPS_POLICY.replace("enabled: true", "enabled: false"));
    within(ENFORCED, "kill switch", || async {
        f.read_logs(OPS_TOKEN).await.code() == "AGENT_DISABLED"
    })
    .await;
    // DELETED: without its contract the tool is unknown, to every agent.
    f.api.delete(NS, "ToolContract", "read-logs");
    within(ENFORCED, "deleted contract", || async {
        f.read_logs(STRANGER_TOKEN).await.code() == "UNKNOWN_TOOL"
    })
    .await;
    f.read_logs(STRANGER_TOKEN)
        .await
        .assert_refused("UNKNOWN_TOOL", 404);
    // Another namespace's objects are not this sidecar's.
    f.api.apply("elsewhere", CONTRACTS);
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(f.read_logs(STRANGER_TOKEN).await.code(), "UNKNOWN_TOOL");
    assert_eq!(f.synchronized().await, 1);
    f.stop().await;
}

#[tokio::test]
async fn workload_selector_picks_the_objects_for_this_pod() {
    let api = FakeApiServer::start().await;
    api.apply(NS, CONTRACTS);
    api.apply(NS, OPS_POLICY);
    let elsewhere = STRANGER_POLICY.replace(
        "agents: [stranger]",
        "agents: [stranger]\n  workloadSelector: {matchLabels: {app: billing}}",
    );
    api.apply(NS, &elsewhere);
    let f = Fixture::start(api, true).await;
    f.read_logs(STRANGER_TOKEN)
        .await
        .assert_refused("TOOL_NOT_ALLOWED", 403);
    f.api
        .apply(NS, &elsewhere.replace("app: billing", "app: log-service"));
    within(ENFORCED, "selected policy", || async {
        f.read_logs(STRANGER_TOKEN).await.status == 200
    })
    .await;
    f.stop().await;
}

#[tokio::test]
async fn a_bookmark_moves_the_point_a_watch_resumes_from() {
    let f = Fixture::with_examples().await;
    within(RECOVERED, "watching", || async {
        !f.api.watches("ToolContract").is_empty()
    })
    .await;
    let rv = f.api.bookmark();
    // Forget the history up to the bookmark, then end the watch: resuming from the
    // bookmark is fine, resuming from the last object event would be 410 and a relist.
    tokio::time::sleep(Duration::from_millis(200)).await;
    f.api.compact();
    f.api.end_watches();
    within(ENFORCED, "resumed", || async {
        f.api.watches("ToolContract").len() == 2
    })
    .await;
    let resumed = f.api.watches("ToolContract").pop().unwrap();
    assert_eq!(resumed.query["resourceVersion"], rv.to_string());
    assert_eq!(f.api.lists("ToolContract"), 1, "no relist");
    // The resumed watch delivers changes.
    f.api.apply(NS, STRANGER_POLICY);
    within(ENFORCED, "change after the bookmark", || async {
        f.read_logs(STRANGER_TOKEN).await.status == 200
    })
    .await;
    f.stop().await;
}

#[tokio::test]
async fn a_dropped_watch_reconnects() {
    let f = Fixture::with_examples().await;
    // Ended cleanly (the API server's watch timeout): resumed at once, nothing relisted.
    f.api.end_watches();
    f.api.apply(NS, STRANGER_POLICY);
    within(ENFORCED, "change after a clean end", || async {
        f.read_logs(STRANGER_TOKEN).await.status == 200
    })
    .await;
    assert_eq!(f.api.lists("AgentPolicy"), 1);
    // Cut mid-stream: the watcher fails, backs off, lists again and catches up.
    f.api.cut_connections();
    f.api.delete(NS, "AgentPolicy", "stranger");
    within(RECOVERED, "change after a cut", || async {
        f.read_logs(STRANGER_TOKEN).await.code() == "TOOL_NOT_ALLOWED"
    })
    .await;
    within(RECOVERED, "synchronized again", || async {
        f.synchronized().await == 1
    })
    .await;
    assert_eq!(f.read_logs(OPS_TOKEN).await.status, 200);
    f.stop().await;
}

#[tokio::test]
async fn gone_410_relists_and_catches_up() {
    let f = Fixture::with_examples().await;
    // The watch is away while a change happens and the history is compacted.
    f.api.hold_watches(true);
    f.api.end_watches();
    f.api
        .apply(NS, &OPS_POLICY.replace("enabled: true", "enabled: false"));
    f.api.compact();
    tokio::time::sleep(Duration::from_millis(200)).await;
    // Meanwhile the last good snapshot serves.
    assert_eq!(f.read_logs(OPS_TOKEN).await.status, 200);
    let lists = f.api.lists("AgentPolicy");
    f.api.hold_watches(false);
    // kube-rs relists at once on 410: no backoff.
    within(ENFORCED, "relisted after 410", || async {
        f.read_logs(OPS_TOKEN).await.code() == "AGENT_DISABLED"
    })
    .await;
    assert!(f.api.lists("AgentPolicy") > lists, "410 led to a relist");
    assert!(f.ready().await);
    within(RECOVERED, "synchronized", || async {
        f.synchronized().await == 1
    })
    .await;
    f.stop().await;
}

#[tokio::test]
async fn an_invalid_object_is_rejected_by_name_while_the_rest_apply() {
    let api = FakeApiServer::start().await;
    api.apply(NS, CONTRACTS);
    api.apply(NS, OPS_POLICY);
    // Unreadable by the spec type (unknown field), and readable but with bad CEL.
    api.apply(NS, &STRANGER_POLICY.replace("tools:", "tols:"));
    let bad_cel = OPS_POLICY
        .replace("name: ops-bot}", "name: retired}")
        .replace("[ops-bot]", "[retired-bot]")
        .replace(
            "{name: read_logs}",
            "{name: read_logs, rules: [{name: r, expr: 'args.('}]}",
        );
    api.apply(NS, &bad_cel);
    let f = Fixture::start(api, true).await;
    assert_eq!(f.read_logs(OPS_TOKEN).await.status, 200);
    f.read_logs(STRANGER_TOKEN)
        .await
        .assert_refused("TOOL_NOT_ALLOWED", 403);
    let (_, config) = f.h.get_admin("/config").await;
    assert!(
        config.contains("AgentPolicy/stranger: spec.tols"),
        "{config}"
    );
    assert!(
        config.contains("AgentPolicy/retired: spec.tools[0].rules[0].expr"),
        "{config}"
    );
    // The watch survives a bad object arriving later, and fixing it applies it.
    f.api.apply(
        NS,
        &CONTRACTS.replace("timeoutMs: 300\n", "timeoutMs: soon\n"),
    );
    f.api.apply(NS, STRANGER_POLICY);
    within(ENFORCED, "fixed object", || async {
        f.read_logs(STRANGER_TOKEN).await.status == 200
    })
    .await;
    let (_, config) = f.h.get_admin("/config").await;
    assert!(
        config.contains("ToolContract/slow: spec.timeoutMs"),
        "{config}"
    );
    assert_eq!(f.synchronized().await, 1);
    f.stop().await;
}

#[tokio::test]
async fn an_outage_serves_the_last_snapshot_unsynchronized_until_recovery() {
    let f = Fixture::with_examples().await;
    assert_eq!(f.synchronized().await, 1);
    f.api.set_down(true);
    within(RECOVERED, "unsynchronized", || async {
        f.synchronized().await == 0
    })
    .await;
    // Still ready, still deciding with the last good snapshot.
    assert!(f.ready().await);
    assert_eq!(f.read_logs(OPS_TOKEN).await.status, 200);
    f.h.call("GET", "/etc/passwd", Some(OPS_TOKEN), &[], "")
        .await
        .assert_refused("UNKNOWN_TOOL", 404);
    // A change made during the outage arrives once the API server is back.
    f.api.apply(NS, STRANGER_POLICY);
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(f.synchronized().await, 0);
    f.api.set_down(false);
    within(RECOVERED, "synchronized again", || async {
        f.synchronized().await == 1
    })
    .await;
    assert_eq!(f.read_logs(STRANGER_TOKEN).await.status, 200);
    f.stop().await;
}

/// Defect of issue 19: in a namespace of two workloads, one policy granting an agent the
/// tools of both is the normal setup. This pod serves `read_logs`; `wipe` is selected
/// for the billing workload. The policy must apply here without the `wipe` grant, not
/// be rejected whole (which left the sidecar never ready).
#[tokio::test]
async fn a_namespace_wide_policy_applies_in_a_pod_serving_part_of_it() {
    let api = FakeApiServer::start().await;
    api.apply(NS, CONTRACTS);
    api.apply(
        NS,
        r#"
apiVersion: toolgate.dev/v1alpha1
kind: ToolContract
metadata: {name: wipe}
spec:
  tool: wipe
  http: {method: POST, path: /wipe}
  workloadSelector: {matchLabels: {app: billing}}
---
apiVersion: toolgate.dev/v1alpha1
kind: AgentPolicy
metadata: {name: ops-bot}
spec:
  agents: [ops-bot]
  tools: [{name: read_logs}, {name: wipe}]
"#,
    );
    let f = Fixture::start(api, true).await;
    assert!(
        f.ready().await,
        "the sidecar serving part of the policy is ready"
    );
    assert_eq!(f.read_logs(OPS_TOKEN).await.status, 200);
    f.h.call("POST", "/wipe", Some(OPS_TOKEN), &[], "{}")
        .await
        .assert_refused("UNKNOWN_TOOL", 404);
    let (_, config) = f.h.get_admin("/config").await;
    assert!(
        config.contains("\"errors\": []"),
        "nothing rejected: {config}"
    );
    assert_eq!(f.synchronized().await, 1);
    f.stop().await;
}
