use super::*;
use serde_json::{json, Value};

fn mk_review(kind: &str, operation: &str, object: Value, old: Value) -> Vec<u8> {
    json!({
        "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
        "request": {
            "uid": "e911857d-c318-11e8-bbad-025000000001",
            "kind": {"group": "toolgate.dev", "version": "v1alpha1", "kind": kind},
            "resource": {"group": "toolgate.dev", "version": "v1alpha1", "resource": "toolcontracts"},
            "namespace": "team-a", "name": "read-logs", "operation": operation,
            "userInfo": {"username": "alice"},
            "object": object, "oldObject": old, "dryRun": false
        }
    })
    .to_string()
    .into_bytes()
}

fn mk_contract(input: Value) -> Value {
    json!({"apiVersion": "toolgate.dev/v1alpha1", "kind": "ToolContract",
           "metadata": {"name": "read-logs", "namespace": "team-a", "labels": {}},
           "spec": {"tool": "read_logs", "input": input}})
}

fn answer_of(body: &[u8]) -> (Value, &'static str) {
    let answer = validate(body);
    assert_eq!(answer.status, 200, "{}", answer.body);
    (answer.body["response"].clone(), answer.outcome)
}

#[test]
fn a_broken_contract_is_denied_with_the_check_message() {
    let body = mk_review(
        "ToolContract",
        "CREATE",
        mk_contract(json!({"type": 7})),
        Value::Null,
    );
    let (response, outcome) = answer_of(&body);
    assert_eq!(outcome, "denied");
    assert_eq!(response["allowed"], false);
    assert_eq!(response["uid"], "e911857d-c318-11e8-bbad-025000000001");
    assert_eq!(response["status"]["code"], 422);
    let message = response["status"]["message"].as_str().unwrap();
    assert!(
        message.starts_with("ToolContract/read-logs: spec.input: "),
        "{message}"
    );
}

#[test]
fn a_valid_contract_is_allowed() {
    let body = mk_review(
        "ToolContract",
        "CREATE",
        mk_contract(json!({"type": "object"})),
        Value::Null,
    );
    let (response, outcome) = answer_of(&body);
    assert_eq!((outcome, &response["allowed"]), ("allowed", &json!(true)));
    assert!(response.get("status").is_none());
}

/// A broken object stored while the webhook was away can still be labelled.
#[test]
fn an_update_that_keeps_a_broken_spec_is_allowed_with_a_warning() {
    let broken = mk_contract(json!({"type": 7}));
    let mut labelled = broken.clone();
    labelled["metadata"]["labels"] = json!({"team": "a"});
    let (response, outcome) = answer_of(&mk_review(
        "ToolContract",
        "UPDATE",
        labelled,
        broken.clone(),
    ));
    assert_eq!(outcome, "warned");
    assert_eq!(response["allowed"], true);
    assert!(response["warnings"][0]
        .as_str()
        .unwrap()
        .contains("spec.input"));
    // Changing the spec to another broken one is refused.
    let other = mk_contract(json!({"type": 8}));
    let (response, _) = answer_of(&mk_review("ToolContract", "UPDATE", other, broken));
    assert_eq!(response["allowed"], false);
}

#[test]
fn deletes_and_other_kinds_are_allowed() {
    let broken = mk_contract(json!({"type": 7}));
    let (response, outcome) = answer_of(&mk_review(
        "ToolContract",
        "DELETE",
        Value::Null,
        broken.clone(),
    ));
    assert_eq!((outcome, &response["allowed"]), ("allowed", &json!(true)));
    let (response, outcome) =
        answer_of(&mk_review("Gadget", "CREATE", broken.clone(), Value::Null));
    assert_eq!((outcome, &response["allowed"]), ("warned", &json!(true)));
    let mut deleting = broken;
    deleting["metadata"]["deletionTimestamp"] = json!("2025-01-01T00:00:00Z");
    let (response, _) = answer_of(&mk_review("ToolContract", "UPDATE", deleting, Value::Null));
    assert_eq!(response["allowed"], true);
}

