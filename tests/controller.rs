//! `toolgate controller` end to end: the real `kube::Client` and kube-rs watchers against
//! the stand-in API server (list/watch, the status subresource, Leases with
//! resourceVersion conflicts). What a user of `kubectl get` notices: each object's
//! `Accepted` condition with the right reason, field path and generation, written once
//! and not again while nothing changes; and with two replicas, one writer, a takeover
//! when the writer dies, and a quick handover when it shuts down.

mod common;

use common::fake_apiserver::{FakeApiServer, Seen};
use serde_json::Value;
use std::future::Future;
use std::time::{Duration, Instant};

use toolgate::controller::settings::ControllerSettings;
use toolgate::controller::Controller;

/// The controller's own namespace (the kubeconfig context's): where its Lease lives.
const HOME: &str = "toolgate-system";
const NS: &str = "team-a";
const LEASE_SECONDS: u64 = 3;
/// Statuses appear within a few retry periods of a change.
const WRITTEN: Duration = Duration::from_secs(5);

/// A replica named `identity` (also its bearer token), reading `namespace` ("" = all).
async fn start(api: &FakeApiServer, identity: &str, namespace: &str) -> Controller {
    let text = format!(
        "listen: 127.0.0.1:0\nkubernetes: {{namespace: '{namespace}', kubeconfig: {}}}\n\
         leaderElection: {{identity: {identity}, leaseDurationSeconds: {LEASE_SECONDS}, renewDeadlineMs: 2000, retryPeriodMs: 200}}\n",
        api.kubeconfig_as(HOME, identity).display()
    );
    let settings = ControllerSettings::parse("test", &text, Vec::new()).unwrap();
    Controller::start(settings).await.unwrap()
}

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
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The object's `Accepted` condition (`Null` when there is none yet).
fn accepted(api: &FakeApiServer, ns: &str, kind: &str, name: &str) -> Value {
    let object = api.object(ns, kind, name);
    let conditions = object["status"]["conditions"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    conditions
        .into_iter()
        .find(|c| c["type"] == "Accepted")
        .unwrap_or(Value::Null)
}

fn generation(api: &FakeApiServer, ns: &str, kind: &str, name: &str) -> Value {
    api.object(ns, kind, name)["metadata"]["generation"].clone()
}

fn writes_by(api: &FakeApiServer, token: &str) -> usize {
    api.status_writes()
        .iter()
        .filter(|r| r.token.as_deref() == Some(token))
        .count()
}

fn holder(api: &FakeApiServer) -> Option<String> {
    let lease = api.lease(HOME, "toolgate-controller")?;
    lease["spec"]["holderIdentity"].as_str().map(String::from)
}

fn contract(name: &str, spec: &str) -> String {
    format!("---\napiVersion: toolgate.dev/v1alpha1\nkind: ToolContract\nmetadata: {{name: {name}}}\nspec: {spec}\n")
}

fn policy(name: &str, spec: &str) -> String {
    format!("---\napiVersion: toolgate.dev/v1alpha1\nkind: AgentPolicy\nmetadata: {{name: {name}}}\nspec: {spec}\n")
}

/// One object of every outcome: (kind, name, reason, field path the message starts with).
const OUTCOMES: [(&str, &str, &str, &str); 11] = [
    ("ToolContract", "read-logs", "Valid", ""),
    ("AgentPolicy", "ops-bot", "Valid", ""),
    (
        "ToolContract",
        "bad-schema",
        "InvalidSchema",
        "spec.input: ",
    ),
    ("ToolContract", "same-route", "RouteConflict", "spec.http: "),
    ("ToolContract", "same-tool", "ToolConflict", "spec.tool: "),
    (
        "ToolContract",
        "zero-timeout",
        "InvalidSpec",
        "spec.timeoutMs: ",
    ),
    ("ToolContract", "typo", "InvalidManifest", "spec.inptu: "),
    (
        "AgentPolicy",
        "bad-rule",
        "InvalidRule",
        "spec.tools[0].rules[0].expr: ",
    ),
    (
        "AgentPolicy",
        "second-ops-bot",
        "AgentConflict",
        "spec.agents[0]: ",
    ),
    (
        "AgentPolicy",
        "unknown-tool",
        "UnknownTool",
        "spec.tools[1].name: ",
    ),
    (
        "AgentPolicy",
        "bad-approval",
        "InvalidRule",
        "spec.tools[0].approval.when: ",
    ),
];

fn outcomes_manifest() -> String {
    [
        contract("read-logs", "{tool: read_logs, http: {method: GET, path: '/logs/{service}'}}"),
        policy("ops-bot", "{agents: [ops-bot], tools: [{name: read_logs}]}"),
        contract("bad-schema", "{tool: bad, input: {type: 7}}"),
        contract("same-route", "{tool: other, http: {method: GET, path: '/logs/{name}'}}"),
        contract("same-tool", "{tool: read_logs}"),
        contract("zero-timeout", "{tool: slow, timeoutMs: 0}"),
        contract("typo", "{tool: typo, inptu: {}}"),
        policy("bad-rule", "{agents: [r], tools: [{name: read_logs, rules: [{name: r, expr: 'argz.x == 1'}]}]}"),
        policy("second-ops-bot", "{agents: [ops-bot], tools: []}"),
        policy("unknown-tool", "{agents: [u], tools: [{name: read_logs}, {name: wipe}]}"),
        policy("bad-approval", "{agents: [h], tools: [{name: read_logs, approval: {approvers: [a], when: 'args.x >'}}]}"),
    ]
    .concat()
}

#[tokio::test]
async fn status_says_why_each_object_is_or_is_not_accepted() {
    let api = FakeApiServer::start().await;
    api.apply(NS, &outcomes_manifest());
    // Another namespace may reuse the tool and route: namespaces never meet.
    api.apply(
        "team-b",
        &contract(
            "read-logs",
            "{tool: read_logs, http: {method: GET, path: '/logs/{service}'}}",
        ),
    );
    let controller = start(&api, "a", "").await;
    within(WRITTEN, "every object has a condition", || async {
        OUTCOMES
            .iter()
            .all(|(kind, name, _, _)| !accepted(&api, NS, kind, name).is_null())
            && !accepted(&api, "team-b", "ToolContract", "read-logs").is_null()
    })
    .await;
    for (kind, name, reason, field) in OUTCOMES {
        let condition = accepted(&api, NS, kind, name);
        let what = format!("{kind}/{name}: {condition}");
        assert_eq!(condition["reason"], reason, "{what}");
        let status = if reason == "Valid" { "True" } else { "False" };
        assert_eq!(condition["status"], status, "{what}");
        assert!(
            condition["message"].as_str().unwrap().starts_with(field),
            "{what}"
        );
        assert_eq!(condition["observedGeneration"], 1, "{what}");
        let time = condition["lastTransitionTime"].as_str().unwrap();
        assert!(time.len() == 20 && time.ends_with('Z'), "{what}");
    }
    assert_eq!(
        accepted(&api, "team-b", "ToolContract", "read-logs")["reason"],
        "Valid"
    );
    assert!(controller.is_leader());

    // One write per object, then quiet: its own writes come back as watch events and
    // must not cause more (bookmarks and retry periods pass meanwhile).
    let objects = OUTCOMES.len() + 1;
    assert_eq!(api.status_writes().len(), objects);
    api.bookmark();
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(
        api.status_writes().len(),
        objects,
        "no write when nothing changed"
    );
    assert_rbac_allows(&api.requests());
    controller.shutdown().await;
}

#[tokio::test]
async fn observed_generation_and_neighbours_follow_edits() {
    let api = FakeApiServer::start().await;
    let fixed = contract("read-logs", "{tool: read_logs, input: {type: object}}");
    let broken = contract("read-logs", "{tool: read_logs, input: {type: 7}}");
    api.apply(NS, &broken);
    api.apply(
        NS,
        &policy("ops-bot", "{agents: [ops-bot], tools: [{name: read_logs}]}"),
    );
    let controller = start(&api, "a", NS).await;
    within(WRITTEN, "the broken contract's status", || async {
        accepted(&api, NS, "ToolContract", "read-logs")["reason"] == "InvalidSchema"
    })
    .await;
    // A broken contract defines no tool: the policy's grant names an unknown one.
    within(WRITTEN, "the policy's status", || async {
        accepted(&api, NS, "AgentPolicy", "ops-bot")["reason"] == "UnknownTool"
    })
    .await;
    let first = accepted(&api, NS, "ToolContract", "read-logs");

    // Still broken, differently: same status, so the transition time stays.
    tokio::time::sleep(Duration::from_millis(1100)).await;
    api.apply(
        NS,
        &contract(
            "read-logs",
            "{tool: read_logs, input: {type: 7}, output: {type: 8}}",
        ),
    );
    within(WRITTEN, "generation 2 observed", || async {
        accepted(&api, NS, "ToolContract", "read-logs")["observedGeneration"] == 2
    })
    .await;
    let second = accepted(&api, NS, "ToolContract", "read-logs");
    assert_eq!(second["lastTransitionTime"], first["lastTransitionTime"]);
    assert_eq!(second["status"], "False");

    // Fixed: accepted from now, and the policy's grant is served again.
    api.apply(NS, &fixed);
    within(WRITTEN, "generation 3 accepted", || async {
        let c = accepted(&api, NS, "ToolContract", "read-logs");
        c["observedGeneration"] == 3 && c["status"] == "True"
    })
    .await;
    let third = accepted(&api, NS, "ToolContract", "read-logs");
    assert_ne!(third["lastTransitionTime"], first["lastTransitionTime"]);
    within(WRITTEN, "the policy follows its contract", || async {
        accepted(&api, NS, "AgentPolicy", "ops-bot")["reason"] == "Valid"
    })
    .await;
    assert_eq!(generation(&api, NS, "AgentPolicy", "ops-bot"), 1);

    // A label is no spec change: no new generation, no write.
    let writes = api.status_writes().len();
    api.apply(
        NS,
        &fixed.replace(
            "metadata: {name: read-logs}",
            "metadata: {name: read-logs, labels: {team: a}}",
        ),
    );
    assert_eq!(generation(&api, NS, "ToolContract", "read-logs"), 3);
    tokio::time::sleep(Duration::from_millis(800)).await;
    assert_eq!(
        api.status_writes().len(),
        writes,
        "a relabel writes nothing"
    );

    // The contract deleted: the policy's grant is unknown again.
    api.delete(NS, "ToolContract", "read-logs");
    within(WRITTEN, "the policy sees the contract gone", || async {
        accepted(&api, NS, "AgentPolicy", "ops-bot")["reason"] == "UnknownTool"
    })
    .await;
    controller.shutdown().await;
}

#[tokio::test]
async fn two_controllers_one_writer_and_a_takeover() {
    let api = FakeApiServer::start().await;
    api.apply(NS, &contract("read-logs", "{tool: read_logs}"));
    // Started together: both try to create the Lease; the API server lets one win.
    let (a, b) = tokio::join!(start(&api, "a", ""), start(&api, "b", ""));
    within(WRITTEN, "one leader", || async { holder(&api).is_some() }).await;
    within(WRITTEN, "the first status", || async {
        !accepted(&api, NS, "ToolContract", "read-logs").is_null()
    })
    .await;
    let (leader, standby, lead, stand) = match holder(&api).as_deref() {
        Some("a") => (a, b, "a", "b"),
        Some("b") => (b, a, "b", "a"),
        other => panic!("holder {other:?}"),
    };
    assert!(leader.is_leader() && !standby.is_leader());
    let probe = reqwest_readyz(standby.addr).await;
    assert_eq!(probe, (200, "ok: standby\n".to_string()));

    // Edits are written by the leader alone.
    api.apply(
        NS,
        &contract("read-logs", "{tool: read_logs, input: {type: 7}}"),
    );
    within(WRITTEN, "the leader writes the edit", || async {
        accepted(&api, NS, "ToolContract", "read-logs")["observedGeneration"] == 2
    })
    .await;
    assert!(writes_by(&api, lead) >= 2);
    assert_eq!(writes_by(&api, stand), 0, "the standby wrote status");

    // The leader dies without releasing: the standby waits out the lease, then takes over.
    let died = Instant::now();
    drop(leader);
    api.apply(
        NS,
        &contract("read-logs", "{tool: read_logs, input: {type: object}}"),
    );
    within(
        Duration::from_secs(LEASE_SECONDS + 4),
        "the standby takes over",
        || async { accepted(&api, NS, "ToolContract", "read-logs")["observedGeneration"] == 3 },
    )
    .await;
    let waited = died.elapsed();
    // It saw the dead leader's last renewal at most one retry period before the crash.
    assert!(
        waited >= Duration::from_millis(LEASE_SECONDS * 1000 - 400),
        "took over after {waited:?}"
    );
    assert_eq!(holder(&api).as_deref(), Some(stand));
    assert_eq!(writes_by(&api, stand), 1);
    let lease = api.lease(HOME, "toolgate-controller").unwrap();
    assert_eq!(lease["spec"]["leaseTransitions"], 1, "{lease}");
    assert!(standby.is_leader());

    // A graceful shutdown releases the lease: a new replica takes over well before it
    // could have lapsed.
    let c = start(&api, "c", "").await;
    within(WRITTEN, "c lists", || async {
        reqwest_readyz(c.addr).await.0 == 200
    })
    .await;
    let handover = Instant::now();
    standby.shutdown().await;
    within(
        Duration::from_secs(LEASE_SECONDS),
        "c takes the released lease",
        || async { holder(&api).as_deref() == Some("c") },
    )
    .await;
    assert!(
        handover.elapsed() < Duration::from_secs(LEASE_SECONDS),
        "{:?}",
        handover.elapsed()
    );
    assert_rbac_allows(&api.requests());
    c.shutdown().await;
}

/// Someone with access to the status subresource marks a broken object accepted: the
/// controller puts the truth back, once.
#[tokio::test]
async fn a_forged_status_is_corrected() {
    let api = FakeApiServer::start().await;
    api.apply(
        NS,
        &contract("read-logs", "{tool: read_logs, input: {type: 7}}"),
    );
    let controller = start(&api, "a", NS).await;
    within(WRITTEN, "the first status", || async {
        accepted(&api, NS, "ToolContract", "read-logs")["reason"] == "InvalidSchema"
    })
    .await;
    let forged = serde_json::json!({"conditions": [{"type": "Accepted", "status": "True",
        "lastTransitionTime": "2025-01-01T00:00:00Z", "reason": "Valid", "message": "trust me",
        "observedGeneration": 1}]});
    api.write_status(NS, "ToolContract", "read-logs", forged);
    within(WRITTEN, "corrected", || async {
        accepted(&api, NS, "ToolContract", "read-logs")["reason"] == "InvalidSchema"
    })
    .await;
    let writes = writes_by(&api, "a");
    tokio::time::sleep(Duration::from_millis(600)).await;
    assert_eq!(writes_by(&api, "a"), writes);
    assert_eq!(writes, 2, "the first status and the correction");
    controller.shutdown().await;
}

/// docs/install.md shows a route conflict as `kubectl` would: the controller writes that.
#[tokio::test]
async fn the_install_doc_shows_what_the_controller_writes() {
    let api = FakeApiServer::start().await;
    api.apply(
        NS,
        &contract(
            "read-logs",
            "{tool: read_logs, http: {method: GET, path: '/logs/{service}'}}",
        ),
    );
    api.apply(
        NS,
        &contract(
            "read-logs-v2",
            "{tool: read_logs_2, http: {method: GET, path: '/logs/{service}'}}",
        ),
    );
    let controller = start(&api, "a", NS).await;
    within(WRITTEN, "the conflict", || async {
        accepted(&api, NS, "ToolContract", "read-logs-v2")["reason"] == "RouteConflict"
    })
    .await;
    let doc =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/install.md")).unwrap();
    let mut lines = doc
        .lines()
        .skip_while(|l| !l.contains("get tc read-logs-v2 -o jsonpath"));
    lines.next().expect("docs/install.md shows the message");
    let shown = lines.next().unwrap();
    assert_eq!(
        accepted(&api, NS, "ToolContract", "read-logs-v2")["message"],
        shown
    );
    assert!(doc.contains(
        "read-logs-v2    read_logs_2   GET      /logs/{service}   False      RouteConflict"
    ));
    controller.shutdown().await;
}

/// A leader that can't reach the API server stops counting itself the writer before its
/// lease could lapse, and resumes when the server is back.
#[tokio::test]
async fn a_leader_that_cannot_renew_steps_down() {
    let api = FakeApiServer::start().await;
    api.apply(NS, &contract("read-logs", "{tool: read_logs}"));
    let controller = start(&api, "a", NS).await;
    within(WRITTEN, "leader", || async { controller.is_leader() }).await;
    api.set_down(true);
    let stepped = within(
        Duration::from_secs(LEASE_SECONDS),
        "stepped down",
        || async { !controller.is_leader() },
    )
    .await;
    assert!(stepped < Duration::from_secs(LEASE_SECONDS), "{stepped:?}");
    api.set_down(false);
    within(Duration::from_secs(10), "leader again", || async {
        controller.is_leader()
    })
    .await;
    controller.shutdown().await;
}

/// `/readyz`'s status and body.
async fn reqwest_readyz(addr: std::net::SocketAddr) -> (u16, String) {
    use http_body_util::{BodyExt, Empty};
    let stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    let (mut sender, conn) =
        hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream))
            .await
            .unwrap();
    tokio::spawn(conn);
    let request = http::Request::get("/readyz")
        .header("host", "controller")
        .body(Empty::<bytes::Bytes>::new())
        .unwrap();
    let response = sender.send_request(request).await.unwrap();
    let status = response.status().as_u16();
    let body = response.into_body().collect().await.unwrap().to_bytes();
    (status, String::from_utf8_lossy(&body).into_owned())
}

