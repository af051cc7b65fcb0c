//! The `status` both kinds carry: Kubernetes conditions, written by `toolgate controller`
//! through the status subresource and read by `kubectl get` (the `Accepted` and `Reason`
//! printer columns) and `kubectl wait --for=condition=Accepted`.
//!
//! The shape is `metav1.Condition`'s, so tools that understand conditions read these too.
//! Nothing in toolgate's data plane reads status: a sidecar compiles the spec itself.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// The one condition type toolgate writes.
pub const ACCEPTED: &str = "Accepted";

/// What `toolgate controller` found, per object.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ObjectStatus {
    /// `Accepted`: whether the object compiles as `toolgate check --strict` compiles it,
    /// alongside the objects of its namespace it can meet in one pod.
    #[serde(default)]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["type"]))]
    pub conditions: Vec<Condition>,
}

/// One condition, as `metav1.Condition` spells it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Condition {
    /// The condition's name, e.g. `Accepted`.
    #[serde(rename = "type")]
    #[schemars(length(min = 1, max = 316))]
    pub type_: String,
    /// `True`, `False` or `Unknown`.
    #[schemars(schema_with = "condition_status_schema")]
    pub status: String,
    /// The `metadata.generation` the condition was computed from; older than the
    /// object's generation means the controller has not seen the latest spec yet.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub observed_generation: Option<i64>,
    /// When `status` last changed (RFC 3339).
    #[schemars(schema_with = "date_time_schema")]
    pub last_transition_time: String,
    /// A CamelCase word for programs: `Valid`, `InvalidSchema`, `RouteConflict`, …
    #[schemars(
        length(min = 1, max = 1024),
        regex(pattern = r"^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$")
    )]
    pub reason: String,
    /// For people: the field path and what is wrong with it.
    #[schemars(length(max = 32768))]
    pub message: String,
}

fn condition_status_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({"type": "string", "enum": ["True", "False", "Unknown"]})
}

fn date_time_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({"type": "string", "format": "date-time"})
}

impl ObjectStatus {
    /// The condition of `type_`, when there is one.
    pub fn condition(&self, type_: &str) -> Option<&Condition> {
        self.conditions.iter().find(|c| c.type_ == type_)
    }
}
