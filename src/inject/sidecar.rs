//! The container and volumes the injector adds: a native sidecar (an init container with
//! `restartPolicy: Always`, so it starts before the app, stays up beside it, and stops
//! after it) configured entirely through `TOOLGATE_*` variables.
//!
//! Invariants: the container meets the Pod Security "restricted" profile on its own
//! (every field set at container level, whatever the pod says); its probes and ports
//! are the sidecar's admin and agent ports; the cluster source gets the pod's namespace
//! from the downward API, never from the review, so the spec stays correct if the pod
//! template is reused elsewhere; the audit key (`sidecar.auditKeySecret`) and the Redis
//! password (`sidecar.redisPasswordSecret`) are mounted into the sidecar alone, never into
//! the app's containers, as are the token Secrets, issuer keys and audit volume of
//! [`super::files`]. With workload identity (`sidecar.workloadIdentity`, on by
//! default) the sidecar verifies agents' projected ServiceAccount tokens with keys it
//! reads from the API server, so it gets its own API token even when its policies come
//! from a ConfigMap.

use k8s_openapi::api::core::v1::{
    Capabilities, ConfigMapProjection, ConfigMapVolumeSource, Container, ContainerPort,
    DownwardAPIProjection, DownwardAPIVolumeFile, DownwardAPIVolumeSource, EnvVar, EnvVarSource,
    HTTPGetAction, KeyToPath, ObjectFieldSelector, Probe, ProjectedVolumeSource,
    ResourceRequirements, SeccompProfile, SecretVolumeSource, SecurityContext,
    ServiceAccountTokenProjection, Volume, VolumeMount, VolumeProjection,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use std::collections::BTreeMap;

use super::settings::{SidecarSettings, AUDIT_KEY_ENV, REDIS_PASSWORD_ENV, WORKLOAD_IDENTITY_ENV};
use super::{ADMIN_PORT, AGENT_PORT, CONTAINER_NAME, UID};

pub const PODINFO_VOLUME: &str = "toolgate-podinfo";
pub const TOKEN_VOLUME: &str = "toolgate-token";
pub const POLICIES_VOLUME: &str = "toolgate-policies";
pub const AUDIT_KEY_VOLUME: &str = "toolgate-audit-key";
pub const REDIS_PASSWORD_VOLUME: &str = "toolgate-redis-password";
pub const AGENT_PORT_NAME: &str = "toolgate";
pub const ADMIN_PORT_NAME: &str = "toolgate-admin";

const PODINFO_DIR: &str = "/etc/podinfo";
/// Where the sidecar's `policies.kubernetes.podLabelsFile` points.
const LABELS_FILE: &str = "/etc/podinfo/labels";
/// Where kube's in-cluster config looks for the token, CA and namespace.
const TOKEN_DIR: &str = "/var/run/secrets/kubernetes.io/serviceaccount";
const POLICIES_DIR: &str = "/etc/toolgate/policies";
const AUDIT_KEY_DIR: &str = "/etc/toolgate/audit-key";
/// The item of `sidecar.auditKeySecret` that holds the key, fixed so that one
/// `kubectl create secret generic NAME --from-literal=key=...` is the whole setup.
pub const AUDIT_KEY_ITEM: &str = "key";
/// Where the sidecar's `audit.keyFile` points: the Secret's item, as a file.
pub const AUDIT_KEY_FILE: &str = "/etc/toolgate/audit-key/key";
const REDIS_PASSWORD_DIR: &str = "/etc/toolgate/redis-password";
/// The item of `sidecar.redisPasswordSecret` that holds the password, fixed for the same
/// reason as [`AUDIT_KEY_ITEM`].
pub const REDIS_PASSWORD_ITEM: &str = "password";
/// Where the sidecar's `state.redis.passwordFile` points.
pub const REDIS_PASSWORD_FILE: &str = "/etc/toolgate/redis-password/password";
/// Short-lived token; the kubelet refreshes the file and kube-rs re-reads it. 3607 s is
/// the kubelet's own default for `kube-api-access-*` volumes.
const TOKEN_SECONDS: i64 = 3607;

/// What the sidecar needs to know about its pod.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodFacts {
    /// The app's port on the pod's loopback.
    pub upstream_port: u16,
    /// The app's name from its labels, for the spans' `service.name`.
    pub service_name: Option<String>,
}

