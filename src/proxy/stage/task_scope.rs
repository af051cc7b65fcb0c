//! task scope: what a call's session limits and call history key on (DESIGN §16).
//!
//! Only a policy with session limits or `requires` asks (`Policy::keys_on_task`): for
//! any other the call's scope is its session id and its task token is not read here. A
//! call that carries a valid task token naming a task id (`task_id`, else `jti`) is
//! scoped to that task, whatever session id it sends; `session.requireTask: true`
//! refuses a call without one (`OUT_OF_TASK_SCOPE`).

use crate::limits::scope;
use crate::policy::agent_policy::Policy;
use crate::proxy::task_token::Presented;
use crate::vocab::{Code, Reject};

/// The task or session whose calls `session.calls` counts: the one the call's session
/// limits key on ([`task_scope`]), so a rule counting calls holds across invented
/// session ids as `maxCalls` does. (The refusal `requireTask` makes is [`task_scope`]'s,
/// later: here a call without a task counts its session.)
pub fn counted<'a>(
    policy: &Policy,
    token: &Presented<'_>,
    session: Option<&'a str>,
) -> Option<std::borrow::Cow<'a, str>> {
    match task_scope(policy, token) {
        Ok(Some(task)) => Some(task.into()),
        _ => session.map(Into::into),
    }
}

/// The task scope of the call, if it carries a task token naming a task; `Err` when the
/// policy requires one and it doesn't.
pub fn task_scope(policy: &Policy, token: &Presented<'_>) -> Result<Option<String>, Reject> {
    if !policy.keys_on_task {
        return Ok(None);
    }
    let task = token.claims().and_then(scope::task_id).map(scope::task);
    if task.is_none() && policy.session.is_some_and(|s| s.require_task) {
        return Err(Reject::new(
            Code::OutOfTaskScope,
            "this agent's calls must carry a task token naming a task (session.requireTask); \
             ask the orchestrator for one",
        ));
    }
    Ok(task)
}
