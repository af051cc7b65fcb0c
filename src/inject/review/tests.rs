use super::*;

fn settings() -> SidecarSettings {
    SidecarSettings::default()
}

fn review_of(object: Value, operation: &str) -> Vec<u8> {
    json!({
        "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
        "request": {
            "uid": "705ab4f5-6393-11e8-b7cc-42010a800002",
            "kind": {"group": "", "version": "v1", "kind": "Pod"},
            "resource": {"group": "", "version": "v1", "resource": "pods"},
            "namespace": "shop", "operation": operation,
            "userInfo": {"username": "system:serviceaccount:kube-system:replicaset-controller"},
            "object": object, "oldObject": null, "dryRun": false
        }
    })
    .to_string()
    .into_bytes()
}

fn pod(annotations: Value) -> Value {
    json!({"apiVersion": "v1", "kind": "Pod",
           "metadata": {"generateName": "orders-", "namespace": "shop", "annotations": annotations},
           "spec": {"containers": [{"name": "app", "image": "orders:1", "ports": [{"containerPort": 8080}]}]}})
}

#[test]
fn malformed_bodies_get_400_with_a_message() {
    for body in [
        &b"not json"[..],
        br#"{"apiVersion": "admission.k8s.io/v1beta1", "kind": "AdmissionReview", "request": {}}"#,
        br#"{"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview"}"#,
        br#"{"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {"kind": 3}}"#,
        b"",
    ] {
        let answer = review(body, &settings());
        assert_eq!(answer.status, StatusCode::BAD_REQUEST);
        assert_eq!(answer.outcome, "malformed");
        assert!(answer.body["message"].as_str().unwrap().contains("AdmissionReview"));
    }
}

#[test]
fn an_injected_pod_gets_a_json_patch_and_the_uid_back() {
    let answer = review(
        &review_of(pod(json!({"toolgate.dev/inject": "true"})), "CREATE"),
        &settings(),
    );
    assert_eq!(answer.status, StatusCode::OK);
    assert_eq!(answer.outcome, "injected");
    let response = &answer.body["response"];
    assert_eq!(answer.body["apiVersion"], "admission.k8s.io/v1");
    assert_eq!(response["uid"], "705ab4f5-6393-11e8-b7cc-42010a800002");
    assert_eq!(response["allowed"], true);
    assert_eq!(response["patchType"], "JSONPatch");
    let patch = BASE64.decode(response["patch"].as_str().unwrap()).unwrap();
    let patch: Value = serde_json::from_slice(&patch).unwrap();
    assert_eq!(patch[0]["path"], "/spec/initContainers");
}

#[test]
fn a_refused_pod_is_denied_with_the_reason() {
    let answer = review(
        &review_of(
            pod(json!({"toolgate.dev/inject": "true", "toolgate.dev/upstream-port": "http"})),
            "CREATE",
        ),
        &settings(),
    );
    assert_eq!(answer.outcome, "denied");
    assert_eq!(answer.body["response"]["allowed"], false);
    let message = answer.body["response"]["status"]["message"]
        .as_str()
        .unwrap();
    assert!(message.contains("toolgate.dev/upstream-port"), "{message}");
}

#[test]
fn odd_but_valid_reviews_are_allowed_unchanged() {
    let cases = [
        (
            review_of(pod(json!({"toolgate.dev/inject": "yes"})), "CREATE"),
            "skipped",
            true,
        ),
        (
            review_of(pod(json!({"toolgate.dev/inject": "true"})), "UPDATE"),
            "ignored",
            false,
        ),
        (
            String::from_utf8(review_of(pod(json!({})), "CREATE"))
                .unwrap()
                .replace(r#""kind":"Pod""#, r#""kind":"Deployment""#)
                .into_bytes(),
            "unreadable",
            true,
        ),
        (
            review_of(json!({"spec": {"containers": "many"}}), "CREATE"),
            "unreadable",
            true,
        ),
    ];
    for (body, outcome, warned) in cases {
        let answer = review(&body, &settings());
        assert_eq!(answer.status, StatusCode::OK);
        assert_eq!(answer.outcome, outcome);
        let response = &answer.body["response"];
        assert_eq!(response["allowed"], true);
        assert!(response.get("patch").is_none());
        assert_eq!(response.get("warnings").is_some(), warned, "{outcome}");
    }
}
