//! `toolgate replay`: re-decides the calls an audit log recorded against candidate
//! policies, offline and deterministically (docs/replay.md).
//!
//! ```text
//! audit file ─ line by line: chain verified ─ call record ─ before (what the gate decided)
//!                                                        └ after: the candidate snapshot
//!                                                          decides it with the sidecar's code
//!                                                          (authorize → validate → rules,
//!                                                          approval `when`) on the recorded
//!                                                          arguments and inputs
//! ```
//!
//! Files are streamed, so memory doesn't grow with their length: what is kept is the
//! totals, the changes grouped (with a few example trace ids each), and at most
//! [`MAX_LISTED`] changes for `--format json`. Nor does it grow past a small multiple of
//! the longest line: a long line is weighed first ([`weight`]), and one whose tree would
//! pass [`tree_budget`] is re-decided without its arguments and counted `partial`. Rate limits, budgets, loops and duplicate
//! suppression depend on timing and state and are not replayed (such records are
//! skipped and counted). A record without captured arguments (`captureArguments` off) is
//! re-decided on what needs none — the tool, the grant, the kill switch — and counted
//! `partial`, as is one whose candidate rules read a variable the record doesn't hold.

pub mod order;
pub mod recorded;
pub mod report;
pub mod weight;

use std::path::{Path, PathBuf};

use crate::audit::key::AuditKey;
use crate::audit::verify::{LineError, Lines, Verifier, MAX_LINE};
use crate::policy::Snapshot;
use crate::proxy::decide::{redecide, Inputs};
use crate::proxy::stage::authorize;
use crate::proxy::stage::validate::validate;
use crate::vocab::{Args, Code};
use order::Histories;
use recorded::{Outcome, Recorded, Skip};
use report::Report;

/// At most this many changes are listed one by one (all are counted and grouped).
pub const MAX_LISTED: usize = 10_000;
/// Lines shorter than this are parsed without weighing: even a list of empty objects, the
/// heaviest JSON per byte (~250 bytes of tree a byte), stays under [`TREE_FLOOR`].
const WEIGH_FROM: usize = 64 << 10;
/// The tree any line may build, however short.
const TREE_FLOOR: u64 = 32 << 20;
/// Beyond the floor, a line's tree may take this many times the line.
const TREE_PER_BYTE: u64 = 2;

/// The most a line's arguments and inputs may take as a tree to be re-decided on them.
pub fn tree_budget(line: usize) -> u64 {
    TREE_FLOOR.max(TREE_PER_BYTE.saturating_mul(line as u64))
}

/// What a replay is asked to do.
pub struct Request<'a> {
    pub audit: &'a [PathBuf],
    pub policies: &'a [PathBuf],
    pub key: Option<&'a AuditKey>,
    /// Replay a file whose chain is broken (its intact part and the rest alike).
    pub allow_broken: bool,
}

/// Bad input: a file that can't be read, a broken chain, policies that don't compile.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct Failed(pub String);

/// The candidate policies, compiled as a sidecar would compile them. A shadow policy is
/// replayed as if it enforced: the question is what it would refuse.
pub fn candidate(paths: &[PathBuf]) -> Result<Snapshot, Failed> {
    let (snapshot, report) = crate::check::compile(paths);
    if let Some(first) = report.errors.first() {
        return Err(Failed(format!(
            "the candidate policies don't compile ({} errors), first: {first}",
            report.errors.len()
        )));
    }
    if report.files == 0 {
        return Err(Failed("no policy files found".into()));
    }
    Ok(snapshot)
}

pub fn run(request: &Request<'_>) -> Result<Report, Failed> {
    let snapshot = candidate(request.policies)?;
    let mut report = Report::default();
    // One history across files: they are read in the order given, as one log.
    let mut histories = Histories::default();
    for path in request.audit {
        replay_file(path, &snapshot, request, &mut histories, &mut report)?;
    }
    Ok(report)
}

