//! The injection decision: a pure function from a pod to a JSON Patch (RFC 6902).
//!
//! Invariants:
//! - only `toolgate.dev/inject: "true"` injects; absent or `"false"` skips silently, any
//!   other value skips with a warning (a typo must not silently mean "no gateway");
//! - a pod that already has a container named `toolgate` is left alone, so a second pass
//!   (webhook reinvocation, a re-sent review, a pod copied from an injected one) is a no-op;
//! - a pod that asks for the sidecar but can't get a working one (no port to forward to,
//!   a port or port name the sidecar needs is taken) is refused with the reason, rather
//!   than admitted with a sidecar that could never start;
//! - a pod whose own containers could reach what the sidecar brings (a `toolgate-*`
//!   volume, the sidecar's Secrets) is refused with the reason ([`super::borrow`]), and
//!   so is a `kubectl debug` container that would ([`debug`]);
//! - patch paths never assume an array exists (`/spec/initContainers` is added whole when
//!   absent) and are built from tokens, so keys like `toolgate.dev/injected` are escaped.

use json_patch::jsonptr::PointerBuf;
use json_patch::{AddOperation, Patch, PatchOperation};
use k8s_openapi::api::core::v1::{Container, Pod, PodSpec};
use serde_json::Value;

use super::borrow;
use super::settings::SidecarSettings;
use super::sidecar::{self, PodFacts, ADMIN_PORT_NAME, AGENT_PORT_NAME};
use super::{
    ADMIN_PORT, AGENT_PORT, CONTAINER_NAME, INJECTED_ANNOTATION, INJECT_ANNOTATION,
    UPSTREAM_PORT_ANNOTATION,
};

/// What to do with a pod.
#[derive(Debug, Clone, PartialEq)]
pub enum Decision {
    /// Admit the pod unchanged; the warning, if any, goes back to whoever created it.
    Skip { warning: Option<String> },
    /// Admit the pod with this patch applied.
    Inject(Patch),
    /// Refuse the pod, saying why and how to fix it.
    Refuse(String),
}

/// Decides what happens to `pod`.
pub fn patch(pod: &Pod, settings: &SidecarSettings) -> Decision {
    let annotations = pod.metadata.annotations.as_ref();
    match annotations
        .and_then(|a| a.get(INJECT_ANNOTATION))
        .map(String::as_str)
    {
        None | Some("false") => return Decision::Skip { warning: None },
        Some("true") => {}
        Some(other) => {
            return Decision::Skip {
                warning: Some(format!(
                    "{INJECT_ANNOTATION}: {other:?} is neither \"true\" nor \"false\"; \
                     the toolgate sidecar was not injected"
                )),
            }
        }
    }
    let Some(spec) = &pod.spec else {
        return Decision::Skip {
            warning: Some("the pod has no spec; the toolgate sidecar was not injected".into()),
        };
    };
    if all_containers(spec).any(|c| c.name == CONTAINER_NAME) {
        return Decision::Skip { warning: None };
    }
    match plan(pod, spec, settings) {
        Ok(patch) => Decision::Inject(patch),
        Err(reason) => Decision::Refuse(reason),
    }
}

fn plan(pod: &Pod, spec: &PodSpec, settings: &SidecarSettings) -> Result<Patch, String> {
    let facts = PodFacts {
        upstream_port: upstream_port(pod, spec)?,
        service_name: service_name(pod),
    };
    check_conflicts(spec)?;
    borrow::check(spec, settings)?;
    let encode =
        |what: &str, e: serde_json::Error| format!("cannot encode the sidecar's {what}: {e}");
    let container = serde_json::to_value(sidecar::container(settings, &facts))
        .map_err(|e| encode("container", e))?;
    let volumes = sidecar::volumes(settings)
        .iter()
        .map(serde_json::to_value)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| encode("volumes", e))?;
    let mut ops = Vec::new();
    // First, so the gateway is running before the app's own init containers and containers.
    match spec.init_containers.as_deref() {
        None | Some([]) => ops.push(add(
            &["spec", "initContainers"],
            Value::Array(vec![container]),
        )),
        Some(_) => ops.push(add(&["spec", "initContainers", "0"], container)),
    }
    match spec.volumes.as_deref() {
        None | Some([]) => ops.push(add(&["spec", "volumes"], Value::Array(volumes))),
        Some(_) => ops.extend(
            volumes
                .into_iter()
                .map(|v| add(&["spec", "volumes", "-"], v)),
        ),
    }
    // The opt-in annotation is there, so the annotations map is too.
    ops.push(add(
        &["metadata", "annotations", INJECTED_ANNOTATION],
        Value::String(settings.image.clone()),
    ));
    if settings.scrape_annotations {
        ops.extend(super::scrape::annotations(pod));
    }
    Ok(Patch(ops))
}

