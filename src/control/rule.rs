//! CEL rules, compiled when the snapshot is built and evaluated after schema validation.
//!
//! Compilation also bounds cost, since CEL can't be interrupted once it runs: an
//! expression has at most [`MAX_NODES`] nodes and no comprehension nested inside another
//! (`all`, `exists`, `map`, `filter`). Evaluation is then linear in the size of the
//! validated arguments, which `limits.maxBodyBytes` bounds. Only the five variables of
//! DESIGN §2 may be read; anything else is a compile error, not a runtime surprise.

use cel::common::ast::{EntryExpr, Expr, IdedExpr};
use cel::{Context, Program, Value};
use serde_json::Value as Json;
use std::collections::HashSet;

use crate::crd::Rule;
use crate::proxy::reject::Recovery;

pub const VARIABLES: [&str; 5] = ["args", "agent", "task", "session", "request"];
pub const MAX_NODES: usize = 512;

pub struct CompiledRule {
    pub name: String,
    pub source: String,
    pub message: Option<String>,
    pub recovery: Option<Recovery>,
    /// Reads `task`: a denial is `OUT_OF_TASK_SCOPE`, and no task token denies it.
    pub reads_task: bool,
    program: Program,
}

impl std::fmt::Debug for CompiledRule {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CompiledRule")
            .field("name", &self.name)
            .field("source", &self.source)
            .finish()
    }
}

/// The values a rule sees, already converted once per call.
pub struct Bindings {
    pub args: Value,
    pub agent: Value,
    pub task: Option<Value>,
    pub session: Value,
    pub request: Value,
}

impl Bindings {
    pub fn new(
        args: &Json,
        agent: &Json,
        task: Option<&Json>,
        session: &Json,
        request: &Json,
    ) -> Result<Bindings, String> {
        let conv = |v: &Json| cel::to_value(v).map_err(|e| e.to_string());
        Ok(Bindings {
            args: conv(args)?,
            agent: conv(agent)?,
            task: task.map(conv).transpose()?,
            session: conv(session)?,
            request: conv(request)?,
        })
    }
}

/// Why a rule did not pass.
#[derive(Debug, Clone, PartialEq)]
pub enum Failure {
    False,
    NoTask,
    Error(String),
}

impl CompiledRule {
    pub fn compile(rule: &Rule) -> Result<CompiledRule, String> {
        if rule.name.trim().is_empty() {
            return Err("the rule needs a name".into());
        }
        let program = Program::compile(&rule.expr).map_err(|e| format!("CEL syntax: {e}"))?;
        let mut walk = Walk::default();
        walk.visit(program.expression(), 0, &mut Vec::new());
        if let Some(problem) = walk.problem {
            return Err(problem);
        }
        if walk.nodes > MAX_NODES {
            return Err(format!(
                "expression too large: {} nodes (at most {MAX_NODES})",
                walk.nodes
            ));
        }
        if let Some(unknown) = walk.free.iter().find(|v| !VARIABLES.contains(&v.as_str())) {
            return Err(format!(
                "unknown variable {unknown:?} (rules may read {})",
                VARIABLES.join(", ")
            ));
        }
        Ok(CompiledRule {
            name: rule.name.clone(),
            source: rule.expr.clone(),
            message: rule.message.clone(),
            recovery: rule.recovery,
            reads_task: walk.free.contains("task"),
            program,
        })
    }

    /// Runs the rule. Anything but `true` fails: an error denies, never allows.
    pub fn evaluate(&self, bindings: &Bindings) -> Result<(), Failure> {
        let mut ctx = Context::default();
        ctx.add_variable_from_value("args", bindings.args.clone());
        ctx.add_variable_from_value("agent", bindings.agent.clone());
        ctx.add_variable_from_value("session", bindings.session.clone());
        ctx.add_variable_from_value("request", bindings.request.clone());
        match &bindings.task {
            Some(task) => ctx.add_variable_from_value("task", task.clone()),
            None if self.reads_task => return Err(Failure::NoTask),
            None => {}
        }
        match self.program.execute(&ctx) {
            Ok(Value::Bool(true)) => Ok(()),
            Ok(Value::Bool(false)) => Err(Failure::False),
            Ok(other) => Err(Failure::Error(format!(
                "evaluated to {other:?}, not a boolean"
            ))),
            Err(e) => Err(Failure::Error(e.to_string())),
        }
    }
}

/// One pass over the AST: node count, free variables, comprehension nesting.
#[derive(Default)]
struct Walk {
    nodes: usize,
    free: HashSet<String>,
    problem: Option<String>,
}