/// Every request the controller made is one `deploy/controller-rbac.yaml` allows.
fn assert_rbac_allows(requests: &[Seen]) {
    let text = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/deploy/controller-rbac.yaml"
    ))
    .unwrap();
    let roles: Vec<Value> = serde_yaml::Deserializer::from_str(&text)
        .map(|d| serde::Deserialize::deserialize(d).unwrap())
        .collect();
    assert!(!requests.is_empty());
    for r in requests {
        let (group, namespace, resource, name) = resource_of(&r.path);
        let verb = match (r.method.as_str(), name.is_some()) {
            ("GET", false) if r.is_watch() => "watch",
            ("GET", false) => "list",
            ("GET", true) => "get",
            ("POST", _) => "create",
            ("PUT", _) => "update",
            ("PATCH", _) => "patch",
            (other, _) => panic!("unexpected {other} {}", r.path),
        };
        let allowed = roles.iter().any(|role| {
            let cluster = role["kind"] == "ClusterRole";
            (cluster || namespace.as_deref() == Some(HOME))
                && role["rules"].as_array().unwrap().iter().any(|rule| {
                    let has = |field: &str, v: &str| {
                        rule[field]
                            .as_array()
                            .is_some_and(|a| a.iter().any(|x| x == v))
                    };
                    let named = match (&rule["resourceNames"], &name) {
                        (Value::Null, _) => true,
                        (_, Some(name)) => has("resourceNames", name),
                        (_, None) => false,
                    };
                    has("apiGroups", &group)
                        && has("resources", &resource)
                        && has("verbs", verb)
                        && named
                })
        });
        assert!(
            allowed,
            "{} {} ({verb} {resource}) is not in deploy/controller-rbac.yaml",
            r.method, r.path
        );
    }
}

