//! The files an injected sidecar reads besides its policies — agent token digests, the
//! keys of JWT, task and approver issuers, approver token digests — and the audit log it
//! writes: which Secret, ConfigMap or volume each comes from, where the injector mounts
//! it, and the `TOOLGATE_*` variable that points the sidecar there.
//!
//! Invariants:
//! - every path a variable set here names lies in a volume mounted here, so no setting
//!   the injector writes points at a file nothing mounts; an issuer names its keys by
//!   `https://` URL, by `discovery: true`, or by a ConfigMap ([`Issuer::jwks_config_map`]),
//!   never by a file path (the injected container's filesystem holds no such file);
//! - Secrets and ConfigMaps are mounted read-only, with only the item the sidecar reads,
//!   and not optional: a missing one keeps the pod from starting, with the reason in its
//!   events, rather than starting a sidecar that refuses every call;
//! - the audit volume is the sidecar's one writable mount, and each pod writes its own
//!   file in it (named after the pod), so replicas sharing a claim never share a chain;
//! - every volume is named `toolgate-…` ([`super::borrow`] keeps the app's containers off
//!   them), and the token Secrets are the sidecar's alone ([`super::borrow`] again).

use k8s_openapi::api::core::v1::{
    ConfigMapProjection, EmptyDirVolumeSource, EnvVar, EnvVarSource, KeyToPath,
    ObjectFieldSelector, PersistentVolumeClaimVolumeSource, ProjectedVolumeSource, Volume,
    VolumeMount, VolumeProjection,
};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use std::collections::BTreeSet;

use super::settings::is_dns_subdomain;

/// The Secret of agent token digests (`sidecar.identity.tokensSecret`), as `identity.tokens`.
pub const AGENT_TOKENS_VOLUME: &str = "toolgate-agent-tokens";
pub const AGENT_TOKENS_FILE: &str = "/etc/toolgate/agent-tokens/tokens.yaml";
/// The Secret of approver token digests (`sidecar.approvers.tokensSecret`), as
/// `approvals.approvers.tokens`.
pub const APPROVER_TOKENS_VOLUME: &str = "toolgate-approver-tokens";
pub const APPROVER_TOKENS_FILE: &str = "/etc/toolgate/approver-tokens/tokens.yaml";
/// The item both token Secrets hold their YAML map in, fixed so that `kubectl create
/// secret generic NAME --from-file=tokens.yaml` is the whole setup.
pub const TOKENS_ITEM: &str = "tokens.yaml";
/// Every issuer ConfigMap, projected into one volume: `<JWKS_DIR>/<ConfigMap>/jwks.json`.
pub const JWKS_VOLUME: &str = "toolgate-jwks";
pub const JWKS_DIR: &str = "/etc/toolgate/jwks";
/// The item an issuer's ConfigMap holds its JWKS in.
pub const JWKS_ITEM: &str = "jwks.json";
/// The audit log's volume (`sidecar.auditVolume`), mounted writable.
pub const AUDIT_VOLUME: &str = "toolgate-audit";
pub const AUDIT_DIR: &str = "/var/log/toolgate";
/// The pod's name, for the audit file's name (Kubernetes expands `$(POD_NAME)` in later
/// variables of the same container).
pub const POD_NAME_ENV: &str = "POD_NAME";
/// `audit.path` on the audit volume: one file per pod.
pub const AUDIT_PATH: &str = "/var/log/toolgate/$(POD_NAME).log";

const TOKENS_ENV: &str = "TOOLGATE_IDENTITY_TOKENS";
const JWT_ENV: &str = "TOOLGATE_IDENTITY_JWT";
const TASK_ISSUERS_ENV: &str = "TOOLGATE_IDENTITY_TASK_ISSUERS";
const APPROVER_TOKENS_ENV: &str = "TOOLGATE_APPROVALS_APPROVERS_TOKENS";
const APPROVER_JWT_ENV: &str = "TOOLGATE_APPROVALS_APPROVERS_JWT";
const AUDIT_PATH_ENV: &str = "TOOLGATE_AUDIT_PATH";

