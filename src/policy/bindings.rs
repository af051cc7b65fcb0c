//! What CEL rules see: the five variables of docs/policies.md §5.2 for one call, and only those the
//! grant's rules read (a grant whose rules never mention `request` doesn't pay for
//! copying the headers).
//!
//! Values go from JSON straight to CEL's value types once per call, borrowing strings
//! and keys rather than copying them, and are bound in a child scope of a per-thread root
//! context. Building a root registers CEL's whole standard library, which costs far more
//! than evaluating a rule, so each thread builds one once; a call only adds its
//! variables to a fresh child.

use cel::common::types::{
    CelBool, CelDouble, CelInt, CelList, CelMap, CelMapKey, CelNull, CelString, CelUInt,
};
use cel::common::value::Val;
use cel::Context;
use serde_json::Value as Json;
use std::borrow::Cow;
use std::collections::HashMap;

use super::field_reads::FieldReads;
use super::rule::CompiledRule;

thread_local! {
    static ROOT: Context<'static, 'static> = root();
}

/// CEL's standard library, plus `max` and `min`: the crate implements them but leaves
/// them out of its default context, and `rule::FUNCTIONS` admits them, so without this
/// a rule using them passed `toolgate check` and then denied every call.
fn root() -> Context<'static, 'static> {
    let mut context = Context::default();
    for (name, function) in [
        ("max", cel::functions::max as fn(_) -> _),
        ("min", cel::functions::min as fn(_) -> _),
    ] {
        if let Err(e) = context.add_function(name, function) {
            tracing::error!(function = name, error = ?e, "CEL function not registered");
        }
    }
    context
}

/// Which variables an expression reads; for a grant, what its rules read together.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Reads {
    pub args: bool,
    pub agent: bool,
    pub task: bool,
    pub session: bool,
    pub request: bool,
}

impl Reads {
    pub fn of<'a>(variables: impl IntoIterator<Item = &'a str>) -> Reads {
        let mut reads = Reads::default();
        for variable in variables {
            match variable {
                "args" => reads.args = true,
                "agent" => reads.agent = true,
                "task" => reads.task = true,
                "session" => reads.session = true,
                "request" => reads.request = true,
                _ => {}
            }
        }
        reads
    }

    pub fn union(self, other: Reads) -> Reads {
        Reads {
            args: self.args || other.args,
            agent: self.agent || other.agent,
            task: self.task || other.task,
            session: self.session || other.session,
            request: self.request || other.request,
        }
    }
}

/// The JSON values of one call's variables; `None` is a variable no rule reads (or, for
/// `task`, no valid task token).
#[derive(Debug, Default)]
pub struct Bindings<'a> {
    pub args: Option<Cow<'a, Json>>,
    /// The top-level fields of `args` the expressions read, the only ones converted;
    /// `None`: all of them.
    pub args_fields: Option<&'a FieldReads>,
    pub agent: Option<Cow<'a, Json>>,
    pub task: Option<Cow<'a, Json>>,
    pub session: Option<Cow<'a, Json>>,
    pub request: Option<Cow<'a, Json>>,
}

/// A call's variables bound in a child of the thread's root context.
pub struct Scope<'p, 'v> {
    pub(super) context: Context<'p, 'v>,
    pub(super) has_task: bool,
}

impl<'a> Bindings<'a> {
    /// Runs `evaluate` with these variables bound, once for any number of rules.
    pub fn scope<R>(&self, evaluate: impl FnOnce(&Scope<'_, '_>) -> R) -> R {
        ROOT.with(|root| {
            // The root holds no values, so its scope can hold values that borrow ours.
            let root: &Context<'_, '_> = root;
            let mut context = root.new_inner_scope();
            if let Some(args) = &self.args {
                context.add_variable_as_val("args", to_val_fields(args, self.args_fields));
            }
            let variables = [
                ("agent", &self.agent),
                ("task", &self.task),
                ("session", &self.session),
                ("request", &self.request),
            ];
            for (name, value) in variables {
                if let Some(value) = value {
                    context.add_variable_as_val(name, to_val(value));
                }
            }
            evaluate(&Scope {
                context,
                has_task: self.task.is_some(),
            })
        })
    }
}