fn add(tokens: &[&str], value: Value) -> PatchOperation {
    PatchOperation::Add(AddOperation {
        path: PointerBuf::from_tokens(tokens.iter().copied()),
        value,
    })
}

fn all_containers(spec: &PodSpec) -> impl Iterator<Item = &Container> {
    spec.init_containers
        .iter()
        .flatten()
        .chain(spec.containers.iter())
}

/// The annotation's port, else the first TCP port an app container declares.
fn upstream_port(pod: &Pod, spec: &PodSpec) -> Result<u16, String> {
    let annotated = pod
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(UPSTREAM_PORT_ANNOTATION));
    let port = match annotated {
        Some(text) => text
            .trim()
            .parse::<u16>()
            .ok()
            .filter(|p| *p > 0)
            .ok_or_else(|| {
                format!("{UPSTREAM_PORT_ANNOTATION}: {text:?} is not a port number (1-65535)")
            })?,
        None => spec
            .containers
            .iter()
            .flat_map(|c| c.ports.iter().flatten())
            .find(|p| p.protocol.as_deref().unwrap_or("TCP") == "TCP")
            .and_then(|p| u16::try_from(p.container_port).ok())
            .ok_or_else(|| {
                format!(
                    "no container declares a TCP port for toolgate to forward to; \
                     set the annotation {UPSTREAM_PORT_ANNOTATION} to the app's port"
                )
            })?,
    };
    if [AGENT_PORT, ADMIN_PORT].contains(&i32::from(port)) {
        return Err(format!(
            "the app's port {port} is one the toolgate sidecar listens on; \
             set {UPSTREAM_PORT_ANNOTATION} to the app's own port"
        ));
    }
    Ok(port)
}

/// Ports and port names the sidecar needs must be free in the pod (its volume names are
/// reserved whole: [`super::borrow`]).
fn check_conflicts(spec: &PodSpec) -> Result<(), String> {
    for container in all_containers(spec) {
        for port in container.ports.iter().flatten() {
            if [AGENT_PORT, ADMIN_PORT].contains(&port.container_port) {
                return Err(format!(
                    "container {:?} declares port {}, which the toolgate sidecar needs",
                    container.name, port.container_port
                ));
            }
            if let Some(name) = port.name.as_deref() {
                if [AGENT_PORT_NAME, ADMIN_PORT_NAME].contains(&name) {
                    return Err(format!(
                        "container {:?} names a port {name:?}, a name the toolgate sidecar uses",
                        container.name
                    ));
                }
            }
        }
    }
    Ok(())
}

/// What to do with ephemeral containers added to a running pod (`kubectl debug`, the
/// `pods/ephemeralcontainers` subresource): nothing is injected; one that would reach
/// the sidecar's volumes or Secrets is refused.
pub fn debug(pod: &Pod, settings: &SidecarSettings) -> Decision {
    match pod
        .spec
        .as_ref()
        .map(|spec| borrow::ephemeral(spec, settings))
    {
        Some(Err(reason)) => Decision::Refuse(reason),
        _ => Decision::Skip { warning: None },
    }
}

/// `app.kubernetes.io/name`, else `app`: what the team calls the service in Jaeger.
fn service_name(pod: &Pod) -> Option<String> {
    let labels = pod.metadata.labels.as_ref()?;
    ["app.kubernetes.io/name", "app"]
        .iter()
        .find_map(|key| labels.get(*key))
        .filter(|name| !name.is_empty())
        .cloned()
}

#[cfg(test)]
mod tests;
