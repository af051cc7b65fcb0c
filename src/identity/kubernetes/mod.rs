//! Workload identity (`identity.kubernetes`, DESIGN §15): an agent in the cluster sends
//! a projected ServiceAccount token, requested for one of `audiences`, as its bearer
//! token; nothing is handed out by hand.
//!
//! The token is verified with the cluster's service-account issuer keys, fetched from
//! the API server ([`apiserver`]) and kept fresh like any fetched key set
//! (`identity::remote`): `iss` must be the issuer the API server's discovery document
//! names, `aud` must hold one of `audiences` (never the API server's own, so the pod's
//! API token is no agent credential), `exp` is required and `nbf` honoured.
//!
//! The agent id is the token's `sub`, `system:serviceaccount:<namespace>:<name>`, and
//! must agree with the token's `kubernetes.io` claim. That prefix is this source's own:
//! no other source may assert an id under it (`identity::namespace`). All claims are
//! `agent.claims` in CEL (`agent.claims["kubernetes.io"].namespace`, `.pod.name`,
//! `.serviceaccount.uid`). Audit records and spans name the issuer `kubernetes`.

pub mod apiserver;

use serde_json::{Map, Value};
use std::sync::{Arc, LazyLock};

pub use apiserver::ApiServer;

use super::jwks::{peek_issuer, Issuer, JwtError};
use super::jwt::Asserted;
use super::remote::{Fetcher, Origin};
use super::verified::Verified;
use crate::config::KubernetesIdentity;
use crate::vocab::agent::{service_account, KUBERNETES_ISSUER};

static ISSUER: LazyLock<Arc<str>> = LazyLock::new(|| Arc::from(KUBERNETES_ISSUER));

/// The cluster as a source of agent identities.
pub struct Workload {
    issuer: Arc<Issuer>,
    verified: Verified,
}

impl Workload {
    /// Connects to the API server and starts fetching the issuer's keys (not waiting for
    /// them: see [`Issuer::first_fetch`]).
    pub async fn connect(
        settings: &KubernetesIdentity,
        fetcher: &Fetcher,
    ) -> anyhow::Result<Workload> {
        let api = ApiServer::connect(settings.kubeconfig.as_deref()).await?;
        Workload::with_api(api, settings.audiences.clone(), fetcher)
    }

    fn with_api(
        api: ApiServer,
        audiences: Vec<String>,
        fetcher: &Fetcher,
    ) -> anyhow::Result<Workload> {
        let issuer = Issuer::fetched(
            KUBERNETES_ISSUER,
            false,
            audiences,
            Origin::ApiServer(api),
            fetcher,
        )
        .map_err(anyhow::Error::msg)?;
        Ok(Workload {
            issuer: Arc::new(issuer),
            verified: Verified::default(),
        })
    }

    pub fn issuer(&self) -> &Arc<Issuer> {
        &self.issuer
    }

    /// The agent a valid token names.
    pub async fn verify(&self, token: &str) -> Result<Asserted, JwtError> {
        if let Some(claims) = self.verified.get(token) {
            return asserted(claims);
        }
        let iss = peek_issuer(token).ok_or_else(|| JwtError::Malformed("no iss claim".into()))?;
        // Keys in hand name the cluster's issuer: a token of another needs no refresh.
        if self.issuer.rules_out_iss(&iss) {
            return Err(JwtError::Invalid(
                "the token is not from this cluster's issuer".into(),
            ));
        }
        let claims = self.issuer.verify_fresh(token).await?;
        asserted(self.verified.insert(token, claims))
    }
}

/// The ServiceAccount of verified claims, as an agent.
fn asserted(claims: Arc<Map<String, Value>>) -> Result<Asserted, JwtError> {
    let sub = claims.get("sub").and_then(Value::as_str).unwrap_or("");
    let (namespace, name) = service_account(sub).ok_or_else(|| {
        JwtError::Invalid("sub is not system:serviceaccount:<namespace>:<name>".into())
    })?;
    // Projected tokens say the same thing twice; a token where the two disagree is not one
    // the API server made.
    if let Some(pod) = claims.get("kubernetes.io") {
        let said = |pointer: &str| pod.pointer(pointer).and_then(Value::as_str);
        if said("/namespace") != Some(namespace) || said("/serviceaccount/name") != Some(name) {
            return Err(JwtError::Invalid(
                "the kubernetes.io claim names another ServiceAccount than sub".into(),
            ));
        }
    }
    Ok(Asserted {
        id: sub.to_string(),
        issuer: ISSUER.clone(),
        prefixed: true,
        claims,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn mk_claims(value: Value) -> Arc<Map<String, Value>> {
        Arc::new(value.as_object().unwrap().clone())
    }

    #[test]
    fn the_agent_is_the_service_account() {
        let agent = asserted(mk_claims(json!({
            "sub": "system:serviceaccount:agents:ops-bot",
            "kubernetes.io": {"namespace": "agents", "serviceaccount": {"name": "ops-bot", "uid": "u-1"},
                              "pod": {"name": "ops-bot-7d9", "uid": "p-1"}},
        })))
        .unwrap();
        assert_eq!(agent.id, "system:serviceaccount:agents:ops-bot");
        assert_eq!(&*agent.issuer, "kubernetes");
        assert!(agent.prefixed);
        assert_eq!(agent.claims["kubernetes.io"]["pod"]["name"], "ops-bot-7d9");
    }

    #[test]
    fn a_sub_that_is_no_service_account_or_disagrees_is_refused() {
        for claims in [
            json!({"sub": "ops-bot"}),
            json!({"sub": "system:serviceaccount:agents"}),
            json!({"sub": "system:serviceaccount:agents:ops-bot",
                   "kubernetes.io": {"namespace": "other", "serviceaccount": {"name": "ops-bot"}}}),
            json!({"sub": "system:serviceaccount:agents:ops-bot",
                   "kubernetes.io": {"namespace": "agents", "serviceaccount": {"name": "admin"}}}),
            json!({"sub": "system:serviceaccount:agents:ops-bot", "kubernetes.io": {}}),
            json!({}),
        ] {
            assert!(asserted(mk_claims(claims.clone())).is_err(), "{claims}");
        }
    }
}
