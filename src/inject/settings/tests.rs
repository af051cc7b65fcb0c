use super::*;

fn vars(list: &[(&str, &str)]) -> Vec<(String, String)> {
    list.iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

#[test]
fn the_design_example_parses_and_matches_the_defaults() {
    let text = r#"
listen: 0.0.0.0:15443
tls: {cert: /etc/toolgate/webhook/tls.crt, key: /etc/toolgate/webhook/tls.key}
sidecar:
  image: toolgate:0.1.0
  resources: {requests: {cpu: 20m, memory: 32Mi}, limits: {memory: 128Mi}}
  policiesConfigMap: null
"#;
    let parsed = InjectSettings::parse("t", text, vars(&[])).unwrap();
    assert_eq!(parsed, InjectSettings::default());
    assert_eq!(parsed.listen.port(), 15443);
}

#[test]
fn unknown_keys_are_rejected_with_their_path() {
    let err = InjectSettings::parse("t.yaml", "sidecar: {imag: x}", vars(&[])).unwrap_err();
    let text = err.to_string();
    assert!(text.contains("sidecar") && text.contains("imag"), "{text}");
    let err = InjectSettings::parse("t.yaml", "tls: {cert: a, key: b, clientCa: c}", vars(&[]))
        .unwrap_err();
    assert!(err.to_string().contains("clientCa"), "{err}");
}

#[test]
fn variables_override_the_file() {
    let s = InjectSettings::parse(
        "t",
        "sidecar: {image: a:1}",
        vars(&[
            ("TOOLGATE_INJECT_SIDECAR_IMAGE", "b:2"),
            ("TOOLGATE_INJECT_LISTEN", "127.0.0.1:9443"),
            (
                "TOOLGATE_INJECT_SIDECAR_POLICIES_CONFIG_MAP",
                "agent-policies",
            ),
            (
                "TOOLGATE_INJECT_SIDECAR_AUDIT_KEY_SECRET",
                "toolgate-audit-key",
            ),
            (
                "TOOLGATE_INJECT_SIDECAR_REDIS_PASSWORD_SECRET",
                "toolgate-redis",
            ),
            ("TOOLGATE_INJECT_SIDECAR_RESOURCES", "{requests: {cpu: 1}}"),
            ("TOOLGATE_UPSTREAM", "not ours"),
        ]),
    )
    .unwrap();
    assert_eq!(s.sidecar.image, "b:2");
    assert_eq!(s.listen.port(), 9443);
    assert_eq!(
        s.sidecar.policies_config_map.as_deref(),
        Some("agent-policies")
    );
    assert_eq!(
        s.sidecar.audit_key_secret.as_deref(),
        Some("toolgate-audit-key")
    );
    assert_eq!(
        s.sidecar.redis_password_secret.as_deref(),
        Some("toolgate-redis")
    );
    assert_eq!(s.sidecar.resources.requests["cpu"], "1");
    assert!(s.sidecar.resources.limits.is_empty());
}

#[test]
fn values_every_pod_would_carry_are_checked_at_start() {
    for (text, field) in [
        ("sidecar: {resources: {limits: {memory: 128MB}}}", "memory"),
        (
            "sidecar: {policiesConfigMap: Agent_Policies}",
            "policiesConfigMap",
        ),
        ("sidecar: {auditKeySecret: Audit_Key}", "auditKeySecret"),
        ("sidecar: {auditKeySecret: ''}", "auditKeySecret"),
        (
            "sidecar: {redisPasswordSecret: Redis_Password}",
            "redisPasswordSecret",
        ),
        ("sidecar: {redisPasswordSecret: ''}", "redisPasswordSecret"),
        ("sidecar: {image: ''}", "image"),
        (
            "sidecar: {env: {TOOLGATE_UPSTREAM: x}}",
            "TOOLGATE_UPSTREAM",
        ),
        ("sidecar: {env: {'1A': x}}", "1A"),
    ] {
        let err = InjectSettings::parse("t", text, vars(&[])).unwrap_err();
        assert!(err.to_string().contains(field), "{text}: {err}");
    }
}

/// The injector sets `TOOLGATE_AUDIT_KEY_FILE` only when it mounts the key, so only
/// then may `sidecar.env` not set it.
#[test]
fn the_audit_key_variable_is_reserved_with_an_audit_key_secret() {
    let env = "env: {TOOLGATE_AUDIT_KEY_FILE: /keys/audit}";
    let err = InjectSettings::parse(
        "t",
        &format!("sidecar: {{auditKeySecret: toolgate-audit-key, {env}}}"),
        vars(&[]),
    )
    .unwrap_err();
    let text = err.to_string();
    assert!(
        text.contains("sidecar.env.TOOLGATE_AUDIT_KEY_FILE") && text.contains("per pod"),
        "{text}"
    );
    let without = InjectSettings::parse("t", &format!("sidecar: {{{env}}}"), vars(&[])).unwrap();
    assert_eq!(
        without.sidecar.env["TOOLGATE_AUDIT_KEY_FILE"], "/keys/audit",
        "without a Secret the variable is the user's"
    );
}

/// Likewise `TOOLGATE_STATE_REDIS_PASSWORD_FILE`, only when the injector mounts the
/// password.
#[test]
fn the_redis_password_variable_is_reserved_with_a_redis_password_secret() {
    let env = "env: {TOOLGATE_STATE_REDIS_PASSWORD_FILE: /secrets/redis}";
    let err = InjectSettings::parse(
        "t",
        &format!("sidecar: {{redisPasswordSecret: toolgate-redis, {env}}}"),
        vars(&[]),
    )
    .unwrap_err();
    let text = err.to_string();
    assert!(
        text.contains("sidecar.env.TOOLGATE_STATE_REDIS_PASSWORD_FILE") && text.contains("per pod"),
        "{text}"
    );
    let without = InjectSettings::parse("t", &format!("sidecar: {{{env}}}"), vars(&[])).unwrap();
    assert_eq!(
        without.sidecar.env["TOOLGATE_STATE_REDIS_PASSWORD_FILE"], "/secrets/redis",
        "without a Secret the variable is the user's"
    );
}

#[test]
fn quantities_follow_kubernetes() {
    for good in ["20m", "1", "0.5", "64Mi", "1Gi", "1e3", "100k", "+1", ".5"] {
        assert!(is_quantity(good), "{good}");
    }
    for bad in ["", "m", "1MB", "1.2.3", "lots", "1e", "Mi", "."] {
        assert!(!is_quantity(bad), "{bad}");
    }
}

/// Every leaf of a fully populated settings tree has a `TOOLGATE_INJECT_*` variable (maps
/// are set whole, as YAML).
#[test]
fn every_key_has_a_variable() {
    let mut settings = InjectSettings::default();
    settings.sidecar.policies_config_map = Some("p".into());
    settings.sidecar.audit_key_secret = Some("k".into());
    settings.sidecar.redis_password_secret = Some("r".into());
    settings.sidecar.env.insert("A".into(), "b".into());
    let tree = serde_json::to_value(&settings).unwrap();
    for leaf in crate::config::file::leaves(&tree) {
        let covered = KEYS.iter().any(|(key, kind)| {
            leaf == *key || (matches!(kind, Kind::Yaml) && leaf.starts_with(&format!("{key}.")))
        });
        assert!(covered, "setting {leaf} has no TOOLGATE_INJECT_* variable");
    }
}

#[test]
fn workload_identity_is_on_by_default_and_checked() {
    let settings = InjectSettings::parse("t", "", vars(&[])).unwrap();
    assert!(settings.sidecar.workload_identity.enabled);
    assert_eq!(settings.sidecar.workload_identity.audiences, ["toolgate"]);
    let off = InjectSettings::parse(
        "t",
        "",
        vars(&[
            ("TOOLGATE_INJECT_SIDECAR_WORKLOAD_IDENTITY_ENABLED", "false"),
            (
                "TOOLGATE_INJECT_SIDECAR_WORKLOAD_IDENTITY_AUDIENCES",
                "a, b",
            ),
        ]),
    )
    .unwrap();
    assert!(!off.sidecar.workload_identity.enabled);
    assert_eq!(off.sidecar.workload_identity.audiences, ["a", "b"]);
    for text in [
        "sidecar: {workloadIdentity: {audiences: []}}",
        "sidecar: {workloadIdentity: {audiences: ['a,b']}}",
        "sidecar: {workloadIdentity: {audiences: ['a b']}}",
    ] {
        let err = InjectSettings::parse("t", text, vars(&[]))
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("sidecar.workloadIdentity.audiences"),
            "{text}: {err}"
        );
    }
    // Off, the list is not read.
    assert!(InjectSettings::parse(
        "t",
        "sidecar: {workloadIdentity: {enabled: false, audiences: []}}",
        vars(&[])
    )
    .is_ok());
    // The injector sets the sidecar's variables itself while it is on.
    let env = "sidecar: {env: {TOOLGATE_IDENTITY_KUBERNETES_AUDIENCES: x}}";
    let err = InjectSettings::parse("t", env, vars(&[]))
        .unwrap_err()
        .to_string();
    assert!(err.contains("per pod"), "{err}");
    let env = "sidecar: {workloadIdentity: {enabled: false}, env: {TOOLGATE_IDENTITY_KUBERNETES_AUDIENCES: x}}";
    assert!(InjectSettings::parse("t", env, vars(&[])).is_ok());
}