/// (API group, namespace, resource[/subresource], object name) of a request path.
fn resource_of(path: &str) -> (String, Option<String>, String, Option<String>) {
    let parts: Vec<&str> = path.trim_start_matches('/').split('/').collect();
    let (group, rest) = (parts[1].to_string(), &parts[3..]);
    let (namespace, rest) = match rest {
        ["namespaces", ns, rest @ ..] => (Some(ns.to_string()), rest),
        rest => (None, rest),
    };
    match rest {
        [resource] => (group, namespace, resource.to_string(), None),
        [resource, name] => (
            group,
            namespace,
            resource.to_string(),
            Some(name.to_string()),
        ),
        [resource, name, sub] => (
            group,
            namespace,
            format!("{resource}/{sub}"),
            Some(name.to_string()),
        ),
        _ => panic!("unexpected path {path}"),
    }
}

#[test]
fn the_controller_subcommand_refuses_bad_settings() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("controller.yaml");
    std::fs::write(
        &file,
        "leaderElection: {leaseDurationSeconds: 5, renewDeadlineMs: 9000}\n",
    )
    .unwrap();
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_toolgate"))
        .args(["controller", "--config"])
        .arg(&file)
        .env("HOSTNAME", "p")
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("leaderElection.renewDeadlineMs"),
        "{stderr}"
    );
}