fn replay_file(
    path: &Path,
    snapshot: &Snapshot,
    request: &Request<'_>,
    histories: &mut Histories,
    report: &mut Report,
) -> Result<(), Failed> {
    let file = std::fs::File::open(path).map_err(|e| Failed(format!("{}: {e}", path.display())))?;
    // Bounded like `audit verify`: one endless line can't grow memory.
    let mut lines = Lines::new(std::io::BufReader::with_capacity(1 << 16, file));
    let mut verifier = Verifier::new(request.key);
    loop {
        let (text, complete) = match lines.next_line() {
            Ok(Some(line)) => line,
            Ok(None) => break,
            Err(LineError::Read(e)) => return Err(Failed(format!("{}: {e}", path.display()))),
            Err(LineError::TooLong) => {
                return Err(Failed(format!(
                    "{}: a line longer than {MAX_LINE} bytes is not an audit record",
                    path.display()
                )))
            }
        };
        if let Err(broken) = verifier.line(text, complete) {
            if !request.allow_broken {
                return Err(Failed(format!(
                    "{}: the chain is broken at line {} ({}): refusing to replay it (--allow-broken replays it anyway)",
                    path.display(),
                    broken.line,
                    broken.reason
                )));
            }
        }
        if text.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        match read_record(text) {
            Some(recorded) => replay_one(recorded, snapshot, histories, report),
            None => report.skip(Skip::NotACall),
        }
    }
    Ok(())
}

/// The record on `line`, built whole only if its tree fits [`tree_budget`]; `None` if
/// the line is not a record.
fn read_record(line: &[u8]) -> Option<Recorded> {
    if line.len() < WEIGH_FROM {
        return serde_json::from_slice(line).ok();
    }
    // Not JSON: nothing is built to find that out.
    if weight::of(line)? <= tree_budget(line.len()) {
        serde_json::from_slice(line).ok()
    } else {
        Recorded::without_arguments(line).ok()
    }
}

/// Re-decides one recorded call and counts it; a call that ran successfully is kept
/// for the `requires` of the calls after it.
pub fn replay_one(
    mut recorded: Recorded,
    snapshot: &Snapshot,
    histories: &mut Histories,
    report: &mut Report,
) {
    // Copied only for a tool some candidate grant requires.
    let prior = histories
        .wants(snapshot, &recorded)
        .then(|| recorded.args.clone());
    let before = match recorded.outcome() {
        Ok(before) => before,
        Err(skip) => {
            if let Some(args) = prior {
                histories.remember(&recorded, args);
            }
            return report.skip(skip);
        }
    };
    // Moved out, not copied: the arguments can be the largest thing replay holds.
    let captured = Captured {
        args: recorded.args.take(),
        inputs: recorded.inputs.take(),
    };
    let (after, partial) = decide(&recorded, captured, &before, snapshot, histories);
    if let Some(args) = prior {
        histories.remember(&recorded, args);
    }
    report.count(&recorded, before, after, partial);
}

/// What a record captured of the call's inputs, owned.
struct Captured {
    args: Option<serde_json::Value>,
    inputs: Option<serde_json::Value>,
}

