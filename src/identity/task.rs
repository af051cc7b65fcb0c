//! Task tokens (`X-Toolgate-Task`): a JWT signed by the orchestrator once a user has
//! confirmed a task. Its claims are `task` in CEL, so rules can bind arguments to what the
//! user actually asked for.
//!
//! A missing, invalid or foreign token is simply no task: rules that read `task` then
//! deny with `OUT_OF_TASK_SCOPE`. A task token names the agents it was issued to: its
//! `agent` claim, a string or an array of strings, must contain the caller's agent id,
//! so one agent can't borrow another's task. A token without `agent` is no task either,
//! unless its issuer sets `requireAgent: false`; an `agent` claim of any other shape (a
//! number, an array holding anything but strings) binds to no one.

use serde_json::{Map, Value};
use std::sync::Arc;

use super::jwks::{peek_issuer, Issuer};
use super::remote::Fetcher;
use super::verified::Verified;
use crate::config::{jwks::key_source, TaskIssuer};
use crate::vocab::agent::canonical;

/// One orchestrator trusted to sign task tokens.
struct Orchestrator {
    issuer: Arc<Issuer>,
    /// A token without an `agent` claim is no task (`requireAgent`, default true).
    require_agent: bool,
}

pub struct TaskTokens {
    orchestrators: Vec<Orchestrator>,
    verified: Verified,
}

/// What a verified token's `agent` claim says about the caller.
#[derive(Debug, PartialEq, Eq)]
enum Binding {
    /// The claim names the caller.
    Caller,
    /// There is no `agent` claim.
    Unbound,
    /// The claim names others only.
    Others,
    /// The claim is neither a string nor an array of strings.
    Malformed,
}

impl TaskTokens {
    /// The orchestrators of `config`; fetched keys are fetched through `fetcher`.
    pub fn load(config: &[TaskIssuer], fetcher: &Fetcher) -> Result<TaskTokens, String> {
        let orchestrators = config
            .iter()
            .map(|c| {
                let keys = key_source(&c.issuer, c.jwks.as_ref(), c.discovery)
                    .map_err(|e| format!("{}: {e}", c.issuer))?;
                Ok(Orchestrator {
                    issuer: Arc::new(Issuer::load(
                        &c.issuer,
                        c.audience.as_deref(),
                        &keys,
                        fetcher,
                    )?),
                    require_agent: c.require_agent,
                })
            })
            .collect::<Result<Vec<_>, String>>()?;
        Ok(TaskTokens {
            orchestrators,
            verified: Verified::default(),
        })
    }

    pub fn issuers(&self) -> impl Iterator<Item = &Arc<Issuer>> {
        self.orchestrators.iter().map(|o| &o.issuer)
    }

    /// Before a call is decided (which may read `task` and can't wait): when `token`
    /// names a key its orchestrator's fetched keys lack, waits (bounded, rate-limited)
    /// for them to refresh. Costs nothing when no orchestrator's keys are fetched or the
    /// token was verified before.
    pub async fn prepare(&self, token: &str) {
        if !self.orchestrators.iter().any(|o| o.issuer.is_fetched())
            || self.verified.get(token).is_some()
        {
            return;
        }
        let Some(iss) = peek_issuer(token) else {
            return;
        };
        if let Some(o) = self.orchestrators.iter().find(|o| o.issuer.issuer == iss) {
            if o.issuer.lacks_key_of(token) {
                o.issuer.refresh_for_unknown_key().await;
            }
        }
    }

    /// The task's claims, if `token` is a valid task token for `agent`.
    pub fn claims(&self, token: &str, agent: &str) -> Option<Value> {
        // A token verified before needs no decoding to find its issuer: the common case,
        // since an agent sends one task token with every call of the task.
        let claims = match self.verified.get(token) {
            Some(claims) => claims,
            None => self.verify(token, agent)?,
        };
        // Verified claims always carry the `iss` they were verified for.
        let orchestrator = self
            .orchestrators
            .iter()
            .find(|o| claims.get("iss").and_then(Value::as_str) == Some(&o.issuer.issuer))?;
        match binding(&claims, agent) {
            Binding::Caller => {}
            Binding::Unbound if !orchestrator.require_agent => {}
            refused => {
                tracing::info!(agent, binding = ?refused, "task token not bound to this agent");
                return None;
            }
        }
        Some(Value::Object((*claims).clone()))
    }

