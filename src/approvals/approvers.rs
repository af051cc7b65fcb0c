//! Who may decide approvals: approvers are an identity class of their own, never an
//! agent credential (`approvals.approvers`).
//!
//! - A token file maps each approver's name to the SHA-256 of their bearer token and
//!   their groups: `alice: {sha256: <hex>, groups: [finance-leads]}`. Only digests are
//!   stored; a presented token is hashed and compared in constant time.
//! - JWT issuers name the approver by a claim (default `sub`) and their groups by
//!   another (default `groups`, a list of strings or one string).
//!
//! No agent credential is an approver's (DESIGN §9): an issuer may not be both an agent
//! issuer and an approver issuer for the same audience (refused at start), and at each
//! request a credential that also authenticates as an agent is refused — a static token
//! the agents' token file holds (the same digest in both files), or a JWT whose
//! audience also names the agents' audience of its issuer (`aud: [tg, approvers]`).

use serde::Deserialize;
use serde_json::Value;
use sha2::{Digest, Sha256};
use std::collections::HashMap;
use std::path::Path;
use subtle::ConstantTimeEq;

use crate::config::{jwks::key_source, ApproverJwt, Approvers as Settings};
use crate::identity::jwks::{peek_issuer, Issuer};
use crate::identity::remote::Fetcher;

/// An authenticated approver.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Approver {
    pub name: String,
    pub groups: Vec<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Entry {
    sha256: String,
    #[serde(default)]
    groups: Vec<String>,
}

struct JwtApprovers {
    issuer: Issuer,
    name_claim: String,
    groups_claim: String,
}

#[derive(Default)]
pub struct ApproverIdentity {
    by_digest: HashMap<[u8; 32], Approver>,
    jwt: Vec<JwtApprovers>,
    /// What authenticates agents, to refuse as an approver's credential.
    agents: Agents,
}

/// The agents' credentials, as far as an approver's must differ from them.
#[derive(Default)]
pub struct Agents {
    /// The agents' token file (`identity.tokens`), read as it is reloaded.
    pub tokens: Option<std::sync::Arc<crate::identity::tokens::Tokens>>,
    /// Each agent JWT issuer and its audience (`identity.jwt`).
    pub audiences: Vec<(String, String)>,
}

impl Agents {
    /// Whether `token`, or a JWT from `iss` with these `claims`, would name an agent.
    fn would_name(
        &self,
        token: &str,
        jwt: Option<(&str, &serde_json::Map<String, Value>)>,
    ) -> bool {
        if self
            .tokens
            .as_ref()
            .is_some_and(|t| t.agent(token).is_some())
        {
            return true;
        }
        let Some((iss, claims)) = jwt else {
            return false;
        };
        let audiences: Vec<&str> = match claims.get("aud") {
            Some(Value::String(aud)) => vec![aud.as_str()],
            Some(Value::Array(auds)) => auds.iter().filter_map(Value::as_str).collect(),
            _ => Vec::new(),
        };
        self.audiences
            .iter()
            .any(|(issuer, audience)| issuer == iss && audiences.contains(&audience.as_str()))
    }
}

impl ApproverIdentity {
    /// The approvers of `settings`; fetched keys are fetched through `fetcher`.
    pub fn load(
        settings: &Settings,
        agents: Agents,
        fetcher: &Fetcher,
    ) -> Result<ApproverIdentity, String> {
        let mut identity = ApproverIdentity {
            agents,
            ..ApproverIdentity::default()
        };
        if let Some(path) = &settings.tokens {
            identity.by_digest = parse_tokens(path)?;
        }
        for ApproverJwt {
            issuer,
            audience,
            jwks,
            discovery,
            name_claim,
            groups_claim,
        } in &settings.jwt
        {
            let keys = key_source(issuer, jwks.as_ref(), *discovery)
                .map_err(|e| format!("{issuer}: {e}"))?;
            identity.jwt.push(JwtApprovers {
                issuer: Issuer::load(issuer, Some(audience), &keys, fetcher)?,
                name_claim: name_claim.clone(),
                groups_claim: groups_claim.clone(),
            });
        }
        Ok(identity)
    }

    /// Whether any approver can authenticate at all.
    pub fn is_empty(&self) -> bool {
        self.by_digest.is_empty() && self.jwt.is_empty()
    }

    /// The approver a bearer token names; `None` for anything else (an agent's token).
    /// A token naming a key its issuer's fetched keys lack waits (bounded) for a refresh.
    pub async fn verify(&self, token: &str) -> Option<Approver> {
        let digest: [u8; 32] = Sha256::digest(token.as_bytes()).into();
        if let Some((stored, approver)) = self.by_digest.get_key_value(&digest) {
            if bool::from(stored.ct_eq(&digest)) && !self.agents.would_name(token, None) {
                return Some(approver.clone());
            }
            return None;
        }
        let iss = peek_issuer(token)?;
        let jwt = self.jwt.iter().find(|j| j.issuer.issuer == iss)?;
        let claims = jwt.issuer.verify_fresh(token).await.ok()?;
        if self.agents.would_name(token, Some((&iss, &claims))) {
            tracing::info!(issuer = %iss, "an approver's JWT that an agent could present too was refused");
            return None;
        }
        let name = claims
            .get(&jwt.name_claim)
            .and_then(Value::as_str)
            .filter(|n| !n.is_empty())?
            .to_string();
        let groups = match claims.get(&jwt.groups_claim) {
            Some(Value::Array(items)) => items
                .iter()
                .filter_map(Value::as_str)
                .map(String::from)
                .collect(),
            Some(Value::String(group)) => vec![group.clone()],
            _ => Vec::new(),
        };
        Some(Approver { name, groups })
    }
}