/// `sidecar.identity`: how agents prove who they are, besides workload identity.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct IdentityFiles {
    /// A Secret whose item `tokens.yaml` maps agent ids to their tokens' SHA-256.
    pub tokens_secret: Option<String>,
    /// The sidecar's `identity.jwt` issuers.
    pub jwt: Vec<Issuer>,
    /// The sidecar's `identity.taskIssuers`.
    pub task_issuers: Vec<Issuer>,
}

/// `sidecar.approvers`: who may decide held calls (`approvals.approvers`).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct ApproverFiles {
    /// A Secret whose item `tokens.yaml` maps approvers to their token's SHA-256 and groups.
    pub tokens_secret: Option<String>,
    pub jwt: Vec<Issuer>,
}

/// One issuer: the sidecar's own setting for its kind (`identity.jwt[]`,
/// `identity.taskIssuers[]`, `approvals.approvers.jwt[]`), whose keys may also come from a
/// ConfigMap. The other keys pass to the sidecar as written; the injector checks them at
/// start with the sidecar's own rules.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Issuer {
    /// A ConfigMap whose item `jwks.json` is the issuer's key set, instead of `jwks` or
    /// `discovery`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub jwks_config_map: Option<String>,
    #[serde(flatten)]
    pub setting: Map<String, Value>,
}

/// `sidecar.auditVolume`: where the audit log is written instead of stdout.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct AuditVolume {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub empty_dir: Option<EmptyDirVolumeSource>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub persistent_volume_claim: Option<PersistentVolumeClaimVolumeSource>,
}

/// Where the sidecar reads the JWKS of the ConfigMap `name`.
pub fn jwks_file(name: &str) -> String {
    format!("{JWKS_DIR}/{name}/{JWKS_ITEM}")
}

impl Issuer {
    /// The sidecar's setting: as written, with `jwksConfigMap` become the file it is
    /// mounted as.
    pub fn setting(&self) -> Value {
        let mut setting = self.setting.clone();
        if let Some(name) = &self.jwks_config_map {
            setting.insert("jwks".into(), Value::String(jwks_file(name)));
        }
        Value::Object(setting)
    }

    /// `Err((field, message))` when the injector can't give the sidecar this issuer's keys.
    fn check(&self, field: &str) -> Result<(), (String, String)> {
        let jwks = self.setting.get("jwks");
        if let Some(path) = jwks
            .and_then(Value::as_str)
            .filter(|text| !text.contains("://"))
        {
            return Err((
                format!("{field}.jwks"),
                format!(
                    "{path:?} is a file path, and nothing mounts such a file into the sidecar: put the JWKS in a ConfigMap (item {JWKS_ITEM}) and name it in jwksConfigMap, or give an https:// URL"
                ),
            ));
        }
        let Some(name) = &self.jwks_config_map else {
            return Ok(());
        };
        let discovery = self.setting.get("discovery") == Some(&Value::Bool(true));
        if jwks.is_some() || discovery {
            return Err((
                format!("{field}.jwksConfigMap"),
                "set one of jwks (a URL), jwksConfigMap or discovery: true".into(),
            ));
        }
        if !is_dns_subdomain(name) {
            return Err((
                format!("{field}.jwksConfigMap"),
                format!("{name:?} is not a ConfigMap name (lowercase letters, digits, '-', '.')"),
            ));
        }
        Ok(())
    }
}

/// The list variable of `issuers`, unset when there are none.
fn issuers_env(name: &'static str, issuers: &[Issuer]) -> Option<(&'static str, String)> {
    (!issuers.is_empty()).then(|| {
        let list = Value::Array(issuers.iter().map(Issuer::setting).collect());
        (name, list.to_string())
    })
}