/// What the candidate decides, and whether it could only decide part of it.
fn decide(
    recorded: &Recorded,
    captured: Captured,
    before: &Outcome,
    snapshot: &Snapshot,
    histories: &Histories,
) -> (Outcome, bool) {
    let (Some(agent), Some(tool)) = (recorded.agent.as_deref(), recorded.tool.as_deref()) else {
        return (before.clone(), true);
    };
    let Some(tool_id) = snapshot.tool(tool) else {
        return (Outcome::deny(Code::UnknownTool, None), false);
    };
    let policy = match authorize::policy(snapshot, agent) {
        Ok(policy) => policy,
        Err(reject) => return (Outcome::deny(reject.code, reject.rule), false),
    };
    let contract = snapshot.contract(tool_id);
    let grant = match authorize::authorize(policy, agent, tool) {
        Ok(permit) => permit.grant,
        Err(reject) => return (Outcome::deny(reject.code, reject.rule), false),
    };
    let Some(args) = captured.args else {
        // Only what needs no arguments was decided: the rest stands as it was.
        return (before.clone(), true);
    };
    let Some(inputs) = captured.inputs.as_ref().and_then(Inputs::from_json) else {
        // Refused before its rules ran (its inputs never read), or of another version:
        // the arguments still decide validation; the rules, if reached, can't be judged.
        return match validate(contract, Args::from(args)) {
            Err(reject) => (Outcome::deny(reject.code, reject.rule), false),
            Ok(_) if grant.rules.is_empty() && grant.approval.is_none() => {
                (Outcome::allow(), false)
            }
            Ok(_) => (before.clone(), true),
        };
    };
    // Rules reading a variable the record doesn't hold can't be judged on it.
    let reads = grant.reads;
    let partial = (reads.agent && inputs.agent.is_none())
        || (reads.task && inputs.task.is_none())
        || (reads.session && inputs.session.is_none())
        || (reads.request && inputs.request.is_none());
    if partial {
        return (before.clone(), true);
    }
    // The call order needs the arguments after the rules took them.
    let order_args = (!grant.requires.is_empty()).then(|| args.clone());
    let decided = redecide(policy, agent, contract, Args::from(args), &inputs);
    // As in the gate: the call order is checked after the rules, before any approval.
    if let (Ok(_), Some(args)) = (&decided, order_args) {
        match histories.check(&grant.requires, recorded, &args) {
            order::Verdict::Met => {}
            order::Verdict::Unmet(reject) => {
                return (Outcome::deny(reject.code, reject.rule), false)
            }
            order::Verdict::Unknown => return (before.clone(), true),
        }
    }
    let after = match decided {
        Ok(decided) if !decided.needs_approval => Outcome::allow(),
        // Held for a person: what the person did can't be replayed. A call that ran under
        // an approval, or was held or denied by one, keeps its outcome.
        Ok(_) if recorded.approval.is_some() || recorded.replayed => Outcome::allow(),
        Ok(_) if is_approval(before) => before.clone(),
        Ok(_) => Outcome::deny(Code::ApprovalRequired, None),
        Err(reject) => Outcome::deny(reject.code, reject.rule),
    };
    (after, false)
}

