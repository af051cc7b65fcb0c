//! identify: who is calling. Every call must prove it; there is no anonymous agent.
//!
//! A verified client certificate (mTLS) names the agent outright. Otherwise the bearer
//! token does: a JWT from a configured issuer, or a static token. What fails says only
//! that the credential is not valid; the reason goes to the log.

use http::HeaderMap;
use serde_json::{json, Map, Value};
use std::sync::Arc;

use crate::identity::jwt::AgentJwt;
use crate::identity::task::TaskTokens;
use crate::identity::Tokens;
use crate::proxy::headers::bearer;
use crate::tls::PeerIdentity;
use crate::vocab::{Agent, Code, Reject};

/// What identifies agents and their tasks.
#[derive(Default)]
pub struct Identity {
    pub tokens: Option<Arc<Tokens>>,
    pub jwt: Option<AgentJwt>,
    pub tasks: Option<TaskTokens>,
}

pub fn identify(
    identity: &Identity,
    headers: &HeaderMap,
    peer: Option<&PeerIdentity>,
) -> Result<Agent, Reject> {
    if let Some(peer) = peer {
        return Ok(Agent {
            id: Arc::from(peer.agent.as_str()),
            claims: json!({"san": peer.agent}),
        });
    }
    let Some(token) = bearer(headers) else {
        return Err(Reject::new(
            Code::Unauthenticated,
            "send the agent's credential as Authorization: Bearer <token>",
        ));
    };
    let invalid = || Reject::new(Code::Unauthenticated, "the credential is not valid");
    if let Some(jwt) = identity.jwt.as_ref().filter(|_| looks_like_jwt(token)) {
        return match jwt.verify(token) {
            Ok((id, claims)) => Ok(Agent {
                id: Arc::from(id.as_str()),
                claims: Value::Object(Map::clone(&claims)),
            }),
            Err(error) => {
                tracing::info!(%error, "agent JWT rejected");
                Err(invalid())
            }
        };
    }
    match identity.tokens.as_ref().and_then(|t| t.agent(token)) {
        Some(agent) => Ok(Agent {
            id: agent,
            claims: json!({}),
        }),
        None => Err(invalid()),
    }
}

fn looks_like_jwt(token: &str) -> bool {
    token.bytes().filter(|b| *b == b'.').count() == 2
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::identity::tokens::{digest_hex, TokenTable};

    fn mk_identity() -> Identity {
        let table = TokenTable::parse(&format!("ops-bot: {}", digest_hex("s3cret"))).unwrap();
        Identity {
            tokens: Some(Arc::new(Tokens::new(table))),
            ..Identity::default()
        }
    }

    #[test]
    fn token_names_the_agent() {
        let mut h = HeaderMap::new();
        h.insert("authorization", "Bearer s3cret".parse().unwrap());
        assert_eq!(&*identify(&mk_identity(), &h, None).unwrap().id, "ops-bot");
    }

    #[test]
    fn missing_or_wrong_credential_is_unauthenticated() {
        let mut h = HeaderMap::new();
        assert_eq!(
            identify(&mk_identity(), &h, None).unwrap_err().code,
            Code::Unauthenticated
        );
        h.insert("authorization", "Bearer nope".parse().unwrap());
        assert_eq!(
            identify(&mk_identity(), &h, None).unwrap_err().code,
            Code::Unauthenticated
        );
    }

    #[test]
    fn a_client_certificate_names_the_agent() {
        let peer = PeerIdentity {
            agent: "spiffe://example.org/agent/ops-bot".into(),
        };
        let agent = identify(&mk_identity(), &HeaderMap::new(), Some(&peer)).unwrap();
        assert_eq!(&*agent.id, "spiffe://example.org/agent/ops-bot");
    }
}
