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

use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine as _;
use http::StatusCode;
use k8s_openapi::api::core::v1::Pod;
use kube::core::admission::{AdmissionRequest, AdmissionReview, Operation};
use kube::core::DynamicObject;
use serde_json::{json, Value};

use super::patch::{patch, Decision};
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
        Err(message) => {
            return Answer {
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
    };
    let subject = subject(&request);
    let mut reply = Reply::allow();
    let outcome = match read_pod(&request) {
        Err(Some(warning)) => {
            reply.warnings.push(warning);
            "unreadable"
        }
        Err(None) => "ignored",
        Ok(pod) => match patch(&pod, settings) {
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

/// The `response` of an `AdmissionReview`, written out rather than taken from kube-rs,
/// whose `patch` serializes as an array of numbers; the API documents base64.
struct Reply {
    allowed: bool,
    status: Option<Value>,
    patch: Option<String>,
    warnings: Vec<String>,
}

impl Reply {
    fn allow() -> Reply {
        Reply {
            allowed: true,
            status: None,
            patch: None,
            warnings: Vec::new(),
        }
    }

    fn into_review(self, request: &AdmissionRequest<DynamicObject>) -> Value {
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

fn subject(request: &AdmissionRequest<DynamicObject>) -> String {
    let name = match (&request.name, &request.object) {
        (name, _) if !name.is_empty() => name.clone(),
        (_, Some(object)) => object.metadata.generate_name.clone().unwrap_or_default(),
        _ => String::new(),
    };
    format!("{}/{name}", request.namespace.as_deref().unwrap_or(""))
}

fn parse(body: &[u8]) -> Result<AdmissionRequest<DynamicObject>, String> {
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

/// The pod of a CREATE review. `Err(None)`: not ours to look at (another operation);
/// `Err(Some(warning))`: something we were sent but can't read.
fn read_pod(request: &AdmissionRequest<DynamicObject>) -> Result<Pod, Option<String>> {
    if request.operation != Operation::Create {
        return Err(None);
    }
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
    serde_json::to_value(object)
        .and_then(serde_json::from_value::<Pod>)
        .map_err(|e| {
            Some(format!(
                "toolgate cannot read this pod ({e}); nothing injected"
            ))
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings() -> SidecarSettings {
        SidecarSettings::default()
    }

    fn review_of(object: Value, operation: &str) -> Vec<u8> {
        json!({
            "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
            "request": {
                "uid": "705ab4f5-6393-11e8-b7cc-42010a800002",
                "kind": {"group": "", "version": "v1", "kind": "Pod"},
                "resource": {"group": "", "version": "v1", "resource": "pods"},
                "namespace": "shop", "operation": operation,
                "userInfo": {"username": "system:serviceaccount:kube-system:replicaset-controller"},
                "object": object, "oldObject": null, "dryRun": false
            }
        })
        .to_string()
        .into_bytes()
    }

    fn pod(annotations: Value) -> Value {
        json!({"apiVersion": "v1", "kind": "Pod",
               "metadata": {"generateName": "orders-", "namespace": "shop", "annotations": annotations},
               "spec": {"containers": [{"name": "app", "image": "orders:1", "ports": [{"containerPort": 8080}]}]}})
    }

    #[test]
    fn malformed_bodies_get_400_with_a_message() {
        for body in [
            &b"not json"[..],
            br#"{"apiVersion": "admission.k8s.io/v1beta1", "kind": "AdmissionReview", "request": {}}"#,
            br#"{"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview"}"#,
            br#"{"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {"kind": 3}}"#,
            b"",
        ] {
            let answer = review(body, &settings());
            assert_eq!(answer.status, StatusCode::BAD_REQUEST);
            assert_eq!(answer.outcome, "malformed");
            assert!(answer.body["message"].as_str().unwrap().contains("AdmissionReview"));
        }
    }

    #[test]
    fn an_injected_pod_gets_a_json_patch_and_the_uid_back() {
        let answer = review(
            &review_of(pod(json!({"toolgate.dev/inject": "true"})), "CREATE"),
            &settings(),
        );
        assert_eq!(answer.status, StatusCode::OK);
        assert_eq!(answer.outcome, "injected");
        let response = &answer.body["response"];
        assert_eq!(answer.body["apiVersion"], "admission.k8s.io/v1");
        assert_eq!(response["uid"], "705ab4f5-6393-11e8-b7cc-42010a800002");
        assert_eq!(response["allowed"], true);
        assert_eq!(response["patchType"], "JSONPatch");
        let patch = BASE64.decode(response["patch"].as_str().unwrap()).unwrap();
        let patch: Value = serde_json::from_slice(&patch).unwrap();
        assert_eq!(patch[0]["path"], "/spec/initContainers");
    }

    #[test]
    fn a_refused_pod_is_denied_with_the_reason() {
        let answer = review(
            &review_of(
                pod(json!({"toolgate.dev/inject": "true", "toolgate.dev/upstream-port": "http"})),
                "CREATE",
            ),
            &settings(),
        );
        assert_eq!(answer.outcome, "denied");
        assert_eq!(answer.body["response"]["allowed"], false);
        let message = answer.body["response"]["status"]["message"]
            .as_str()
            .unwrap();
        assert!(message.contains("toolgate.dev/upstream-port"), "{message}");
    }

    #[test]
    fn odd_but_valid_reviews_are_allowed_unchanged() {
        let cases = [
            (
                review_of(pod(json!({"toolgate.dev/inject": "yes"})), "CREATE"),
                "skipped",
                true,
            ),
            (
                review_of(pod(json!({"toolgate.dev/inject": "true"})), "UPDATE"),
                "ignored",
                false,
            ),
            (
                String::from_utf8(review_of(pod(json!({})), "CREATE"))
                    .unwrap()
                    .replace(r#""kind":"Pod""#, r#""kind":"Deployment""#)
                    .into_bytes(),
                "unreadable",
                true,
            ),
            (
                review_of(json!({"spec": {"containers": "many"}}), "CREATE"),
                "unreadable",
                true,
            ),
        ];
        for (body, outcome, warned) in cases {
            let answer = review(&body, &settings());
            assert_eq!(answer.status, StatusCode::OK);
            assert_eq!(answer.outcome, outcome);
            let response = &answer.body["response"];
            assert_eq!(response["allowed"], true);
            assert!(response.get("patch").is_none());
            assert_eq!(response.get("warnings").is_some(), warned, "{outcome}");
        }
    }
}