/// An earlier call as a requirement's `match` sees it (`prior.tool`, `prior.args`).
pub struct PriorCall<'a> {
    pub tool: &'a str,
    pub args: &'a Json,
}

/// Runs `evaluate` with only `args` and `prior` bound: a requirement's `match`
/// (`policy::requires`), which compares an earlier call's arguments with this one's.
/// Of both, only the fields `rule` reads are converted.
pub fn scope_prior<R>(
    rule: &CompiledRule,
    args: &Json,
    prior: PriorCall<'_>,
    evaluate: impl FnOnce(&Scope<'_, '_>) -> R,
) -> R {
    ROOT.with(|root| {
        let root: &Context<'_, '_> = root;
        let mut context = root.new_inner_scope();
        context.add_variable_as_val("args", to_val_fields(args, Some(&rule.args)));
        let prior: HashMap<CelMapKey, Box<dyn Val + '_>> = HashMap::from([
            (
                CelMapKey::from("tool"),
                Box::new(CelString::from(prior.tool)) as Box<dyn Val>,
            ),
            (
                CelMapKey::from("args"),
                to_val_fields(prior.args, Some(&rule.prior_args)),
            ),
        ]);
        context.add_variable_as_val("prior", Box::new(CelMap::from(prior)));
        evaluate(&Scope {
            context,
            has_task: false,
        })
    })
}

/// A map of arguments as CEL sees it: only the top-level fields `fields` names, when it
/// names some (`policy::field_reads`).
fn to_val_fields<'v>(value: &'v Json, fields: Option<&FieldReads>) -> Box<dyn Val + 'v> {
    match (value, fields) {
        (Json::Object(all), Some(FieldReads::Named(names))) => Box::new(CelMap::from(
            names
                .iter()
                .filter_map(|name| all.get_key_value(name.as_str()))
                .map(|(k, v)| (CelMapKey::from(k.as_str()), to_val(v)))
                .collect::<HashMap<_, _>>(),
        )),
        _ => to_val(value),
    }
}

/// JSON to a CEL value that borrows its strings. Integers stay `int` (CEL's serde path
/// makes non-negative ones `uint`, which then can't be added to an `int` literal).
fn to_val(value: &Json) -> Box<dyn Val + '_> {
    match value {
        Json::Null => Box::new(CelNull),
        Json::Bool(b) => Box::new(CelBool::from(*b)),
        Json::Number(n) => match (n.as_i64(), n.as_u64()) {
            (Some(i), _) => Box::new(CelInt::from(i)),
            (None, Some(u)) => Box::new(CelUInt::from(u)),
            _ => Box::new(CelDouble::from(n.as_f64().unwrap_or(f64::NAN))),
        },
        Json::String(s) => Box::new(CelString::from(s.as_str())),
        Json::Array(items) => Box::new(CelList::from(items.iter().map(to_val).collect::<Vec<_>>())),
        Json::Object(fields) => Box::new(CelMap::from(
            fields
                .iter()
                .map(|(k, v)| (CelMapKey::from(k.as_str()), to_val(v)))
                .collect::<HashMap<_, _>>(),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_names_the_variables() {
        let reads = Reads::of(["args", "task", "x"]);
        assert!(reads.args && reads.task);
        assert!(!reads.agent && !reads.session && !reads.request);
        let both = reads.union(Reads::of(["request"]));
        assert!(both.args && both.task && both.request);
    }

    #[test]
    fn a_scope_binds_only_what_is_given() {
        let args = serde_json::json!({"n": 1});
        let bindings = Bindings {
            args: Some(Cow::Borrowed(&args)),
            ..Bindings::default()
        };
        bindings.scope(|scope| {
            assert!(!scope.has_task);
            let parse = |e: &str| cel::parser::Parser::new().parse(e).unwrap();
            let ok = cel::Value::resolve(&parse("args.n == 1"), &scope.context);
            assert_eq!(ok, Ok(cel::Value::Bool(true)));
            assert!(cel::Value::resolve(&parse("agent.id"), &scope.context).is_err());
        });
    }
}
