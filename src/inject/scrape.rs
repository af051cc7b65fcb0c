//! `monitoring.scrapeAnnotations`: the standard `prometheus.io/scrape`, `/port` and
//! `/path` annotations on an injected pod, pointing at the sidecar's admin port, for a
//! Prometheus that discovers pods by annotation (docs/observability.md).
//!
//! A pod carries one such set. One that already names any `prometheus.io/*` annotation
//! scrapes its app's own metrics; it is left as it is (none of ours is added), and its
//! sidecar is scraped through the PodMonitor's named port instead.

use json_patch::jsonptr::PointerBuf;
use json_patch::{AddOperation, PatchOperation};
use k8s_openapi::api::core::v1::Pod;
use serde_json::Value;

use super::ADMIN_PORT;

/// The annotations' prefix.
const PREFIX: &str = "prometheus.io/";

/// The operations adding the scrape annotations to `pod` (whose annotations map exists:
/// it opted in), or none when the pod has its own.
pub fn annotations(pod: &Pod) -> Vec<PatchOperation> {
    let own = pod
        .metadata
        .annotations
        .as_ref()
        .is_some_and(|a| a.keys().any(|k| k.starts_with(PREFIX)));
    if own {
        return Vec::new();
    }
    [
        ("scrape", "true".to_string()),
        ("port", ADMIN_PORT.to_string()),
        ("path", "/metrics".to_string()),
    ]
    .into_iter()
    .map(|(key, value)| {
        PatchOperation::Add(AddOperation {
            path: PointerBuf::from_tokens(["metadata", "annotations", &format!("{PREFIX}{key}")]),
            value: Value::String(value),
        })
    })
    .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod(annotations: Value) -> Pod {
        serde_json::from_value(
            json!({"metadata": {"name": "orders-1", "annotations": annotations}}),
        )
        .unwrap()
    }

    #[test]
    fn the_admin_port_is_advertised_unless_the_pod_has_its_own() {
        let mut doc = json!({"metadata": {"annotations": {"toolgate.dev/inject": "true"}}});
        let patch = json_patch::Patch(annotations(&pod(doc["metadata"]["annotations"].clone())));
        json_patch::patch(&mut doc, &patch).unwrap();
        assert_eq!(
            doc["metadata"]["annotations"],
            json!({
                "toolgate.dev/inject": "true",
                "prometheus.io/scrape": "true",
                "prometheus.io/port": "15101",
                "prometheus.io/path": "/metrics",
            })
        );
        let app = pod(json!({"toolgate.dev/inject": "true", "prometheus.io/port": "9090"}));
        assert!(annotations(&app).is_empty());
    }
}
