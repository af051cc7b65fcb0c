use super::*;
use serde_json::{json, Value};

fn mk_object(kind: Kind, ns: &str, name: &str, spec: Value, status: Value) -> DynamicObject {
    serde_json::from_value(json!({
        "apiVersion": "toolgate.dev/v1alpha1",
        "kind": kind.name(),
        "metadata": {"name": name, "namespace": ns, "resourceVersion": "1", "generation": 3},
        "spec": spec,
        "status": status,
    }))
    .unwrap()
}

fn mk_contract(ns: &str, name: &str) -> DynamicObject {
    mk_object(
        Kind::ToolContract,
        ns,
        name,
        json!({"tool": name}),
        json!({}),
    )
}

fn list(store: &mut Store, kind: Kind, objects: Vec<DynamicObject>) {
    store.handle(kind, Ok(Event::Init));
    for o in objects {
        store.handle(kind, Ok(Event::InitApply(o)));
    }
    store.handle(kind, Ok(Event::InitDone));
}

#[test]
fn ready_only_after_both_kinds_listed() {
    let mut store = Store::default();
    list(&mut store, Kind::ToolContract, vec![mk_contract("a", "t")]);
    assert!(!store.ready());
    list(&mut store, Kind::AgentPolicy, vec![]);
    assert!(store.ready());
    assert_eq!(store.take_dirty(), BTreeSet::from(["a".to_string()]));
    assert!(!store.has_dirty());
}

#[test]
fn a_relist_dirties_namespaces_that_lost_objects() {
    let mut store = Store::default();
    list(
        &mut store,
        Kind::ToolContract,
        vec![mk_contract("a", "t"), mk_contract("b", "t")],
    );
    store.take_dirty();
    // Deleted in `b` while the watch was down; the relist no longer has it.
    store.handle(Kind::ToolContract, Err(Lost::Expired));
    list(&mut store, Kind::ToolContract, vec![mk_contract("a", "t")]);
    assert_eq!(
        store.take_dirty(),
        BTreeSet::from(["a".to_string(), "b".to_string()])
    );
    assert_eq!(store.len(), 1);
}

#[test]
fn entries_keep_generation_status_and_read_errors() {
    let mut store = Store::default();
    let status = json!({"conditions": [
        {"type": "Accepted", "status": "True", "lastTransitionTime": "2025-01-01T00:00:00Z",
         "reason": "Valid", "message": "ok", "observedGeneration": 2},
        {"type": "Broken"}
    ]});
    let object = mk_object(
        Kind::AgentPolicy,
        "a",
        "p",
        json!({"agents": ["x"], "tols": []}),
        status,
    );
    store.handle(Kind::AgentPolicy, Ok(Event::Apply(object.clone())));
    let key = key(Kind::AgentPolicy, &object);
    let entry = store.get(&key).unwrap();
    assert_eq!(entry.generation, Some(3));
    assert_eq!(
        entry.conditions.len(),
        1,
        "the unreadable condition is dropped"
    );
    let error = entry.read.as_ref().unwrap_err();
    assert_eq!(error.field.as_deref(), Some("spec.tols"));
    store.handle(Kind::AgentPolicy, Ok(Event::Delete(object)));
    assert!(store.is_empty());
    assert_eq!(store.take_dirty(), BTreeSet::from(["a".to_string()]));
}
