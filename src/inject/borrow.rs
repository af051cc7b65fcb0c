//! The sidecar's secrets stay in the sidecar: a pod whose own containers could reach
//! what the injector brings for the sidecar alone is refused.
//!
//! The patch adds volumes the sidecar mounts: its audit key, Redis password and token
//! Secrets, its issuers' keys, its audit log's volume, its own ServiceAccount token, its
//! policies and pod info. A volume mount names a volume
//! only by name, so an app container that declares `volumeMounts: [{name:
//! toolgate-audit-key}]` before injection would be given the key the moment the patch
//! adds the volume. Refused, with the reason, when any container of the pod — init,
//! regular or ephemeral — mounts (or maps as a device) a volume whose name starts with
//! [`RESERVED_PREFIX`], the namespace every sidecar volume is named in, whatever today's
//! settings bring; or when the pod declares such a volume itself; or when the pod reaches
//! the sidecar's Secrets by name under another volume's name or through `env`, or claims
//! the PersistentVolumeClaim the sidecar writes its audit log to.
//!
//! A container added later by `kubectl debug` (the `pods/ephemeralcontainers`
//! subresource) is checked the same way ([`ephemeral`]): an injected pod has the
//! volumes by then, so a debug container naming one would get it.

use k8s_openapi::api::core::v1::{
    Container, EnvFromSource, EnvVar, EphemeralContainer, PodSpec, Volume,
};

use super::settings::SidecarSettings;

/// Every volume the sidecar brings is named `toolgate-…`; no app container may use one.
pub const RESERVED_PREFIX: &str = "toolgate-";

/// Why `spec` can't be injected without lending it the sidecar's volumes, if it can't.
pub fn check(spec: &PodSpec, settings: &SidecarSettings) -> Result<(), String> {
    for volume in spec.volumes.iter().flatten() {
        if reserved(&volume.name) {
            return Err(format!(
                "the pod declares a volume named {:?}; {}; rename the volume",
                volume.name, RESERVED_WHY
            ));
        }
        let secrets = volume
            .secret
            .iter()
            .filter_map(|s| s.secret_name.as_deref())
            .chain(
                volume
                    .projected
                    .iter()
                    .flat_map(|p| p.sources.iter().flatten())
                    .filter_map(|s| s.secret.as_ref().map(|s| s.name.as_str())),
            );
        if let Some(why) = audit_claim(volume, settings) {
            return Err(why);
        }
        for secret in secrets {
            if let Some(what) = sidecar_secret(secret, settings) {
                return Err(format!(
                    "the pod's volume {:?} mounts the Secret {secret:?}, which holds the toolgate sidecar's {what}; \
                     only the sidecar may read it (give the app a Secret of its own)",
                    volume.name
                ));
            }
        }
    }
    let containers = spec
        .init_containers
        .iter()
        .flatten()
        .chain(spec.containers.iter())
        .map(Parts::of);
    let ephemeral = spec
        .ephemeral_containers
        .iter()
        .flatten()
        .map(Parts::of_ephemeral);
    containers
        .chain(ephemeral)
        .try_for_each(|parts| parts.check(settings))
}

/// Why the ephemeral containers of `spec` (a `kubectl debug` update) can't be added.
pub fn ephemeral(spec: &PodSpec, settings: &SidecarSettings) -> Result<(), String> {
    spec.ephemeral_containers
        .iter()
        .flatten()
        .map(Parts::of_ephemeral)
        .try_for_each(|parts| parts.check(settings))
}

const RESERVED_WHY: &str =
    "volume names starting with \"toolgate-\" are the toolgate sidecar's own \
     (its audit key, Redis password, ServiceAccount token, identity material and audit log), \
     and no other container may mount them";

fn reserved(name: &str) -> bool {
    name.to_ascii_lowercase().starts_with(RESERVED_PREFIX)
}

/// What the Secret named `name` holds for the sidecar, if it is one of its Secrets.
fn sidecar_secret(name: &str, settings: &SidecarSettings) -> Option<&'static str> {
    [
        (settings.audit_key_secret.as_deref(), "audit key"),
        (settings.redis_password_secret.as_deref(), "Redis password"),
    ]
    .into_iter()
    .chain(settings.files().secrets())
    .find_map(|(secret, what)| (secret == Some(name)).then_some(what))
}

/// Why the pod's volume `volume` may not be declared: it claims the audit log's
/// PersistentVolumeClaim, whose files only the sidecar may write.
fn audit_claim(volume: &Volume, settings: &SidecarSettings) -> Option<String> {
    let claim = settings.audit_volume.as_ref()?.claim()?;
    let declared = volume.persistent_volume_claim.as_ref()?;
    (declared.claim_name == claim).then(|| {
        format!(
            "the pod's volume {:?} mounts the PersistentVolumeClaim {claim:?}, which holds the toolgate \
             sidecar's audit logs; only the sidecar may write them (read them from another pod)",
            volume.name
        )
    })
}

/// What a container of any kind can reach volumes and Secrets through.
struct Parts<'a> {
    name: &'a str,
    mounts: Vec<&'a str>,
    env: Option<&'a [EnvVar]>,
    env_from: Option<&'a [EnvFromSource]>,
}

impl<'a> Parts<'a> {
    fn of(c: &'a Container) -> Parts<'a> {
        Parts {
            name: &c.name,
            mounts: c
                .volume_mounts
                .iter()
                .flatten()
                .map(|m| m.name.as_str())
                .chain(c.volume_devices.iter().flatten().map(|d| d.name.as_str()))
                .collect(),
            env: c.env.as_deref(),
            env_from: c.env_from.as_deref(),
        }
    }

    fn of_ephemeral(c: &'a EphemeralContainer) -> Parts<'a> {
        Parts {
            name: &c.name,
            mounts: c
                .volume_mounts
                .iter()
                .flatten()
                .map(|m| m.name.as_str())
                .chain(c.volume_devices.iter().flatten().map(|d| d.name.as_str()))
                .collect(),
            env: c.env.as_deref(),
            env_from: c.env_from.as_deref(),
        }
    }

    fn check(&self, settings: &SidecarSettings) -> Result<(), String> {
        if let Some(volume) = self.mounts.iter().find(|m| reserved(m)) {
            return Err(format!(
                "container {:?} mounts a volume named {volume:?}; {RESERVED_WHY}; remove the mount",
                self.name
            ));
        }
        let by_env = self
            .env
            .into_iter()
            .flatten()
            .filter_map(|e| e.value_from.as_ref()?.secret_key_ref.as_ref())
            .map(|r| r.name.as_str());
        let by_env_from = self
            .env_from
            .into_iter()
            .flatten()
            .filter_map(|e| e.secret_ref.as_ref())
            .map(|r| r.name.as_str());
        for secret in by_env.chain(by_env_from) {
            if let Some(what) = sidecar_secret(secret, settings) {
                return Err(format!(
                    "container {:?} reads the Secret {secret:?} into its environment, which holds the toolgate \
                     sidecar's {what}; only the sidecar may read it (give the app a Secret of its own)",
                    self.name
                ));
            }
        }
        Ok(())
    }
}
