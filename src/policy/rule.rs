//! CEL rules, compiled when the snapshot is built and evaluated after schema validation.
//!
//! Compilation also bounds cost and depth, since CEL can't be interrupted once it runs
//! and recurses on the stack: a source has at most [`MAX_SOURCE`] bytes, the tree at most
//! [`MAX_NODES`] nodes and [`MAX_DEPTH`] levels, and no comprehension (`all`, `exists`,
//! `map`, `filter`) nests inside another. Parsing runs on a thread with a large stack
//! ([`super::parser`]), so even a hostile expression is rejected rather than crashing
//! the process.
//! Evaluation is then linear in the size of the validated arguments, which
//! `limits.maxBodyBytes` bounds. Only the five variables (docs/policies.md §5.2) and the functions in
//! [`FUNCTIONS`] may be used; anything else is a compile error, not a runtime surprise.

use cel::common::ast::{EntryExpr, Expr, IdedExpr};
use cel::Value;
use std::collections::HashSet;

pub use super::bindings::{Bindings, Reads, Scope};
pub use super::field_reads::{FieldReads, HeaderReads, Of};
use super::parser::parse;
use crate::crd::Rule;
use crate::vocab::Recovery;

pub const VARIABLES: [&str; 5] = ["args", "agent", "task", "session", "request"];
pub const MAX_NODES: usize = 512;
pub use super::parser::MAX_DEPTH;
pub const MAX_SOURCE: usize = 4096;
/// The CEL standard functions rules may call (operators aside).
pub const FUNCTIONS: [&str; 17] = [
    "size",
    "contains",
    "startsWith",
    "endsWith",
    "matches",
    "string",
    "int",
    "uint",
    "double",
    "bool",
    "bytes",
    "type",
    "dyn",
    "max",
    "min",
    "exists",
    "all",
];

pub struct CompiledRule {
    pub name: String,
    pub source: String,
    pub message: Option<String>,
    pub recovery: Option<Recovery>,
    /// Reads `task`: a denial is `OUT_OF_TASK_SCOPE`, and no task token denies it.
    pub reads_task: bool,
    /// The variables it reads: only those are converted for a call.
    pub reads: Reads,
    /// The request headers it reads: only those are bound (and captured).
    pub headers: HeaderReads,
    /// The arguments it reads: only those become CEL values.
    pub args: FieldReads,
    /// In a requirement's `match`, the earlier call's arguments it reads.
    pub prior_args: FieldReads,
    expression: IdedExpr,
}

