//! The injector's settings file (docs/install.md): where it listens, its TLS files, and what
//! sidecar it adds.
//!
//! Like the sidecar's settings: camelCase keys, unknown keys rejected with their path,
//! and every key overridable by a variable named after its path under `TOOLGATE_INJECT`
//! (`sidecar.image` → `TOOLGATE_INJECT_SIDECAR_IMAGE`). Everything a pod's admission
//! depends on is checked here, at start, so a typo fails the injector's rollout instead
//! of every pod it would have patched.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use super::files::{ApproverFiles, AuditVolume, Files, IdentityFiles};
use crate::config::env::{self, Kind};
use crate::config::file;
use crate::config::SettingsError;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct InjectSettings {
    pub listen: SocketAddr,
    pub tls: WebhookTls,
    pub sidecar: SidecarSettings,
}

/// The webhook's serving certificate and key (PEM), re-read when they change so a
/// rotated Secret needs no restart.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct WebhookTls {
    pub cert: PathBuf,
    pub key: PathBuf,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct SidecarSettings {
    pub image: String,
    pub resources: Resources,
    /// A ConfigMap in the pod's namespace whose files are the policies; unset, the
    /// sidecar watches the cluster's `ToolContract`/`AgentPolicy` objects instead.
    pub policies_config_map: Option<String>,
    /// A Secret in the pod's namespace whose item `key` is the audit chain's key
    /// (the keyed audit chain), mounted into the sidecar alone and named by its `audit.keyFile`;
    /// unset, the chain is plain SHA-256.
    pub audit_key_secret: Option<String>,
    /// A Secret in the pod's namespace whose item `password` is the Redis password of the
    /// shared state (`state.redis.passwordFile`), mounted into the sidecar alone; unset,
    /// the password, if any, is in the URL. Only worth setting with `state.backend: redis`
    /// in `env`, which the chart does together.
    pub redis_password_secret: Option<String>,
    /// Agent credentials from files: a Secret of token digests, and JWT and task issuers
    /// whose keys may come from ConfigMaps (`inject::files`).
    pub identity: IdentityFiles,
    /// Who may decide held calls: a Secret of approver token digests, and approver
    /// issuers whose keys may come from ConfigMaps.
    pub approvers: ApproverFiles,
    /// A volume (an `emptyDir` or a PersistentVolumeClaim) the audit log is written to,
    /// one file per pod; unset, the audit log goes to stdout.
    pub audit_volume: Option<AuditVolume>,
    /// Extra environment for every sidecar (e.g. `TOOLGATE_TELEMETRY_OTLP_ENDPOINT`), on
    /// top of what the injector sets per pod.
    pub env: BTreeMap<String, String>,
    /// Workload identity for every sidecar (its `identity.kubernetes`): agents in the
    /// cluster call with a projected ServiceAccount token for one of `audiences`. On by
    /// default, so an injected sidecar has an identity source with nothing to mount.
    pub workload_identity: WorkloadIdentity,
    /// Add the `prometheus.io/*` scrape annotations for the admin port to injected pods
    /// (`inject::scrape`).
    pub scrape_annotations: bool,
}

/// `sidecar.workloadIdentity`: the sidecar's `identity.kubernetes`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct WorkloadIdentity {
    pub enabled: bool,
    pub audiences: Vec<String>,
}

impl Default for WorkloadIdentity {
    fn default() -> Self {
        WorkloadIdentity {
            enabled: true,
            audiences: vec!["toolgate".into()],
        }
    }
}

/// The variables that carry [`WorkloadIdentity`] to the sidecar.
pub const WORKLOAD_IDENTITY_ENV: [&str; 2] = [
    "TOOLGATE_IDENTITY_KUBERNETES_ENABLED",
    "TOOLGATE_IDENTITY_KUBERNETES_AUDIENCES",
];

/// Resource requests and limits: resource name → Kubernetes quantity.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct Resources {
    #[serde(deserialize_with = "quantities")]
    pub requests: BTreeMap<String, String>,
    #[serde(deserialize_with = "quantities")]
    pub limits: BTreeMap<String, String>,
}

impl Default for InjectSettings {
    fn default() -> Self {
        InjectSettings {
            listen: SocketAddr::from(([0, 0, 0, 0], super::WEBHOOK_PORT)),
            tls: WebhookTls::default(),
            sidecar: SidecarSettings::default(),
        }
    }
}

impl Default for WebhookTls {
    fn default() -> Self {
        WebhookTls {
            cert: PathBuf::from("/etc/toolgate/webhook/tls.crt"),
            key: PathBuf::from("/etc/toolgate/webhook/tls.key"),
        }
    }
}

impl Default for SidecarSettings {
    fn default() -> Self {
        let quantities = |pairs: &[(&str, &str)]| {
            pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect()
        };
        SidecarSettings {
            image: format!("toolgate:{}", env!("CARGO_PKG_VERSION")),
            resources: Resources {
                requests: quantities(&[("cpu", "20m"), ("memory", "32Mi")]),
                limits: quantities(&[("memory", "128Mi")]),
            },
            policies_config_map: None,
            audit_key_secret: None,
            redis_password_secret: None,
            identity: IdentityFiles::default(),
            approvers: ApproverFiles::default(),
            audit_volume: None,
            env: BTreeMap::new(),
            workload_identity: WorkloadIdentity::default(),
            scrape_annotations: false,
        }
    }
}

