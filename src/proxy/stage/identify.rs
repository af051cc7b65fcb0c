//! identify: who is calling. Every call must prove it; there is no anonymous agent.
//!
//! A verified client certificate (mTLS) names the agent outright. Otherwise the bearer
//! token does: a JWT from a configured issuer (`identity.jwt`, matched by `iss`), else a
//! projected ServiceAccount token (`identity.kubernetes`), or a static token. Then,
//! whatever the source, the id must be one that source may assert ([`Namespaces`]: no
//! control characters, no other source's prefix), and with `identity.oauth` the
//! credential must carry every required scope. Every door of the agent port (REST, MCP)
//! calls this one function, so none can skip a step.
//!
//! It is async only because fetched keys may need a refresh: a token naming a key its
//! issuer's fetched set lacks waits (bounded, rate-limited) for fresh keys — and so does
//! a task token, here, before the decision that may read it and can't wait. With keys in
//! hand nothing waits.
//!
//! What fails says only that the credential is not valid, with the `WWW-Authenticate`
//! challenge its answer carries; the reason goes to the log.

use http::{HeaderMap, HeaderValue};
use serde_json::{json, Map, Value};
use std::sync::{Arc, LazyLock};

use crate::identity::credential::{presented, Presented};
use crate::identity::jwks::JwtError;
use crate::identity::jwt::{AgentJwt, Asserted};
use crate::identity::kubernetes::Workload;
use crate::identity::namespace::Namespaces;
use crate::identity::task::TaskTokens;
use crate::identity::Tokens;
use crate::proxy::mcp::oauth::ResourceServer;
use crate::tls::PeerIdentity;
use crate::vocab::agent::{MTLS_ISSUER, TOKENS_ISSUER};
use crate::vocab::{Agent, Code, Reject};

/// What identifies agents and their tasks, and what their credentials must carry.
#[derive(Default)]
pub struct Identity {
    pub tokens: Option<Arc<Tokens>>,
    pub jwt: Option<AgentJwt>,
    pub tasks: Option<TaskTokens>,
    /// `identity.kubernetes`: projected ServiceAccount tokens.
    pub workload: Option<Workload>,
    /// `identity.oauth`: challenges that name the metadata, and required scopes.
    pub oauth: Option<ResourceServer>,
    /// Every JWT issuer's `agentPrefix`, and the ServiceAccount prefixes with workload
    /// identity: what other sources may not assert.
    pub namespaces: Namespaces,
}

/// A caller that was not admitted: the refusal (401, or 403 for a missing scope) and the
/// `WWW-Authenticate` challenge its answer must carry.
#[derive(Debug)]
pub struct Unidentified {
    pub reject: Reject,
    pub challenge: HeaderValue,
}

pub async fn identify(
    identity: &Identity,
    headers: &HeaderMap,
    peer: Option<&PeerIdentity>,
) -> Result<Agent, Box<Unidentified>> {
    let credential = presented(headers);
    let refuse = |message: &str| {
        Box::new(Unidentified {
            reject: Reject::new(Code::Unauthenticated, message),
            challenge: challenge(identity, credential.any()),
        })
    };
    let (agent, prefixed) = match credential_agent(identity, credential, peer).await {
        Ok(found) => found,
        Err(message) => return Err(refuse(message)),
    };
    if let Err(error) = identity.namespaces.admit(&agent.id, prefixed) {
        tracing::info!(%error, issuer = %agent.issuer, "agent id refused");
        return Err(refuse(INVALID));
    }
    if let Some((reject, challenge)) = identity
        .oauth
        .as_ref()
        .and_then(|rs| rs.insufficient(&agent))
    {
        return Err(Box::new(Unidentified { reject, challenge }));
    }
    prepare_task(identity, headers).await;
    Ok(agent)
}

