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
use super::verified::Verified;
use crate::config::JwtIssuer;

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
    pub fn load(config: &[JwtIssuer]) -> Result<AgentJwt, String> {
        let sources = config
            .iter()
            .map(|c| {
                Ok(Source {
                    issuer: Arc::new(Issuer::load(&c.issuer, Some(&c.audience), &c.jwks)?),
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

    /// The agent a valid token names, and who vouched for it.
    pub fn verify(&self, token: &str) -> Result<Asserted, JwtError> {
        let iss = peek_issuer(token).ok_or_else(|| JwtError::Malformed("no iss claim".into()))?;
        let source = self
            .sources
            .iter()
            .find(|s| s.issuer.issuer == iss)
            .ok_or(JwtError::NoKey)?;
        let claims = self
            .verified
            .get_or_verify(token, || source.issuer.verify(token))?;
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