impl std::fmt::Debug for CompiledRule {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CompiledRule")
            .field("name", &self.name)
            .field("source", &self.source)
            .finish()
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
        CompiledRule::compile_over(rule, &VARIABLES)
    }

    /// Compiles an expression that may read only `variables` (a requirement's `match`
    /// reads `prior` and `args`; a rule the five of [`VARIABLES`]).
    pub fn compile_over(rule: &Rule, variables: &[&str]) -> Result<CompiledRule, String> {
        if rule.name.trim().is_empty() {
            return Err("the rule needs a name".into());
        }
        if rule.expr.len() > MAX_SOURCE {
            return Err(format!(
                "expression too long: {} bytes (at most {MAX_SOURCE})",
                rule.expr.len()
            ));
        }
        let expression = parse(&rule.expr)?;
        let mut walk = Walk::default();
        walk.visit(&expression, 0, &mut Vec::new(), 0);
        if let Some(problem) = walk.problem {
            return Err(problem);
        }
        let references = expression.references();
        if let Some(unknown) = references
            .functions()
            .into_iter()
            .find(|f| !is_operator(f) && !FUNCTIONS.contains(f))
        {
            return Err(format!("unknown function {unknown:?}"));
        }
        if walk.nodes > MAX_NODES {
            return Err(format!(
                "expression too large: {} nodes (at most {MAX_NODES})",
                walk.nodes
            ));
        }
        if let Some(unknown) = walk.free.iter().find(|v| !variables.contains(&v.as_str())) {
            let who = if variables == VARIABLES.as_slice() {
                "rules"
            } else {
                "it"
            };
            return Err(format!(
                "unknown variable {unknown:?} ({who} may read {})",
                variables.join(", ")
            ));
        }
        Ok(CompiledRule {
            name: rule.name.clone(),
            source: rule.expr.clone(),
            message: rule.message.clone(),
            recovery: rule.recovery,
            reads_task: walk.free.contains("task"),
            reads: Reads::of(walk.free.iter().map(String::as_str)),
            headers: FieldReads::of(&expression, Of::Headers),
            args: FieldReads::of(&expression, Of::Args),
            prior_args: FieldReads::of(&expression, Of::PriorArgs),
            expression,
        })
    }

    /// Runs the rule alone (see [`Bindings::scope`] to run several on one binding).
    pub fn evaluate(&self, bindings: &Bindings) -> Result<(), Failure> {
        bindings.scope(|scope| self.evaluate_in(scope))
    }

    /// Runs the rule. Anything but `true` fails: an error denies, never allows.
    pub fn evaluate_in(&self, scope: &Scope<'_, '_>) -> Result<(), Failure> {
        if self.reads_task && !scope.has_task {
            return Err(Failure::NoTask);
        }
        match Value::resolve(&self.expression, &scope.context) {
            Ok(Value::Bool(true)) => Ok(()),
            Ok(Value::Bool(false)) => Err(Failure::False),
            Ok(other) => Err(Failure::Error(format!(
                "evaluated to {other:?}, not a boolean"
            ))),
            Err(e) => Err(Failure::Error(e.to_string())),
        }
    }
}

impl CompiledRule {
    /// Runs the expression for its value rather than a verdict (a contract's `dedupeKey`).
    pub fn value_in(&self, scope: &Scope<'_, '_>) -> Result<Value, String> {
        Value::resolve(&self.expression, &scope.context).map_err(|e| e.to_string())
    }
}

fn is_operator(name: &str) -> bool {
    name.starts_with('_') || name.starts_with('@') || name.starts_with('!') || name.starts_with('-')
}

/// One pass over the AST: node count, depth, free variables, comprehension nesting.
#[derive(Default)]
struct Walk {
    nodes: usize,
    free: HashSet<String>,
    problem: Option<String>,
}

impl Walk {
    fn visit(
        &mut self,
        e: &IdedExpr,
        comprehensions: usize,
        bound: &mut Vec<String>,
        depth: usize,
    ) {
        self.nodes += 1;
        if depth > MAX_DEPTH || self.nodes > MAX_NODES {
            // Stop descending: the expression is refused either way.
            if depth > MAX_DEPTH {
                self.problem.get_or_insert_with(|| {
                    format!("expression nested too deeply (at most {MAX_DEPTH} levels)")
                });
            }
            return;
        }
        let d = depth + 1;
        match &e.expr {
            Expr::Ident(name) => {
                if !bound.contains(name) {
                    self.free.insert(name.clone());
                }
            }
            Expr::Select(s) => self.visit(&s.operand, comprehensions, bound, d),
            Expr::Call(c) => {
                if let Some(target) = &c.target {
                    self.visit(target, comprehensions, bound, d);
                }
                c.args
                    .iter()
                    .for_each(|a| self.visit(a, comprehensions, bound, d));
            }
            Expr::List(l) => l
                .elements
                .iter()
                .for_each(|a| self.visit(a, comprehensions, bound, d)),
            Expr::Map(m) => m
                .entries
                .iter()
                .for_each(|en| self.entry(&en.expr, comprehensions, bound, d)),
            Expr::Struct(s) => s
                .entries
                .iter()
                .for_each(|en| self.entry(&en.expr, comprehensions, bound, d)),
            Expr::Comprehension(c) => {
                if comprehensions > 0 {
                    self.problem = Some(
                        "a comprehension (all, exists, map, filter) inside another is not allowed: its cost would grow with the square of the input".into(),
                    );
                }
                self.visit(&c.iter_range, comprehensions, bound, d);
                self.visit(&c.accu_init, comprehensions, bound, d);
                let scope = bound.len();
                bound.push(c.iter_var.clone());
                bound.extend(c.iter_var2.clone());
                bound.push(c.accu_var.clone());
                for part in [&c.loop_cond, &c.loop_step, &c.result] {
                    self.visit(part, comprehensions + 1, bound, d);
                }
                bound.truncate(scope);
            }
            Expr::Literal(_) | Expr::Unspecified => {}
        }
    }

