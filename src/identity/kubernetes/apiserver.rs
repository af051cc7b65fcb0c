//! The cluster's service-account issuer, as the API server publishes it
//! (ServiceAccountIssuerDiscovery): `/.well-known/openid-configuration` names the
//! `issuer` that projected tokens carry as `iss`, and `/openid/v1/jwks` holds the keys
//! that sign them.
//!
//! Both are read through a `kube::Client` with the sidecar's own credentials: in a pod,
//! its ServiceAccount token and the cluster CA (`KUBERNETES_SERVICE_HOST/PORT`,
//! `/var/run/secrets/kubernetes.io/serviceaccount/{token,ca.crt}`, the token re-read as
//! the kubelet rotates it); outside, a kubeconfig. Reading them needs the ClusterRole
//! `system:service-account-issuer-discovery` (bound to every ServiceAccount by default;
//! the chart binds it to the sidecars' own too).
//!
//! The keys are read from the API server's own `/openid/v1/jwks` whatever the
//! configuration's `jwks_uri` says: on a self-managed cluster that is where it points, and
//! on a managed one it names a public copy of the same keys the pod may not reach.
//! Answers are bounded like any fetched document.

use http::header::ACCEPT;
use http::Request;
use kube::Client;
use std::path::Path;
use std::sync::Arc;

use crate::identity::discovery::Configuration;
use crate::identity::fetch::{self, Document, FetchError, Shown};
use crate::identity::jwks::KeySet;
use crate::identity::remote::Fetched;

const CONFIGURATION: &str = "/.well-known/openid-configuration";
const KEYS: &str = "/openid/v1/jwks";

/// A client of the API server's issuer discovery endpoints.
pub struct ApiServer {
    client: Client,
}

impl ApiServer {
    /// In a pod: its service account; outside: `kubeconfig`, or the usual lookup
    /// (`KUBECONFIG`, `~/.kube/config`).
    pub async fn connect(kubeconfig: Option<&Path>) -> anyhow::Result<ApiServer> {
        let client =
            crate::input::kube_client::client(kubeconfig, "identity.kubernetes.kubeconfig").await?;
        Ok(ApiServer { client })
    }

    /// The issuer's keys, carrying the issuer its configuration names.
    pub async fn fetch(&self) -> Result<Fetched, FetchError> {
        let shown = shown(CONFIGURATION);
        let document = self.get(CONFIGURATION).await?;
        let configuration = Configuration::parse(&shown, &document.body)?;
        if configuration.issuer.is_empty() {
            return Err(FetchError::Unusable(shown, "the issuer is empty".into()));
        }
        let keys = self.get(KEYS).await?;
        let set = KeySet::parse_published(&keys.body)
            .map_err(|e| FetchError::Unusable(self::shown(KEYS), e))?;
        Ok(Fetched {
            keys: set.with_issuer(configuration.issuer),
            max_age: keys.max_age,
        })
    }

    async fn get(&self, path: &'static str) -> Result<Document, FetchError> {
        let shown = shown(path);
        let request = Request::get(path)
            .header(ACCEPT, "application/json")
            .body(kube::client::Body::empty())
            .map_err(|_| FetchError::Unusable(shown.clone(), "not a request path".into()))?;
        let response = self
            .client
            .send(request)
            .await
            .map_err(|e| FetchError::Unreachable(shown.clone(), e.to_string()))?;
        fetch::read(shown, response).await
    }
}

fn shown(path: &str) -> Shown {
    Shown(Arc::from(format!("the Kubernetes API server's {path}")))
}