/// The sidecar container, to go first in `initContainers`.
pub fn container(settings: &SidecarSettings, pod: &PodFacts) -> Container {
    let mut mounts = vec![];
    if cluster_source(settings) {
        mounts.push(mount(PODINFO_VOLUME, PODINFO_DIR));
    } else {
        mounts.push(mount(POLICIES_VOLUME, POLICIES_DIR));
    }
    if api_access(settings) {
        mounts.push(mount(TOKEN_VOLUME, TOKEN_DIR));
    }
    if settings.audit_key_secret.is_some() {
        mounts.push(mount(AUDIT_KEY_VOLUME, AUDIT_KEY_DIR));
    }
    if settings.redis_password_secret.is_some() {
        mounts.push(mount(REDIS_PASSWORD_VOLUME, REDIS_PASSWORD_DIR));
    }
    mounts.extend(settings.files().mounts());
    let quantities = |map: &BTreeMap<String, String>| {
        (!map.is_empty()).then(|| {
            map.iter()
                .map(|(k, v)| (k.clone(), Quantity(v.clone())))
                .collect()
        })
    };
    Container {
        name: CONTAINER_NAME.into(),
        image: Some(settings.image.clone()),
        args: Some(vec!["run".into()]),
        restart_policy: Some("Always".into()),
        env: Some(env(settings, pod)),
        ports: Some(vec![
            port(AGENT_PORT_NAME, AGENT_PORT),
            port(ADMIN_PORT_NAME, ADMIN_PORT),
        ]),
        resources: Some(ResourceRequirements {
            requests: quantities(&settings.resources.requests),
            limits: quantities(&settings.resources.limits),
            ..Default::default()
        }),
        // The main containers start once the gateway answers, so no request reaches the
        // app's port through toolgate before toolgate is there.
        startup_probe: Some(probe("/healthz", 1, 30)),
        readiness_probe: Some(probe("/readyz", 5, 3)),
        liveness_probe: Some(probe("/healthz", 10, 3)),
        security_context: Some(restricted()),
        volume_mounts: Some(mounts),
        termination_message_policy: Some("FallbackToLogsOnError".into()),
        ..Default::default()
    }
}

/// The volumes the container mounts.
pub fn volumes(settings: &SidecarSettings) -> Vec<Volume> {
    let mut volumes = match &settings.policies_config_map {
        None => vec![podinfo_volume()],
        Some(name) => vec![Volume {
            name: POLICIES_VOLUME.into(),
            config_map: Some(ConfigMapVolumeSource {
                name: name.clone(),
                ..Default::default()
            }),
            ..Default::default()
        }],
    };
    if api_access(settings) {
        volumes.push(token_volume());
    }
    if let Some(secret) = &settings.audit_key_secret {
        volumes.push(secret_volume(AUDIT_KEY_VOLUME, secret, AUDIT_KEY_ITEM));
    }
    if let Some(secret) = &settings.redis_password_secret {
        volumes.push(secret_volume(
            REDIS_PASSWORD_VOLUME,
            secret,
            REDIS_PASSWORD_ITEM,
        ));
    }
    volumes.extend(settings.files().volumes());
    volumes
}

/// Policies come from the cluster unless a ConfigMap is named. The sidecar needs API
/// access (token) and its labels (for `workloadSelector`) only then.
fn cluster_source(settings: &SidecarSettings) -> bool {
    settings.policies_config_map.is_none()
}

/// The sidecar reads the API server (its own token) for cluster policies or for
/// workload identity's issuer keys.
fn api_access(settings: &SidecarSettings) -> bool {
    cluster_source(settings) || settings.workload_identity.enabled
}

