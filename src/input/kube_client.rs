//! A Kubernetes API client from a kubeconfig setting: the one way the cluster source, the
//! workload-identity key fetcher and the controller connect.
//!
//! In a pod: its ServiceAccount (`Config::infer`). Outside: the kubeconfig the setting
//! names, checked as every file is (a regular file, bounded) before kube reads it again
//! itself to resolve its relative certificate paths; its parse errors lose the values
//! they quote. Without the setting: `KUBECONFIG`, then `~/.kube/config`.

use anyhow::Context as _;
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Client, Config};
use std::path::Path;

use super::file::{read_text, Bound};
use super::quiet;

/// A client for the API server; `setting` names the kubeconfig setting in errors.
pub async fn client(kubeconfig: Option<&Path>, setting: &str) -> anyhow::Result<Client> {
    let config = match kubeconfig {
        Some(path) => {
            read_text(path, Bound::SMALL).map_err(|e| anyhow::anyhow!("{setting}: {e}"))?;
            let kubeconfig = Kubeconfig::read_from(path).map_err(|e| {
                anyhow::anyhow!("{setting} {}: {}", path.display(), quiet::error(&e))
            })?;
            Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default()).await?
        }
        None => Config::infer()
            .await
            .context("no Kubernetes API config (in-cluster service account or kubeconfig)")?,
    };
    Client::try_from(config).context("Kubernetes client")
}
