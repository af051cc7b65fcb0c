//! The sidecar's record of drift ([`drift`]): which contract tools the backend last
//! listed differently from their contracts. It feeds `toolgate_tool_drift{tool}`,
//! `/config`, and with `mcp.onDrift: hide` the refusal of a withheld tool's calls.
//!
//! Bounded by the policy: only tools a contract of the current snapshot names are kept,
//! one entry each (the backend's last drifted description and input schema), and a tool
//! whose contract is gone loses its entry and its series at the next listing. Each
//! listing re-judges the tools it shows; a tool it doesn't show (another page, or gone
//! from the backend) keeps its last state.
//!
//! A withheld tool stays withheld until the listing and the contract agree, whichever
//! changes: [`ToolDrift::withheld`] compares the kept listing with the contract of the
//! call's own snapshot, so a reloaded contract that matches lets calls through at once,
//! before any agent lists again.

use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use serde_json::{json, Map, Value};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, PoisonError};

use super::drift;
use crate::config::{Listing, Mcp, OnDrift};
use crate::policy::Snapshot;
use crate::telemetry::metrics::ToolLabels;
use crate::vocab::{Code, Reject};

/// What a listing shows of the tools it lists: `mcp.listing` and `mcp.onDrift`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Presentation {
    pub listing: Listing,
    pub on_drift: OnDrift,
}

/// One contract tool as one listing showed it.
#[derive(Debug, Clone)]
pub struct Seen {
    pub tool: String,
    /// The backend's description and input schema when they drifted from the contract.
    pub drift: Option<Map<String, Value>>,
}

pub struct ToolDrift {
    pub presentation: Presentation,
    state: Mutex<State>,
    /// `drifted.len()`, read without the lock on every call when tools may be withheld.
    count: AtomicUsize,
    gauge: Family<ToolLabels, Gauge>,
}

#[derive(Default)]
struct State {
    /// Tool → the backend's drifted description and input schema, as last listed.
    drifted: BTreeMap<String, Map<String, Value>>,
    /// The tools with a `toolgate_tool_drift` series (the family can't be walked).
    series: BTreeSet<String>,
}

impl ToolDrift {
    pub fn new(mcp: &Mcp, gauge: Family<ToolLabels, Gauge>) -> ToolDrift {
        ToolDrift {
            presentation: Presentation {
                listing: mcp.listing,
                on_drift: mcp.on_drift,
            },
            state: Mutex::default(),
            count: AtomicUsize::new(0),
            gauge,
        }
    }

    /// Records what one listing showed, judged against `snapshot`.
    pub fn observe(&self, snapshot: &Snapshot, seen: &[Seen]) {
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        for one in seen.iter().filter(|s| snapshot.tool(&s.tool).is_some()) {
            let labels = ToolLabels {
                tool: one.tool.clone(),
            };
            match &one.drift {
                Some(listed) => {
                    if state
                        .drifted
                        .insert(one.tool.clone(), listed.clone())
                        .is_none()
                    {
                        tracing::warn!(tool = %one.tool, "the backend lists a tool unlike its contract (description or input schema): update the contract once reviewed, or the backend");
                    }
                    self.gauge.get_or_create(&labels).set(1);
                }
                None => {
                    if state.drifted.remove(&one.tool).is_some() {
                        tracing::info!(tool = %one.tool, "the backend lists a tool as its contract says again");
                    }
                    self.gauge.get_or_create(&labels).set(0);
                }
            }
            state.series.insert(one.tool.clone());
        }
        // Tools no contract names any more: their entries and series go.
        state
            .drifted
            .retain(|tool, _| snapshot.tool(tool).is_some());
        let gone: Vec<String> = state
            .series
            .iter()
            .filter(|tool| snapshot.tool(tool).is_none())
            .cloned()
            .collect();
        for tool in gone {
            self.gauge.remove(&ToolLabels { tool: tool.clone() });
            state.series.remove(&tool);
        }
        self.count.store(state.drifted.len(), Ordering::Relaxed);
    }

    /// The tools whose last listing drifted, by name.
    pub fn drifted(&self) -> Vec<String> {
        let state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        state.drifted.keys().cloned().collect()
    }

    /// What `/config` shows.
    pub fn status(&self) -> Value {
        json!({
            "listing": match self.presentation.listing {
                Listing::Contract => "contract",
                Listing::Backend => "backend",
            },
            "onDrift": match self.presentation.on_drift {
                OnDrift::List => "list",
                OnDrift::Hide => "hide",
            },
            "drifted": self.drifted(),
        })
    }

