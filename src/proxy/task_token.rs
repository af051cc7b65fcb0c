//! The task token a call presents (`X-Toolgate-Task`), verified at most once per call.
//!
//! Two steps read it: rules that read `task` (`proxy::decide`) and the task scope of
//! DESIGN §16 (`stage::task_scope`). Each looked the token up on its own, so a call of a
//! policy with both paid for it twice (a hash of the token and a copy of its claims, or
//! the signature check on a cache miss), and the two could in principle disagree should
//! a key rotate between them. The call now carries one [`Presented`], which verifies on
//! first read and keeps the answer.

use http::HeaderMap;
use serde_json::Value;
use std::sync::OnceLock;

use crate::identity::task::TaskTokens;

/// A call's task token, verified for its agent on first read.
pub struct Presented<'a> {
    headers: &'a HeaderMap,
    agent: &'a str,
    tasks: Option<&'a TaskTokens>,
    claims: OnceLock<Option<Value>>,
}

impl<'a> Presented<'a> {
    /// `tasks`: the sidecar's task-token verifier; `None` (none configured) reads as no
    /// token.
    pub fn new(headers: &'a HeaderMap, agent: &'a str, tasks: Option<&'a TaskTokens>) -> Self {
        Presented {
            headers,
            agent,
            tasks,
            claims: OnceLock::new(),
        }
    }

    /// The token's claims, if the call carries a valid one naming its agent.
    pub fn claims(&self) -> Option<&Value> {
        self.claims
            .get_or_init(|| {
                let token = self
                    .headers
                    .get(crate::proxy::headers::TASK)?
                    .to_str()
                    .ok()?;
                self.tasks?.claims(token.trim(), self.agent)
            })
            .as_ref()
    }
}
