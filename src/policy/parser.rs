//! Parsing CEL safely: the parser recurses, so it runs on a thread with a large stack
//! ([`PARSER_STACK`]) and a depth limit, and a hostile expression fails to compile instead
//! of overflowing the sidecar's stack. A parser panic fails only that expression.
//!
//! A snapshot build runs whole on one such thread ([`with_parser_stack`]) and its rules
//! parse inline there; a rule compiled anywhere else gets a thread of its own.

use cel::common::ast::IdedExpr;
use cel::parser::Parser;
use std::cell::Cell;
use std::sync::Mutex;

/// How deeply an expression may nest; the parser stops there (a compile error).
pub const MAX_DEPTH: usize = 48;

const PARSER_STACK: usize = 64 << 20;

thread_local! {
    /// Set on a thread started with [`PARSER_STACK`]: rules compiled there parse inline.
    static ON_PARSER_STACK: Cell<bool> = const { Cell::new(false) };
}

/// Runs `compile` on one thread with the parser's large stack, so every rule it compiles
/// parses inline: a snapshot of thousands of rules would otherwise start (and wait for)
/// a thread per rule, most of its build time.
pub fn with_parser_stack<R: Send>(compile: impl FnOnce() -> R + Send) -> R {
    if ON_PARSER_STACK.get() {
        return compile();
    }
    // Taken by whichever thread runs it: the large-stack one, or this one if that one
    // can't start (then each rule gets a thread of its own, as `parse` falls back to).
    let compile = Mutex::new(Some(compile));
    let take = || compile.lock().ok().and_then(|mut c| c.take());
    let ran = std::thread::scope(|scope| {
        let worker = std::thread::Builder::new()
            .name("toolgate-cel-parse".into())
            .stack_size(PARSER_STACK)
            .spawn_scoped(scope, || {
                ON_PARSER_STACK.set(true);
                take().map(|compile| compile())
            });
        match worker {
            Ok(handle) => handle
                .join()
                .unwrap_or_else(|panic| std::panic::resume_unwind(panic)),
            Err(_) => None,
        }
    });
    match ran {
        Some(result) => result,
        None => match take() {
            Some(compile) => compile(),
            None => unreachable!("the compile step ran on neither thread"),
        },
    }
}

/// Parses on a thread with a large stack: the parser recurses, and a hostile expression
/// must fail to compile, not overflow the sidecar's stack. A parser panic fails only
/// this expression.
pub fn parse(source: &str) -> Result<IdedExpr, String> {
    let failed = |_| "the CEL parser failed on this expression".to_string();
    if ON_PARSER_STACK.get() {
        return std::panic::catch_unwind(|| parse_here(source)).map_err(failed)?;
    }
    let owned = source.to_string();
    std::thread::Builder::new()
        .name("toolgate-cel-parse".into())
        .stack_size(PARSER_STACK)
        .spawn(move || parse_here(&owned))
        .map_err(|e| format!("cannot start the CEL parser: {e}"))?
        .join()
        .map_err(failed)?
}

fn parse_here(source: &str) -> Result<IdedExpr, String> {
    Parser::new()
        .max_recursion_depth(MAX_DEPTH as u16)
        .parse(source)
        .map_err(|e| format!("CEL syntax: {e}"))
}
