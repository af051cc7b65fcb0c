//! What a replay found: totals, changes grouped by tool, rule and direction with example
//! trace ids, and the table and JSON renderings of them.

use serde::Serialize;
use std::collections::BTreeMap;
use std::fmt::Write as _;

use super::recorded::{Outcome, Recorded, Skip};
use super::MAX_LISTED;

/// Example trace ids kept per group.
const EXAMPLES: usize = 3;

/// One change, as `--format json` lists it.
#[derive(Debug, Clone)]
pub struct Change {
    pub trace_id: String,
    pub agent: String,
    pub tool: String,
    pub before: Outcome,
    pub after: Outcome,
}

/// The changes of one tool, direction and code/rule pair.
#[derive(Debug, Default, Clone)]
pub struct Group {
    pub count: u64,
    pub examples: Vec<String>,
}

#[derive(Debug, Default)]
pub struct Report {
    pub replayed: u64,
    pub unchanged: u64,
    pub changed: u64,
    pub partial: u64,
    /// Of the partial ones: records whose arguments were too large to re-decide within
    /// replay's memory bound.
    pub oversized: u64,
    pub skipped: u64,
    /// Why records were skipped: not calls, unidentified, decided by a limit.
    pub skipped_by: BTreeMap<&'static str, u64>,
    /// (tool, direction, what decided before → after) → count and examples.
    pub groups: BTreeMap<(String, String, String), Group>,
    pub changes: Vec<Change>,
}

impl Report {
    pub fn skip(&mut self, skip: Skip) {
        self.skipped += 1;
        let why = match skip {
            Skip::NotACall => "not a decision",
            Skip::Unidentified => "no agent or tool",
            Skip::Limit => "rate limit, budget, loop, duplicate or gate state",
        };
        *self.skipped_by.entry(why).or_default() += 1;
    }

    pub fn count(&mut self, recorded: &Recorded, before: Outcome, after: Outcome, partial: bool) {
        self.replayed += 1;
        if partial {
            self.partial += 1;
        }
        if recorded.oversized {
            self.oversized += 1;
        }
        if before == after {
            self.unchanged += 1;
            return;
        }
        self.changed += 1;
        let tool = recorded.tool.clone().unwrap_or_default();
        let direction = match (before.allowed, after.allowed) {
            (true, false) => "allow→deny",
            (false, true) => "deny→allow",
            _ => "code change",
        };
        let group = self
            .groups
            .entry((tool.clone(), direction.to_string(), why(&before, &after)))
            .or_default();
        group.count += 1;
        if group.examples.len() < EXAMPLES {
            group.examples.push(recorded.trace_id.clone());
        }
        if self.changes.len() < MAX_LISTED {
            self.changes.push(Change {
                trace_id: recorded.trace_id.clone(),
                agent: recorded.agent.clone().unwrap_or_default(),
                tool,
                before,
                after,
            });
        }
    }

    /// The `--format json` object, written as it is serialized: no second copy of the
    /// listed changes is built in memory.
    pub fn write_json(&self, out: impl std::io::Write) -> serde_json::Result<()> {
        serde_json::to_writer(out, &JsonReport::of(self))
    }

    pub fn table(&self) -> String {
        let mut out = String::new();
        let _ = writeln!(
            out,
            "replayed {}: unchanged {}, changed {}, partial {} (decided without captured arguments), skipped {}",
            self.replayed, self.unchanged, self.changed, self.partial, self.skipped
        );
        if self.oversized > 0 {
            let _ = writeln!(
                out,
                "  partial {}: arguments too large to re-decide within replay's memory bound",
                self.oversized
            );
        }
        for (why, n) in &self.skipped_by {
            let _ = writeln!(out, "  skipped {n}: {why}");
        }
        if self.groups.is_empty() {
            let _ = writeln!(out, "no decision changes");
            return out;
        }
        let _ = writeln!(out, "changes, by tool:");
        for ((tool, direction, why), group) in &self.groups {
            let _ = writeln!(
                out,
                "  {tool:<20} {direction:<11} {why:<48} {:>7} calls  e.g. {}",
                group.count,
                group.examples.join(", ")
            );
        }
        out
    }
}

#[derive(Serialize)]
struct JsonOutcome<'a> {
    decision: &'static str,
    code: &'a Option<String>,
    rule: &'a Option<String>,
}

impl<'a> JsonOutcome<'a> {
    fn of(o: &'a Outcome) -> JsonOutcome<'a> {
        JsonOutcome {
            decision: o.decision(),
            code: &o.code,
            rule: &o.rule,
        }
    }
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct JsonChange<'a> {
    trace_id: &'a str,
    agent: &'a str,
    tool: &'a str,
    before: JsonOutcome<'a>,
    after: JsonOutcome<'a>,
}

#[derive(Serialize)]
struct JsonGroup<'a> {
    tool: &'a str,
    direction: &'a str,
    why: &'a str,
    count: u64,
    examples: &'a [String],
}

#[derive(Serialize)]
struct JsonReport<'a> {
    replayed: u64,
    unchanged: u64,
    changed: u64,
    partial: u64,
    oversized: u64,
    skipped: u64,
    changes: Vec<JsonChange<'a>>,
    groups: Vec<JsonGroup<'a>>,
    listed: usize,
}

impl<'a> JsonReport<'a> {
    fn of(r: &'a Report) -> JsonReport<'a> {
        JsonReport {
            replayed: r.replayed,
            unchanged: r.unchanged,
            changed: r.changed,
            partial: r.partial,
            oversized: r.oversized,
            skipped: r.skipped,
            changes: r
                .changes
                .iter()
                .map(|c| JsonChange {
                    trace_id: &c.trace_id,
                    agent: &c.agent,
                    tool: &c.tool,
                    before: JsonOutcome::of(&c.before),
                    after: JsonOutcome::of(&c.after),
                })
                .collect(),
            groups: r
                .groups
                .iter()
                .map(|((tool, direction, why), g)| JsonGroup {
                    tool,
                    direction,
                    why,
                    count: g.count,
                    examples: &g.examples,
                })
                .collect(),
            listed: r.changes.len(),
        }
    }
}

/// What decided the call before and after: a code, with its rule where one decided.
fn why(before: &Outcome, after: &Outcome) -> String {
    let one = |o: &Outcome| match (&o.code, &o.rule) {
        (None, _) => "allowed".to_string(),
        (Some(code), Some(rule)) => format!("{code} (rule {rule})"),
        (Some(code), None) => code.clone(),
    };
    format!("{} → {}", one(before), one(after))
}
