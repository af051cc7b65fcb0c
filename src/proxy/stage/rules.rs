//! rules: the grant's CEL rules over the validated arguments and the caller's identity
//! and task. Every rule must be true; the first that isn't decides the refusal.

use crate::control::policy::Grant;
use crate::control::rule::{Bindings, Failure};
use crate::proxy::reject::{Code, Recovery, Reject};

pub fn check(grant: &Grant, bindings: &Bindings) -> Result<(), Reject> {
    // One scope for all the rules: the variables are bound once per call.
    let failed = bindings.scope(|scope| {
        grant
            .rules
            .iter()
            .find_map(|rule| rule.evaluate_in(scope).err().map(|f| (rule, f)))
    });
    let Some((rule, failure)) = failed else {
        return Ok(());
    };
    let (code, default_message) = match (&failure, rule.reads_task) {
        (Failure::NoTask, _) => (
            Code::OutOfTaskScope,
            "this call needs a confirmed task: send X-Toolgate-Task".to_string(),
        ),
        (Failure::False, true) => (
            Code::OutOfTaskScope,
            format!(
                "the call is outside the confirmed task (rule {})",
                rule.name
            ),
        ),
        (Failure::False, false) => (
            Code::PolicyDenied,
            format!("rule {} denies this call", rule.name),
        ),
        (Failure::Error(e), task) => {
            // Fail closed; the evaluation error is for operators, not for the agent.
            tracing::warn!(rule = %rule.name, error = %e, "rule evaluation failed; denying");
            let code = if task {
                Code::OutOfTaskScope
            } else {
                Code::PolicyDenied
            };
            (
                code,
                format!(
                    "rule {} could not be evaluated for these arguments",
                    rule.name
                ),
            )
        }
    };
    let message = match (&failure, &rule.message) {
        (Failure::NoTask, _) | (_, None) => default_message,
        (_, Some(m)) => m.clone(),
    };
    let recovery = if code == Code::OutOfTaskScope {
        Recovery::AskUser
    } else {
        rule.recovery.unwrap_or(Recovery::Stop)
    };
    Err(Reject::new(code, message)
        .with_rule(rule.name.clone())
        .with_recovery(recovery))
}
