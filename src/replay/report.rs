//! What a replay found: totals, changes grouped by tool, rule and direction with example
//! trace ids, and the table and JSON renderings of them.

use serde_json::{json, Value};
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

    pub fn json(&self) -> Value {
        let outcome =
            |o: &Outcome| json!({"decision": o.decision(), "code": o.code, "rule": o.rule});
        json!({
            "replayed": self.replayed,
            "unchanged": self.unchanged,
            "changed": self.changed,
            "partial": self.partial,
            "skipped": self.skipped,
            "changes": self.changes.iter().map(|c| json!({
                "traceId": c.trace_id,
                "agent": c.agent,
                "tool": c.tool,
                "before": outcome(&c.before),
                "after": outcome(&c.after),
            })).collect::<Vec<_>>(),
            "groups": self.groups.iter().map(|((tool, direction, why), g)| json!({
                "tool": tool, "direction": direction, "why": why, "count": g.count, "examples": g.examples,
            })).collect::<Vec<_>>(),
            "listed": self.changes.len(),
        })
    }

    pub fn table(&self) -> String {
        let mut out = String::new();
        let _ = writeln!(
            out,
            "replayed {}: unchanged {}, changed {}, partial {} (decided without captured arguments), skipped {}",
            self.replayed, self.unchanged, self.changed, self.partial, self.skipped
        );
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

/// What decided the call before and after: a code, with its rule where one decided.
fn why(before: &Outcome, after: &Outcome) -> String {
    let one = |o: &Outcome| match (&o.code, &o.rule) {
        (None, _) => "allowed".to_string(),
        (Some(code), Some(rule)) => format!("{code} (rule {rule})"),
        (Some(code), None) => code.clone(),
    };
    format!("{} → {}", one(before), one(after))
}
