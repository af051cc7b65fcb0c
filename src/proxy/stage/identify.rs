//! identify: who is calling. Every call must prove it; there is no anonymous agent.

use http::HeaderMap;
use serde_json::{json, Value};
use std::sync::Arc;

use crate::identity::Tokens;
use crate::proxy::headers::bearer;
use crate::proxy::reject::{Code, Reject};

/// An authenticated caller: its id and the claims its credential carries (`agent` in CEL).
#[derive(Debug, Clone)]
pub struct Agent {
    pub id: Arc<str>,
    pub claims: Value,
}

impl Agent {
    pub fn cel_value(&self) -> Value {
        json!({"id": &*self.id, "claims": self.claims})
    }
}

/// What identifies agents: static tokens today.
pub struct Identity {
    pub tokens: Option<Arc<Tokens>>,
}

pub fn identify(identity: &Identity, headers: &HeaderMap) -> Result<Agent, Reject> {
    let Some(token) = bearer(headers) else {
        return Err(Reject::new(
            Code::Unauthenticated,
            "send the agent's credential as Authorization: Bearer <token>",
        ));
    };
    if let Some(agent) = identity.tokens.as_ref().and_then(|t| t.agent(token)) {
        return Ok(Agent {
            id: agent,
            claims: json!({}),
        });
    }
    Err(Reject::new(
        Code::Unauthenticated,
        "the credential is not valid",
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::identity::tokens::{digest_hex, TokenTable};

    fn mk_identity() -> Identity {
        let table = TokenTable::parse(&format!("ops-bot: {}", digest_hex("s3cret"))).unwrap();
        Identity {
            tokens: Some(Arc::new(Tokens::new(table))),
        }
    }

    #[test]
    fn token_names_the_agent() {
        let mut h = HeaderMap::new();
        h.insert("authorization", "Bearer s3cret".parse().unwrap());
        assert_eq!(&*identify(&mk_identity(), &h).unwrap().id, "ops-bot");
    }

    #[test]
    fn missing_or_wrong_credential_is_unauthenticated() {
        let mut h = HeaderMap::new();
        assert_eq!(
            identify(&mk_identity(), &h).unwrap_err().code,
            Code::Unauthenticated
        );
        h.insert("authorization", "Bearer nope".parse().unwrap());
        assert_eq!(
            identify(&mk_identity(), &h).unwrap_err().code,
            Code::Unauthenticated
        );
    }
}
