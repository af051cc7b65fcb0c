//! An object as the API server returns it → the [`Object`] a file would have produced.
//!
//! The watcher sees raw `DynamicObject`s, not typed specs, so that one object the spec type
//! can't read (an unknown field, a wrong type) is reported by name instead of failing the
//! whole list. The conversion then goes through the file parser itself
//! ([`crate::crd::parse_value`]), so both sources share every check and error message.

use kube::api::DynamicObject;

use super::Kind;
use crate::crd::{parse_value, ManifestError, Object, ObjectKey, API_VERSION};

/// `Object::origin` of everything from the cluster.
pub const ORIGIN: &str = "cluster";

/// The key an object of `kind` has in the index; what a delete event names.
pub fn key(kind: Kind, object: &DynamicObject) -> ObjectKey {
    ObjectKey {
        kind: kind.name(),
        namespace: object.metadata.namespace.clone().unwrap_or_default(),
        name: object.metadata.name.clone().unwrap_or_default(),
    }
}

pub fn convert(kind: Kind, object: &DynamicObject) -> Result<Object, ManifestError> {
    let error = |message: String| ManifestError {
        origin: ORIGIN.to_string(),
        object: Some(format!("{}/{}", kind.name(), key(kind, object).name)),
        field: None,
        message,
    };
    let mut value = serde_json::to_value(object).map_err(|e| error(e.to_string()))?;
    // List items may omit their type; the watched resource says what it is.
    if let Some(map) = value.as_object_mut() {
        map.entry("apiVersion").or_insert(API_VERSION.into());
        map.entry("kind").or_insert(kind.name().into());
    }
    let value = serde_yaml::to_value(value).map_err(|e| error(e.to_string()))?;
    let parsed = parse_value(ORIGIN, value)?;
    if parsed.key != key(kind, object) {
        return Err(error(format!(
            "watched as a {} but is a {}",
            kind.name(),
            parsed.key.kind
        )));
    }
    Ok(parsed)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::crd::parse_documents;
    use serde_json::json;

    const MANIFEST: &str = r#"
apiVersion: toolgate.dev/v1alpha1
kind: AgentPolicy
metadata: {name: ops-bot, namespace: team-a}
spec:
  agents: [ops-bot]
  rateLimit: {perMinute: 60}
  tools:
    - name: read_logs
      rules: [{name: r, expr: "args.x == 1", recovery: ask_user}]
"#;

    /// What the API server sends: the manifest plus server-set metadata and defaults.
    fn mk_served(spec: serde_json::Value) -> DynamicObject {
        serde_json::from_value(json!({
            "apiVersion": "toolgate.dev/v1alpha1",
            "kind": "AgentPolicy",
            "metadata": {
                "name": "ops-bot", "namespace": "team-a", "uid": "0b6c", "resourceVersion": "42",
                "generation": 3, "creationTimestamp": "2025-01-01T00:00:00Z",
                "managedFields": [{"manager": "kubectl", "operation": "Apply"}]
            },
            "spec": spec,
            "status": {"observed": true}
        }))
        .unwrap()
    }

    #[test]
    fn cluster_and_file_produce_the_same_object() {
        let from_file = parse_documents("policies.yaml", MANIFEST).0.remove(0);
        let served = mk_served(json!({
            "agents": ["ops-bot"], "enabled": true, "mode": "enforce",
            "rateLimit": {"perMinute": 60},
            "tools": [{"name": "read_logs",
                       "rules": [{"name": "r", "expr": "args.x == 1", "recovery": "ask_user"}]}]
        }));
        let from_cluster = convert(Kind::AgentPolicy, &served).unwrap();
        assert_eq!(from_cluster.key, from_file.key);
        assert_eq!(from_cluster.manifest, from_file.manifest);
        assert_eq!(from_cluster.origin, ORIGIN);
    }

    #[test]
    fn an_unreadable_spec_is_an_error_naming_the_object_and_field() {
        let served = mk_served(json!({"agents": ["a"], "tools": [{"name": "t", "ruls": []}]}));
        let err = convert(Kind::AgentPolicy, &served).unwrap_err();
        assert_eq!(err.object.as_deref(), Some("AgentPolicy/ops-bot"));
        assert_eq!(err.field.as_deref(), Some("spec.tools[0].ruls"));
        assert_eq!(key(Kind::AgentPolicy, &served).name, "ops-bot");
    }

    #[test]
    fn list_items_without_a_type_take_the_watched_kind() {
        let mut served = mk_served(json!({"agents": ["a"]}));
        served.types = None;
        assert_eq!(
            convert(Kind::AgentPolicy, &served).unwrap().key.kind,
            "AgentPolicy"
        );
        let err = convert(Kind::ToolContract, &mk_served(json!({"agents": ["a"]}))).unwrap_err();
        assert!(err.message.contains("watched as a ToolContract"), "{err}");
    }
}