/// YAML reads `cpu: 1` as a number; Kubernetes quantities are strings either way.
fn quantities<'de, D>(deserializer: D) -> Result<BTreeMap<String, String>, D::Error>
where
    D: serde::Deserializer<'de>,
{
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Quantity {
        Text(String),
        Number(serde_json::Number),
    }
    let map = BTreeMap::<String, Quantity>::deserialize(deserializer)?;
    Ok(map
        .into_iter()
        .map(|(name, q)| {
            let text = match q {
                Quantity::Text(t) => t,
                Quantity::Number(n) => n.to_string(),
            };
            (name, text)
        })
        .collect())
}

const KEYS: &[(&str, Kind)] = &[
    ("listen", Kind::Str),
    ("tls.cert", Kind::Str),
    ("tls.key", Kind::Str),
    ("sidecar.image", Kind::Str),
    ("sidecar.resources", Kind::Yaml),
    ("sidecar.policiesConfigMap", Kind::Str),
    ("sidecar.auditKeySecret", Kind::Str),
    ("sidecar.redisPasswordSecret", Kind::Str),
    ("sidecar.identity.tokensSecret", Kind::Str),
    ("sidecar.identity.jwt", Kind::Yaml),
    ("sidecar.identity.taskIssuers", Kind::Yaml),
    ("sidecar.approvers.tokensSecret", Kind::Str),
    ("sidecar.approvers.jwt", Kind::Yaml),
    ("sidecar.auditVolume", Kind::Yaml),
    ("sidecar.env", Kind::Yaml),
    ("sidecar.workloadIdentity.enabled", Kind::Bool),
    ("sidecar.workloadIdentity.audiences", Kind::List),
    ("sidecar.scrapeAnnotations", Kind::Bool),
];

pub const ENV_PREFIX: &str = "TOOLGATE_INJECT";

impl InjectSettings {
    /// Reads `file` (when given), applies `TOOLGATE_INJECT_*` variables, and checks the
    /// values a pod spec would carry.
    pub fn load(
        file: Option<&Path>,
        vars: impl IntoIterator<Item = (String, String)>,
    ) -> Result<InjectSettings, SettingsError> {
        let (origin, text) = file::read(file)?;
        InjectSettings::parse(&origin, &text, vars)
    }

    pub fn parse(
        origin: &str,
        text: &str,
        vars: impl IntoIterator<Item = (String, String)>,
    ) -> Result<InjectSettings, SettingsError> {
        let settings: InjectSettings = file::parse(origin, text, vars, |tree, vars| {
            env::apply_table(tree, vars, ENV_PREFIX, KEYS, &[])
        })?;
        settings
            .sidecar
            .check()
            .and_then(|()| settings.sidecar.check_sidecar())
            .map_err(|(field, message)| file::invalid(origin, field, message))?;
        Ok(settings)
    }
}

impl SidecarSettings {
    /// `Err((field, message))` for a value the API server would refuse in every pod.
    fn check(&self) -> Result<(), (String, String)> {
        if self.image.trim().is_empty() || self.image.contains(char::is_whitespace) {
            return Err(("sidecar.image".into(), "must be an image reference".into()));
        }
        for (kind, map) in [
            ("requests", &self.resources.requests),
            ("limits", &self.resources.limits),
        ] {
            for (name, quantity) in map {
                if !is_quantity(quantity) {
                    return Err((
                        format!("sidecar.resources.{kind}.{name}"),
                        format!("{quantity:?} is not a Kubernetes quantity (e.g. 20m, 64Mi, 1)"),
                    ));
                }
            }
        }
        for (field, kind, name) in [
            (
                "sidecar.policiesConfigMap",
                "ConfigMap",
                &self.policies_config_map,
            ),
            ("sidecar.auditKeySecret", "Secret", &self.audit_key_secret),
            (
                "sidecar.redisPasswordSecret",
                "Secret",
                &self.redis_password_secret,
            ),
        ] {
            if let Some(name) = name.as_deref().filter(|n| !is_dns_subdomain(n)) {
                return Err((
                    field.into(),
                    format!("{name:?} is not a {kind} name (lowercase letters, digits, '-', '.')"),
                ));
            }
        }
        self.workload_identity.check()?;
        self.files().check()?;
        for name in self.env.keys() {
            let valid = !name.is_empty()
                && !name.starts_with(|c: char| c.is_ascii_digit())
                && name
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'));
            if !valid {
                return Err((format!("sidecar.env.{name}"), "not a variable name".into()));
            }
            if self.reserves(name) {
                return Err((
                    format!("sidecar.env.{name}"),
                    "the injector sets this variable per pod; remove it here".into(),
                ));
            }
        }
        Ok(())
    }
}

