use super::*;
use crate::inject::settings::{InjectSettings, SidecarSettings};
use crate::inject::sidecar::{self, PodFacts};
use std::collections::BTreeMap;

fn mk_facts() -> PodFacts {
    PodFacts {
        upstream_port: 8080,
        service_name: None,
    }
}

fn settings(yaml: &str) -> SidecarSettings {
    InjectSettings::parse("t", yaml, Vec::new())
        .unwrap_or_else(|e| panic!("{e}"))
        .sidecar
}

fn refusal(yaml: &str) -> String {
    InjectSettings::parse("t", yaml, Vec::new())
        .unwrap_err()
        .to_string()
}

/// Every file the variables above name, and every one of their issuers' `jwks`.
const EVERYTHING: &str = r#"
sidecar:
  identity:
    tokensSecret: agent-tokens
    jwt:
      - {issuer: "https://login.example.com", audience: toolgate, jwksConfigMap: idp-jwks}
      - {issuer: "https://partner.example.com", audience: toolgate, jwks: "https://partner.example.com/jwks.json", agentPrefix: "partner:"}
    taskIssuers:
      - {issuer: orchestrator, jwksConfigMap: orchestrator-jwks}
  approvers:
    tokensSecret: approver-tokens
    jwt:
      - {issuer: "https://login.example.com", audience: toolgate-approvals, jwksConfigMap: idp-jwks}
  auditVolume: {emptyDir: {sizeLimit: 1Gi}}
"#;

fn plain_env(settings: &SidecarSettings) -> BTreeMap<String, String> {
    sidecar::container(settings, &mk_facts())
        .env
        .into_iter()
        .flatten()
        .filter_map(|e| Some((e.name, e.value?)))
        .collect()
}

#[test]
fn nothing_named_mounts_nothing_and_sets_nothing() {
    let defaults = SidecarSettings::default();
    let files = defaults.files();
    assert!(files.mounts().is_empty());
    assert!(files.volumes().is_empty());
    assert!(files.variables().is_empty());
    let env = plain_env(&defaults);
    for name in [
        "TOOLGATE_IDENTITY_TOKENS",
        "TOOLGATE_IDENTITY_JWT",
        "TOOLGATE_AUDIT_PATH",
    ] {
        assert!(!env.contains_key(name), "{name}");
    }
}

#[test]
fn each_file_is_mounted_where_its_variable_points() {
    let settings = settings(EVERYTHING);
    let container = sidecar::container(&settings, &mk_facts());
    let mounts = container.volume_mounts.clone().unwrap();
    let mount_of = |volume: &str| {
        mounts
            .iter()
            .find(|m| m.name == volume)
            .unwrap_or_else(|| panic!("{volume} is not mounted"))
    };
    for (volume, dir, read_only) in [
        (AGENT_TOKENS_VOLUME, "/etc/toolgate/agent-tokens", true),
        (
            APPROVER_TOKENS_VOLUME,
            "/etc/toolgate/approver-tokens",
            true,
        ),
        (JWKS_VOLUME, JWKS_DIR, true),
        (AUDIT_VOLUME, AUDIT_DIR, false),
    ] {
        let mount = mount_of(volume);
        assert_eq!(mount.mount_path, dir);
        assert_eq!(mount.read_only, Some(read_only), "{volume}");
        assert!(volume.starts_with(crate::inject::borrow::RESERVED_PREFIX));
    }
    let env = plain_env(&settings);
    assert_eq!(env["TOOLGATE_IDENTITY_TOKENS"], AGENT_TOKENS_FILE);
    assert_eq!(
        env["TOOLGATE_APPROVALS_APPROVERS_TOKENS"],
        APPROVER_TOKENS_FILE
    );
    assert_eq!(
        env["TOOLGATE_AUDIT_PATH"],
        "/var/log/toolgate/$(POD_NAME).log"
    );

    // The issuers reach the sidecar as written, a ConfigMap become its mounted file.
    let jwt: Value = serde_json::from_str(&env["TOOLGATE_IDENTITY_JWT"]).unwrap();
    assert_eq!(
        jwt,
        serde_json::json!([
            {"issuer": "https://login.example.com", "audience": "toolgate", "jwks": "/etc/toolgate/jwks/idp-jwks/jwks.json"},
            {"issuer": "https://partner.example.com", "audience": "toolgate", "jwks": "https://partner.example.com/jwks.json", "agentPrefix": "partner:"},
        ])
    );
    let tasks: Value = serde_json::from_str(&env["TOOLGATE_IDENTITY_TASK_ISSUERS"]).unwrap();
    assert_eq!(
        tasks[0]["jwks"],
        "/etc/toolgate/jwks/orchestrator-jwks/jwks.json"
    );
    let approvers: Value = serde_json::from_str(&env["TOOLGATE_APPROVALS_APPROVERS_JWT"]).unwrap();
    assert_eq!(
        approvers[0]["jwks"],
        "/etc/toolgate/jwks/idp-jwks/jwks.json"
    );

    // The pod's name comes from the downward API, before the path that expands it.
    let names: Vec<String> = container.env.unwrap().into_iter().map(|e| e.name).collect();
    let at = |name: &str| names.iter().position(|n| n == name).unwrap();
    assert!(at(POD_NAME_ENV) < at("TOOLGATE_AUDIT_PATH"));

    // And the sidecar's own settings load from those variables.
    let sidecar = crate::config::Settings::parse("t", "", plain_env(&settings)).unwrap();
    assert_eq!(sidecar.identity.jwt.len(), 2);
    assert_eq!(sidecar.approvals.approvers.jwt.len(), 1);
}