fn env(settings: &SidecarSettings, pod: &PodFacts) -> Vec<EnvVar> {
    let value = |name: &str, value: String| EnvVar {
        name: name.into(),
        value: Some(value),
        ..Default::default()
    };
    let mut env = vec![
        value("TOOLGATE_LISTEN", format!("0.0.0.0:{AGENT_PORT}")),
        value("TOOLGATE_ADMIN", format!("0.0.0.0:{ADMIN_PORT}")),
        value(
            "TOOLGATE_UPSTREAM",
            format!("http://127.0.0.1:{}", pod.upstream_port),
        ),
    ];
    if cluster_source(settings) {
        env.extend([
            // Empty: no file source; the cluster is the only one.
            value("TOOLGATE_POLICIES_FILES", String::new()),
            value("TOOLGATE_POLICIES_KUBERNETES_ENABLED", "true".into()),
            EnvVar {
                name: "TOOLGATE_POLICIES_KUBERNETES_NAMESPACE".into(),
                value_from: Some(EnvVarSource {
                    field_ref: Some(field("metadata.namespace")),
                    ..Default::default()
                }),
                ..Default::default()
            },
            value(
                "TOOLGATE_POLICIES_KUBERNETES_POD_LABELS_FILE",
                LABELS_FILE.into(),
            ),
        ]);
    } else {
        env.extend([
            value("TOOLGATE_POLICIES_FILES", POLICIES_DIR.into()),
            value("TOOLGATE_POLICIES_KUBERNETES_ENABLED", "false".into()),
        ]);
    }
    if settings.workload_identity.enabled {
        let [enabled, audiences] = WORKLOAD_IDENTITY_ENV;
        env.push(value(enabled, "true".into()));
        env.push(value(
            audiences,
            settings.workload_identity.audiences.join(","),
        ));
    }
    if settings.audit_key_secret.is_some() {
        env.push(value(AUDIT_KEY_ENV, AUDIT_KEY_FILE.into()));
    }
    if settings.redis_password_secret.is_some() {
        env.push(value(REDIS_PASSWORD_ENV, REDIS_PASSWORD_FILE.into()));
    }
    env.extend(settings.files().env_vars());
    let service_name = "TOOLGATE_TELEMETRY_SERVICE_NAME";
    if let (Some(name), false) = (&pod.service_name, settings.env.contains_key(service_name)) {
        env.push(value(service_name, name.clone()));
    }
    env.extend(settings.env.iter().map(|(k, v)| value(k, v.clone())));
    env
}

fn mount(volume: &str, path: &str) -> VolumeMount {
    VolumeMount {
        name: volume.into(),
        mount_path: path.into(),
        read_only: Some(true),
        ..Default::default()
    }
}

fn port(name: &str, number: i32) -> ContainerPort {
    ContainerPort {
        name: Some(name.into()),
        container_port: number,
        protocol: Some("TCP".into()),
        ..Default::default()
    }
}

fn probe(path: &str, period: i32, failures: i32) -> Probe {
    Probe {
        http_get: Some(HTTPGetAction {
            path: Some(path.into()),
            port: IntOrString::Int(ADMIN_PORT),
            ..Default::default()
        }),
        period_seconds: Some(period),
        failure_threshold: Some(failures),
        timeout_seconds: Some(1),
        ..Default::default()
    }
}

/// Pod Security "restricted", plus a read-only root filesystem (the sidecar writes only
/// to stdout and stderr, and to the audit volume when one is named).
fn restricted() -> SecurityContext {
    SecurityContext {
        run_as_non_root: Some(true),
        run_as_user: Some(UID),
        run_as_group: Some(UID),
        read_only_root_filesystem: Some(true),
        allow_privilege_escalation: Some(false),
        privileged: Some(false),
        capabilities: Some(Capabilities {
            drop: Some(vec!["ALL".into()]),
            ..Default::default()
        }),
        seccomp_profile: Some(SeccompProfile {
            type_: "RuntimeDefault".into(),
            ..Default::default()
        }),
        ..Default::default()
    }
}

fn field(path: &str) -> ObjectFieldSelector {
    ObjectFieldSelector {
        field_path: path.into(),
        ..Default::default()
    }
}

