use super::*;
use serde_json::json;

fn settings() -> SidecarSettings {
    SidecarSettings::default()
}

fn mk_pod(annotations: Value, spec: Value) -> Pod {
    serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "orders-1", "namespace": "shop", "labels": {"app": "orders"}, "annotations": annotations},
        "spec": spec,
    }))
    .unwrap()
}

fn app(ports: Value) -> Value {
    json!({"containers": [{"name": "app", "image": "orders:1", "ports": ports}]})
}

fn opted_in() -> Value {
    json!({"toolgate.dev/inject": "true"})
}

fn injected(pod: &Pod, settings: &SidecarSettings) -> (Patch, Value) {
    let Decision::Inject(patch) = patch(pod, settings) else {
        panic!("expected a patch, got {:?}", patch(pod, settings));
    };
    let mut doc = serde_json::to_value(pod).unwrap();
    json_patch::patch(&mut doc, &patch).unwrap();
    (patch, doc)
}

fn refusal(pod: &Pod) -> String {
    match patch(pod, &settings()) {
        Decision::Refuse(reason) => reason,
        other => panic!("expected a refusal, got {other:?}"),
    }
}

fn paths(patch: &Patch) -> Vec<String> {
    patch.iter().map(|op| op.path().to_string()).collect()
}

fn env_of(doc: &Value) -> serde_json::Map<String, Value> {
    doc["spec"]["initContainers"][0]["env"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            let value = e
                .get("value")
                .cloned()
                .unwrap_or_else(|| e["valueFrom"].clone());
            (e["name"].as_str().unwrap().to_string(), value)
        })
        .collect()
}

#[test]
fn only_true_injects() {
    let spec = app(json!([{"containerPort": 8080}]));
    for annotations in [
        json!(null),
        json!({}),
        json!({"toolgate.dev/inject": "false"}),
    ] {
        assert_eq!(
            patch(&mk_pod(annotations, spec.clone()), &settings()),
            Decision::Skip { warning: None }
        );
    }
    let Decision::Skip { warning: Some(w) } = patch(
        &mk_pod(json!({"toolgate.dev/inject": "True"}), spec),
        &settings(),
    ) else {
        panic!("a typo must warn");
    };
    assert!(w.contains("\"True\""), "{w}");
}

