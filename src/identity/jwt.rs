//! Agent identity from JWTs (`identity.jwt`): a token from a configured issuer, for the
//! configured audience, names the agent by a claim (default `sub`); all its claims become
//! `agent.claims` in CEL. That is where identity-derived values (tenant, projects) come
//! from — never from the arguments.

use serde_json::{Map, Value};
use std::sync::Arc;

use super::jwks::{peek_issuer, Issuer, JwtError};
use super::verified::Verified;
use crate::config::JwtIssuer;

pub struct AgentJwt {
    issuers: Vec<(Arc<Issuer>, String)>,
    verified: Verified,
}

impl AgentJwt {
    pub fn load(config: &[JwtIssuer]) -> Result<AgentJwt, String> {
        let issuers = config
            .iter()
            .map(|c| {
                Ok((
                    Arc::new(Issuer::load(&c.issuer, Some(&c.audience), &c.jwks)?),
                    c.agent_claim.clone(),
                ))
            })
            .collect::<Result<Vec<_>, String>>()?;
        Ok(AgentJwt {
            issuers,
            verified: Verified::default(),
        })
    }

    pub fn issuers(&self) -> impl Iterator<Item = &Arc<Issuer>> {
        self.issuers.iter().map(|(i, _)| i)
    }

    pub fn is_empty(&self) -> bool {
        self.issuers.is_empty()
    }

    /// The agent id and claims of a valid token.
    pub fn verify(&self, token: &str) -> Result<(String, Arc<Map<String, Value>>), JwtError> {
        let iss = peek_issuer(token).ok_or_else(|| JwtError::Malformed("no iss claim".into()))?;
        let (issuer, claim) = self
            .issuers
            .iter()
            .find(|(i, _)| i.issuer == iss)
            .ok_or(JwtError::NoKey)?;
        let claims = self
            .verified
            .get_or_verify(token, || issuer.verify(token))?;
        let agent = claims
            .get(claim)
            .and_then(Value::as_str)
            .filter(|a| !a.is_empty())
            .ok_or_else(|| JwtError::Invalid(format!("no {claim} claim names the agent")))?;
        Ok((agent.to_string(), claims.clone()))
    }
}