fn podinfo_volume() -> Volume {
    Volume {
        name: PODINFO_VOLUME.into(),
        downward_api: Some(DownwardAPIVolumeSource {
            items: Some(vec![DownwardAPIVolumeFile {
                path: "labels".into(),
                field_ref: Some(field("metadata.labels")),
                ..Default::default()
            }]),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// Only the one item (the audit key, the Redis password, a token file), and not optional: a missing
/// Secret or item keeps the pod from starting, with the reason in its events, rather than
/// starting a sidecar that can only fail to read its file. The default file mode (0644,
/// root-owned) stays because the sidecar runs as a non-root UID and must read the file;
/// no other container mounts it.
pub(super) fn secret_volume(volume: &str, secret: &str, item: &str) -> Volume {
    Volume {
        name: volume.into(),
        secret: Some(SecretVolumeSource {
            secret_name: Some(secret.into()),
            items: Some(vec![KeyToPath {
                key: item.into(),
                path: item.into(),
                ..Default::default()
            }]),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// What the kubelet mounts as `kube-api-access-*`, for the sidecar alone: the admission
/// plugin that mounts service-account tokens runs before webhooks, so an added container
/// never gets that volume, and a pod with `automountServiceAccountToken: false` keeps its
/// app containers token-free while the sidecar still reaches the API.
fn token_volume() -> Volume {
    Volume {
        name: TOKEN_VOLUME.into(),
        projected: Some(ProjectedVolumeSource {
            sources: Some(vec![
                VolumeProjection {
                    service_account_token: Some(ServiceAccountTokenProjection {
                        path: "token".into(),
                        expiration_seconds: Some(TOKEN_SECONDS),
                        ..Default::default()
                    }),
                    ..Default::default()
                },
                VolumeProjection {
                    config_map: Some(ConfigMapProjection {
                        name: "kube-root-ca.crt".into(),
                        items: Some(vec![KeyToPath {
                            key: "ca.crt".into(),
                            path: "ca.crt".into(),
                            ..Default::default()
                        }]),
                        ..Default::default()
                    }),
                    ..Default::default()
                },
                VolumeProjection {
                    downward_api: Some(DownwardAPIProjection {
                        items: Some(vec![DownwardAPIVolumeFile {
                            path: "namespace".into(),
                            field_ref: Some(field("metadata.namespace")),
                            ..Default::default()
                        }]),
                    }),
                    ..Default::default()
                },
            ]),
            ..Default::default()
        }),
        ..Default::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::inject::settings::WorkloadIdentity;

    fn mk_facts() -> PodFacts {
        PodFacts {
            upstream_port: 8080,
            service_name: None,
        }
    }

    fn env_of(container: &Container) -> BTreeMap<String, String> {
        container
            .env
            .iter()
            .flatten()
            .filter_map(|e| Some((e.name.clone(), e.value.clone()?)))
            .collect()
    }

    fn mounted(container: &Container, volume: &str) -> bool {
        container
            .volume_mounts
            .iter()
            .flatten()
            .any(|m| m.name == volume)
    }

    #[test]
    fn workload_identity_is_on_by_default_with_the_api_token() {
        for policies_config_map in [None, Some("agent-policies".to_string())] {
            let settings = SidecarSettings {
                policies_config_map: policies_config_map.clone(),
                ..SidecarSettings::default()
            };
            let sidecar = container(&settings, &mk_facts());
            let env = env_of(&sidecar);
            assert_eq!(env["TOOLGATE_IDENTITY_KUBERNETES_ENABLED"], "true");
            assert_eq!(env["TOOLGATE_IDENTITY_KUBERNETES_AUDIENCES"], "toolgate");
            // Its token reads the issuer's keys even when policies come from files.
            assert!(mounted(&sidecar, TOKEN_VOLUME), "{policies_config_map:?}");
            let volumes = volumes(&settings);
            let tokens = volumes.iter().filter(|v| v.name == TOKEN_VOLUME).count();
            assert_eq!(tokens, 1, "{policies_config_map:?}");
            assert_eq!(
                mounted(&sidecar, PODINFO_VOLUME),
                policies_config_map.is_none()
            );
        }
    }

    #[test]
    fn audiences_travel_in_one_variable_and_off_means_absent() {
        let settings = SidecarSettings {
            workload_identity: WorkloadIdentity {
                enabled: true,
                audiences: vec!["toolgate".into(), "orders.toolgate".into()],
            },
            ..SidecarSettings::default()
        };
        let env = env_of(&container(&settings, &mk_facts()));
        assert_eq!(
            env["TOOLGATE_IDENTITY_KUBERNETES_AUDIENCES"],
            "toolgate,orders.toolgate"
        );
        let off = SidecarSettings {
            policies_config_map: Some("agent-policies".into()),
            workload_identity: WorkloadIdentity {
                enabled: false,
                ..WorkloadIdentity::default()
            },
            ..SidecarSettings::default()
        };
        let sidecar = container(&off, &mk_facts());
        assert!(env_of(&sidecar)
            .keys()
            .all(|k| !k.starts_with("TOOLGATE_IDENTITY_KUBERNETES")));
        assert!(!mounted(&sidecar, TOKEN_VOLUME));
        assert!(volumes(&off).iter().all(|v| v.name != TOKEN_VOLUME));
    }
}
