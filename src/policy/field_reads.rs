//! Which request headers a grant's rules read, found when the policy compiles.
//!
//! Rules see `request.headers`, and a capturing contract's audit record keeps what its
//! rules saw (`inputs`, for `toolgate replay`). Handing every header to both would put a
//! client's cookies and API keys in the audit log for a rule that only asked for
//! `x-env`. So a rule's expression is read once: `request.headers['x-env']`,
//! `request.headers.x_env`, `has(request.headers.x_env)` and `'x-env' in
//! request.headers` name one header each;
//! any other use of `request.headers` (iterated, sized, indexed by something computed)
//! or of `request` whole reads them all. A call then binds only the headers read
//! ([`HeaderReads::keeps`]).

use cel::common::ast::{operators, EntryExpr, Expr, IdedExpr, LiteralValue};
use std::collections::BTreeSet;

/// The request headers an expression (or a grant's rules together) reads.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum HeaderReads {
    #[default]
    None,
    /// Only these, by the names the rules wrote.
    Named(BTreeSet<String>),
    /// Possibly any: the rules use the headers as a whole.
    All,
}

impl HeaderReads {
    /// What `expression` reads.
    pub fn of(expression: &IdedExpr) -> HeaderReads {
        let mut reads = HeaderReads::None;
        visit(expression, &mut Vec::new(), &mut reads);
        reads
    }

    pub fn union(self, other: &HeaderReads) -> HeaderReads {
        match (self, other) {
            (HeaderReads::All, _) | (_, HeaderReads::All) => HeaderReads::All,
            (HeaderReads::None, other) => other.clone(),
            (HeaderReads::Named(mut names), HeaderReads::Named(more)) => {
                names.extend(more.iter().cloned());
                HeaderReads::Named(names)
            }
            (named, HeaderReads::None) => named,
        }
    }

    /// Whether a call binds the header `name` (lowercase, as requests carry it).
    pub fn keeps(&self, name: &str) -> bool {
        match self {
            HeaderReads::None => false,
            HeaderReads::Named(names) => names.contains(name),
            HeaderReads::All => true,
        }
    }

    fn name(&mut self, name: &str) {
        match self {
            HeaderReads::All => {}
            HeaderReads::Named(names) => {
                names.insert(name.to_string());
            }
            HeaderReads::None => *self = HeaderReads::Named(BTreeSet::from([name.to_string()])),
        }
    }
}

/// Whether `e` is `request.headers`, `request` being the rules' variable (not a
/// comprehension's of the same name).
fn is_headers(e: &IdedExpr, bound: &[String]) -> bool {
    matches!(&e.expr, Expr::Select(s) if s.field == "headers" && is_request(&s.operand, bound))
}

fn is_request(e: &IdedExpr, bound: &[String]) -> bool {
    matches!(&e.expr, Expr::Ident(name) if name == "request" && !bound.iter().any(|b| b == name))
}

fn visit(e: &IdedExpr, bound: &mut Vec<String>, reads: &mut HeaderReads) {
    match &e.expr {
        // request.headers.NAME, has(request.headers.NAME)
        Expr::Select(s) if is_headers(&s.operand, bound) => reads.name(&s.field),
        // request.headers: whole, since the selection of one header matched above.
        Expr::Select(_) if is_headers(e, bound) => *reads = HeaderReads::All,
        // request.method, request.path: no header.
        Expr::Select(s) if is_request(&s.operand, bound) => {}
        Expr::Ident(_) if is_request(e, bound) => *reads = HeaderReads::All,
        Expr::Select(s) => visit(&s.operand, bound, reads),
        // request.headers['name'] (or `[?'name']`)
        Expr::Call(c)
            if (c.func_name == operators::INDEX || c.func_name == operators::OPT_INDEX)
                && c.args.len() == 2
                && is_headers(&c.args[0], bound) =>
        {
            match &c.args[1].expr {
                Expr::Literal(LiteralValue::String(name)) => reads.name(name.as_ref()),
                _ => {
                    *reads = HeaderReads::All;
                    visit(&c.args[1], bound, reads);
                }
            }
        }
        // 'name' in request.headers
        Expr::Call(c)
            if c.func_name == operators::IN
                && c.args.len() == 2
                && is_headers(&c.args[1], bound)
                && matches!(&c.args[0].expr, Expr::Literal(LiteralValue::String(_))) =>
        {
            if let Expr::Literal(LiteralValue::String(name)) = &c.args[0].expr {
                reads.name(name.as_ref());
            }
        }
        Expr::Call(c) => {
            if let Some(target) = &c.target {
                visit(target, bound, reads);
            }
            c.args.iter().for_each(|a| visit(a, bound, reads));
        }
        Expr::List(l) => l.elements.iter().for_each(|a| visit(a, bound, reads)),
        Expr::Map(m) => m
            .entries
            .iter()
            .for_each(|en| entry(&en.expr, bound, reads)),
        Expr::Struct(s) => s
            .entries
            .iter()
            .for_each(|en| entry(&en.expr, bound, reads)),
        Expr::Comprehension(c) => {
            visit(&c.iter_range, bound, reads);
            visit(&c.accu_init, bound, reads);
            let scope = bound.len();
            bound.push(c.iter_var.clone());
            bound.extend(c.iter_var2.clone());
            bound.push(c.accu_var.clone());
            for part in [&c.loop_cond, &c.loop_step, &c.result] {
                visit(part, bound, reads);
            }
            bound.truncate(scope);
        }
        Expr::Ident(_) | Expr::Literal(_) | Expr::Unspecified => {}
    }
}

fn entry(entry: &EntryExpr, bound: &mut Vec<String>, reads: &mut HeaderReads) {
    match entry {
        EntryExpr::StructField(f) => visit(&f.value, bound, reads),
        EntryExpr::MapEntry(m) => {
            visit(&m.key, bound, reads);
            visit(&m.value, bound, reads);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reads(expr: &str) -> HeaderReads {
        HeaderReads::of(&crate::policy::parser::parse(expr).unwrap())
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
}