    fn entry(
        &mut self,
        entry: &EntryExpr,
        comprehensions: usize,
        bound: &mut Vec<String>,
        depth: usize,
    ) {
        match entry {
            EntryExpr::StructField(f) => self.visit(&f.value, comprehensions, bound, depth),
            EntryExpr::MapEntry(m) => {
                self.visit(&m.key, comprehensions, bound, depth);
                self.visit(&m.value, comprehensions, bound, depth);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{json, Value as Json};
    use std::borrow::Cow;

    fn mk_rule(expr: &str) -> Rule {
        Rule {
            name: "r".into(),
            expr: expr.into(),
            message: None,
            recovery: None,
        }
    }

    fn mk_bindings(args: Json, task: Option<Json>) -> Bindings<'static> {
        Bindings {
            args: Some(Cow::Owned(args)),
            args_fields: None,
            agent: Some(Cow::Owned(
                json!({"id": "ops-bot", "claims": {"tenant": "acme", "projects": ["OPS"]}}),
            )),
            task: task.map(Cow::Owned),
            session: Some(Cow::Owned(json!({"id": "s1", "calls": 0}))),
            request: Some(Cow::Owned(
                json!({"method": "GET", "path": "/", "headers": {}}),
            )),
        }
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
    fn every_admitted_function_evaluates() {
        let r = CompiledRule::compile(&mk_rule(
            "max(args.a, args.b) == 7 && min(args.a, args.b) == 3 && max(args.xs) == 9",
        ))
        .unwrap();
        let args = json!({"a": 3, "b": 7, "xs": [1, 9, 4]});
        assert_eq!(r.evaluate(&mk_bindings(args, None)), Ok(()));
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
    fn integers_stay_integers() {
        let r = CompiledRule::compile(&mk_rule("args.n + 1 == 11 && args.n - 20 == -10")).unwrap();
        assert_eq!(r.evaluate(&mk_bindings(json!({"n": 10}), None)), Ok(()));
    }

    #[test]
    fn hostile_expressions_are_refused_not_crashed_on() {
        let deep = format!("{}1{}", "(".repeat(2000), ")".repeat(2000));
        assert!(CompiledRule::compile(&mk_rule(&deep)).is_err());
        let chain = vec!["1"; 1500].join(" + ");
        assert!(CompiledRule::compile(&mk_rule(&chain)).is_err());
        let selects = format!("args{} == 1", ".a".repeat(1500));
        assert!(CompiledRule::compile(&mk_rule(&selects)).is_err());
        let wide = vec!["args.n == 1"; 200].join(" || ");
        assert!(CompiledRule::compile(&mk_rule(&wide))
            .unwrap_err()
            .contains("too"));
    }

    #[test]
    fn unknown_functions_fail_to_compile() {
        assert!(CompiledRule::compile(&mk_rule("launch(args.n)"))
            .unwrap_err()
            .contains("launch"));
        let r = CompiledRule::compile(&mk_rule(
            "size(args.s) > 0 && args.s.startsWith('a') && args.s.matches('^a+$')",
        ))
        .unwrap();
        assert_eq!(r.evaluate(&mk_bindings(json!({"s": "aaa"}), None)), Ok(()));
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
