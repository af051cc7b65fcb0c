//! From a verdict and the object's current status to the conditions to write — or to
//! nothing, which is what keeps the controller quiet: every status write comes back as a
//! watch event, and only a write that changes something would be answered by another.
//!
//! Kubernetes' rules for conditions: `lastTransitionTime` moves only when `status`
//! flips; `observedGeneration` is the generation the verdict was computed from; other
//! writers' condition types are kept as they are.

use super::verdict::Verdict;
use crate::crd::status::ACCEPTED;
use crate::crd::Condition;

/// The conditions to write for `verdict`, or `None` when `current` already says it.
/// `now` is an RFC 3339 timestamp, used only if `status` changes.
pub fn update(
    verdict: &Verdict,
    generation: Option<i64>,
    current: &[Condition],
    now: &str,
) -> Option<Vec<Condition>> {
    let status = if verdict.reason.accepted() {
        "True"
    } else {
        "False"
    };
    let previous = current.iter().find(|c| c.type_ == ACCEPTED);
    let unchanged = previous.is_some_and(|c| {
        c.status == status
            && c.reason == verdict.reason.as_str()
            && c.message == verdict.message
            && c.observed_generation == generation
    });
    if unchanged {
        return None;
    }
    let last_transition_time = match previous {
        Some(c) if c.status == status => c.last_transition_time.clone(),
        _ => now.to_string(),
    };
    let accepted = Condition {
        type_: ACCEPTED.into(),
        status: status.into(),
        observed_generation: generation,
        last_transition_time,
        reason: verdict.reason.as_str().into(),
        message: verdict.message.clone(),
    };
    let mut conditions: Vec<Condition> = current
        .iter()
        .filter(|c| c.type_ != ACCEPTED)
        .cloned()
        .collect();
    conditions.push(accepted);
    Some(conditions)
}

/// Now, as conditions spell time (RFC 3339, whole seconds, UTC).
pub fn now() -> String {
    humantime::format_rfc3339_seconds(std::time::SystemTime::now()).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::controller::reason::Reason;

    fn mk_verdict(reason: Reason, message: &str) -> Verdict {
        Verdict {
            reason,
            message: message.into(),
        }
    }

    const T0: &str = "2025-01-01T00:00:00Z";
    const T1: &str = "2025-01-02T00:00:00Z";

    #[test]
    fn first_write_then_nothing_while_nothing_changes() {
        let valid = mk_verdict(Reason::Valid, "ok");
        let written = update(&valid, Some(1), &[], T0).unwrap();
        assert_eq!(written.len(), 1);
        let c = &written[0];
        assert_eq!((c.type_.as_str(), c.status.as_str()), ("Accepted", "True"));
        assert_eq!(
            (c.reason.as_str(), c.last_transition_time.as_str()),
            ("Valid", T0)
        );
        assert_eq!(c.observed_generation, Some(1));
        assert_eq!(update(&valid, Some(1), &written, T1), None);
    }

    #[test]
    fn transition_time_moves_only_when_status_flips() {
        let first = update(
            &mk_verdict(Reason::InvalidSchema, "spec.input: a"),
            Some(1),
            &[],
            T0,
        )
        .unwrap();
        // Another error, another generation: still False, so the time stays.
        let second = update(
            &mk_verdict(Reason::InvalidRule, "spec.x: b"),
            Some(2),
            &first,
            T1,
        )
        .unwrap();
        assert_eq!(second[0].last_transition_time, T0);
        assert_eq!(second[0].observed_generation, Some(2));
        assert_eq!(second[0].reason, "InvalidRule");
        // Fixed: True from now.
        let third = update(&mk_verdict(Reason::Valid, "ok"), Some(3), &second, T1).unwrap();
        assert_eq!(
            (
                third[0].status.as_str(),
                third[0].last_transition_time.as_str()
            ),
            ("True", T1)
        );
    }

    #[test]
    fn other_condition_types_are_kept() {
        let other = Condition {
            type_: "Reviewed".into(),
            status: "True".into(),
            observed_generation: None,
            last_transition_time: T0.into(),
            reason: "ByPerson".into(),
            message: String::new(),
        };
        let written = update(
            &mk_verdict(Reason::Valid, "ok"),
            Some(1),
            std::slice::from_ref(&other),
            T1,
        )
        .unwrap();
        assert_eq!(written[0], other);
        assert_eq!(written[1].type_, "Accepted");
    }

    #[test]
    fn now_is_rfc3339_in_seconds() {
        let text = now();
        assert_eq!(text.len(), "2025-01-01T00:00:00Z".len(), "{text}");
        assert!(text.ends_with('Z'));
    }
}
