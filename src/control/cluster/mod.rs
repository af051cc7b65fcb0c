//! The cluster source (`policies.kubernetes`): `ToolContract` and `AgentPolicy` objects of
//! the sidecar's namespace, watched with kube-rs and fed through the same index → snapshot
//! path as files. The only code that talks to the API server.
//!
//! Layout: [`watch`] runs one watcher per kind, [`sync`] turns their events into `Control`
//! updates (pure, tested by feeding events), [`convert`] reads one object like the file
//! parser does, [`labels`] reads the pod's labels for `workloadSelector`.

pub mod convert;
pub mod labels;
pub mod sync;
pub mod watch;

use kube::api::{Api, ApiResource, DynamicObject};
use kube::Client;
use std::collections::BTreeMap;
use std::sync::Arc;
use tokio::sync::mpsc;

use super::Control;
use crate::config::Kubernetes;
use crate::crd::{AgentPolicy, ToolContract};

/// A watched kind. Each is its own index source, so a relist of one replaces only it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Kind {
    ToolContract,
    AgentPolicy,
}

impl Kind {
    /// Contracts first: policies name contracts' tools.
    pub const ALL: [Kind; 2] = [Kind::ToolContract, Kind::AgentPolicy];

    pub fn name(self) -> &'static str {
        match self {
            Kind::ToolContract => "ToolContract",
            Kind::AgentPolicy => "AgentPolicy",
        }
    }

    /// The index source this kind reports as; readiness waits for both.
    pub fn source(self) -> &'static str {
        match self {
            Kind::ToolContract => "cluster/toolcontracts",
            Kind::AgentPolicy => "cluster/agentpolicies",
        }
    }

    pub fn api_resource(self) -> ApiResource {
        match self {
            Kind::ToolContract => ApiResource::erase::<ToolContract>(&()),
            Kind::AgentPolicy => ApiResource::erase::<AgentPolicy>(&()),
        }
    }
}

/// What the cluster source needs, resolved at start so a bad setting fails the start.
pub struct Cluster {
    pub client: Client,
    pub namespace: String,
    pub pod_labels: BTreeMap<String, String>,
}

impl Cluster {
    /// In a pod: the service account (`Config::infer`); outside: `policies.kubernetes.kubeconfig`
    /// when set, else `KUBECONFIG` or `~/.kube/config`.
    pub async fn connect(settings: &Kubernetes) -> anyhow::Result<Cluster> {
        let client = crate::input::kube_client::client(
            settings.kubeconfig.as_deref(),
            "policies.kubernetes.kubeconfig",
        )
        .await?;
        let pod_labels = labels::load(&settings.pod_labels_file)?;
        Ok(Cluster {
            client,
            namespace: settings.namespace.clone(),
            pod_labels,
        })
    }

    /// Watches both kinds until the task is dropped.
    pub async fn run(self, control: Arc<Control>) {
        let (events, mut received) = mpsc::channel(64);
        let watchers = Kind::ALL.map(|kind| {
            let api: Api<DynamicObject> =
                Api::namespaced_with(self.client.clone(), &self.namespace, &kind.api_resource());
            watch::watch(kind, api, events.clone())
        });
        drop(events);
        let apply = async move {
            let mut sync = sync::Sync::new(control);
            while let Some((kind, item)) = received.recv().await {
                sync.handle(kind, item);
            }
        };
        tracing::info!(namespace = %self.namespace, "watching ToolContract and AgentPolicy objects");
        let [contracts, policies] = watchers;
        tokio::join!(contracts, policies, apply);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// In a pod the API server is https: the TLS stack must resolve one crypto provider
    /// (`ring`) by itself, or every sidecar would panic at start.
    #[tokio::test]
    async fn an_https_client_builds() {
        let config = kube::Config::new("https://10.96.0.1:443".parse().unwrap());
        assert!(Client::try_from(config).is_ok());
    }

    #[test]
    fn kinds_know_their_resources() {
        assert_eq!(Kind::AgentPolicy.api_resource().plural, "agentpolicies");
        assert_eq!(Kind::ToolContract.api_resource().plural, "toolcontracts");
        assert_eq!(Kind::ALL.map(Kind::name), ["ToolContract", "AgentPolicy"]);
    }
}
