//! The controller's settings file (docs/install.md, "Status and apply-time validation"):
//! which namespaces it reads, how it elects a leader, where its health endpoints listen.
//!
//! Like the injector's: camelCase keys, unknown keys rejected with their path, every key
//! overridable by a variable named after its path under `TOOLGATE_CONTROLLER`
//! (`kubernetes.namespace` → `TOOLGATE_CONTROLLER_KUBERNETES_NAMESPACE`). Timings that
//! could let two leaders overlap are refused at start.

use serde::{Deserialize, Serialize};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::config::env::{self, Kind};
use crate::config::file;
use crate::config::SettingsError;
use crate::inject::settings::is_dns_subdomain;

/// The health listener's default port, next to the sidecar's admin port.
pub const HEALTH_PORT: u16 = 15102;
/// The Lease's default name (DESIGN §15).
pub const LEASE_NAME: &str = "toolgate-controller";

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct ControllerSettings {
    /// `/healthz` and `/readyz`, plain HTTP (the kubelet's probes).
    pub listen: SocketAddr,
    pub kubernetes: Scope,
    pub leader_election: LeaderElection,
}

/// What the controller reads, and with which credentials.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct Scope {
    /// One namespace; empty: every namespace (the chart's default, with a ClusterRole).
    pub namespace: String,
    /// A kubeconfig to reach the API server with; unset: the pod's service account.
    pub kubeconfig: Option<PathBuf>,
}

/// The `coordination.k8s.io/v1` Lease that makes one replica the writer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct LeaderElection {
    pub lease_name: String,
    /// Where the Lease lives; empty: the controller's own namespace (its service
    /// account's, or the kubeconfig context's).
    pub namespace: String,
    /// This replica's name in the Lease; empty: `HOSTNAME` (the pod's name).
    pub identity: String,
    /// How long a lease holds without renewal before another replica may take it.
    pub lease_duration_seconds: u32,
    /// A leader that could not renew for this long stops writing, before its lease can
    /// lapse and a successor start.
    pub renew_deadline_ms: u64,
    /// How often the leader renews and the others look at the Lease.
    pub retry_period_ms: u64,
}

impl Default for ControllerSettings {
    fn default() -> Self {
        ControllerSettings {
            listen: SocketAddr::from(([0, 0, 0, 0], HEALTH_PORT)),
            kubernetes: Scope::default(),
            leader_election: LeaderElection::default(),
        }
    }
}

impl Default for LeaderElection {
    /// client-go's defaults: 15 s lease, 10 s renew deadline, 2 s retry.
    fn default() -> Self {
        LeaderElection {
            lease_name: LEASE_NAME.into(),
            namespace: String::new(),
            identity: String::new(),
            lease_duration_seconds: 15,
            renew_deadline_ms: 10_000,
            retry_period_ms: 2_000,
        }
    }
}

impl LeaderElection {
    pub fn lease_duration(&self) -> Duration {
        Duration::from_secs(u64::from(self.lease_duration_seconds))
    }

    pub fn renew_deadline(&self) -> Duration {
        Duration::from_millis(self.renew_deadline_ms)
    }

    pub fn retry_period(&self) -> Duration {
        Duration::from_millis(self.retry_period_ms)
    }
}

const KEYS: &[(&str, Kind)] = &[
    ("listen", Kind::Str),
    ("kubernetes.namespace", Kind::Str),
    ("kubernetes.kubeconfig", Kind::Str),
    ("leaderElection.leaseName", Kind::Str),
    ("leaderElection.namespace", Kind::Str),
    ("leaderElection.identity", Kind::Str),
    ("leaderElection.leaseDurationSeconds", Kind::Num),
    ("leaderElection.renewDeadlineMs", Kind::Num),
    ("leaderElection.retryPeriodMs", Kind::Num),
];

pub const ENV_PREFIX: &str = "TOOLGATE_CONTROLLER";

impl ControllerSettings {
    /// Reads `file` (when given), applies `TOOLGATE_CONTROLLER_*` variables, fills the
    /// identity from `HOSTNAME` when unset, and checks the values.
    pub fn load(
        file: Option<&Path>,
        vars: impl IntoIterator<Item = (String, String)>,
    ) -> Result<ControllerSettings, SettingsError> {
        let (origin, text) = file::read(file)?;
        ControllerSettings::parse(&origin, &text, vars)
    }

    pub fn parse(
        origin: &str,
        text: &str,
        vars: impl IntoIterator<Item = (String, String)>,
    ) -> Result<ControllerSettings, SettingsError> {
        let vars: Vec<(String, String)> = vars.into_iter().collect();
        let hostname = vars
            .iter()
            .find(|(name, _)| name == "HOSTNAME")
            .map(|(_, value)| value.clone());
        let mut settings: ControllerSettings = file::parse(origin, text, vars, |tree, vars| {
            env::apply_table(tree, vars, ENV_PREFIX, KEYS, &[])
        })?;
        if settings.leader_election.identity.is_empty() {
            settings.leader_election.identity = hostname.unwrap_or_default();
        }
        settings
            .check()
            .map_err(|(field, message)| file::invalid(origin, field.into(), message))?;
        Ok(settings)
    }

    fn check(&self) -> Result<(), (&'static str, String)> {
        let namespace = &self.kubernetes.namespace;
        if !namespace.is_empty() && !is_dns_label(namespace) {
            return Err((
                "kubernetes.namespace",
                format!("{namespace:?} is not a namespace name"),
            ));
        }
        let election = &self.leader_election;
        if !is_dns_subdomain(&election.lease_name) {
            let name = &election.lease_name;
            return Err((
                "leaderElection.leaseName",
                format!("{name:?} is not a Lease name"),
            ));
        }
        if !election.namespace.is_empty() && !is_dns_label(&election.namespace) {
            let name = &election.namespace;
            return Err((
                "leaderElection.namespace",
                format!("{name:?} is not a namespace name"),
            ));
        }
        if election.identity.trim().is_empty() {
            let message =
                "empty and HOSTNAME is unset: name this replica (the chart uses the pod's name)";
            return Err(("leaderElection.identity", message.into()));
        }
        if election.lease_duration_seconds == 0 {
            return Err((
                "leaderElection.leaseDurationSeconds",
                "must be at least 1".into(),
            ));
        }
        // A leader must give up before its lease can lapse, or two replicas would write.
        if election.renew_deadline() >= election.lease_duration() {
            let message = "must be shorter than leaseDurationSeconds, so a leader that can't renew stops before another takes over";
            return Err(("leaderElection.renewDeadlineMs", message.into()));
        }
        if election.retry_period_ms < 10 || election.retry_period() >= election.renew_deadline() {
            let message = "must be at least 10 and shorter than renewDeadlineMs, so a leader gets more than one try to renew";
            return Err(("leaderElection.retryPeriodMs", message.into()));
        }
        Ok(())
    }
}

/// RFC 1123 label, as Kubernetes names namespaces.
fn is_dns_label(name: &str) -> bool {
    name.len() <= 63 && !name.contains('.') && is_dns_subdomain(name)
}

#[cfg(test)]
mod tests;
