//! The manifest fields of DESIGN §16 ("the seeds' remaining rules"), as plain data: a
//! grant's `requires` (call order), a policy's or grant's spend `budget`, and a
//! contract's `cost`. They only describe; `policy::requires` and `limits::budget`
//! compile them.

use schemars::{json_schema, JsonSchema, Schema, SchemaGenerator};
use serde::{Deserialize, Serialize};

/// An earlier call a grant's call needs, in the same task or session (docs/policies.md).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Requirement {
    /// The tool that must have been called, allowed and answered successfully, before.
    #[schemars(length(min = 1))]
    pub tool: String,
    /// CEL over `prior.args` (the earlier call's validated arguments) and `args` (this
    /// call's): the earlier call counts only if it is true. Absent: any earlier call counts.
    #[serde(rename = "match", default, skip_serializing_if = "Option::is_none")]
    pub matches: Option<String>,
    /// `task`: the earlier call carried the same task token's task id (a call without a
    /// task token is `OUT_OF_TASK_SCOPE`); `session` (default): the same task, or without
    /// a task token the same session.
    #[serde(default)]
    pub within: Within,
    /// The earlier call counts only this long (default: as long as history is kept).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub max_age_seconds: Option<u64>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub enum Within {
    Task,
    #[default]
    Session,
}

/// A spend budget: how much of its calls' `cost` an agent may spend per local day.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Budget {
    /// What one agent may spend per day, in the contracts' `cost` units.
    #[schemars(range(min = 1))]
    pub per_day: i64,
    /// The IANA time zone whose midnight starts a new day (default `UTC`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timezone: Option<String>,
}

/// What one call of a tool costs against a spend budget: a whole number, or CEL over
/// `args` (and `agent`) that evaluates to one (`args.amount`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Cost {
    Fixed(i64),
    Expr(String),
}

impl JsonSchema for Cost {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "Cost".into()
    }

    /// An integer or a string, in the one form a structural CRD schema allows for that.
    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        json_schema!({"x-kubernetes-int-or-string": true})
    }
}
