//! `requires` re-decided from the log (DESIGN §16): the earlier successful calls each
//! recorded call saw, rebuilt from the records before it.
//!
//! A record that was allowed and answered successfully (no code, a 2xx or no upstream
//! status, not an MCP tool error — which the record marks with a code) becomes a prior
//! call of its agent and task (the record's `task`) or session, at its `ts`, with its
//! captured arguments. Only tools some candidate grant requires are kept, at most
//! [`MAX_ENTRIES`] per agent and task or session and [`MAX_SCOPES`] of those (oldest
//! dropped first), so memory stays bounded whatever the log's length. A requirement
//! whose `match` reads arguments an earlier record did not capture can't be judged:
//! the record is `partial`.

use serde_json::Value;
use std::collections::{HashMap, VecDeque};
use std::time::Duration;

use super::recorded::Recorded;
use crate::crd::Within;
use crate::limits::history::MAX_ENTRIES;
use crate::limits::scope;
use crate::policy::requires::{self, Prior, Requirement};
use crate::policy::Snapshot;
use crate::vocab::Reject;

/// Tasks and sessions whose history replay keeps at once.
pub const MAX_SCOPES: usize = 100_000;

struct Entry {
    tool: String,
    /// `None`: the record did not capture them.
    args: Option<Value>,
    at_ms: i64,
}

/// The earlier successful calls, per agent and task or session.
#[derive(Default)]
pub struct Histories {
    calls: HashMap<(String, String), VecDeque<Entry>>,
    order: VecDeque<(String, String)>,
}

/// How a record's requirements came out.
pub enum Verdict {
    Met,
    Unmet(Reject),
    /// An earlier call's arguments were not captured: can't be judged.
    Unknown,
}

fn scope_of(recorded: &Recorded) -> Option<String> {
    match (&recorded.task, &recorded.session) {
        (Some(task), _) => Some(scope::task(task)),
        (None, Some(session)) => Some(session.clone()),
        (None, None) => None,
    }
}

fn at_ms(recorded: &Recorded) -> i64 {
    recorded
        .ts
        .as_deref()
        .and_then(|ts| ts.parse::<jiff::Timestamp>().ok())
        .map_or(0, |t| t.as_millisecond())
}

fn succeeded(recorded: &Recorded) -> bool {
    recorded.decision.as_deref() == Some("allow")
        && recorded.code.is_none()
        && recorded
            .upstream_status
            .is_none_or(|s| (200..300).contains(&s))
}

impl Histories {
    /// Whether `recorded` is a prior call the candidate's `requires` would read.
    pub fn wants(&self, snapshot: &Snapshot, recorded: &Recorded) -> bool {
        let (Some(agent), Some(tool)) = (&recorded.agent, &recorded.tool) else {
            return false;
        };
        succeeded(recorded)
            && snapshot
                .policy_for(agent)
                .is_some_and(|p| p.remembered.contains(tool.as_str()))
    }

    /// Keeps `recorded` (which [`wants`](Self::wants) said to) as a prior call.
    pub fn remember(&mut self, recorded: &Recorded, args: Option<Value>) {
        let (Some(agent), Some(tool), Some(scope)) =
            (&recorded.agent, &recorded.tool, scope_of(recorded))
        else {
            return;
        };
        let key = (agent.clone(), scope);
        if !self.calls.contains_key(&key) {
            if self.order.len() >= MAX_SCOPES {
                if let Some(oldest) = self.order.pop_front() {
                    self.calls.remove(&oldest);
                }
            }
            self.order.push_back(key.clone());
        }
        let entries = self.calls.entry(key).or_default();
        if entries.len() >= MAX_ENTRIES {
            entries.pop_front();
        }
        entries.push_back(Entry {
            tool: tool.clone(),
            args,
            at_ms: at_ms(recorded),
        });
    }

    /// The grant's `requires` for `recorded`, with `args` its captured arguments.
    pub fn check(&self, needs: &[Requirement], recorded: &Recorded, args: &Value) -> Verdict {
        if let Some(first) = needs.iter().find(|r| r.within == Within::Task) {
            if recorded.task.is_none() {
                return Verdict::Unmet(requires::needs_task(first));
            }
        }
        let now = at_ms(recorded);
        let empty = VecDeque::new();
        let entries = match (&recorded.agent, scope_of(recorded)) {
            (Some(agent), Some(scope)) => self.calls.get(&(agent.clone(), scope)),
            _ => None,
        }
        .unwrap_or(&empty);
        let mut unknown = false;
        for need in needs {
            let mut met = false;
            for entry in entries.iter().rev() {
                let age = Duration::from_millis(u64::try_from(now - entry.at_ms).unwrap_or(0));
                let Some(prior_args) = &entry.args else {
                    let fits = entry.tool == need.tool && need.max_age.is_none_or(|m| age <= m);
                    unknown |= fits && need.has_match();
                    met |= fits && !need.has_match();
                    continue;
                };
                let prior = Prior {
                    tool: &entry.tool,
                    args: prior_args,
                    age,
                };
                if need.met_by(&prior, args) {
                    met = true;
                    break;
                }
            }
            if !met && unknown {
                return Verdict::Unknown;
            }
            if !met {
                return Verdict::Unmet(requires::unmet(need));
            }
        }
        Verdict::Met
    }
}
