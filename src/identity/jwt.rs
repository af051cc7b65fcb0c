//! Agent identity from JWTs (`identity.jwt`): a token from a configured issuer, for the
//! configured audience, names the agent by a claim (default `sub`); all its claims become
//! `agent.claims` in CEL. That is where identity-derived values (tenant, projects) come
//! from — never from the arguments.
//!
//! An issuer with an `agentPrefix` speaks only for ids under that prefix: its agent id is
//! the prefix followed by the claim, so it can't name another source's agents
//! ([`super::namespace`]).

use serde_json::{Map, Value};
use std::sync::Arc;

use super::jwks::{peek_issuer, Issuer, JwtError};
use super::remote::Fetcher;
use super::verified::Verified;
use crate::config::{jwks::key_source, JwtIssuer};

/// One trusted issuer of agent tokens.
struct Source {
    issuer: Arc<Issuer>,
    /// The claim that names the agent.
    claim: String,
    /// Put in front of the claim to make the agent id.
    prefix: Option<String>,
    /// The issuer's `iss`, as audit records and spans name it.
    name: Arc<str>,
}

/// An agent a valid token asserts.
#[derive(Debug)]
pub struct Asserted {
    /// The agent id: the issuer's prefix, if any, then the claim.
    pub id: String,
    /// The token's issuer (`iss`).
    pub issuer: Arc<str>,
    /// Whether the id is under the issuer's own prefix.
    pub prefixed: bool,
    pub claims: Arc<Map<String, Value>>,
}

pub struct AgentJwt {
    sources: Vec<Source>,
    verified: Verified,
}

impl AgentJwt {
    /// The issuers of `config`; fetched keys are fetched through `fetcher`.
    pub fn load(config: &[JwtIssuer], fetcher: &Fetcher) -> Result<AgentJwt, String> {
        let sources = config
            .iter()
            .map(|c| {
                let keys = key_source(&c.issuer, c.jwks.as_ref(), c.discovery)
                    .map_err(|e| format!("{}: {e}", c.issuer))?;
                Ok(Source {
                    issuer: Arc::new(Issuer::load(&c.issuer, Some(&c.audience), &keys, fetcher)?),
                    claim: c.agent_claim.clone(),
                    prefix: c.agent_prefix.clone(),
                    name: Arc::from(c.issuer.as_str()),
                })
            })
            .collect::<Result<Vec<_>, String>>()?;
        Ok(AgentJwt {
            sources,
            verified: Verified::default(),
        })
    }

    pub fn issuers(&self) -> impl Iterator<Item = &Arc<Issuer>> {
        self.sources.iter().map(|s| &s.issuer)
    }

    pub fn is_empty(&self) -> bool {
        self.sources.is_empty()
    }

    /// Whether one of these issuers is the token's (`iss`, read unverified): if none
    /// is, another source may be asked.
    pub fn issues(&self, token: &str) -> bool {
        self.verified.get(token).is_some()
            || peek_issuer(token).is_some_and(|iss| self.source(&iss).is_some())
    }

    fn source(&self, iss: &str) -> Option<&Source> {
        self.sources.iter().find(|s| s.issuer.issuer == iss)
    }

    /// The agent a valid token names, and who vouched for it. A token naming a key its
    /// issuer's fetched keys lack waits (bounded) for a refresh.
    pub async fn verify(&self, token: &str) -> Result<Asserted, JwtError> {
        let claims = match self.verified.get(token) {
            Some(claims) => claims,
            None => {
                let iss =
                    peek_issuer(token).ok_or_else(|| JwtError::Malformed("no iss claim".into()))?;
                let source = self.source(&iss).ok_or(JwtError::NoKey)?;
                self.verified
                    .insert(token, source.issuer.verify_fresh(token).await?)
            }
        };
        // Verified claims always carry the `iss` they were verified for.
        let iss = claims.get("iss").and_then(Value::as_str).unwrap_or("");
        let source = self.source(iss).ok_or(JwtError::NoKey)?;
        let claim = &source.claim;
        let named = claims
            .get(claim)
            .and_then(Value::as_str)
            .filter(|a| !a.is_empty())
            .ok_or_else(|| JwtError::Invalid(format!("no {claim} claim names the agent")))?;
        let id = match &source.prefix {
            Some(prefix) => format!("{prefix}{named}"),
            None => named.to_string(),
        };
        Ok(Asserted {
            id,
            issuer: source.name.clone(),
            prefixed: source.prefix.is_some(),
            claims,
        })
    }
}
