//! Which fields of a map a grant's expressions read, found when the policy compiles:
//! the request headers of `request.headers`, and the top-level arguments of `args`.
//!
//! Rules see `request.headers`, and a capturing contract's audit record keeps what its
//! rules saw (`inputs`, for `toolgate replay`). Handing every header to both would put a
//! client's cookies and API keys in the audit log for a rule that only asked for
//! `x-env`. And a call's arguments become CEL values for every expression that reads
//! them (rules, `cost`, a requirement's `match`): a 1 KiB body of eleven fields is an
//! allocation per field and item, though the rules compare three.
//!
//! So each expression is read once: `m['name']`, `m.name`, `has(m.name)`, `m[?'name']`
//! and `'name' in m` name one field of the map `m`; any other use of it (iterated,
//! sized, indexed by something computed, passed whole), or of `request` whole for the
//! headers, reads them all. A call then binds only the fields read
//! ([`FieldReads::keeps`]); a map without a named field behaves the same bound whole
//! or in part (`m.name` an error, `has(m.name)` false, `'name' in m` false).

use cel::common::ast::{operators, EntryExpr, Expr, IdedExpr, LiteralValue};
use std::collections::BTreeSet;

/// The fields of one map an expression (or a grant's expressions together) reads.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum FieldReads {
    #[default]
    None,
    /// Only these, by the names the expressions wrote.
    Named(BTreeSet<String>),
    /// Possibly any: the map is used as a whole.
    All,
}

/// Which map.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Of {
    /// `request.headers`.
    Headers,
    /// `args`.
    Args,
    /// `prior.args`, in a requirement's `match`.
    PriorArgs,
}

/// The request headers read; the name their callers know them by.
pub type HeaderReads = FieldReads;

impl FieldReads {
    /// What `expression` reads of the map `of`.
    pub fn of(expression: &IdedExpr, of: Of) -> FieldReads {
        let mut reads = FieldReads::None;
        visit(expression, of, &mut Vec::new(), &mut reads);
        reads
    }

    pub fn union(self, other: &FieldReads) -> FieldReads {
        match (self, other) {
            (FieldReads::All, _) | (_, FieldReads::All) => FieldReads::All,
            (FieldReads::None, other) => other.clone(),
            (FieldReads::Named(mut names), FieldReads::Named(more)) => {
                names.extend(more.iter().cloned());
                FieldReads::Named(names)
            }
            (named, FieldReads::None) => named,
        }
    }

    /// Whether a call binds the field `name` (for headers: lowercase, as requests carry
    /// them).
    pub fn keeps(&self, name: &str) -> bool {
        match self {
            FieldReads::None => false,
            FieldReads::Named(names) => names.contains(name),
            FieldReads::All => true,
        }
    }

    fn name(&mut self, name: &str) {
        match self {
            FieldReads::All => {}
            FieldReads::Named(names) => {
                names.insert(name.to_string());
            }
            FieldReads::None => *self = FieldReads::Named(BTreeSet::from([name.to_string()])),
        }
    }
}

/// Whether `e` is the expressions' own variable `name` (not a comprehension's of the
/// same name).
fn is_variable(e: &IdedExpr, name: &str, bound: &[String]) -> bool {
    matches!(&e.expr, Expr::Ident(n) if n == name && !bound.iter().any(|b| b == n))
}

/// Whether `e` is the map itself.
fn is_map(e: &IdedExpr, of: Of, bound: &[String]) -> bool {
    match of {
        Of::Headers => matches!(&e.expr, Expr::Select(s)
            if s.field == "headers" && is_variable(&s.operand, "request", bound)),
        Of::Args => is_variable(e, "args", bound),
        Of::PriorArgs => matches!(&e.expr, Expr::Select(s)
            if s.field == "args" && is_variable(&s.operand, "prior", bound)),
    }
}

fn visit(e: &IdedExpr, of: Of, bound: &mut Vec<String>, reads: &mut FieldReads) {
    match &e.expr {
        // m.NAME, has(m.NAME), m.?NAME
        Expr::Select(s) if is_map(&s.operand, of, bound) => reads.name(&s.field),
        // The map whole: its uses that name one field matched above or below.
        _ if is_map(e, of, bound) => *reads = FieldReads::All,
        // request.method, request.path: no header.
        Expr::Select(s) if of == Of::Headers && is_variable(&s.operand, "request", bound) => {}
        Expr::Ident(_) if of == Of::Headers && is_variable(e, "request", bound) => {
            *reads = FieldReads::All
        }
        Expr::Select(s) => visit(&s.operand, of, bound, reads),
        // m['name'] (or `[?'name']`)
        Expr::Call(c)
            if (c.func_name == operators::INDEX || c.func_name == operators::OPT_INDEX)
                && c.args.len() == 2
                && is_map(&c.args[0], of, bound) =>
        {
            match &c.args[1].expr {
                Expr::Literal(LiteralValue::String(name)) => reads.name(name.as_ref()),
                _ => {
                    *reads = FieldReads::All;
                    visit(&c.args[1], of, bound, reads);
                }
            }
        }
        // 'name' in m
        Expr::Call(c)
            if c.func_name == operators::IN
                && c.args.len() == 2
                && is_map(&c.args[1], of, bound)
                && matches!(&c.args[0].expr, Expr::Literal(LiteralValue::String(_))) =>
        {
            if let Expr::Literal(LiteralValue::String(name)) = &c.args[0].expr {
                reads.name(name.as_ref());
            }
        }
        Expr::Call(c) => {
            if let Some(target) = &c.target {
                visit(target, of, bound, reads);
            }
            c.args.iter().for_each(|a| visit(a, of, bound, reads));
        }
        Expr::List(l) => l.elements.iter().for_each(|a| visit(a, of, bound, reads)),
        Expr::Map(m) => m
            .entries
            .iter()
            .for_each(|en| entry(&en.expr, of, bound, reads)),
        Expr::Struct(s) => s
            .entries
            .iter()
            .for_each(|en| entry(&en.expr, of, bound, reads)),
        Expr::Comprehension(c) => {
            visit(&c.iter_range, of, bound, reads);
            visit(&c.accu_init, of, bound, reads);
            let scope = bound.len();
            bound.push(c.iter_var.clone());
            bound.extend(c.iter_var2.clone());
            bound.push(c.accu_var.clone());
            for part in [&c.loop_cond, &c.loop_step, &c.result] {
                visit(part, of, bound, reads);
            }
            bound.truncate(scope);
        }
        Expr::Ident(_) | Expr::Literal(_) | Expr::Unspecified => {}
    }
}

