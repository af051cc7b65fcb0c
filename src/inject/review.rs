//! One `admission.k8s.io/v1` `AdmissionReview` in, one answer out — still pure, so the
//! golden tests run the same code as the server.
//!
//! How malformed input is answered:
//! - a body that is not a v1 `AdmissionReview` with a `request` (bad JSON, another
//!   version, no `uid`) gets **HTTP 400** and a Kubernetes `Status` naming the problem.
//!   Without a request `uid` there is no valid review to answer, and the API server never
//!   sends such a body, so whoever did (a person, a probe, a broken proxy) sees the error
//!   plainly; the API server would apply the webhook's `failurePolicy`.
//! - a well-formed review whose object is not a readable pod is **allowed unchanged with
//!   a warning**: the API server has already validated the object, so failing to read it
//!   is toolgate's problem, not the pod owner's; and the data path stays closed anyway —
//!   agents reach the app through the sidecar's port, which an uninjected pod lacks.
//! - a pod that asks for the sidecar but can't get a working one is **denied** with the
//!   reason (see [`super::patch`]): that is the owner's to fix, and they see the message in
//!   their ReplicaSet's events.
//! - an update of a pod's `ephemeralcontainers` subresource (`kubectl debug`) is allowed
//!   unchanged, or denied if a new container would reach the sidecar's volumes or
//!   Secrets ([`super::borrow`]).

use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine as _;
use http::StatusCode;
use k8s_openapi::api::core::v1::Pod;
use kube::core::admission::{AdmissionRequest, AdmissionReview, Operation};
use kube::core::DynamicObject;
use serde_json::{json, Value};

use super::patch::{debug, patch, Decision};
use super::settings::SidecarSettings;

const API_VERSION: &str = "admission.k8s.io/v1";
const KIND: &str = "AdmissionReview";

/// The HTTP answer to one review body.
#[derive(Debug)]
pub struct Answer {
    pub status: StatusCode,
    pub body: Value,
    /// What happened, for the log line: `injected`, `skipped`, `denied`, `malformed`, ….
    pub outcome: &'static str,
    /// `namespace/name` (or the `generateName` prefix) of the object, for the log line.
    pub subject: String,
}

/// Answers one request body.
pub fn review(body: &[u8], settings: &SidecarSettings) -> Answer {
    let request = match parse(body) {
        Ok(request) => request,
        Err(message) => return malformed(&message),
    };
    let subject = subject(&request);
    let mut reply = Reply::allow();
    let outcome = match read_pod(&request) {
        Err(Some(warning)) => {
            reply.warnings.push(warning);
            "unreadable"
        }
        Err(None) => "ignored",
        Ok((pod, operation)) => match operation.decide(&pod, settings) {
            Decision::Skip { warning } => {
                reply.warnings.extend(warning);
                "skipped"
            }
            Decision::Refuse(reason) => {
                reply.allowed = false;
                reply.status =
                    Some(json!({"code": 400, "reason": "BadRequest", "message": reason}));
                "denied"
            }
            Decision::Inject(ops) => match serde_json::to_vec(&ops) {
                Ok(bytes) => {
                    reply.patch = Some(BASE64.encode(bytes));
                    "injected"
                }
                Err(e) => {
                    reply
                        .warnings
                        .push(format!("toolgate could not encode its patch: {e}"));
                    "unencodable"
                }
            },
        },
    };
    Answer {
        status: StatusCode::OK,
        body: reply.into_review(&request),
        outcome,
        subject,
    }
}

/// The 400 answer to a body that is not a review (see the module's doc).
pub(super) fn malformed(message: &str) -> Answer {
    Answer {
        status: StatusCode::BAD_REQUEST,
        body: json!({
            "kind": "Status", "apiVersion": "v1", "status": "Failure",
            "reason": "BadRequest", "code": 400,
            "message": format!("not an admission.k8s.io/v1 AdmissionReview request: {message}"),
        }),
        outcome: "malformed",
        subject: String::new(),
    }
}

