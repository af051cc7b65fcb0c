//! A grant's `requires` (DESIGN §16, docs/policies.md "Call order"), compiled: which
//! earlier calls a call needs, and the one check of a call against the earlier calls of
//! its task or session.
//!
//! `match` is CEL over `prior.args` and `args` only, compiled when the snapshot is built
//! with the same bounds as rules. The check is pure: the history it reads (successful
//! calls of the same agent and task or session, newest first) comes from the state
//! backend (`limits::history` in memory, `state::history` in Redis) or, offline, from
//! the audit log (`replay::order`), so all three decide with this one function.

use serde_json::Value;
use std::time::Duration;

use super::bindings::PriorCall;
use super::fault::FieldError;
use super::rule::{CompiledRule, Scope};
use crate::crd::{Requirement as Spec, Rule, Within};
use crate::vocab::{Code, Detail, Reject};

/// The variables a `match` may read.
pub const MATCH_VARIABLES: [&str; 2] = ["prior", "args"];

#[derive(Debug)]
pub struct Requirement {
    pub tool: String,
    pub within: Within,
    pub max_age: Option<Duration>,
    matches: Option<CompiledRule>,
}

/// An earlier successful call, as a requirement sees it.
#[derive(Debug, Clone)]
pub struct Prior<'a> {
    pub tool: &'a str,
    pub args: &'a Value,
    /// How long ago it was answered.
    pub age: Duration,
}

impl Requirement {
    /// `at`: the requirement's path (`spec.tools[1].requires[0]`).
    pub fn compile(at: &str, spec: &Spec) -> Result<Requirement, FieldError> {
        if spec.tool.trim().is_empty() {
            return Err(FieldError::spec(format!("{at}.tool"), "must name a tool"));
        }
        if spec.max_age_seconds == Some(0) {
            return Err(FieldError::spec(
                format!("{at}.maxAgeSeconds"),
                "must be positive",
            ));
        }
        let matches = match &spec.matches {
            Some(expr) => Some(
                CompiledRule::compile_over(
                    &Rule {
                        name: format!("requires {}", spec.tool),
                        expr: expr.clone(),
                        message: None,
                        recovery: None,
                    },
                    &MATCH_VARIABLES,
                )
                .map_err(|e| FieldError::rule(format!("{at}.match"), e))?,
            ),
            None => None,
        };
        Ok(Requirement {
            tool: spec.tool.clone(),
            within: spec.within,
            max_age: spec.max_age_seconds.map(Duration::from_secs),
            matches,
        })
    }

    /// Whether an earlier call must also match (`match`), not only be of the tool.
    pub fn has_match(&self) -> bool {
        self.matches.is_some()
    }

    /// Whether `prior` meets this requirement for a call with `args`. A `match` that
    /// fails to evaluate (a field missing) does not meet it.
    pub fn met_by(&self, prior: &Prior<'_>, args: &Value) -> bool {
        if prior.tool != self.tool || self.max_age.is_some_and(|max| prior.age > max) {
            return false;
        }
        let Some(matches) = &self.matches else {
            return true;
        };
        let prior = PriorCall {
            tool: prior.tool,
            args: prior.args,
        };
        super::bindings::scope_prior(matches, args, prior, |scope: &Scope<'_, '_>| {
            matches.evaluate_in(scope).is_ok()
        })
    }
}

/// Checks every requirement against `history` (the task's or session's earlier
/// successful calls): the first unmet one is `CALL_ORDER_VIOLATION`.
pub fn check<'h>(
    requirements: &[Requirement],
    history: impl Iterator<Item = Prior<'h>> + Clone,
    args: &Value,
) -> Result<(), Reject> {
    for requirement in requirements {
        if !history
            .clone()
            .any(|prior| requirement.met_by(&prior, args))
        {
            return Err(unmet(requirement));
        }
    }
    Ok(())
}

/// `CALL_ORDER_VIOLATION` for `requirement`.
pub fn unmet(requirement: &Requirement) -> Reject {
    let within = match requirement.within {
        Within::Task => "this task",
        Within::Session => "this task or session",
    };
    let matching = match &requirement.matches {
        Some(m) => format!(" (with {})", m.source),
        None => String::new(),
    };
    let age = match requirement.max_age {
        Some(max) => format!(" in the last {} s", max.as_secs()),
        None => String::new(),
    };
    Reject::new(
        Code::CallOrderViolation,
        format!(
            "call {}{matching} first: this call needs it to have succeeded earlier in {within}{age}",
            requirement.tool
        ),
    )
    .with_details(vec![Detail {
        requires: Some(requirement.tool.clone()),
        ..Detail::default()
    }])
}

/// A call whose grant `requires` something `within: task` carries no task token.
pub fn needs_task(requirement: &Requirement) -> Reject {
    Reject::new(
        Code::OutOfTaskScope,
        format!(
            "this call needs an earlier {} call in the same task, and it carries no valid task token",
            requirement.tool
        ),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn mk(expr: Option<&str>, max_age: Option<u64>) -> Requirement {
        Requirement::compile(
            "r",
            &Spec {
                tool: "get_order".into(),
                matches: expr.map(str::to_string),
                within: Within::Task,
                max_age_seconds: max_age,
            },
        )
        .unwrap()
    }

    fn prior<'a>(tool: &'a str, args: &'a Value, age: u64) -> Prior<'a> {
        Prior {
            tool,
            args,
            age: Duration::from_secs(age),
        }
    }

    #[test]
    fn a_matching_earlier_call_meets_it() {
        let r = mk(Some("prior.args.order_id == args.order_id"), Some(60));
        let (a, b) = (json!({"order_id": "A"}), json!({"order_id": "B"}));
        let history = [prior("get_order", &a, 10)];
        assert!(check(&[r], history.iter().cloned(), &a).is_ok());
        let r = mk(Some("prior.args.order_id == args.order_id"), Some(60));
        let e = check(&[r], history.iter().cloned(), &b).unwrap_err();
        assert_eq!(e.code, Code::CallOrderViolation);
        assert_eq!(e.recovery().as_str(), "call_first");
        assert_eq!(e.details[0].requires.as_deref(), Some("get_order"));
    }

    #[test]
    fn age_tool_and_errors_count_against_it() {
        let r = mk(Some("prior.args.order_id == args.order_id"), Some(60));
        let a = json!({"order_id": "A"});
        assert!(!r.met_by(&prior("get_order", &a, 61), &a), "too old");
        assert!(!r.met_by(&prior("get_customer", &a, 1), &a), "other tool");
        assert!(
            !r.met_by(&prior("get_order", &json!({}), 1), &a),
            "no field"
        );
        assert!(mk(None, None).met_by(&prior("get_order", &json!({}), 999), &a));
    }

    #[test]
    fn match_reads_only_prior_and_args() {
        let bad = |expr: &str| {
            Requirement::compile(
                "spec.tools[0].requires[0]",
                &Spec {
                    tool: "t".into(),
                    matches: Some(expr.into()),
                    within: Within::Session,
                    max_age_seconds: None,
                },
            )
            .unwrap_err()
        };
        let e = bad("prior.args.x == task.x");
        assert_eq!(e.field, "spec.tools[0].requires[0].match");
        assert!(e.message.contains("task"), "{}", e.message);
        assert!(bad("prior.args.x ==").message.contains("syntax"));
    }
}
