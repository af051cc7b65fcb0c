//! The validating webhook (`POST /validate`): a `ToolContract` or `AgentPolicy` that would
//! not compile is refused at `kubectl apply` with `toolgate check`'s message, the object's
//! name standing where `check` names the file. Pure, like [`super::review`], so the
//! fixture tests run exactly what the server runs.
//!
//! It judges **the object alone**: everything `check` finds without another object (YAML
//! shape, schemas, CEL, quotas, redaction pointers, a tool granted twice). What needs
//! the rest of the namespace — route and tool conflicts, an agent in two policies, a
//! grant for a tool no contract defines — is left to `toolgate controller`'s status:
//! - one `kubectl apply -f dir/` admits its objects one by one in file order, so a
//!   policy would be refused because its contract, a few lines below, was not admitted
//!   yet;
//! - two concurrent applies would each pass against a namespace without the other;
//! - the injector holds no API credentials and reads nothing from the cluster, so the
//!   webhook that sees every pod spec can't read (or leak) anything else.
//!
//! How requests are answered:
//! - CREATE or UPDATE of an object that doesn't compile: `allowed: false`, code 422
//!   (`Invalid`), the findings as the message;
//! - an UPDATE that leaves a broken object's `spec` as it was (a label, an annotation, a
//!   finalizer removed) is allowed with a warning, so an object stored while the webhook
//!   was away can still be labelled and deleted; an object being deleted likewise;
//! - DELETE, CONNECT and other kinds are allowed (other kinds with a warning: the
//!   webhook's rules are wrong); a body that is not a review gets the injector's 400.

use kube::core::admission::{AdmissionRequest, Operation};
use kube::core::DynamicObject;
use kube::core::GroupVersionKind;
use serde_json::json;

use super::review::{malformed, parse, subject, Answer, Reply};
use crate::control::cluster::convert::convert;
use crate::control::cluster::Kind;
use crate::controller::verdict::{alone, located};
use crate::crd::{ManifestError, GROUP};

/// What the webhook decided about one request.
#[derive(Debug, PartialEq, Eq)]
enum Decision {
    Allow,
    /// Allowed, with a warning `kubectl` prints.
    Warn(String),
    Deny(String),
}

/// Answers one request body.
pub fn validate(body: &[u8]) -> Answer {
    let request = match parse(body) {
        Ok(request) => request,
        Err(message) => return malformed(&message),
    };
    let mut reply = Reply::allow();
    let outcome = match decide(&request) {
        Decision::Allow => "allowed",
        Decision::Warn(warning) => {
            reply.warnings.push(warning);
            "warned"
        }
        Decision::Deny(message) => {
            reply.allowed = false;
            reply.status = Some(json!({"code": 422, "reason": "Invalid", "message": message}));
            "denied"
        }
    };
    Answer {
        status: http::StatusCode::OK,
        body: reply.into_review(&request),
        outcome,
        subject: subject(&request),
    }
}

fn decide(request: &AdmissionRequest<DynamicObject>) -> Decision {
    if !matches!(request.operation, Operation::Create | Operation::Update) {
        return Decision::Allow;
    }
    let Some(kind) = kind_of(&request.kind) else {
        let GroupVersionKind {
            group,
            version,
            kind,
        } = &request.kind;
        return Decision::Warn(format!(
            "toolgate validates {GROUP} ToolContract and AgentPolicy only, not {group}/{version} {kind}; check the webhook's rules"
        ));
    };
    let Some(object) = &request.object else {
        return Decision::Warn("the review carries no object; nothing validated".into());
    };
    if object.metadata.deletion_timestamp.is_some() {
        return Decision::Allow;
    }
    let Some(message) = findings(kind, object) else {
        return Decision::Allow;
    };
    let unchanged_spec = request
        .old_object
        .as_ref()
        .is_some_and(|old| old.data.get("spec") == object.data.get("spec"));
    if unchanged_spec {
        return Decision::Warn(format!(
            "{message} (allowed: the spec is unchanged; fix it to make the object apply)"
        ));
    }
    Decision::Deny(message)
}

fn kind_of(kind: &GroupVersionKind) -> Option<Kind> {
    if kind.group != GROUP {
        return None;
    }
    Kind::ALL.into_iter().find(|k| k.name() == kind.kind)
}

/// `toolgate check`'s findings on `object` alone, `Kind/name: field: message` each;
/// `None` when it compiles.
fn findings(kind: Kind, object: &DynamicObject) -> Option<String> {
    let errors: Vec<ManifestError> = match convert(kind, object) {
        Err(e) => vec![e],
        Ok(parsed) => alone(&parsed).into_iter().map(|f| f.error).collect(),
    };
    let lines: Vec<String> = errors
        .iter()
        .map(|e| match &e.object {
            Some(object) => format!("{object}: {}", located(e)),
            None => located(e),
        })
        .collect();
    (!lines.is_empty()).then(|| lines.join("; "))
}

#[cfg(test)]
mod tests;
