//! The limits every call meets besides its policy's rules: rate limits, session budgets,
//! loop detection, and never executing a non-idempotent call twice (docs/policies.md, README "Limits and never-twice").
//!
//! All of it is state kept *between* requests, so it lives here in one [`Ledger`] owned
//! by the gate, outside the policy snapshot: a policy reload doesn't reset counters (a
//! changed quota does get a fresh limiter, since limiters are keyed by their quota).
//! Every table is bounded by a TTL and a capacity, so a million agents or sessions can't
//! grow memory without limit (see `examples/limits_memory.rs` for the measurement).
//!
//! The APIs take plain values (agent id, session id, tool, arguments) so the REST and MCP
//! paths use them alike:
//! - [`Ledger::check_rate`] — in `decide`, right after authorize, for every request;
//! - [`Ledger::session_calls`] — `session.calls` for CEL rules;
//! - [`Ledger::admit`] — counts a call against its session just before it runs;
//! - [`once::run`] — the at-most-once path for `idempotent: false` tools.
//!
//! Session limits key on the call's task when it carries a task token (its `task_id` or
//! `jti` claim, [`scope`]), else on the session id the client sent: an agent can't
//! escape a task's limits by naming a new session, and `session.requireTask: true`
//! refuses calls without a task token. A call with neither a task token nor a session id
//! has no session budget and no loop detection (inventing a per-agent default would turn
//! `maxCalls` into a lifetime cap and call every steady poll a loop); rate limits, spend
//! budgets and duplicate suppression still apply.

pub mod actions;
pub mod backoff;
pub mod budget;
pub mod canonical;
pub mod clock;
pub mod dedupe;
pub mod history;
pub mod once;
pub mod rate;
pub mod scope;
pub mod session;
pub mod table;

pub use clock::Clock;

use std::sync::OnceLock;
use std::time::Duration;

use crate::crd::SessionLimits;
use crate::policy::quota::Quota;
use crate::vocab::args::Args;
use crate::vocab::Reject;
use actions::Actions;
use budget::{Budgets, Charges};
use canonical::{Key, KeyBuilder};
use dedupe::Dedupe;
use history::History;
use rate::RateLimits;
use session::Sessions;

/// One call as the limits see it. The fingerprint (tool + canonical arguments) is what
/// "the same call" means for loop detection and duplicate suppression.
#[derive(Debug, Clone)]
pub struct Call<'a> {
    pub agent: &'a str,
    pub session: Option<&'a str>,
    pub tool: &'a str,
    pub idempotency_key: Option<&'a str>,
    args: &'a Args,
    /// What makes this call a later round of a multi-round call (MCP's `inputResponses`
    /// and `requestState`): part of what "the same call" means.
    round: Option<&'a serde_json::Value>,
    /// The action the contract's `dedupeKey` names, as a key: with one, "the same call"
    /// for duplicate suppression is the same action, whatever the other arguments.
    pub action: Option<&'a str>,
    /// What the call costs against spend budgets, charged when it is admitted.
    pub charges: Option<&'a Charges>,
    /// Computed on first use: an idempotent call without a session never needs it, and
    /// digesting the canonical arguments is a good part of a small call's cost.
    fingerprint: OnceLock<Key>,
}