#[test]
fn one_projected_volume_holds_each_config_map_once() {
    let settings = settings(EVERYTHING);
    let volumes = sidecar::volumes(&settings);
    let jwks = volumes.iter().find(|v| v.name == JWKS_VOLUME).unwrap();
    let sources = jwks.projected.as_ref().unwrap().sources.as_ref().unwrap();
    let projected: Vec<(String, String, String)> = sources
        .iter()
        .map(|s| {
            let cm = s.config_map.as_ref().unwrap();
            let item = &cm.items.as_ref().unwrap()[0];
            assert_ne!(cm.optional, Some(true));
            (cm.name.clone(), item.key.clone(), item.path.clone())
        })
        .collect();
    assert_eq!(
        projected,
        [
            (
                "idp-jwks".into(),
                "jwks.json".into(),
                "idp-jwks/jwks.json".into()
            ),
            (
                "orchestrator-jwks".into(),
                "jwks.json".into(),
                "orchestrator-jwks/jwks.json".into()
            ),
        ]
    );
    let secret = |volume: &str| {
        let v = volumes.iter().find(|v| v.name == volume).unwrap();
        let s = v.secret.as_ref().unwrap();
        (
            s.secret_name.clone().unwrap(),
            s.items.as_ref().unwrap()[0].key.clone(),
        )
    };
    assert_eq!(
        secret(AGENT_TOKENS_VOLUME),
        ("agent-tokens".into(), "tokens.yaml".into())
    );
    assert_eq!(
        secret(APPROVER_TOKENS_VOLUME),
        ("approver-tokens".into(), "tokens.yaml".into())
    );
    let audit = volumes.iter().find(|v| v.name == AUDIT_VOLUME).unwrap();
    assert!(audit.empty_dir.is_some() && audit.persistent_volume_claim.is_none());
}

#[test]
fn a_claim_holds_the_audit_log_writable() {
    let settings =
        settings("sidecar: {auditVolume: {persistentVolumeClaim: {claimName: audit-logs}}}");
    let volumes = sidecar::volumes(&settings);
    let audit = volumes.iter().find(|v| v.name == AUDIT_VOLUME).unwrap();
    let claim = audit.persistent_volume_claim.as_ref().unwrap();
    assert_eq!(claim.claim_name, "audit-logs");
    assert_eq!(
        settings.audit_volume.as_ref().unwrap().claim(),
        Some("audit-logs")
    );
}