fn entry(entry: &EntryExpr, of: Of, bound: &mut Vec<String>, reads: &mut FieldReads) {
    match entry {
        EntryExpr::StructField(f) => visit(&f.value, of, bound, reads),
        EntryExpr::MapEntry(m) => {
            visit(&m.key, of, bound, reads);
            visit(&m.value, of, bound, reads);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reads(expr: &str) -> HeaderReads {
        FieldReads::of(&crate::policy::parser::parse(expr).unwrap(), Of::Headers)
    }

    fn args(expr: &str) -> FieldReads {
        FieldReads::of(&crate::policy::parser::parse(expr).unwrap(), Of::Args)
    }

    fn named(names: &[&str]) -> HeaderReads {
        HeaderReads::Named(names.iter().map(|n| n.to_string()).collect())
    }

    #[test]
    fn named_headers_are_found_in_every_spelling() {
        assert_eq!(
            reads("args.n == 1 && request.method == 'GET'"),
            HeaderReads::None
        );
        assert_eq!(
            reads("request.headers['x-env'] == 'prod'"),
            named(&["x-env"])
        );
        assert_eq!(
            reads("has(request.headers.x_team) && request.headers['x-env'] == request.path"),
            named(&["x-env", "x_team"])
        );
        assert_eq!(
            reads("args.xs.all(x, request.headers['x-a'] == x)"),
            named(&["x-a"])
        );
        assert_eq!(
            reads("'x-env' in request.headers && request.headers['x-env'] == 'prod'"),
            named(&["x-env"])
        );
    }

    #[test]
    fn any_other_use_reads_them_all() {
        for expr in [
            "size(request.headers) > 1",
            "args.name in request.headers",
            "request.headers[args.name] == 'x'",
            "request.headers.exists(h, h == 'x')",
            "request == {}",
            "[request][0].method == 'GET'",
        ] {
            assert_eq!(reads(expr), HeaderReads::All, "{expr}");
        }
    }

    #[test]
    fn a_comprehension_variable_named_request_is_not_the_request() {
        assert_eq!(
            reads("args.xs.all(request, request.headers == 1)"),
            HeaderReads::None
        );
    }

    #[test]
    fn unions_keep_every_name() {
        let both = named(&["a"]).union(&named(&["b"]));
        assert!(both.keeps("a") && both.keeps("b") && !both.keeps("c"));
        assert_eq!(HeaderReads::None.union(&HeaderReads::All), HeaderReads::All);
        assert!(!HeaderReads::None.keeps("a"));
    }

    #[test]
    fn named_arguments_are_found_in_every_spelling() {
        assert_eq!(args("task.service == 'x'"), FieldReads::None);
        assert_eq!(
            args("args.service == task.service && args.limit <= 500"),
            named(&["limit", "service"])
        );
        assert_eq!(
            args("has(args.note) || args['window'] > 1 || 'tags' in args"),
            named(&["note", "tags", "window"])
        );
        assert_eq!(
            args("args.tags.all(t, t != args.service)"),
            named(&["service", "tags"])
        );
        assert_eq!(args("prior.args.id == args.id"), named(&["id"]));
        let prior =
            |e: &str| FieldReads::of(&crate::policy::parser::parse(e).unwrap(), Of::PriorArgs);
        assert_eq!(
            prior("prior.args.order_id == args.id"),
            named(&["order_id"])
        );
        assert_eq!(
            prior("prior.tool == 'x' && size(prior.args) > 0"),
            FieldReads::All
        );
    }

    #[test]
    fn any_other_use_of_the_arguments_reads_them_all() {
        for expr in [
            "size(args) > 1",
            "args[task.field] == 1",
            "args.exists(k, k == 'x')",
            "args == {}",
            "[args][0].n == 1",
            "request.headers['x'] == args",
        ] {
            assert_eq!(args(expr), FieldReads::All, "{expr}");
        }
        // A comprehension's own `args` is not the call's.
        assert_eq!(args("[1].all(args, args > 0)"), FieldReads::None);
    }
}