impl AuditVolume {
    fn check(&self) -> Result<(), (String, String)> {
        let field = "sidecar.auditVolume";
        match (&self.empty_dir, &self.persistent_volume_claim) {
            (Some(_), None) => Ok(()),
            (None, Some(claim)) if !is_dns_subdomain(&claim.claim_name) => Err((
                format!("{field}.persistentVolumeClaim.claimName"),
                format!("{:?} is not a PersistentVolumeClaim name", claim.claim_name),
            )),
            (None, Some(claim)) if claim.read_only == Some(true) => Err((
                format!("{field}.persistentVolumeClaim.readOnly"),
                "must not be true: the sidecar writes the audit log there".into(),
            )),
            (None, Some(_)) => Ok(()),
            _ => Err((
                field.into(),
                "name exactly one of emptyDir or persistentVolumeClaim".into(),
            )),
        }
    }

    /// The claim the audit log is written to, if it is on one.
    pub fn claim(&self) -> Option<&str> {
        self.persistent_volume_claim
            .as_ref()
            .map(|c| c.claim_name.as_str())
    }
}

/// What [`super::settings::SidecarSettings`] names for these files, read once per pod.
pub struct Files<'a> {
    pub identity: &'a IdentityFiles,
    pub approvers: &'a ApproverFiles,
    pub audit_volume: Option<&'a AuditVolume>,
}