#[test]
fn what_no_pod_could_use_stops_the_injector() {
    for (yaml, field, says) in [
        (
            "sidecar: {identity: {jwt: [{issuer: a, audience: b, jwks: /etc/keys/jwks.json}]}}",
            "sidecar.identity.jwt[0].jwks",
            "nothing mounts",
        ),
        (
            "sidecar: {identity: {taskIssuers: [{issuer: o, jwksConfigMap: k, discovery: true}]}}",
            "sidecar.identity.taskIssuers[0].jwksConfigMap",
            "one of",
        ),
        (
            "sidecar: {approvers: {jwt: [{issuer: a, audience: b, jwksConfigMap: Keys}]}}",
            "sidecar.approvers.jwt[0].jwksConfigMap",
            "not a ConfigMap name",
        ),
        (
            "sidecar: {identity: {tokensSecret: Agent_Tokens}}",
            "sidecar.identity.tokensSecret",
            "not a Secret name",
        ),
        (
            "sidecar: {auditVolume: {}}",
            "sidecar.auditVolume",
            "exactly one",
        ),
        (
            "sidecar: {auditVolume: {emptyDir: {}, persistentVolumeClaim: {claimName: a}}}",
            "sidecar.auditVolume",
            "exactly one",
        ),
        (
            "sidecar: {auditVolume: {persistentVolumeClaim: {claimName: a, readOnly: true}}}",
            "sidecar.auditVolume.persistentVolumeClaim.readOnly",
            "writes",
        ),
        (
            "sidecar: {auditVolume: {hostPath: {path: /var/log}}}",
            "sidecar.auditVolume",
            "hostPath",
        ),
        // The sidecar's own rules, checked at the injector's start: an issuer without an
        // audience, a second issuer that does not prefix its agents.
        (
            "sidecar: {identity: {jwt: [{issuer: a, jwksConfigMap: k}]}}",
            "sidecar",
            "audience",
        ),
        (
            "sidecar: {identity: {jwt: [{issuer: a, audience: t, jwksConfigMap: k}, {issuer: b, audience: t, jwksConfigMap: k}]}}",
            "identity.jwt[1].agentPrefix",
            "would refuse",
        ),
    ] {
        let text = refusal(yaml);
        assert!(
            text.contains(field) && text.contains(says),
            "{yaml}: {text}"
        );
    }
}

#[test]
fn the_variables_it_sets_are_reserved_then_only() {
    for (yaml, variable) in [
        ("identity: {tokensSecret: t}", "TOOLGATE_IDENTITY_TOKENS"),
        (
            "identity: {jwt: [{issuer: a, audience: b, jwksConfigMap: k}]}",
            "TOOLGATE_IDENTITY_JWT",
        ),
        (
            "identity: {taskIssuers: [{issuer: o, jwksConfigMap: k}]}",
            "TOOLGATE_IDENTITY_TASK_ISSUERS",
        ),
        (
            "approvers: {tokensSecret: t}",
            "TOOLGATE_APPROVALS_APPROVERS_TOKENS",
        ),
        (
            "approvers: {jwt: [{issuer: a, audience: b, jwksConfigMap: k}]}",
            "TOOLGATE_APPROVALS_APPROVERS_JWT",
        ),
        ("auditVolume: {emptyDir: {}}", "TOOLGATE_AUDIT_PATH"),
        ("auditVolume: {emptyDir: {}}", POD_NAME_ENV),
    ] {
        let value = if variable.ends_with("JWT") || variable.ends_with("ISSUERS") {
            "'[]'"
        } else {
            "x"
        };
        let text = refusal(&format!(
            "sidecar: {{{yaml}, env: {{{variable}: {value}}}}}"
        ));
        assert!(
            text.contains(&format!("sidecar.env.{variable}")) && text.contains("per pod"),
            "{yaml}: {text}"
        );
        let free = settings(&format!("sidecar: {{env: {{{variable}: {value}}}}}"));
        assert!(!free.reserves(variable), "{variable}");
    }
}
