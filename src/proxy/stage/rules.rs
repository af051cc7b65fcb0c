//! rules: the grant's CEL rules over the validated arguments and the caller's identity
//! and task. Every rule must be true; the first that isn't decides the refusal.

use crate::policy::agent_policy::Grant;
use crate::policy::rule::{Bindings, Failure};
use crate::vocab::{Code, Recovery, Reject};

/// Checks the rules; `Ok(true)` when the call also needs a person's approval (the
/// grant's `approval.when` is true, fails to evaluate, or is absent).
pub fn check(grant: &Grant, bindings: &Bindings) -> Result<bool, Reject> {
    // One scope for all the rules and the approval's condition: the variables are bound
    // once per call.
    let (failed, approval) = bindings.scope(|scope| {
        let failed = grant
            .rules
            .iter()
            .find_map(|rule| rule.evaluate_in(scope).err().map(|f| (rule, f)));
        let approval = failed.is_none()
            && grant.approval.as_ref().is_some_and(|a| match &a.when {
                // Only a `false` spares the approval: an error asks for it.
                Some(when) => !matches!(when.evaluate_in(scope), Err(Failure::False)),
                None => true,
            });
        (failed, approval)
    });
    let Some((rule, failure)) = failed else {
        return Ok(approval);
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::crd::Rule;
    use crate::policy::rule::{Bindings, CompiledRule, Reads};
    use serde_json::json;
    use std::borrow::Cow;

    fn mk_grant(rules: &[(&str, &str, Option<&str>, Option<Recovery>)]) -> Grant {
        let rules: Vec<CompiledRule> = rules
            .iter()
            .map(|(name, expr, message, recovery)| {
                CompiledRule::compile(&Rule {
                    name: name.to_string(),
                    expr: expr.to_string(),
                    message: message.map(str::to_string),
                    recovery: *recovery,
                })
                .unwrap()
            })
            .collect();
        let reads = rules
            .iter()
            .fold(Reads::default(), |all, r| all.union(r.reads));
        Grant {
            rate_limit: None,
            rules,
            reads,
            headers: Default::default(),
            args: Default::default(),
            approval: None,
            requires: Vec::new(),
            budget: None,
        }
    }

    fn mk_bindings(args: serde_json::Value, task: Option<serde_json::Value>) -> Bindings<'static> {
        Bindings {
            args: Some(Cow::Owned(args)),
            args_fields: None,
            agent: Some(Cow::Owned(json!({"id": "bot", "claims": {}}))),
            task: task.map(Cow::Owned),
            session: Some(Cow::Owned(json!({"id": null, "calls": 0}))),
            request: Some(Cow::Owned(json!({}))),
        }
    }

    #[test]
    fn the_first_false_rule_decides_with_its_message_and_recovery() {
        let grant = mk_grant(&[
            (
                "small",
                "args.n < 10",
                Some("keep it small"),
                Some(Recovery::FixArguments),
            ),
            ("even", "args.n % 2 == 0", None, None),
        ]);
        assert!(check(&grant, &mk_bindings(json!({"n": 4}), None)).is_ok());
        let r = check(&grant, &mk_bindings(json!({"n": 40}), None)).unwrap_err();
        assert_eq!(
            (r.code, r.rule.as_deref(), r.message.as_str()),
            (Code::PolicyDenied, Some("small"), "keep it small")
        );
        assert_eq!(r.recovery(), Recovery::FixArguments);
        let r = check(&grant, &mk_bindings(json!({"n": 3}), None)).unwrap_err();
        assert_eq!(
            (r.rule.as_deref(), r.recovery()),
            (Some("even"), Recovery::Stop)
        );
    }

    #[test]
    fn task_rules_ask_the_user() {
        let grant = mk_grant(&[("in-task", "args.n <= task.n", None, Some(Recovery::Stop))]);
        let r = check(&grant, &mk_bindings(json!({"n": 4}), None)).unwrap_err();
        assert_eq!(
            (r.code, r.recovery()),
            (Code::OutOfTaskScope, Recovery::AskUser)
        );
        let r = check(&grant, &mk_bindings(json!({"n": 4}), Some(json!({"n": 1})))).unwrap_err();
        assert_eq!(
            (r.code, r.recovery()),
            (Code::OutOfTaskScope, Recovery::AskUser)
        );
        assert!(check(&grant, &mk_bindings(json!({"n": 1}), Some(json!({"n": 1})))).is_ok());
    }

    #[test]
    fn an_evaluation_error_denies_without_leaking_it() {
        let grant = mk_grant(&[("typed", "args.n > 1", None, None)]);
        let r = check(&grant, &mk_bindings(json!({"n": "x"}), None)).unwrap_err();
        assert_eq!(r.code, Code::PolicyDenied);
        assert!(!r.message.contains("x\""), "{}", r.message);
    }
}
