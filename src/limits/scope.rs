//! What a call's session limits (`maxCalls`, `maxRepeats`, `maxSame`) and its call
//! history (`requires`) key on: its task when it carries a task token, else the session
//! id the client sent (DESIGN §16).
//!
//! A task scope is the task id behind a mark no header value can hold (a NUL byte), so
//! a client naming its session `task:…` can never share a task's tallies or history.

use serde_json::Value;
use std::borrow::Cow;

const TASK_MARK: &str = "\u{0}task:";

/// The scope of the task `id`.
pub fn task(id: &str) -> String {
    let mut scope = String::with_capacity(TASK_MARK.len() + id.len());
    scope.push_str(TASK_MARK);
    scope.push_str(id);
    scope
}

/// The task id a verified task token's claims name: `task_id`, else `jti`.
pub fn task_id(claims: &Value) -> Option<&str> {
    ["task_id", "jti"]
        .iter()
        .find_map(|name| claims.get(*name).and_then(Value::as_str))
        .filter(|id| !id.is_empty())
}

/// The task id of a task scope (`None` for a session), as the audit record keeps it.
pub fn task_label(scope: &str) -> String {
    scope.strip_prefix(TASK_MARK).unwrap_or(scope).to_string()
}

/// The scope as an approval or a log shows it: `task:T-1` (never the NUL mark) or the
/// session id.
pub fn shown(scope: &str) -> String {
    match scope.strip_prefix(TASK_MARK) {
        Some(id) => format!("task:{id}"),
        None => scope.to_string(),
    }
}

/// How a message names the scope: `task T-1` or `session s1`.
pub fn label(scope: &str) -> Cow<'_, str> {
    match scope.strip_prefix(TASK_MARK) {
        Some(id) => Cow::Owned(format!("task {id}")),
        None => Cow::Owned(format!("session {scope}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn tasks_and_sessions_never_share_a_scope() {
        assert_ne!(task("T1"), "task:T1");
        assert_eq!(label(&task("T1")), "task T1");
        assert_eq!(label("task:T1"), "session task:T1");
        assert_eq!(task_id(&json!({"jti": "j", "task_id": "t"})), Some("t"));
        assert_eq!(task_id(&json!({"jti": "j"})), Some("j"));
        assert_eq!(task_id(&json!({"jti": ""})), None);
        assert_eq!(task_id(&json!({"sub": "x"})), None);
    }
}
