//! What the controller says about each object of a namespace: compiled exactly as
//! `toolgate check --strict` compiles a folder (same parser, same snapshot build, same
//! options, grants for undefined tools are errors), with one difference the cluster
//! needs: objects whose `workloadSelector`s can never meet in one pod are not checked
//! against each other, since sidecars apply the selector before their own checks
//! (docs/policies.md, "From the cluster"). Pure: tests hand it objects.
//!
//! Two selectors can meet when no label they both name has different values; objects
//! without a selector meet every other. For each distinct selector the objects it can
//! meet are compiled together, and the objects with that selector take their findings
//! from that build.

use std::collections::BTreeMap;

use super::reason::Reason;
use crate::check;
use crate::crd::{Manifest, ManifestError, Object, ObjectKey};
use crate::policy::{Finding, Snapshot};

/// An object as read from the cluster, or why it couldn't be read.
pub type Read = Result<Object, ManifestError>;

/// Conditions messages stay readable in `kubectl describe` (the API allows 32 KiB).
const MAX_MESSAGE: usize = 4096;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verdict {
    pub reason: Reason,
    /// The field path and what is wrong with it; for a valid object, a line saying so.
    pub message: String,
}

impl Verdict {
    fn valid() -> Verdict {
        Verdict {
            reason: Reason::Valid,
            message: "compiles as `toolgate check --strict` does, and conflicts with no object it can meet in a pod".into(),
        }
    }

    fn of(reason: Reason, errors: &[&ManifestError]) -> Verdict {
        let parts: Vec<String> = errors.iter().map(|e| located(e)).collect();
        Verdict {
            reason,
            message: bounded(parts.join("; ")),
        }
    }
}

/// `field: message`, the object itself being the one the condition is on.
pub fn located(error: &ManifestError) -> String {
    match &error.field {
        Some(field) => format!("{field}: {}", error.message),
        None => error.message.clone(),
    }
}

fn bounded(mut text: String) -> String {
    if text.len() > MAX_MESSAGE {
        let mut end = MAX_MESSAGE - 3;
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        text.truncate(end);
        text.push('…');
    }
    text
}

/// A verdict for every object of one namespace.
pub fn judge<'a>(
    objects: impl IntoIterator<Item = (&'a ObjectKey, &'a Read)>,
) -> BTreeMap<ObjectKey, Verdict> {
    let mut verdicts = BTreeMap::new();
    let mut parsed: Vec<&Object> = Vec::new();
    for (key, read) in objects {
        match read {
            Ok(object) => parsed.push(object),
            Err(e) => {
                verdicts.insert(key.clone(), Verdict::of(Reason::InvalidManifest, &[e]));
            }
        }
    }
    let mut groups: BTreeMap<&BTreeMap<String, String>, Vec<&Object>> = BTreeMap::new();
    for object in &parsed {
        groups.entry(selector(object)).or_default().push(object);
    }
    for (labels, members) in groups {
        let meeting: Vec<Object> = parsed
            .iter()
            .filter(|o| can_meet(labels, selector(o)))
            .map(|o| (*o).clone())
            .collect();
        let (snapshot, findings) = Snapshot::compile(&meeting, &check::OPTIONS, 0);
        for member in members {
            verdicts.insert(member.key.clone(), verdict_of(member, &findings, &snapshot));
        }
    }
    verdicts
}

fn verdict_of(object: &Object, findings: &[Finding], snapshot: &Snapshot) -> Verdict {
    let name = format!("{}/{}", object.key.kind, object.key.name);
    let about = |e: &ManifestError| e.object.as_deref() == Some(name.as_str());
    let own: Vec<&Finding> = findings.iter().filter(|f| about(&f.error)).collect();
    if let Some(first) = own.first() {
        let errors: Vec<&ManifestError> = own.iter().map(|f| &f.error).collect();
        return Verdict::of(first.fault.into(), &errors);
    }
    // `check --strict`: a grant no contract defines is an error, not a warning.
    let unknown: Vec<&ManifestError> = snapshot.unserved.iter().filter(|e| about(e)).collect();
    if unknown.is_empty() {
        Verdict::valid()
    } else {
        Verdict::of(Reason::UnknownTool, &unknown)
    }
}

/// The findings of one object on its own: every check that needs no other object (the
/// validating webhook's, which can't see the rest of the namespace consistently).
pub fn alone(object: &Object) -> Vec<Finding> {
    Snapshot::compile(std::slice::from_ref(object), &check::OPTIONS, 0).1
}

static EVERY_POD: BTreeMap<String, String> = BTreeMap::new();

fn selector(object: &Object) -> &BTreeMap<String, String> {
    let selector = match &object.manifest {
        Manifest::ToolContract(spec) => spec.workload_selector.as_ref(),
        Manifest::AgentPolicy(spec) => spec.workload_selector.as_ref(),
    };
    selector.map_or(&EVERY_POD, |s| &s.match_labels)
}

/// Whether one pod can carry both selectors' labels.
fn can_meet(a: &BTreeMap<String, String>, b: &BTreeMap<String, String>) -> bool {
    a.iter().all(|(k, v)| b.get(k).is_none_or(|w| w == v))
}

#[cfg(test)]
mod tests;