fn is_approval(outcome: &Outcome) -> bool {
    matches!(
        outcome.code.as_deref(),
        Some("APPROVAL_REQUIRED") | Some("APPROVAL_DENIED")
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::crd::parse_documents;
    use crate::policy::BuildOptions;
    use serde_json::json;

    const POLICIES: &str = "apiVersion: toolgate.dev/v1alpha1
kind: ToolContract
metadata: {name: t}
spec: {tool: t, captureArguments: true, input: {type: object, properties: {n: {type: integer}}}}
---
apiVersion: toolgate.dev/v1alpha1
kind: AgentPolicy
metadata: {name: p}
spec:
  agents: [bot]
  tools:
    - name: t
      rules: [{name: small, expr: 'args.n < 10 && task.max >= args.n'}]
";

    fn snapshot(text: &str) -> Snapshot {
        let (snapshot, errors) =
            Snapshot::build(&parse_documents("t", text).0, &BuildOptions::default(), 1);
        assert!(errors.is_empty(), "{errors:?}");
        snapshot
    }

    fn recorded(value: serde_json::Value) -> Recorded {
        serde_json::from_value(value).unwrap()
    }

    fn call(decision: &str, code: Option<&str>, n: i64, task: Option<i64>) -> Recorded {
        let mut inputs = json!({"v": 1});
        if let Some(max) = task {
            inputs["task"] = json!({"max": max});
        }
        recorded(json!({
            "kind": "call", "traceId": format!("t{n}"), "agent": "bot", "tool": "t",
            "decision": decision, "code": code, "rule": code.map(|_| "small"),
            "args": {"n": n}, "inputs": inputs,
        }))
    }

    #[test]
    fn recorded_inputs_decide_again_with_the_sidecars_code() {
        let same = snapshot(POLICIES);
        let tighter = snapshot(&POLICIES.replace("args.n < 10", "args.n < 5"));
        let calls = [
            call("allow", None, 3, Some(9)),
            call("allow", None, 7, Some(9)),
            // The rule reads `task`: its refusals are OUT_OF_TASK_SCOPE.
            call("deny", Some("OUT_OF_TASK_SCOPE"), 12, Some(20)),
        ];
        let mut report = Report::default();
        calls
            .iter()
            .for_each(|c| replay_one(c.clone(), &same, &mut Histories::default(), &mut report));
        assert_eq!(
            (report.replayed, report.changed),
            (3, 0),
            "{:?}",
            report.changes
        );
        let mut report = Report::default();
        calls
            .iter()
            .for_each(|c| replay_one(c.clone(), &tighter, &mut Histories::default(), &mut report));
        assert_eq!(report.changed, 1);
        assert_eq!(report.changes[0].trace_id, "t7");
        assert_eq!(report.changes[0].after.rule.as_deref(), Some("small"));
    }

    #[test]
    fn what_cant_be_replayed_is_skipped_or_partial() {
        let same = snapshot(POLICIES);
        let mut report = Report::default();
        // A rule reads `task`, which this record doesn't hold: partial.
        let mut histories = Histories::default();
        replay_one(
            call("allow", None, 3, None),
            &same,
            &mut histories,
            &mut report,
        );
        // Limits depend on timing: skipped. Not a call: skipped.
        replay_one(
            call("deny", Some("RATE_LIMITED"), 3, Some(9)),
            &same,
            &mut histories,
            &mut report,
        );
        replay_one(
            recorded(json!({"kind": "policy"})),
            &same,
            &mut histories,
            &mut report,
        );
        assert_eq!((report.replayed, report.partial, report.skipped), (1, 1, 2));
        assert_eq!(report.changed, 0);
    }

    const ORDERED: &str = "apiVersion: toolgate.dev/v1alpha1
kind: ToolContract
metadata: {name: g}
spec: {tool: get_order, captureArguments: true, input: {type: object}}
---
apiVersion: toolgate.dev/v1alpha1
kind: ToolContract
metadata: {name: r}
spec: {tool: refund, captureArguments: true, input: {type: object}}
---
apiVersion: toolgate.dev/v1alpha1
kind: AgentPolicy
metadata: {name: p}
spec:
  agents: [bot]
  tools:
    - name: get_order
    - name: refund
      requires: [{tool: get_order, match: 'prior.args.id == args.id', maxAgeSeconds: 60}]
";

    fn ordered(tool: &str, id: &str, ts: &str, status: u16, session: &str) -> Recorded {
        recorded(json!({
            "kind": "call", "traceId": format!("{tool}-{id}-{ts}"), "agent": "bot",
            "tool": tool, "decision": "allow", "code": null, "session": session,
            "ts": ts, "upstreamStatus": status, "args": {"id": id}, "inputs": {"v": 1},
        }))
    }

    #[test]
    fn requires_is_redecided_from_the_calls_before() {
        let candidate = snapshot(ORDERED);
        let log = [
            ordered("get_order", "A", "2026-12-05T10:00:00Z", 200, "s"),
            // Looked up: unchanged.
            ordered("refund", "A", "2026-12-05T10:00:30Z", 200, "s"),
            // Never looked up, another session, or looked up too long ago: changed.
            ordered("refund", "B", "2026-12-05T10:00:31Z", 200, "s"),
            ordered("refund", "A", "2026-12-05T10:00:32Z", 200, "t"),
            ordered("refund", "A", "2026-12-05T10:05:00Z", 200, "s"),
            // A failed lookup is no lookup.
            ordered("get_order", "C", "2026-12-05T10:06:00Z", 404, "s"),
            ordered("refund", "C", "2026-12-05T10:06:01Z", 200, "s"),
        ];
        let mut report = Report::default();
        let mut histories = Histories::default();
        for record in log {
            replay_one(record, &candidate, &mut histories, &mut report);
        }
        let changed: Vec<&str> = report.changes.iter().map(|c| c.trace_id.as_str()).collect();
        assert_eq!(
            changed,
            [
                "refund-B-2026-12-05T10:00:31Z",
                "refund-A-2026-12-05T10:00:32Z",
                "refund-A-2026-12-05T10:05:00Z",
                "refund-C-2026-12-05T10:06:01Z"
            ]
        );
        assert!(report
            .changes
            .iter()
            .all(|c| c.after.code.as_deref() == Some("CALL_ORDER_VIOLATION")));
    }
}