#[test]
fn absent_arrays_are_added_whole_and_present_ones_extended() {
    let bare = mk_pod(opted_in(), app(json!([{"containerPort": 8080}])));
    let (p, doc) = injected(&bare, &settings());
    assert_eq!(
        paths(&p),
        [
            "/spec/initContainers",
            "/spec/volumes",
            "/metadata/annotations/toolgate.dev~1injected"
        ]
    );
    assert_eq!(doc["spec"]["initContainers"][0]["name"], "toolgate");
    assert_eq!(
        doc["metadata"]["annotations"]["toolgate.dev/injected"],
        "toolgate:0.1.0"
    );

    let mut spec = app(json!([{"containerPort": 8080}]));
    spec["initContainers"] = json!([{"name": "migrate", "image": "orders:1"}]);
    spec["volumes"] = json!([{"name": "data", "emptyDir": {}}]);
    let (p, doc) = injected(&mk_pod(opted_in(), spec), &settings());
    assert_eq!(
        paths(&p),
        [
            "/spec/initContainers/0",
            "/spec/volumes/-",
            "/spec/volumes/-",
            "/metadata/annotations/toolgate.dev~1injected"
        ]
    );
    let init: Vec<_> = doc["spec"]["initContainers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["name"].clone())
        .collect();
    assert_eq!(init, ["toolgate", "migrate"], "the sidecar goes first");
    let volumes: Vec<_> = doc["spec"]["volumes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v["name"].clone())
        .collect();
    assert_eq!(volumes, ["data", "toolgate-podinfo", "toolgate-token"]);
}

#[test]
fn injecting_twice_changes_nothing() {
    let pod = mk_pod(opted_in(), app(json!([{"containerPort": 8080}])));
    let (_, doc) = injected(&pod, &settings());
    let again: Pod = serde_json::from_value(doc).unwrap();
    assert_eq!(patch(&again, &settings()), Decision::Skip { warning: None });
    // A hand-written toolgate container counts too, as a regular container.
    let mut spec = app(json!([{"containerPort": 8080}]));
    spec["containers"]
        .as_array_mut()
        .unwrap()
        .push(json!({"name": "toolgate", "image": "toolgate:0.0.9"}));
    assert_eq!(
        patch(&mk_pod(opted_in(), spec), &settings()),
        Decision::Skip { warning: None }
    );
}

#[test]
fn the_sidecar_is_native_restricted_and_probed_on_the_admin_port() {
    let (_, doc) = injected(
        &mk_pod(opted_in(), app(json!([{"containerPort": 8080}]))),
        &settings(),
    );
    let c = &doc["spec"]["initContainers"][0];
    assert_eq!(c["restartPolicy"], "Always");
    assert_eq!(c["args"], json!(["run"]));
    assert_eq!(
        c["securityContext"],
        json!({"allowPrivilegeEscalation": false, "capabilities": {"drop": ["ALL"]}, "privileged": false,
               "readOnlyRootFilesystem": true, "runAsGroup": 65532, "runAsNonRoot": true,
               "runAsUser": 65532, "seccompProfile": {"type": "RuntimeDefault"}})
    );
    assert_eq!(
        c["readinessProbe"]["httpGet"],
        json!({"path": "/readyz", "port": 15101})
    );
    assert_eq!(
        c["livenessProbe"]["httpGet"],
        json!({"path": "/healthz", "port": 15101})
    );
    let ports: Vec<_> = c["ports"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["containerPort"].clone())
        .collect();
    assert_eq!(ports, [15100, 15101]);
    assert_eq!(
        c["resources"],
        json!({"limits": {"memory": "128Mi"}, "requests": {"cpu": "20m", "memory": "32Mi"}})
    );
}

#[test]
fn cluster_policies_use_the_pods_namespace_token_and_labels() {
    let (_, doc) = injected(
        &mk_pod(opted_in(), app(json!([{"containerPort": 8080}]))),
        &settings(),
    );
    let env = env_of(&doc);
    assert_eq!(env["TOOLGATE_UPSTREAM"], "http://127.0.0.1:8080");
    assert_eq!(env["TOOLGATE_POLICIES_FILES"], "");
    assert_eq!(env["TOOLGATE_POLICIES_KUBERNETES_ENABLED"], "true");
    assert_eq!(
        env["TOOLGATE_POLICIES_KUBERNETES_NAMESPACE"],
        json!({"fieldRef": {"fieldPath": "metadata.namespace"}})
    );
    assert_eq!(
        env["TOOLGATE_POLICIES_KUBERNETES_POD_LABELS_FILE"],
        "/etc/podinfo/labels"
    );
    assert_eq!(env["TOOLGATE_TELEMETRY_SERVICE_NAME"], "orders");
    let mounts = &doc["spec"]["initContainers"][0]["volumeMounts"];
    assert_eq!(mounts[0]["mountPath"], "/etc/podinfo");
    assert_eq!(
        mounts[1]["mountPath"],
        "/var/run/secrets/kubernetes.io/serviceaccount"
    );
    let token = &doc["spec"]["volumes"][1]["projected"]["sources"][0]["serviceAccountToken"];
    assert_eq!(token["path"], "token");
}

#[test]
fn a_policies_config_map_replaces_the_cluster_source() {
    let settings = SidecarSettings {
        policies_config_map: Some("agent-policies".into()),
        // Without workload identity either (sidecar.rs tests it with a ConfigMap).
        workload_identity: no_workload_identity(),
        env: [(
            "TOOLGATE_TELEMETRY_OTLP_ENDPOINT".to_string(),
            "http://jaeger:4317".to_string(),
        )]
        .into(),
        ..settings()
    };
    let (_, doc) = injected(
        &mk_pod(opted_in(), app(json!([{"containerPort": 8080}]))),
        &settings,
    );
    let env = env_of(&doc);
    assert_eq!(env["TOOLGATE_POLICIES_FILES"], "/etc/toolgate/policies");
    assert_eq!(env["TOOLGATE_POLICIES_KUBERNETES_ENABLED"], "false");
    assert!(!env.contains_key("TOOLGATE_POLICIES_KUBERNETES_NAMESPACE"));
    assert_eq!(
        env["TOOLGATE_TELEMETRY_OTLP_ENDPOINT"],
        "http://jaeger:4317"
    );
    assert_eq!(
        doc["spec"]["volumes"],
        json!([{"name": "toolgate-policies", "configMap": {"name": "agent-policies"}}]),
        "no API token without the cluster source or workload identity"
    );
}

fn no_workload_identity() -> crate::inject::settings::WorkloadIdentity {
    crate::inject::settings::WorkloadIdentity {
        enabled: false,
        ..Default::default()
    }
}

#[test]
fn an_audit_key_secret_is_mounted_into_the_sidecar_alone() {
    for policies_config_map in [None, Some("agent-policies".to_string())] {
        let settings = SidecarSettings {
            audit_key_secret: Some("toolgate-audit-key".into()),
            policies_config_map: policies_config_map.clone(),
            workload_identity: no_workload_identity(),
            ..settings()
        };
        let (_, doc) = injected(
            &mk_pod(opted_in(), app(json!([{"containerPort": 8080}]))),
            &settings,
        );
        let what = format!("policiesConfigMap {policies_config_map:?}");
        assert_eq!(
            env_of(&doc)["TOOLGATE_AUDIT_KEY_FILE"],
            "/etc/toolgate/audit-key/key",
            "{what}"
        );
        let mounts = doc["spec"]["initContainers"][0]["volumeMounts"]
            .as_array()
            .unwrap();
        assert!(
            mounts.contains(&json!({"name": "toolgate-audit-key", "mountPath": "/etc/toolgate/audit-key", "readOnly": true})),
            "{what}: {mounts:?}"
        );
        let volumes = doc["spec"]["volumes"].as_array().unwrap();
        assert_eq!(
            volumes.last().unwrap(),
            &json!({"name": "toolgate-audit-key", "secret": {
                "secretName": "toolgate-audit-key", "items": [{"key": "key", "path": "key"}]}}),
            "{what}"
        );
        // The policy source is unchanged by the key.
        assert_eq!(
            volumes.len(),
            if policies_config_map.is_some() { 2 } else { 3 },
            "{what}"
        );
        assert!(
            doc["spec"]["containers"][0].get("volumeMounts").is_none(),
            "{what}: the app never sees the key"
        );
    }
    assert_eq!(
        sidecar::AUDIT_KEY_FILE,
        format!("/etc/toolgate/audit-key/{}", sidecar::AUDIT_KEY_ITEM)
    );
}

#[test]
fn without_an_audit_key_secret_nothing_names_a_key() {
    let (_, doc) = injected(
        &mk_pod(opted_in(), app(json!([{"containerPort": 8080}]))),
        &settings(),
    );
    assert!(!env_of(&doc).contains_key("TOOLGATE_AUDIT_KEY_FILE"));
    assert!(!doc["spec"]["volumes"].to_string().contains("audit-key"));
}

#[test]
fn a_taken_audit_key_volume_name_is_refused() {
    let settings = SidecarSettings {
        audit_key_secret: Some("toolgate-audit-key".into()),
        ..settings()
    };
    let mut spec = app(json!([{"containerPort": 8080}]));
    spec["volumes"] = json!([{"name": "toolgate-audit-key", "emptyDir": {}}]);
    let pod = mk_pod(opted_in(), spec);
    match patch(&pod, &settings) {
        Decision::Refuse(reason) => assert!(reason.contains("toolgate-audit-key"), "{reason}"),
        other => panic!("expected a refusal, got {other:?}"),
    }
    // Without the setting too: every `toolgate-` name is the sidecar's, whatever the
    // settings of the day bring (a later setting must not lend it to the app).
    assert!(matches!(
        patch(&pod, &self::settings()),
        Decision::Refuse(_)
    ));
}

#[test]
fn a_redis_password_secret_is_mounted_into_the_sidecar_alone() {
    let settings = SidecarSettings {
        redis_password_secret: Some("toolgate-redis".into()),
        audit_key_secret: Some("toolgate-audit-key".into()),
        ..settings()
    };
    let (_, doc) = injected(
        &mk_pod(opted_in(), app(json!([{"containerPort": 8080}]))),
        &settings,
    );
    let env = env_of(&doc);
    assert_eq!(
        env["TOOLGATE_STATE_REDIS_PASSWORD_FILE"],
        "/etc/toolgate/redis-password/password"
    );
    assert_eq!(
        env["TOOLGATE_AUDIT_KEY_FILE"],
        "/etc/toolgate/audit-key/key"
    );
    let mounts = doc["spec"]["initContainers"][0]["volumeMounts"]
        .as_array()
        .unwrap();
    assert!(
        mounts.contains(&json!({"name": "toolgate-redis-password", "mountPath": "/etc/toolgate/redis-password", "readOnly": true})),
        "{mounts:?}"
    );
    let volumes = doc["spec"]["volumes"].as_array().unwrap();
    assert_eq!(
        volumes.last().unwrap(),
        &json!({"name": "toolgate-redis-password", "secret": {
            "secretName": "toolgate-redis", "items": [{"key": "password", "path": "password"}]}})
    );
    // Beside the cluster source's two volumes and the audit key's, not instead of them.
    assert_eq!(volumes.len(), 4);
    assert!(
        doc["spec"]["containers"][0].get("volumeMounts").is_none(),
        "the app never sees the password"
    );
    assert_eq!(
        sidecar::REDIS_PASSWORD_FILE,
        format!(
            "/etc/toolgate/redis-password/{}",
            sidecar::REDIS_PASSWORD_ITEM
        )
    );

    let (_, doc) = injected(
        &mk_pod(opted_in(), app(json!([{"containerPort": 8080}]))),
        &self::settings(),
    );
    assert!(!env_of(&doc).contains_key("TOOLGATE_STATE_REDIS_PASSWORD_FILE"));
    assert!(!doc["spec"]["volumes"].to_string().contains("redis"));
}

#[test]
fn a_taken_redis_password_volume_name_is_refused() {
    let settings = SidecarSettings {
        redis_password_secret: Some("toolgate-redis".into()),
        ..settings()
    };
    let mut spec = app(json!([{"containerPort": 8080}]));
    spec["volumes"] = json!([{"name": "toolgate-redis-password", "emptyDir": {}}]);
    match patch(&mk_pod(opted_in(), spec), &settings) {
        Decision::Refuse(reason) => assert!(reason.contains("toolgate-redis-password"), "{reason}"),
        other => panic!("expected a refusal, got {other:?}"),
    }
}

#[test]
fn the_upstream_port_comes_from_the_annotation_or_the_first_tcp_port() {
    let upstream = |annotations: Value, ports: Value| {
        let (_, doc) = injected(&mk_pod(annotations, app(ports)), &settings());
        env_of(&doc)["TOOLGATE_UPSTREAM"].clone()
    };
    let annotated = json!({"toolgate.dev/inject": "true", "toolgate.dev/upstream-port": "9090"});
    assert_eq!(
        upstream(annotated, json!([{"containerPort": 8080}])),
        "http://127.0.0.1:9090"
    );
    let ports = json!([{"containerPort": 53, "protocol": "UDP"}, {"containerPort": 8081, "protocol": "TCP"}]);
    assert_eq!(upstream(opted_in(), ports), "http://127.0.0.1:8081");
}

#[test]
fn pods_that_cannot_get_a_working_sidecar_are_refused_with_the_fix() {
    let no_port = refusal(&mk_pod(opted_in(), app(json!(null))));
    assert!(no_port.contains("toolgate.dev/upstream-port"), "{no_port}");
    for bad in ["http", "0", "70000", "-1"] {
        let annotations = json!({"toolgate.dev/inject": "true", "toolgate.dev/upstream-port": bad});
        let reason = refusal(&mk_pod(annotations, app(json!([{"containerPort": 8080}]))));
        assert!(reason.contains("not a port number"), "{bad}: {reason}");
    }
    let annotations = json!({"toolgate.dev/inject": "true", "toolgate.dev/upstream-port": "15100"});
    assert!(refusal(&mk_pod(annotations, app(json!([{"containerPort": 8080}])))).contains("15100"));
    let taken = refusal(&mk_pod(
        opted_in(),
        app(json!([{"containerPort": 8080}, {"containerPort": 15101}])),
    ));
    assert!(taken.contains("15101"), "{taken}");
    let named = refusal(&mk_pod(
        opted_in(),
        app(json!([{"containerPort": 8080, "name": "toolgate"}])),
    ));
    assert!(named.contains("\"toolgate\""), "{named}");
    let mut spec = app(json!([{"containerPort": 8080}]));
    spec["volumes"] = json!([{"name": "toolgate-token", "emptyDir": {}}]);
    assert!(refusal(&mk_pod(opted_in(), spec)).contains("toolgate-token"));
}

fn borrowing() -> SidecarSettings {
    SidecarSettings {
        audit_key_secret: Some("audit-key".into()),
        redis_password_secret: Some("redis".into()),
        ..settings()
    }
}

fn refused_with(spec: Value, settings: &SidecarSettings) -> String {
    match patch(&mk_pod(opted_in(), spec), settings) {
        Decision::Refuse(reason) => reason,
        other => panic!("expected a refusal, got {other:?}"),
    }
}

#[test]
fn every_volume_the_sidecar_brings_is_in_the_reserved_names() {
    for settings in [
        settings(),
        borrowing(),
        SidecarSettings {
            policies_config_map: Some("p".into()),
            ..borrowing()
        },
    ] {
        for volume in sidecar::volumes(&settings) {
            assert!(
                volume.name.starts_with(borrow::RESERVED_PREFIX),
                "{}",
                volume.name
            );
        }
    }
}

#[test]
fn containers_that_mount_the_sidecars_volumes_are_refused() {
    let mount = |name: &str| json!([{"name": name, "mountPath": "/stolen"}]);
    for (at, name) in [
        ("containers", "toolgate-audit-key"),
        ("containers", "toolgate-redis-password"),
        ("initContainers", "toolgate-token"),
        ("ephemeralContainers", "toolgate-policies"),
        ("containers", "Toolgate-Audit-Key"),
        ("containers", "toolgate-identity-of-the-future"),
    ] {
        let mut spec = app(json!([{"containerPort": 8080}]));
        let thief = json!({"name": "thief", "image": "x", "volumeMounts": mount(name)});
        match at {
            "containers" => spec["containers"].as_array_mut().unwrap().push(thief),
            other => spec[other] = json!([thief]),
        }
        let reason = refused_with(spec, &borrowing());
        assert!(
            reason.contains("\"thief\"") && reason.contains(name) && reason.contains("toolgate-"),
            "{at} {name}: {reason}"
        );
    }
    let mut spec = app(json!([{"containerPort": 8080}]));
    spec["containers"][0]["volumeDevices"] =
        json!([{"name": "toolgate-token", "devicePath": "/dev/x"}]);
    assert!(refused_with(spec, &settings()).contains("toolgate-token"));
}

#[test]
fn pods_that_reach_the_sidecars_secrets_by_name_are_refused() {
    let with = |volumes: Value, env: Value| {
        let mut spec = app(json!([{"containerPort": 8080}]));
        spec["volumes"] = volumes;
        spec["containers"][0]["env"] = env;
        spec
    };
    let cases = [
        with(
            json!([{"name": "keys", "secret": {"secretName": "audit-key"}}]),
            json!(null),
        ),
        with(
            json!([{"name": "keys", "projected": {"sources": [{"secret": {"name": "redis"}}]}}]),
            json!(null),
        ),
        with(
            json!(null),
            json!([{"name": "K", "valueFrom": {"secretKeyRef": {"name": "audit-key", "key": "key"}}}]),
        ),
    ];
    for spec in cases {
        let reason = refused_with(spec.clone(), &borrowing());
        assert!(reason.contains("only the sidecar may read it"), "{reason}");
        // Secrets the sidecar doesn't use are the app's business.
        assert!(matches!(
            patch(&mk_pod(opted_in(), spec), &settings()),
            Decision::Inject(_)
        ));
    }
    let mut spec = app(json!([{"containerPort": 8080}]));
    spec["containers"][0]["envFrom"] = json!([{"secretRef": {"name": "redis"}}]);
    assert!(refused_with(spec, &borrowing()).contains("Redis password"));
}

#[test]
fn debug_containers_may_not_mount_what_the_sidecar_brought() {
    let settings = borrowing();
    let (_, mut injected) = injected(
        &mk_pod(opted_in(), app(json!([{"containerPort": 8080}]))),
        &settings,
    );
    let debug_pod = |doc: &Value| serde_json::from_value::<Pod>(doc.clone()).unwrap();
    injected["spec"]["ephemeralContainers"] =
        json!([{"name": "debugger", "image": "busybox", "stdin": true}]);
    assert_eq!(
        debug(&debug_pod(&injected), &settings),
        Decision::Skip { warning: None }
    );
    injected["spec"]["ephemeralContainers"][0]["volumeMounts"] =
        json!([{"name": "toolgate-audit-key", "mountPath": "/k"}]);
    let Decision::Refuse(reason) = debug(&debug_pod(&injected), &settings) else {
        panic!("a debug container took the audit key");
    };
    assert!(reason.contains("\"debugger\""), "{reason}");
}