impl SidecarSettings {
    /// The files the sidecar reads and writes besides its policies.
    pub fn files(&self) -> Files<'_> {
        Files {
            identity: &self.identity,
            approvers: &self.approvers,
            audit_volume: self.audit_volume.as_ref(),
        }
    }

    /// The sidecar's own settings check, on the variables an injected sidecar would get
    /// (for a pod whose app listens on 8080): so an issuer the sidecar would refuse, or a
    /// bad value in `env`, stops the injector's rollout instead of every injected pod.
    fn check_sidecar(&self) -> Result<(), (String, String)> {
        let pod = super::sidecar::PodFacts {
            upstream_port: 8080,
            service_name: None,
        };
        let vars = super::sidecar::container(self, &pod)
            .env
            .into_iter()
            .flatten()
            .filter_map(|e| Some((e.name, e.value?)));
        let why = match crate::config::Settings::parse("sidecar", "", vars) {
            Ok(_) => return Ok(()),
            Err(SettingsError::Invalid { field, message, .. }) => format!("{field}: {message}"),
            Err(e) => e.to_string(),
        };
        Err((
            "sidecar".into(),
            format!("an injected sidecar would refuse its settings: {why}"),
        ))
    }
}

impl WorkloadIdentity {
    /// The audiences travel as one comma-separated variable: each must be non-empty and
    /// hold no comma or whitespace.
    fn check(&self) -> Result<(), (String, String)> {
        if !self.enabled {
            return Ok(());
        }
        let bad = self.audiences.is_empty()
            || self
                .audiences
                .iter()
                .any(|a| a.is_empty() || a.contains(|c: char| c == ',' || c.is_whitespace()));
        if bad {
            return Err((
                "sidecar.workloadIdentity.audiences".into(),
                "must name at least one audience, each without commas or spaces (e.g. [toolgate]): the audience agents request in their serviceAccountToken volume".into(),
            ));
        }
        Ok(())
    }
}

/// A Kubernetes resource quantity: a decimal number, then an SI or binary suffix or an
/// exponent (`100m`, `1.5`, `64Mi`, `1e3`).
pub fn is_quantity(text: &str) -> bool {
    let unsigned = text.strip_prefix(['+', '-']).unwrap_or(text);
    let digits_end = unsigned
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(unsigned.len());
    let (number, suffix) = unsigned.split_at(digits_end);
    let number_ok = !number.is_empty()
        && number != "."
        && number.matches('.').count() <= 1
        && number.chars().any(|c| c.is_ascii_digit());
    let exponent_ok = |rest: &str| {
        let digits = rest.strip_prefix(['+', '-']).unwrap_or(rest);
        !digits.is_empty() && digits.chars().all(|c| c.is_ascii_digit())
    };
    let suffix_ok = matches!(
        suffix,
        "" | "m" | "k" | "M" | "G" | "T" | "P" | "E" | "Ki" | "Mi" | "Gi" | "Ti" | "Pi" | "Ei"
    ) || suffix.strip_prefix(['e', 'E']).is_some_and(exponent_ok);
    number_ok && suffix_ok
}

/// RFC 1123 subdomain, as Kubernetes names most objects.
pub fn is_dns_subdomain(name: &str) -> bool {
    name.len() <= 253
        && name.split('.').all(|label| {
            !label.is_empty()
                && label
                    .chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
                && !label.starts_with('-')
                && !label.ends_with('-')
        })
}

/// The variable that sets the sidecar's `audit.keyFile`.
pub const AUDIT_KEY_ENV: &str = "TOOLGATE_AUDIT_KEY_FILE";
/// The variable that sets the sidecar's `state.redis.passwordFile`.
pub const REDIS_PASSWORD_ENV: &str = "TOOLGATE_STATE_REDIS_PASSWORD_FILE";

/// Variables the injector always sets itself; `sidecar.env` may not set them (see
/// [`SidecarSettings::reserves`] for those it sets only with some settings).
pub const RESERVED_ENV: &[&str] = &[
    "TOOLGATE_LISTEN",
    "TOOLGATE_ADMIN",
    "TOOLGATE_UPSTREAM",
    "TOOLGATE_POLICIES_FILES",
    "TOOLGATE_POLICIES_KUBERNETES_ENABLED",
    "TOOLGATE_POLICIES_KUBERNETES_NAMESPACE",
    "TOOLGATE_POLICIES_KUBERNETES_POD_LABELS_FILE",
];

impl SidecarSettings {
    /// Whether the injector sets `name` itself with these settings, so `sidecar.env` may
    /// not: its value, listed after the injector's, would silently win. The variables of
    /// the files the injector mounts (the audit key, the Redis password, token Secrets,
    /// issuers, the audit volume) are free when it mounts none, so the file can still
    /// come from elsewhere.
    pub fn reserves(&self, name: &str) -> bool {
        RESERVED_ENV.contains(&name)
            || (WORKLOAD_IDENTITY_ENV.contains(&name) && self.workload_identity.enabled)
            || (name == AUDIT_KEY_ENV && self.audit_key_secret.is_some())
            || (name == REDIS_PASSWORD_ENV && self.redis_password_secret.is_some())
            || self.files().variables().contains(&name)
    }
}

#[cfg(test)]
mod tests;