/// Lets a task token's fetched keys refresh now if they lack its key: the decision reads
/// `task` later, where nothing may wait.
async fn prepare_task(identity: &Identity, headers: &HeaderMap) {
    let Some(tasks) = &identity.tasks else {
        return;
    };
    if let Some(token) = headers
        .get(crate::proxy::headers::TASK)
        .and_then(|v| v.to_str().ok())
    {
        tasks.prepare(token.trim()).await;
    }
}

const INVALID: &str = "the credential is not valid";

/// The issuers of the two sources that are not JWTs, shared rather than allocated per call.
static TOKENS: LazyLock<Arc<str>> = LazyLock::new(|| Arc::from(TOKENS_ISSUER));
static MTLS: LazyLock<Arc<str>> = LazyLock::new(|| Arc::from(MTLS_ISSUER));

/// The agent the credential names, and whether its id is under its issuer's own prefix;
/// `Err` with what the agent is told.
async fn credential_agent(
    identity: &Identity,
    credential: Presented<'_>,
    peer: Option<&PeerIdentity>,
) -> Result<(Agent, bool), &'static str> {
    // Two credentials name no one, whichever would win (a certificate included).
    if credential == Presented::Repeated {
        return Err("send one Authorization header, not several");
    }
    if let Some(peer) = peer {
        let agent = Agent {
            id: Arc::from(peer.agent.as_str()),
            issuer: MTLS.clone(),
            claims: json!({"san": peer.agent}),
        };
        return Ok((agent, false));
    }
    let token = match credential {
        Presented::Bearer(token) => token,
        Presented::Nothing => {
            return Err("send the agent's credential as Authorization: Bearer <token>")
        }
        Presented::Unusable | Presented::Repeated => return Err(INVALID),
    };
    if looks_like_jwt(token) {
        if let Some(verdict) = token_agent(identity, token).await {
            return verdict;
        }
    }
    match identity.tokens.as_ref().and_then(|t| t.agent(token)) {
        Some(id) => Ok((
            Agent {
                id,
                issuer: TOKENS.clone(),
                claims: json!({}),
            },
            false,
        )),
        None => Err(INVALID),
    }
}

/// The agent a JWT names: from the `identity.jwt` issuer its `iss` names, else from the
/// cluster (workload identity). `None` when neither source is configured.
async fn token_agent(
    identity: &Identity,
    token: &str,
) -> Option<Result<(Agent, bool), &'static str>> {
    let verdict = match (&identity.jwt, &identity.workload) {
        // Only with both is the token's issuer looked at first, to pick the source.
        (Some(jwt), Some(workload)) if !jwt.issues(token) => workload.verify(token).await,
        (Some(jwt), _) => jwt.verify(token).await,
        (None, Some(workload)) => workload.verify(token).await,
        (None, None) => return None,
    };
    Some(admitted(identity, verdict))
}

/// A verified token's agent, unless it names a token-file agent without a prefix.
fn admitted(
    identity: &Identity,
    verdict: Result<Asserted, JwtError>,
) -> Result<(Agent, bool), &'static str> {
    match verdict {
        // A bare id the token file names is the token file's agent: an issuer without a
        // prefix (only the first may go without) can't speak for it.
        Ok(asserted)
            if !asserted.prefixed
                && identity
                    .tokens
                    .as_ref()
                    .is_some_and(|t| t.names(&asserted.id)) =>
        {
            tracing::info!(issuer = %asserted.issuer, "agent id refused: the token file names it");
            Err(INVALID)
        }
        Ok(asserted) => Ok((
            Agent {
                id: Arc::from(asserted.id.as_str()),
                issuer: asserted.issuer,
                claims: Value::Object(Map::clone(&asserted.claims)),
            },
            asserted.prefixed,
        )),
        Err(error) => {
            tracing::info!(%error, "agent JWT rejected");
            Err(INVALID)
        }
    }
}