    /// With `mcp.onDrift: hide`, the refusal of a call of `tool` while the backend's last
    /// listing of it differs from its contract in `snapshot`: the listing withholds it, so
    /// a client that learned of it earlier (or guessed its name) can't run it either.
    pub fn withheld(&self, snapshot: &Snapshot, tool: &str) -> Option<Reject> {
        if self.presentation.on_drift != OnDrift::Hide || self.count.load(Ordering::Relaxed) == 0 {
            return None;
        }
        let id = snapshot.tool(tool)?;
        let state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        let listed = state.drifted.get(tool)?;
        drift::drifted(listed, snapshot.contract(id)).then(|| {
            Reject::new(
                Code::UnknownTool,
                format!(
                    "tool {tool} is withheld: the backend lists it with another description \
                     or input schema than its contract (mcp.onDrift: hide)"
                ),
            )
        })
    }
}

/// What [`ToolDrift`] keeps of a drifted listing: the two fields drift compares.
pub fn compared_fields(listed: &Map<String, Value>) -> Map<String, Value> {
    ["description", "inputSchema"]
        .into_iter()
        .filter_map(|key| listed.get(key).map(|v| (key.to_string(), v.clone())))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::crd::parse_documents;
    use crate::policy::BuildOptions;

    fn mk_snapshot(description: &str) -> Snapshot {
        let objects = format!(
            "apiVersion: toolgate.dev/v1alpha1\nkind: ToolContract\nmetadata: {{name: s}}\n\
             spec: {{tool: search, description: {description}}}\n"
        );
        let (snapshot, errors) = Snapshot::build(
            &parse_documents("t", &objects).0,
            &BuildOptions::default(),
            1,
        );
        assert!(errors.is_empty(), "{errors:?}");
        snapshot
    }

    fn mk_board(on_drift: OnDrift) -> ToolDrift {
        let mcp = Mcp {
            on_drift,
            ..Mcp::default()
        };
        ToolDrift::new(&mcp, Family::default())
    }

    fn mk_seen(tool: &str, description: Option<&str>) -> Seen {
        Seen {
            tool: tool.into(),
            drift: description.map(|d| {
                json!({"description": d, "inputSchema": {"type": "object"}})
                    .as_object()
                    .cloned()
                    .unwrap()
            }),
        }
    }

    fn gauge(board: &ToolDrift, tool: &str) -> i64 {
        board
            .gauge
            .get_or_create(&ToolLabels { tool: tool.into() })
            .get()
    }

    #[test]
    fn keeps_contract_tools_only_and_clears() {
        let board = mk_board(OnDrift::List);
        let snapshot = mk_snapshot("Search.");
        board.observe(
            &snapshot,
            &[
                mk_seen("search", Some("Evil.")),
                mk_seen("other", Some("x")),
            ],
        );
        assert_eq!(board.drifted(), ["search"]);
        assert_eq!(gauge(&board, "search"), 1);
        board.observe(&snapshot, &[mk_seen("search", None)]);
        assert!(board.drifted().is_empty());
        assert_eq!(gauge(&board, "search"), 0);
    }

    #[test]
    fn withholds_until_the_contract_agrees() {
        let board = mk_board(OnDrift::Hide);
        let old = mk_snapshot("Search.");
        board.observe(&old, &[mk_seen("search", Some("Evil."))]);
        let reject = board.withheld(&old, "search").expect("withheld");
        assert_eq!(reject.code, Code::UnknownTool);
        // The contract was updated to what the backend now says.
        assert!(board.withheld(&mk_snapshot("Evil."), "search").is_none());
        assert!(mk_board(OnDrift::List).withheld(&old, "search").is_none());
    }

    #[test]
    fn a_removed_contract_takes_its_entry_and_series() {
        let board = mk_board(OnDrift::Hide);
        board.observe(&mk_snapshot("Search."), &[mk_seen("search", Some("Evil."))]);
        let (empty, _) = Snapshot::build(&[], &BuildOptions::default(), 2);
        board.observe(&empty, &[]);
        assert!(board.drifted().is_empty());
        assert!(board
            .gauge
            .get(&ToolLabels {
                tool: "search".into()
            })
            .is_none());
    }
}