impl Walk {
    fn visit(&mut self, e: &IdedExpr, comprehensions: usize, bound: &mut Vec<String>) {
        self.nodes += 1;
        match &e.expr {
            Expr::Ident(name) => {
                if !bound.contains(name) {
                    self.free.insert(name.clone());
                }
            }
            Expr::Select(s) => self.visit(&s.operand, comprehensions, bound),
            Expr::Call(c) => {
                if let Some(target) = &c.target {
                    self.visit(target, comprehensions, bound);
                }
                c.args
                    .iter()
                    .for_each(|a| self.visit(a, comprehensions, bound));
            }
            Expr::List(l) => l
                .elements
                .iter()
                .for_each(|a| self.visit(a, comprehensions, bound)),
            Expr::Map(m) => m
                .entries
                .iter()
                .for_each(|en| self.entry(&en.expr, comprehensions, bound)),
            Expr::Struct(s) => s
                .entries
                .iter()
                .for_each(|en| self.entry(&en.expr, comprehensions, bound)),
            Expr::Comprehension(c) => {
                if comprehensions > 0 {
                    self.problem = Some(
                        "a comprehension (all, exists, map, filter) inside another is not allowed: its cost would grow with the square of the input".into(),
                    );
                }
                self.visit(&c.iter_range, comprehensions, bound);
                self.visit(&c.accu_init, comprehensions, bound);
                let scope = bound.len();
                bound.push(c.iter_var.clone());
                bound.extend(c.iter_var2.clone());
                bound.push(c.accu_var.clone());
                for part in [&c.loop_cond, &c.loop_step, &c.result] {
                    self.visit(part, comprehensions + 1, bound);
                }
                bound.truncate(scope);
            }
            Expr::Literal(_) | Expr::Unspecified => {}
        }
    }

    fn entry(&mut self, entry: &EntryExpr, comprehensions: usize, bound: &mut Vec<String>) {
        match entry {
            EntryExpr::StructField(f) => self.visit(&f.value, comprehensions, bound),
            EntryExpr::MapEntry(m) => {
                self.visit(&m.key, comprehensions, bound);
                self.visit(&m.value, comprehensions, bound);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn mk_rule(expr: &str) -> Rule {
        Rule {
            name: "r".into(),
            expr: expr.into(),
            message: None,
            recovery: None,
        }
    }

    fn mk_bindings(args: Json, task: Option<Json>) -> Bindings {
        Bindings::new(
            &args,
            &json!({"id": "ops-bot", "claims": {"tenant": "acme", "projects": ["OPS"]}}),
            task.as_ref(),
            &json!({"id": "s1", "calls": 0}),
            &json!({"method": "GET", "path": "/", "headers": {}}),
        )
        .unwrap()
    }

    #[test]
    fn true_passes_false_fails() {
        let r = CompiledRule::compile(&mk_rule("args.n <= 30")).unwrap();
        assert_eq!(r.evaluate(&mk_bindings(json!({"n": 10}), None)), Ok(()));
        assert_eq!(
            r.evaluate(&mk_bindings(json!({"n": 99}), None)),
            Err(Failure::False)
        );
    }

    #[test]
    fn syntax_error_and_unknown_variable_fail_to_compile() {
        assert!(CompiledRule::compile(&mk_rule("args.n <= "))
            .unwrap_err()
            .contains("syntax"));
        let e = CompiledRule::compile(&mk_rule("argz.n == 1")).unwrap_err();
        assert!(e.contains("argz"), "{e}");
    }

    #[test]
    fn comprehension_variables_are_not_unknown() {
        let r = CompiledRule::compile(&mk_rule("args.xs.all(x, x > 0)")).unwrap();
        assert_eq!(
            r.evaluate(&mk_bindings(json!({"xs": [1, 2]}), None)),
            Ok(())
        );
    }

    #[test]
    fn nested_comprehensions_are_refused() {
        let e = CompiledRule::compile(&mk_rule("args.xs.all(x, args.xs.exists(y, y == x))"));
        assert!(e.unwrap_err().contains("inside another"));
    }

    #[test]
    fn task_rules_need_a_task() {
        let r = CompiledRule::compile(&mk_rule("args.n <= task.n")).unwrap();
        assert!(r.reads_task);
        assert_eq!(
            r.evaluate(&mk_bindings(json!({"n": 1}), None)),
            Err(Failure::NoTask)
        );
        assert_eq!(
            r.evaluate(&mk_bindings(json!({"n": 1}), Some(json!({"n": 5})))),
            Ok(())
        );
    }

    #[test]
    fn runtime_errors_deny() {
        let r = CompiledRule::compile(&mk_rule("args.missing == 1")).unwrap();
        assert!(matches!(
            r.evaluate(&mk_bindings(json!({}), None)),
            Err(Failure::Error(_))
        ));
        let r = CompiledRule::compile(&mk_rule("args.n")).unwrap();
        assert!(matches!(
            r.evaluate(&mk_bindings(json!({"n": 1}), None)),
            Err(Failure::Error(_))
        ));
    }

    #[test]
    fn identity_comes_from_claims_not_args() {
        let r = CompiledRule::compile(&mk_rule("args.tenant == agent.claims.tenant")).unwrap();
        assert_eq!(
            r.evaluate(&mk_bindings(json!({"tenant": "acme"}), None)),
            Ok(())
        );
        assert_eq!(
            r.evaluate(&mk_bindings(
                json!({"tenant": "evil", "agent": {"claims": {"tenant": "evil"}}}),
                None
            )),
            Err(Failure::False)
        );
    }
}