/// The challenge of a refused credential (RFC 9110, RFC 6750): with OAuth, the one that
/// names the resource metadata; otherwise plain `Bearer`, saying the token was invalid
/// when one was presented.
fn challenge(identity: &Identity, presented: bool) -> HeaderValue {
    match (&identity.oauth, presented) {
        (Some(rs), _) => rs.challenge(presented),
        (None, true) => HeaderValue::from_static(r#"Bearer error="invalid_token""#),
        (None, false) => HeaderValue::from_static("Bearer"),
    }
}

fn looks_like_jwt(token: &str) -> bool {
    token.bytes().filter(|b| *b == b'.').count() == 2
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::identity::tokens::{digest_hex, TokenTable};

    fn mk_identity(tokens: &str) -> Identity {
        let table = TokenTable::parse(tokens).unwrap();
        Identity {
            tokens: Some(Arc::new(Tokens::new(table))),
            namespaces: Namespaces::new(["partner:"]),
            ..Identity::default()
        }
    }

    fn mk_ops() -> Identity {
        mk_identity(&format!("ops-bot: {}", digest_hex("s3cret")))
    }

    fn mk_bearer(values: &[&str]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for v in values {
            h.append("authorization", v.parse().unwrap());
        }
        h
    }

    #[tokio::test]
    async fn token_names_the_agent_and_its_issuer() {
        let agent = identify(&mk_ops(), &mk_bearer(&["Bearer s3cret"]), None)
            .await
            .unwrap();
        assert_eq!(&*agent.id, "ops-bot");
        assert_eq!(&*agent.issuer, "tokens");
    }

    #[tokio::test]
    async fn missing_or_wrong_credential_is_unauthenticated_with_a_challenge() {
        let refused = identify(&mk_ops(), &HeaderMap::new(), None)
            .await
            .unwrap_err();
        assert_eq!(refused.reject.code, Code::Unauthenticated);
        assert_eq!(refused.reject.status(), 401);
        assert_eq!(refused.challenge, "Bearer");
        for sent in [&["Bearer nope"][..], &["Basic b3BzOnMzY3JldA=="]] {
            let refused = identify(&mk_ops(), &mk_bearer(sent), None)
                .await
                .unwrap_err();
            assert_eq!(refused.reject.code, Code::Unauthenticated, "{sent:?}");
            assert_eq!(refused.challenge, r#"Bearer error="invalid_token""#);
        }
    }

    #[tokio::test]
    async fn two_authorization_headers_name_no_one() {
        let two = mk_bearer(&["Bearer s3cret", "Bearer s3cret"]);
        let refused = identify(&mk_ops(), &two, None).await.unwrap_err();
        assert_eq!(refused.reject.code, Code::Unauthenticated);
        assert!(refused.reject.message.contains("one Authorization header"));
        let peer = PeerIdentity {
            agent: "spiffe://example.org/agent/ops-bot".into(),
        };
        assert!(identify(&mk_ops(), &two, Some(&peer)).await.is_err());
    }

    #[tokio::test]
    async fn a_client_certificate_names_the_agent() {
        let peer = PeerIdentity {
            agent: "spiffe://example.org/agent/ops-bot".into(),
        };
        let agent = identify(&mk_ops(), &HeaderMap::new(), Some(&peer))
            .await
            .unwrap();
        assert_eq!(&*agent.id, "spiffe://example.org/agent/ops-bot");
        assert_eq!(&*agent.issuer, "mtls");
    }

    #[tokio::test]
    async fn an_unprefixed_source_cannot_name_a_prefixed_or_unprintable_id() {
        let identity = mk_identity(&format!(
            "\"partner:ops-bot\": {}\n\"ops\\u0085bot\": {}\n",
            digest_hex("borrowed"),
            digest_hex("c1")
        ));
        for token in ["Bearer borrowed", "Bearer c1"] {
            let refused = identify(&identity, &mk_bearer(&[token]), None)
                .await
                .unwrap_err();
            assert_eq!(refused.reject.code, Code::Unauthenticated, "{token}");
        }
        let peer = PeerIdentity {
            agent: "ops\nbot".into(),
        };
        assert!(identify(&identity, &HeaderMap::new(), Some(&peer))
            .await
            .is_err());
    }
}
