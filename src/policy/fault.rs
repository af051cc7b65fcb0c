//! What kind of problem keeps an object out of a snapshot, typed where it is found.
//!
//! The compile steps know whether they were compiling a JSON Schema, a CEL expression or
//! a plain value, and the snapshot build knows which uniqueness rule a second object
//! broke; they say so here, so the controller's condition reasons (`InvalidSchema`,
//! `RouteConflict`, …) come from the code that found the problem, never from reading
//! its message.

use crate::crd::ManifestError;

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Fault {
    /// A value the spec types accept but toolgate can't use: a zero limit, a method that
    /// is not an HTTP method, a bad redaction pointer, a tool granted twice.
    InvalidSpec,
    /// A JSON Schema (`input`, `output`) that doesn't compile.
    InvalidSchema,
    /// A CEL expression (a rule, an approval's `when`, a `dedupeKey`) that doesn't
    /// compile or reads an unknown variable.
    InvalidRule,
    /// Another contract already defines this tool.
    ToolConflict,
    /// Another contract already binds this method and path.
    RouteConflict,
    /// Another policy already governs this agent.
    AgentConflict,
}

/// A field of one spec that can't be compiled, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldError {
    /// The dotted path from the object's root: `spec.tools[0].rules[1].expr`.
    pub field: String,
    pub message: String,
    pub fault: Fault,
}

impl FieldError {
    pub fn new(fault: Fault, field: impl Into<String>, message: impl Into<String>) -> Self {
        FieldError {
            field: field.into(),
            message: message.into(),
            fault,
        }
    }

    pub fn spec(field: impl Into<String>, message: impl Into<String>) -> Self {
        FieldError::new(Fault::InvalidSpec, field, message)
    }

    pub fn schema(field: impl Into<String>, message: impl Into<String>) -> Self {
        FieldError::new(Fault::InvalidSchema, field, message)
    }

    pub fn rule(field: impl Into<String>, message: impl Into<String>) -> Self {
        FieldError::new(Fault::InvalidRule, field, message)
    }
}

/// One error of a snapshot build, with its kind.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Finding {
    pub error: ManifestError,
    pub fault: Fault,
}