impl Files<'_> {
    /// `Err((field, message))` for a name or an issuer no pod could use.
    pub fn check(&self) -> Result<(), (String, String)> {
        for (field, secret) in [
            (
                "sidecar.identity.tokensSecret",
                &self.identity.tokens_secret,
            ),
            (
                "sidecar.approvers.tokensSecret",
                &self.approvers.tokens_secret,
            ),
        ] {
            if let Some(name) = secret.as_deref().filter(|n| !is_dns_subdomain(n)) {
                return Err((
                    field.into(),
                    format!("{name:?} is not a Secret name (lowercase letters, digits, '-', '.')"),
                ));
            }
        }
        for (field, issuers) in self.issuer_lists() {
            for (i, issuer) in issuers.iter().enumerate() {
                issuer.check(&format!("{field}[{i}]"))?;
            }
        }
        self.audit_volume.map_or(Ok(()), AuditVolume::check)
    }

    fn issuer_lists(&self) -> [(&'static str, &[Issuer]); 3] {
        [
            ("sidecar.identity.jwt", &self.identity.jwt),
            ("sidecar.identity.taskIssuers", &self.identity.task_issuers),
            ("sidecar.approvers.jwt", &self.approvers.jwt),
        ]
    }

    /// The variables set here, with these settings.
    pub fn variables(&self) -> Vec<&'static str> {
        self.env().iter().map(|e| e.0).collect()
    }

    /// The variables, in order: `POD_NAME` before the audit path that expands it.
    fn env(&self) -> Vec<(&'static str, Option<String>)> {
        let mut env = Vec::new();
        if self.identity.tokens_secret.is_some() {
            env.push((TOKENS_ENV, Some(AGENT_TOKENS_FILE.to_string())));
        }
        let lists = [
            (JWT_ENV, &self.identity.jwt),
            (TASK_ISSUERS_ENV, &self.identity.task_issuers),
        ];
        for (name, issuers) in lists {
            env.extend(issuers_env(name, issuers).map(|(n, v)| (n, Some(v))));
        }
        if self.approvers.tokens_secret.is_some() {
            env.push((APPROVER_TOKENS_ENV, Some(APPROVER_TOKENS_FILE.to_string())));
        }
        env.extend(issuers_env(APPROVER_JWT_ENV, &self.approvers.jwt).map(|(n, v)| (n, Some(v))));
        if self.audit_volume.is_some() {
            // None: from the downward API.
            env.push((POD_NAME_ENV, None));
            env.push((AUDIT_PATH_ENV, Some(AUDIT_PATH.to_string())));
        }
        env
    }

    /// The sidecar's variables for these files.
    pub fn env_vars(&self) -> Vec<EnvVar> {
        self.env()
            .into_iter()
            .map(|(name, value)| EnvVar {
                name: name.into(),
                value_from: value.is_none().then(|| EnvVarSource {
                    field_ref: Some(ObjectFieldSelector {
                        field_path: "metadata.name".into(),
                        ..Default::default()
                    }),
                    ..Default::default()
                }),
                value,
            })
            .collect()
    }

    /// The sidecar's mounts for these files: read-only, but for the audit volume.
    pub fn mounts(&self) -> Vec<VolumeMount> {
        let mount = |name: &str, path: &str, read_only: bool| VolumeMount {
            name: name.into(),
            mount_path: path.into(),
            read_only: Some(read_only),
            ..Default::default()
        };
        let mut mounts = Vec::new();
        if self.identity.tokens_secret.is_some() {
            mounts.push(mount(AGENT_TOKENS_VOLUME, parent(AGENT_TOKENS_FILE), true));
        }
        if self.approvers.tokens_secret.is_some() {
            mounts.push(mount(
                APPROVER_TOKENS_VOLUME,
                parent(APPROVER_TOKENS_FILE),
                true,
            ));
        }
        if !self.config_maps().is_empty() {
            mounts.push(mount(JWKS_VOLUME, JWKS_DIR, true));
        }
        if self.audit_volume.is_some() {
            mounts.push(mount(AUDIT_VOLUME, AUDIT_DIR, false));
        }
        mounts
    }

    /// The volumes the mounts name.
    pub fn volumes(&self) -> Vec<Volume> {
        let mut volumes = Vec::new();
        if let Some(secret) = &self.identity.tokens_secret {
            volumes.push(super::sidecar::secret_volume(
                AGENT_TOKENS_VOLUME,
                secret,
                TOKENS_ITEM,
            ));
        }
        if let Some(secret) = &self.approvers.tokens_secret {
            volumes.push(super::sidecar::secret_volume(
                APPROVER_TOKENS_VOLUME,
                secret,
                TOKENS_ITEM,
            ));
        }
        let config_maps = self.config_maps();
        if !config_maps.is_empty() {
            volumes.push(jwks_volume(&config_maps));
        }
        if let Some(audit) = self.audit_volume {
            volumes.push(Volume {
                name: AUDIT_VOLUME.into(),
                empty_dir: audit.empty_dir.clone(),
                persistent_volume_claim: audit.persistent_volume_claim.clone(),
                ..Default::default()
            });
        }
        volumes
    }

    /// Every issuer ConfigMap, once each, in name order.
    fn config_maps(&self) -> BTreeSet<&str> {
        self.issuer_lists()
            .into_iter()
            .flat_map(|(_, issuers)| issuers.iter())
            .filter_map(|i| i.jwks_config_map.as_deref())
            .collect()
    }

    /// The Secrets mounted here, with what each holds for the sidecar.
    pub fn secrets(&self) -> [(Option<&str>, &'static str); 2] {
        [
            (
                self.identity.tokens_secret.as_deref(),
                "agent token digests",
            ),
            (
                self.approvers.tokens_secret.as_deref(),
                "approver token digests",
            ),
        ]
    }
}

fn parent(file: &str) -> &str {
    file.rsplit_once('/').map_or(file, |(dir, _)| dir)
}

/// One projected volume for every issuer's ConfigMap, each at `<name>/jwks.json`.
fn jwks_volume(config_maps: &BTreeSet<&str>) -> Volume {
    let sources = config_maps
        .iter()
        .map(|name| VolumeProjection {
            config_map: Some(ConfigMapProjection {
                name: (*name).into(),
                items: Some(vec![KeyToPath {
                    key: JWKS_ITEM.into(),
                    path: format!("{name}/{JWKS_ITEM}"),
                    ..Default::default()
                }]),
                ..Default::default()
            }),
            ..Default::default()
        })
        .collect();
    Volume {
        name: JWKS_VOLUME.into(),
        projected: Some(ProjectedVolumeSource {
            sources: Some(sources),
            ..Default::default()
        }),
        ..Default::default()
    }
}

#[cfg(test)]
mod tests;