/// The kind the review says is the kind judged: a contract's body sent as an AgentPolicy
/// review is refused, not read as a contract.
#[test]
fn the_review_kind_and_the_object_kind_must_agree() {
    let body = mk_review("AgentPolicy", "CREATE", mk_contract(json!({})), Value::Null);
    let (response, _) = answer_of(&body);
    assert_eq!(response["allowed"], false, "{response}");
}

#[test]
fn malformed_bodies_get_400() {
    for body in [
        &b"{"[..],
        br#"{"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview"}"#,
    ] {
        let answer = validate(body);
        assert_eq!(answer.status, 400);
        assert_eq!(answer.outcome, "malformed");
    }
}

/// Nesting past serde_json's depth limit is a 400, not a stack overflow; a schema as deep
/// as a review can carry compiles on the parser's stack and is judged.
#[test]
fn deep_inputs_are_answered() {
    let deep = format!("{}{}", "[".repeat(100_000), "]".repeat(100_000));
    let body = String::from_utf8(mk_review("ToolContract", "CREATE", json!("X"), Value::Null))
        .unwrap()
        .replace("\"X\"", &deep);
    assert_eq!(validate(body.as_bytes()).status, 400);
    let mut schema = json!({"type": "object"});
    for _ in 0..50 {
        schema = json!({"type": "object", "properties": {"a": schema}});
    }
    let (response, _) = answer_of(&mk_review(
        "ToolContract",
        "CREATE",
        mk_contract(schema),
        Value::Null,
    ));
    assert_eq!(response["allowed"], true, "{response}");
}

/// DESIGN §16's fields: a bad `match`, an unknown time zone, a negative `perDay` or
/// `cost` are refused at apply time with their field path; good ones pass.
#[test]
fn seeds_fields_are_checked_like_the_rest() {
    let policy = |tool: Value, budget: Value| {
        json!({"apiVersion": "toolgate.dev/v1alpha1", "kind": "AgentPolicy",
               "metadata": {"name": "ops-bot", "namespace": "team-a"},
               "spec": {"agents": ["ops-bot"], "budget": budget, "tools": [tool]}})
    };
    let message = |object: Value, kind: &str| {
        let (response, _) = answer_of(&mk_review(kind, "CREATE", object, Value::Null));
        response["status"]["message"]
            .as_str()
            .unwrap_or("")
            .to_string()
    };
    let good = json!({"name": "refund", "requires": [{"tool": "get_order",
        "match": "prior.args.order_id == args.order_id", "within": "task"}]});
    let ok = json!({"perDay": 300, "timezone": "Europe/Berlin"});
    let (response, _) = answer_of(&mk_review(
        "AgentPolicy",
        "CREATE",
        policy(good.clone(), ok.clone()),
        Value::Null,
    ));
    assert_eq!(response["allowed"], true, "{response}");
    let bad_match = json!({"name": "refund", "requires": [{"tool": "get_order",
        "match": "prior.args.order_id == task.id"}]});
    let m = message(policy(bad_match, ok.clone()), "AgentPolicy");
    assert!(m.contains("spec.tools[0].requires[0].match"), "{m}");
    let m = message(
        policy(
            good.clone(),
            json!({"perDay": 10, "timezone": "Mars/Olympus"}),
        ),
        "AgentPolicy",
    );
    assert!(
        m.contains("spec.budget.timezone") && m.contains("Mars/Olympus"),
        "{m}"
    );
    let m = message(policy(good, json!({"perDay": -5})), "AgentPolicy");
    assert!(m.contains("spec.budget.perDay"), "{m}");
    let mut contract = mk_contract(json!({"type": "object"}));
    contract["spec"]["cost"] = json!(-1);
    let m = message(contract.clone(), "ToolContract");
    assert!(m.contains("spec.cost"), "{m}");
    contract["spec"]["cost"] = json!("args.amount +");
    let m = message(contract, "ToolContract");
    assert!(m.contains("spec.cost"), "{m}");
}
