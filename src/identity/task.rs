//! Task tokens (`X-Toolgate-Task`): a JWT signed by the orchestrator once a user has
//! confirmed a task. Its claims are `task` in CEL, so rules can bind arguments to what the
//! user actually asked for.
//!
//! A missing, invalid or foreign token is simply no task: rules that read `task` then
//! deny with `OUT_OF_TASK_SCOPE`. A token that names an agent (`agent` claim) is valid
//! only for that agent, so one agent can't borrow another's task.

use serde_json::{Map, Value};
use std::sync::Arc;

use super::jwks::{peek_issuer, Issuer};
use super::verified::Verified;
use crate::config::TaskIssuer;

pub struct TaskTokens {
    issuers: Vec<Arc<Issuer>>,
    verified: Verified,
}

impl TaskTokens {
    pub fn load(config: &[TaskIssuer]) -> Result<TaskTokens, String> {
        let issuers = config
            .iter()
            .map(|c| Issuer::load(&c.issuer, c.audience.as_deref(), &c.jwks).map(Arc::new))
            .collect::<Result<Vec<_>, String>>()?;
        Ok(TaskTokens {
            issuers,
            verified: Verified::default(),
        })
    }

    pub fn issuers(&self) -> impl Iterator<Item = &Arc<Issuer>> {
        self.issuers.iter()
    }

    /// The task's claims, if `token` is a valid task token for `agent`.
    pub fn claims(&self, token: &str, agent: &str) -> Option<Value> {
        // A token verified before needs no decoding to find its issuer: the common case,
        // since an agent sends one task token with every call of the task.
        let claims = match self.verified.get(token) {
            Some(claims) => claims,
            None => self.verify(token, agent)?,
        };
        if let Some(bound) = claims.get("agent").and_then(Value::as_str) {
            if bound != agent {
                tracing::info!(agent, bound, "task token belongs to another agent");
                return None;
            }
        }
        Some(Value::Object((*claims).clone()))
    }

    fn verify(&self, token: &str, agent: &str) -> Option<Arc<Map<String, Value>>> {
        let iss = peek_issuer(token)?;
        let issuer = self.issuers.iter().find(|i| i.issuer == iss)?;
        match self.verified.get_or_verify(token, || issuer.verify(token)) {
            Ok(claims) => Some(claims),
            Err(error) => {
                tracing::info!(%error, agent, "task token rejected");
                None
            }
        }
    }
}