/// The `response` of an `AdmissionReview`, written out rather than taken from kube-rs,
/// whose `patch` serializes as an array of numbers; the API documents base64.
pub(super) struct Reply {
    pub(super) allowed: bool,
    pub(super) status: Option<Value>,
    patch: Option<String>,
    pub(super) warnings: Vec<String>,
}

impl Reply {
    pub(super) fn allow() -> Reply {
        Reply {
            allowed: true,
            status: None,
            patch: None,
            warnings: Vec::new(),
        }
    }

    pub(super) fn into_review(self, request: &AdmissionRequest<DynamicObject>) -> Value {
        let mut response = json!({"uid": request.uid, "allowed": self.allowed});
        if let Some(status) = self.status {
            response["status"] = status;
        }
        if let Some(patch) = self.patch {
            response["patchType"] = json!("JSONPatch");
            response["patch"] = json!(patch);
        }
        if !self.warnings.is_empty() {
            response["warnings"] = json!(self.warnings);
        }
        json!({"apiVersion": API_VERSION, "kind": KIND, "response": response})
    }
}

pub(super) fn subject(request: &AdmissionRequest<DynamicObject>) -> String {
    let name = match (&request.name, &request.object) {
        (name, _) if !name.is_empty() => name.clone(),
        (_, Some(object)) => object.metadata.generate_name.clone().unwrap_or_default(),
        _ => String::new(),
    };
    format!("{}/{name}", request.namespace.as_deref().unwrap_or(""))
}

pub(super) fn parse(body: &[u8]) -> Result<AdmissionRequest<DynamicObject>, String> {
    let value: Value = serde_json::from_slice(body).map_err(|e| format!("invalid JSON: {e}"))?;
    let (version, kind) = (&value["apiVersion"], &value["kind"]);
    if version != API_VERSION || kind != KIND {
        return Err(format!(
            "apiVersion {version} and kind {kind}, expected \"admission.k8s.io/v1\" and \"AdmissionReview\""
        ));
    }
    let review: AdmissionReview<DynamicObject> =
        serde_path_to_error::deserialize(value).map_err(|e| {
            let path = e.path().to_string();
            format!("{path}: {}", e.into_inner())
        })?;
    review
        .try_into()
        .map_err(|_| "the review has no request".to_string())
}

/// What a review asks of the injector.
enum Asked {
    /// A pod is created: inject it, skip it, or refuse it.
    Create,
    /// Ephemeral containers are added to a running pod: allow them or refuse them.
    Debug,
}

impl Asked {
    fn decide(&self, pod: &Pod, settings: &SidecarSettings) -> Decision {
        match self {
            Asked::Create => patch(pod, settings),
            Asked::Debug => debug(pod, settings),
        }
    }
}

/// The pod of a CREATE review, or of an update of its ephemeral containers. `Err(None)`:
/// not ours to look at (another operation); `Err(Some(warning))`: something we were
/// sent but can't read.
fn read_pod(request: &AdmissionRequest<DynamicObject>) -> Result<(Pod, Asked), Option<String>> {
    let asked = match (&request.operation, request.sub_resource.as_deref()) {
        (Operation::Create, None) => Asked::Create,
        (Operation::Update, Some("ephemeralcontainers")) => Asked::Debug,
        _ => return Err(None),
    };
    let kind = &request.kind;
    if !(kind.group.is_empty() && kind.version == "v1" && kind.kind == "Pod") {
        return Err(Some(format!(
            "toolgate injects into v1 Pods only, not {}/{} {}; check the webhook's rules",
            kind.group, kind.version, kind.kind
        )));
    }
    let Some(object) = &request.object else {
        return Err(Some("the review carries no pod; nothing injected".into()));
    };
    let pod = serde_json::to_value(object)
        .and_then(serde_json::from_value::<Pod>)
        .map_err(|e| {
            Some(format!(
                "toolgate cannot read this pod ({e}); nothing injected"
            ))
        })?;
    Ok((pod, asked))
}

#[cfg(test)]
mod tests;
