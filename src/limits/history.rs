//! The call history `requires` reads (DESIGN §16), in this sidecar
//! (`state.backend: memory`; `state::history` keeps it in Redis).
//!
//! Per agent and task (or session) the history holds the calls that were allowed and
//! answered successfully, of the tools some grant of the agent's policy `requires` (no
//! other call is remembered, so a policy without `requires` keeps nothing). It is
//! written once a call's outcome is known ([`Remember`], from the call's outcome) and
//! read when a call whose grant `requires` something is decided.
//!
//! Bounds: at most [`MAX_ENTRIES`] calls per agent and task or session (the newest are
//! kept); a call whose arguments are larger than [`MAX_ARGS_BYTES`] as JSON is not
//! remembered (a requirement on it can't be met); a task or session idle for
//! `limits.sessionIdleSeconds` is forgotten; all of it together weighs at most
//! [`MAX_BYTES`] (least recently used dropped first).

use serde_json::Value;
use std::sync::Arc;
use std::time::Duration;

use super::canonical::{Key, KeyBuilder};
use super::clock::Clock;
use super::table::{Op, Table};
use crate::policy::requires::Prior;

/// Calls kept per agent and task or session.
pub const MAX_ENTRIES: usize = 32;
/// The largest arguments (as JSON) a remembered call may have.
pub const MAX_ARGS_BYTES: usize = 16 << 10;
/// What the whole history may weigh in this sidecar.
pub const MAX_BYTES: u64 = 64 << 20;
/// What one entry weighs besides its arguments.
const ENTRY_OVERHEAD: usize = 64;

#[derive(Debug, Clone)]
struct Entry {
    tool: Arc<str>,
    args: Arc<Value>,
    size: usize,
    at: Duration,
}

#[derive(Clone)]
pub struct History {
    calls: Arc<Table<Arc<Vec<Entry>>>>,
    idle: Duration,
    clock: Clock,
}

impl History {
    pub fn new(idle: Duration, clock: Clock) -> History {
        // A shard must hold the heaviest key: every entry at its largest.
        let heaviest = (MAX_ENTRIES * (MAX_ARGS_BYTES + ENTRY_OVERHEAD)) as u64;
        History {
            calls: Arc::new(Table::new(MAX_BYTES, heaviest)),
            idle,
            clock,
        }
    }

    /// Remembers a successful call of `tool` in the agent's task or session `scope`.
    pub fn remember(&self, agent: &str, scope: &str, tool: &str, args: &Arc<Value>) {
        let Some(size) = weigh(args) else { return };
        let now = self.clock.now();
        let entry = Entry {
            tool: Arc::from(tool),
            args: args.clone(),
            size,
            at: now,
        };
        let expires_at = now.saturating_add(self.idle);
        self.calls.compute(key(agent, scope), now, |current| {
            let mut entries: Vec<Entry> = current.map(|c| c.to_vec()).unwrap_or_default();
            if entries.len() >= MAX_ENTRIES {
                entries.remove(0);
            }
            entries.push(entry);
            let weight = entries
                .iter()
                .map(|e| e.size + ENTRY_OVERHEAD)
                .sum::<usize>();
            let put = Op::Put {
                value: Arc::new(entries),
                weight: u32::try_from(weight).unwrap_or(u32::MAX),
                expires_at,
            };
            (put, ())
        });
    }

    /// Runs `read` over the agent's earlier successful calls in `scope`, newest first.
    pub fn read<R>(
        &self,
        agent: &str,
        scope: &str,
        read: impl FnOnce(&mut dyn Iterator<Item = Prior<'_>>) -> R,
    ) -> R {
        let now = self.clock.now();
        let entries = self
            .calls
            .compute(key(agent, scope), now, |c| (Op::Keep, c.cloned()))
            .unwrap_or_default();
        let mut priors = entries.iter().rev().map(|e| Prior {
            tool: &e.tool,
            args: &e.args,
            age: now.saturating_sub(e.at),
        });
        read(&mut priors)
    }

    /// How long a task's or session's history outlives its last call.
    pub fn idle(&self) -> Duration {
        self.idle
    }

    pub fn len(&self) -> u64 {
        self.calls.len() as u64
    }

    pub fn is_empty(&self) -> bool {
        self.calls.is_empty()
    }
}

/// The size of `args` as JSON, if small enough to remember.
pub fn weigh(args: &Value) -> Option<usize> {
    let size = serde_json::to_vec(args).map_or(usize::MAX, |v| v.len());
    (size <= MAX_ARGS_BYTES).then_some(size)
}

fn key(agent: &str, scope: &str) -> Key {
    KeyBuilder::new("history").text(agent).text(scope).finish()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn tools(history: &History, scope: &str) -> Vec<(String, u64)> {
        history.read("bot", scope, |priors| {
            priors
                .map(|p| (p.tool.to_string(), p.age.as_secs()))
                .collect()
        })
    }

    #[test]
    fn newest_first_per_agent_and_scope() {
        let clock = Clock::fake();
        let history = History::new(Duration::from_secs(600), clock.clone());
        history.remember("bot", "s", "get_customer", &Arc::new(json!({})));
        clock.advance(Duration::from_secs(5));
        history.remember("bot", "s", "get_order", &Arc::new(json!({"order_id": "A"})));
        assert_eq!(
            tools(&history, "s"),
            [("get_order".into(), 0), ("get_customer".into(), 5)]
        );
        assert!(tools(&history, "other").is_empty());
        assert!(history.read("eve", "s", |p| p.next().is_none()));
    }

    #[test]
    fn bounded_per_key_in_size_and_in_time() {
        let clock = Clock::fake();
        let history = History::new(Duration::from_secs(60), clock.clone());
        for i in 0..(MAX_ENTRIES + 5) {
            history.remember("bot", "s", &format!("t{i}"), &Arc::new(json!({})));
        }
        let kept = tools(&history, "s");
        assert_eq!(kept.len(), MAX_ENTRIES);
        assert_eq!(kept[0].0, format!("t{}", MAX_ENTRIES + 4));
        let huge = Arc::new(json!({"x": "y".repeat(MAX_ARGS_BYTES)}));
        history.remember("bot", "big", "t", &huge);
        assert!(tools(&history, "big").is_empty(), "too large to keep");
        clock.advance(Duration::from_secs(61));
        assert!(tools(&history, "s").is_empty(), "idle: forgotten");
    }
}