fn parse_tokens(path: &Path) -> Result<HashMap<[u8; 32], Approver>, String> {
    let text = crate::input::file::read_text(path, crate::input::file::Bound::SMALL)
        .map_err(|e| e.to_string())?;
    let entries: HashMap<String, Entry> = if text.trim().is_empty() {
        HashMap::new()
    } else {
        serde_yaml::from_str(&text).map_err(|e| {
            format!(
                "{}: expected a map of approver name to {{sha256, groups}}: {}",
                path.display(),
                crate::input::quiet::error(&e)
            )
        })?
    };
    let mut by_digest = HashMap::new();
    for (name, entry) in entries {
        let hex_digest = entry
            .sha256
            .strip_prefix("sha256:")
            .unwrap_or(&entry.sha256);
        let digest: [u8; 32] = hex::decode(hex_digest)
            .ok()
            .and_then(|b| b.try_into().ok())
            .ok_or_else(|| format!("{}: {name}: not a hex SHA-256 digest", path.display()))?;
        let approver = Approver {
            name: name.clone(),
            groups: entry.groups,
        };
        if by_digest.insert(digest, approver).is_some() {
            return Err(format!(
                "{}: {name}: the same token digest is listed twice",
                path.display()
            ));
        }
    }
    Ok(by_digest)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::identity::tokens::digest_hex;

    #[tokio::test]
    async fn tokens_name_an_approver_and_their_groups() {
        let fetcher = Fetcher::new(Default::default());
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("approvers.yaml");
        std::fs::write(
            &path,
            format!(
                "alice: {{sha256: {}, groups: [finance-leads]}}\nbob: {{sha256: {}}}\n",
                digest_hex("alice-token"),
                digest_hex("bob-token")
            ),
        )
        .unwrap();
        // carol's token is also an agent's: no approver's credential, whatever file says.
        let agents = crate::identity::tokens::TokenTable::parse(&format!(
            "carol-bot: {}\n",
            digest_hex("carol-token")
        ))
        .unwrap();
        std::fs::write(
            &path,
            format!(
                "alice: {{sha256: {}, groups: [finance-leads]}}\nbob: {{sha256: {}}}\n\
                 carol: {{sha256: {}, groups: [finance-leads]}}\n",
                digest_hex("alice-token"),
                digest_hex("bob-token"),
                digest_hex("carol-token")
            ),
        )
        .unwrap();
        let identity = ApproverIdentity::load(
            &Settings {
                tokens: Some(path.clone()),
                jwt: Vec::new(),
            },
            Agents {
                tokens: Some(std::sync::Arc::new(crate::identity::tokens::Tokens::new(
                    agents,
                ))),
                audiences: Vec::new(),
            },
            &fetcher,
        )
        .unwrap();
        assert!(identity.verify("carol-token").await.is_none());
        let alice = identity.verify("alice-token").await.unwrap();
        assert_eq!(alice.name, "alice");
        assert_eq!(alice.groups, ["finance-leads"]);
        assert_eq!(
            identity.verify("bob-token").await.unwrap().groups,
            Vec::<String>::new()
        );
        assert!(identity.verify("ops-token").await.is_none());
        std::fs::write(&path, "alice: {sha256: nope}\n").unwrap();
        assert!(ApproverIdentity::load(
            &Settings {
                tokens: Some(path),
                jwt: Vec::new(),
            },
            Agents::default(),
            &fetcher
        )
        .is_err());
    }

    /// An approver issuer that is also the agents' issuer: a JWT whose audience names
    /// both is an agent's credential too, and approves nothing.
    #[tokio::test]
    async fn a_jwt_an_agent_could_present_is_no_approvers() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/keys");
        let settings: Settings = serde_json::from_value(serde_json::json!({
            "jwt": [{"issuer": "orchestrator", "audience": "approvers",
                     "jwks": root.join("task-jwks.json")}]
        }))
        .unwrap();
        let agents = Agents {
            tokens: None,
            audiences: vec![("orchestrator".into(), "tg".into())],
        };
        let fetcher = Fetcher::new(Default::default());
        let identity = ApproverIdentity::load(&settings, agents, &fetcher).unwrap();
        let pem = std::fs::read(root.join("orchestrator-demo.pem")).unwrap();
        let key = jsonwebtoken::EncodingKey::from_ed_pem(&pem).unwrap();
        let sign = |aud: Value| {
            let mut header = jsonwebtoken::Header::new(jsonwebtoken::Algorithm::EdDSA);
            header.kid = Some("orchestrator-demo".into());
            let claims = serde_json::json!({"iss": "orchestrator", "sub": "refunder",
                "aud": aud, "groups": ["finance-leads"],
                "exp": crate::identity::jwks::now_seconds() + 300});
            jsonwebtoken::encode(&header, &claims, &key).unwrap()
        };
        let approver = identity.verify(&sign(serde_json::json!("approvers"))).await;
        assert_eq!(approver.map(|a| a.name).as_deref(), Some("refunder"));
        let both = sign(serde_json::json!(["tg", "approvers"]));
        assert!(identity.verify(&both).await.is_none());
    }
}
