use super::*;
use crate::policy::BuildOptions;
use crate::telemetry::metrics::Metrics;
use serde_json::{json, Value};

fn mk_object(kind: Kind, name: &str, spec: Value) -> DynamicObject {
    serde_json::from_value(json!({
        "apiVersion": "toolgate.dev/v1alpha1",
        "kind": kind.name(),
        "metadata": {"name": name, "namespace": "ns", "resourceVersion": "1"},
        "spec": spec,
    }))
    .unwrap()
}

fn mk_contract(name: &str) -> DynamicObject {
    mk_object(Kind::ToolContract, name, json!({"tool": name}))
}

fn mk_policy(name: &str, tools: &[&str]) -> DynamicObject {
    let tools: Vec<Value> = tools.iter().map(|t| json!({"name": t})).collect();
    mk_object(
        Kind::AgentPolicy,
        name,
        json!({"agents": [name], "tools": tools}),
    )
}

fn mk_sync() -> (Sync, Arc<Control>, Arc<Metrics>) {
    let metrics = Arc::new(Metrics::new());
    let control = Arc::new(Control::new(
        &Kind::ALL.map(Kind::source),
        BuildOptions::default(),
        metrics.clone(),
    ));
    (Sync::new(control.clone()), control, metrics)
}

fn list(sync: &mut Sync, kind: Kind, objects: Vec<DynamicObject>) {
    sync.handle(kind, Ok(Event::Init));
    for o in objects {
        sync.handle(kind, Ok(Event::InitApply(o)));
    }
    sync.handle(kind, Ok(Event::InitDone));
}

fn tools(control: &Control) -> Vec<String> {
    let snapshot = control.snapshot().expect("a published snapshot");
    let mut tools: Vec<String> = snapshot.contracts.iter().map(|c| c.tool.clone()).collect();
    tools.sort();
    tools
}

#[test]
fn nothing_is_published_until_both_kinds_listed() {
    let (mut sync, control, metrics) = mk_sync();
    // Policies first: they name a tool whose contract is not listed yet.
    list(&mut sync, Kind::AgentPolicy, vec![mk_policy("bot", &["a"])]);
    assert!(control.snapshot().is_none());
    // A change of the listed kind while the other still lists is kept for the first publish.
    sync.handle(
        Kind::AgentPolicy,
        Ok(Event::Apply(mk_policy("bot2", &["a"]))),
    );
    assert!(control.snapshot().is_none());
    list(&mut sync, Kind::ToolContract, vec![mk_contract("a")]);
    let snapshot = control.snapshot().unwrap();
    assert_eq!(snapshot.policies.len(), 2);
    assert!(control.errors().is_empty(), "{:?}", control.errors());
    // Contracts were published before policies: no spurious "unknown tool" error counted.
    assert_eq!(metrics.policy_reload_errors.get(), 0);
    assert_eq!(metrics.policy_synchronized.get(), 1);
}

#[test]
fn changes_apply_at_once_after_the_initial_list() {
    let (mut sync, control, _) = mk_sync();
    list(&mut sync, Kind::ToolContract, vec![mk_contract("a")]);
    list(&mut sync, Kind::AgentPolicy, vec![]);
    sync.handle(Kind::ToolContract, Ok(Event::Apply(mk_contract("b"))));
    assert_eq!(tools(&control), ["a", "b"]);
    sync.handle(Kind::ToolContract, Ok(Event::Delete(mk_contract("a"))));
    assert_eq!(tools(&control), ["b"]);
}

#[test]
fn an_invalid_object_is_rejected_by_name_and_the_rest_apply() {
    let (mut sync, control, _) = mk_sync();
    let unreadable = mk_object(Kind::ToolContract, "typo", json!({"tol": "x"}));
    let bad_cel = mk_object(
        Kind::AgentPolicy,
        "bad-cel",
        json!({"agents": ["x"], "tools": [{"name": "a", "rules": [{"name": "r", "expr": "args.("}]}]}),
    );
    list(
        &mut sync,
        Kind::ToolContract,
        vec![mk_contract("a"), unreadable],
    );
    list(
        &mut sync,
        Kind::AgentPolicy,
        vec![mk_policy("bot", &["a"]), bad_cel],
    );
    assert_eq!(tools(&control), ["a"]);
    assert_eq!(control.snapshot().unwrap().policies.len(), 1);
    let errors = control.errors().join("\n");
    assert!(errors.contains("ToolContract/typo: spec.tol"), "{errors}");
    assert!(
        errors.contains("AgentPolicy/bad-cel: spec.tools[0].rules[0].expr"),
        "{errors}"
    );
    // A good object edited into an unreadable one stops applying (fail closed).
    let broken = mk_object(
        Kind::ToolContract,
        "a",
        json!({"tool": "a", "timeoutMs": "soon"}),
    );
    sync.handle(Kind::ToolContract, Ok(Event::Apply(broken)));
    assert!(tools(&control).is_empty());
    // Fixing it brings it back and clears its error.
    sync.handle(Kind::ToolContract, Ok(Event::Apply(mk_contract("a"))));
    assert_eq!(tools(&control), ["a"]);
    assert!(!control.errors().join("\n").contains("ToolContract/a:"));
}

#[test]
fn a_lost_watch_keeps_serving_unsynchronized_until_relisted() {
    let (mut sync, control, metrics) = mk_sync();
    list(
        &mut sync,
        Kind::ToolContract,
        vec![mk_contract("a"), mk_contract("b")],
    );
    list(&mut sync, Kind::AgentPolicy, vec![]);
    let version = control.snapshot().unwrap().version;
    sync.handle(
        Kind::ToolContract,
        Err(Lost::Failed("connection refused".into())),
    );
    assert_eq!(metrics.policy_synchronized.get(), 0);
    assert_eq!(control.snapshot().unwrap().version, version);
    // The other kind's events still apply, and do not claim the policy is synchronized.
    sync.handle(
        Kind::AgentPolicy,
        Ok(Event::Apply(mk_policy("bot", &["a"]))),
    );
    assert_eq!(control.snapshot().unwrap().policies.len(), 1);
    assert_eq!(metrics.policy_synchronized.get(), 0);
    // The relist is buffered: the old objects serve until it is complete.
    sync.handle(Kind::ToolContract, Ok(Event::Init));
    sync.handle(Kind::ToolContract, Ok(Event::InitApply(mk_contract("a"))));
    assert_eq!(tools(&control), ["a", "b"]);
    sync.handle(Kind::ToolContract, Ok(Event::InitDone));
    // `b` was deleted while the watch was down: the relist drops it.
    assert_eq!(tools(&control), ["a"]);
    assert_eq!(metrics.policy_synchronized.get(), 1);
}
