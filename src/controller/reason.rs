//! The `reason` of an `Accepted` condition: one CamelCase word per kind of finding, so
//! `kubectl get` and `kubectl wait` users (and alerting on them) can tell a schema typo
//! from a clash with another team's contract without reading the message.

use crate::policy::Fault;

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Reason {
    /// The object compiles and clashes with nothing it can meet in a pod.
    Valid,
    /// The object can't be read as its kind: a field the spec doesn't have, a value of
    /// the wrong type, a missing `spec`.
    InvalidManifest,
    /// A value toolgate can't use (see [`Fault::InvalidSpec`]).
    InvalidSpec,
    InvalidSchema,
    InvalidRule,
    ToolConflict,
    RouteConflict,
    AgentConflict,
    /// A policy grants a tool no contract it can meet defines (`check --strict`'s error).
    UnknownTool,
}

impl Reason {
    pub const ALL: [Reason; 9] = [
        Reason::Valid,
        Reason::InvalidManifest,
        Reason::InvalidSpec,
        Reason::InvalidSchema,
        Reason::InvalidRule,
        Reason::ToolConflict,
        Reason::RouteConflict,
        Reason::AgentConflict,
        Reason::UnknownTool,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Reason::Valid => "Valid",
            Reason::InvalidManifest => "InvalidManifest",
            Reason::InvalidSpec => "InvalidSpec",
            Reason::InvalidSchema => "InvalidSchema",
            Reason::InvalidRule => "InvalidRule",
            Reason::ToolConflict => "ToolConflict",
            Reason::RouteConflict => "RouteConflict",
            Reason::AgentConflict => "AgentConflict",
            Reason::UnknownTool => "UnknownTool",
        }
    }

    /// `Accepted` is `True` only for [`Reason::Valid`].
    pub fn accepted(self) -> bool {
        self == Reason::Valid
    }
}

impl From<Fault> for Reason {
    fn from(fault: Fault) -> Reason {
        match fault {
            Fault::InvalidSpec => Reason::InvalidSpec,
            Fault::InvalidSchema => Reason::InvalidSchema,
            Fault::InvalidRule => Reason::InvalidRule,
            Fault::ToolConflict => Reason::ToolConflict,
            Fault::RouteConflict => Reason::RouteConflict,
            Fault::AgentConflict => Reason::AgentConflict,
        }
    }
}

impl std::fmt::Display for Reason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Kubernetes' pattern for a condition reason (metav1.Condition).
    #[test]
    fn reasons_are_valid_condition_reasons() {
        for reason in Reason::ALL {
            let text = reason.as_str();
            assert!(text.starts_with(|c: char| c.is_ascii_uppercase()), "{text}");
            assert!(text.chars().all(|c| c.is_ascii_alphanumeric()), "{text}");
            assert_eq!(reason.accepted(), text == "Valid");
        }
    }
}