    fn verify(&self, token: &str, agent: &str) -> Option<Arc<Map<String, Value>>> {
        let iss = peek_issuer(token)?;
        let orchestrator = self.orchestrators.iter().find(|o| o.issuer.issuer == iss)?;
        match self
            .verified
            .get_or_verify(token, || orchestrator.issuer.verify(token))
        {
            Ok(claims) => Some(claims),
            Err(error) => {
                tracing::info!(%error, agent, "task token rejected");
                None
            }
        }
    }
}

/// Whether the token's `agent` claim names `agent`.
fn binding(claims: &Map<String, Value>, agent: &str) -> Binding {
    match claims.get("agent") {
        None => Binding::Unbound,
        Some(Value::String(named)) if same_agent(named, agent) => Binding::Caller,
        Some(Value::String(_)) => Binding::Others,
        Some(Value::Array(named)) => {
            // All strings, or the claim is not one this rule can read: a list with junk
            // in it might mean something else to whoever wrote it.
            let mut names = Vec::with_capacity(named.len());
            for value in named {
                match value.as_str() {
                    Some(name) => names.push(name),
                    None => return Binding::Malformed,
                }
            }
            if names.iter().any(|named| same_agent(named, agent)) {
                Binding::Caller
            } else {
                Binding::Others
            }
        }
        Some(_) => Binding::Malformed,
    }
}

/// Whether `named` (from a token) is `agent`, in either spelling of a ServiceAccount.
fn same_agent(named: &str, agent: &str) -> bool {
    named == agent || canonical(named).is_ok_and(|c| c == agent)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn mk_claims(agent: Value) -> Map<String, Value> {
        let mut claims = json!({"iss": "orchestrator", "exp": 1});
        if !agent.is_null() {
            claims["agent"] = agent;
        }
        claims.as_object().unwrap().clone()
    }

    #[test]
    fn the_agent_claim_must_name_the_caller() {
        let cases = [
            (json!("ops-bot"), Binding::Caller),
            (json!("other-bot"), Binding::Others),
            (json!("Ops-Bot"), Binding::Others),
            (json!(["other-bot", "ops-bot"]), Binding::Caller),
            (json!(["other-bot"]), Binding::Others),
            (json!([]), Binding::Others),
            (json!(null), Binding::Unbound),
            (json!(["ops-bot", 7]), Binding::Malformed),
            (json!(["ops-bot", ["ops-bot"]]), Binding::Malformed),
            (json!("serviceaccount:agents/ops-bot"), Binding::Others),
            (json!({"id": "ops-bot"}), Binding::Malformed),
            (json!(true), Binding::Malformed),
        ];
        for (agent, want) in cases {
            assert_eq!(
                binding(&mk_claims(agent.clone()), "ops-bot"),
                want,
                "{agent}"
            );
        }
        let mut explicit_null = mk_claims(json!(null));
        explicit_null.insert("agent".into(), Value::Null);
        assert_eq!(binding(&explicit_null, "ops-bot"), Binding::Malformed);
    }

    #[test]
    fn a_service_account_may_be_named_in_either_spelling() {
        let agent = "system:serviceaccount:agents:ops-bot";
        for named in [
            json!("serviceaccount:agents/ops-bot"),
            json!(agent),
            json!(["other", "serviceaccount:agents/ops-bot"]),
        ] {
            assert_eq!(
                binding(&mk_claims(named.clone()), agent),
                Binding::Caller,
                "{named}"
            );
        }
        let other = json!("serviceaccount:agents/other-bot");
        assert_eq!(binding(&mk_claims(other), agent), Binding::Others);
    }
}