impl<'a> Call<'a> {
    pub fn new(
        agent: &'a str,
        session: Option<&'a str>,
        tool: &'a str,
        args: &'a Args,
        idempotency_key: Option<&'a str>,
    ) -> Call<'a> {
        Call {
            agent,
            session,
            tool,
            idempotency_key,
            args,
            round: None,
            action: None,
            charges: None,
            fingerprint: OnceLock::new(),
        }
    }

    /// The call as charged against spend budgets when admitted.
    pub fn charging(mut self, charges: Option<&'a Charges>) -> Call<'a> {
        self.charges = charges;
        self
    }

    /// The call as one action of its tool's `dedupeKey`.
    pub fn as_action(mut self, action: Option<&'a str>) -> Call<'a> {
        self.action = action;
        self
    }

    /// The call as a later round of a multi-round call: a retry that carries the input
    /// the server asked for is a new call, never a duplicate of the round before.
    pub fn in_round(mut self, round: Option<&'a serde_json::Value>) -> Call<'a> {
        self.round = round;
        self
    }

    /// What duplicates must share to be one call: the action, or else the fingerprint.
    pub fn identity(&self) -> Key {
        match self.action {
            Some(action) => KeyBuilder::new("action")
                .text(self.tool)
                .text(action)
                .finish(),
            None => self.fingerprint(),
        }
    }

    /// What an approval of this call is bound to: who asked, in which session, and the
    /// call itself — tool, canonical arguments and round (its [`fingerprint`]). Not the
    /// action: an approval is for one call, never for whatever shares its `dedupeKey`.
    ///
    /// [`fingerprint`]: Call::fingerprint
    pub fn binding(&self) -> Key {
        KeyBuilder::new("approval")
            .text(self.agent)
            .optional(self.session)
            .bytes(&self.fingerprint())
            .finish()
    }

    /// The fingerprint loop detection compares, when `limits` compare calls (`maxRepeats`,
    /// `maxSame`) and the call has a session or task to compare within. Fingerprinting
    /// encodes the arguments canonically and hashes them, the largest cost of a
    /// task-scoped call whose policy only counts calls or orders them (`requires`), so
    /// memory and the Redis script both ask here and skip it otherwise.
    pub fn compared(&self, limits: Option<&SessionLimits>) -> Option<Key> {
        let compares = limits.is_some_and(|l| l.max_repeats.is_some() || l.max_same.is_some());
        (compares && self.session.is_some()).then(|| self.fingerprint())
    }

    pub fn fingerprint(&self) -> Key {
        *self.fingerprint.get_or_init(|| {
            let mut key = KeyBuilder::new("call");
            key.text(self.tool).json(self.args.value());
            if let Some(round) = self.round {
                key.text("round").json(round);
            }
            key.finish()
        })
    }
}

/// How much state the ledger may hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Capacity {
    pub rate_limiters: u64,
    pub sessions: u64,
    pub session_idle: Duration,
    pub dedupe_bytes: u64,
    /// The largest backend result buffered (`limits.maxResponseBytes`): a flight holding
    /// one must fit a dedupe table shard.
    pub largest_result: u64,
}

impl Capacity {
    pub fn from_settings(limits: &crate::config::Limits) -> Capacity {
        Capacity {
            rate_limiters: limits.max_rate_limiters,
            sessions: limits.max_sessions,
            session_idle: Duration::from_secs(limits.session_idle_seconds.max(1)),
            dedupe_bytes: limits.dedupe_max_bytes,
            largest_result: u64::try_from(limits.max_response_bytes).unwrap_or(u64::MAX),
        }
    }
}

/// How many entries each table holds (expired ones not yet dropped included).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sizes {
    pub rate_limiters: u64,
    pub sessions: u64,
    pub flights: u64,
    pub flight_bytes: u64,
}

pub struct Ledger {
    clock: Clock,
    rates: RateLimits,
    sessions: Sessions,
    dedupe: Dedupe,
    actions: Actions,
    budgets: Budgets,
    history: History,
}

impl Ledger {
    pub fn new(capacity: Capacity, clock: Clock) -> Ledger {
        Ledger {
            rates: RateLimits::new(capacity.rate_limiters, clock.clone()),
            sessions: Sessions::new(capacity.sessions, capacity.session_idle, clock.clone()),
            dedupe: Dedupe::new(
                capacity.dedupe_bytes,
                capacity.largest_result,
                clock.clone(),
            ),
            actions: Actions::new(clock.clone()),
            budgets: Budgets::new(capacity.sessions, clock.clone()),
            history: History::new(capacity.session_idle, clock.clone()),
            clock,
        }
    }

    /// The clock refills and windows run on; a fake one in tests.
    pub fn clock(&self) -> &Clock {
        &self.clock
    }

    /// Spends a cell of the tool's and the agent's rate limits (`RATE_LIMITED` if none).
    pub fn check_rate(
        &self,
        agent: &str,
        tool: &str,
        agent_quota: Option<&Quota>,
        tool_quota: Option<&Quota>,
    ) -> Result<(), Reject> {
        self.rates.check(agent, tool, agent_quota, tool_quota)
    }

    /// Calls admitted so far in the agent's session: CEL's `session.calls`.
    pub fn session_calls(&self, agent: &str, session: Option<&str>) -> u64 {
        self.sessions.calls(agent, session)
    }

    /// Counts a call about to run (`BUDGET_EXHAUSTED`, `LOOP_DETECTED` if it may not),
    /// and charges its spend budgets: all of it, or nothing.
    pub fn admit(&self, call: &Call<'_>, limits: Option<&SessionLimits>) -> Result<(), Reject> {
        let Some(charges) = call.charges else {
            return self.sessions.admit(call, limits);
        };
        self.budgets.charge(call.agent, charges)?;
        self.sessions.admit(call, limits).inspect_err(|_| {
            self.budgets.refund_all(call.agent, charges);
        })
    }

    /// The successful calls `requires` reads (DESIGN §16).
    pub fn history(&self) -> &History {
        &self.history
    }

    /// Spend budgets, charged at admission.
    pub fn budgets(&self) -> &Budgets {
        &self.budgets
    }

    /// Who owns each `dedupeKey` action.
    pub fn actions(&self) -> &Actions {
        &self.actions
    }

    /// The duplicate table, for [`once::run`].
    pub fn dedupe(&self) -> &Dedupe {
        &self.dedupe
    }

    pub fn sizes(&self) -> Sizes {
        Sizes {
            rate_limiters: self.rates.len(),
            sessions: self.sessions.len(),
            flights: self.dedupe.len(),
            flight_bytes: self.dedupe.weight(),
        }
    }
}
