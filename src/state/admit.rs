//! A call's admission in Redis: its rate limits, its session budget and loop detection,
//! and (for a non-idempotent call) its never-twice claim, in one server-side script, so
//! one round trip, atomic across every pod (src/state/admit.lua).
//!
//! The order is the in-memory one: the tool's rate limit, then the agent's (a call the
//! tool limit refuses doesn't drain the agent's); then the claim is looked up, so a
//! duplicate joins the running call without costing session budget; then the session
//! counts the call (a refused call is not counted); then the claim is taken, with the
//! dedupe window as its expiry. Time is Redis' own clock (`TIME`), so pods whose clocks
//! disagree still share one limiter.

use redis::Script;
use std::sync::LazyLock;
use std::time::Duration;

use super::keys::Keys;
use super::record::{self, Held};
use crate::crd::SessionLimits;
use crate::limits::canonical::Key;
use crate::limits::dedupe;
use crate::limits::rate::over_limit;
use crate::limits::session::{budget_spent, looping};
use crate::limits::Call;
use crate::policy::quota::Quota;
use crate::vocab::Reject;

static SCRIPT: LazyLock<Script> = LazyLock::new(|| Script::new(include_str!("admit.lua")));

/// What a call's admission checks.
#[derive(Debug, Clone, Copy, Default)]
pub struct Limits<'a> {
    pub agent_quota: Option<&'a Quota>,
    pub tool_quota: Option<&'a Quota>,
    pub session: Option<&'a SessionLimits>,
    /// Under a shadow policy a refusal is reported and the call admitted anyway.
    pub shadow: bool,
    /// How long an idle session is remembered (`limits.sessionIdleSeconds`).
    pub session_idle: Duration,
}

impl Limits<'_> {
    /// Whether a rate limit applies.
    pub fn rated(&self) -> bool {
        self.agent_quota.is_some() || self.tool_quota.is_some()
    }
}

/// A non-idempotent call's claim: its key and the value this pod wrote there.
#[derive(Debug, Clone)]
pub struct Claim {
    pub key: String,
    pub fingerprint: Key,
    pub running: Vec<u8>,
}

/// How the admission went.
#[derive(Debug)]
pub enum Admission {
    /// Run it (and, if claimed, this pod leads). `overridden`: what a shadow policy let through.
    Admitted { overridden: Option<Reject> },
    /// A limit refused it; nothing was counted beyond the rate-limit cells spent.
    Refused(Reject),
    /// An identical call holds the claim (running here or on another pod, or settled):
    /// this one joins it and never runs.
    Joined { held: Held },
}

/// The script's invocation for `call`, and the claim it would take.
pub fn invocation<'a>(
    keys: &Keys,
    call: &Call<'_>,
    limits: &Limits<'_>,
    claim: Option<(&Claim, Duration)>,
) -> redis::ScriptInvocation<'a> {
    let mut invocation = SCRIPT.prepare_invoke();
    let agent = call.agent;
    // A key the script won't touch (its part is switched off by an argument), in the
    // agent's slot: a Redis Cluster refuses a script whose keys span slots.
    let none = keys.session(agent, "");
    invocation
        .key(
            limits
                .tool_quota
                .map_or_else(|| none.clone(), |q| keys.rate(agent, Some(call.tool), q)),
        )
        .key(
            limits
                .agent_quota
                .map_or_else(|| none.clone(), |q| keys.rate(agent, None, q)),
        )
        .key(
            call.session
                .map_or_else(|| none.clone(), |s| keys.session(agent, s)),
        )
        .key(claim.map_or_else(|| none.clone(), |(c, _)| c.key.clone()));
    // Spend budgets (DESIGN §16): up to two, the policy's and the grant's.
    let charge = |i: usize| call.charges.and_then(|c| c.budgets.get(i));
    for i in 0..2 {
        invocation
            .key(charge(i).map_or_else(|| none.clone(), |c| keys.budget(agent, &c.budget, &c.day)));
    }
    let gcra = |q: Option<&Quota>| match q {
        Some(q) => (
            q.governor.replenish_interval().as_micros().max(1) as u64,
            u64::from(q.governor.burst_size().get()),
        ),
        None => (0, 0),
    };
    let (tool_interval, tool_burst) = gcra(limits.tool_quota);
    let (agent_interval, agent_burst) = gcra(limits.agent_quota);
    let session = limits.session;
    let idle_ms = if call.session.is_some() {
        limits.session_idle.as_millis().max(1) as u64
    } else {
        0
    };
    invocation
        .arg(tool_interval)
        .arg(tool_burst)
        .arg(agent_interval)
        .arg(agent_burst)
        .arg(session.and_then(|s| s.max_calls).map_or(-1, |n| n as i64))
        .arg(session.and_then(|s| s.max_repeats).map_or(-1, i64::from))
        .arg(idle_ms)
        // Empty when nothing compares calls; the script then never reads it.
        .arg(call.compared(session).map(hex::encode).unwrap_or_default())
        .arg(claim.map_or(0, |(_, window)| window.as_millis().max(1) as u64))
        .arg(claim.map_or_else(Vec::new, |(c, _)| c.running.clone()))
        .arg(if limits.shadow { "1" } else { "0" })
        .arg(session.and_then(|s| s.max_same).map_or(-1, i64::from))
        .arg(call.charges.map_or(0, |c| c.cost));
    for i in 0..2 {
        let (per_day, expiry) = charge(i).map_or((-1, 0), |c| {
            // Kept a minute past the local midnight, so clocks a little apart agree.
            let expiry = c.resets_in.as_millis() as u64 + 60_000;
            (i64::try_from(c.per_day).unwrap_or(i64::MAX), expiry)
        });
        invocation.arg(per_day).arg(expiry);
    }
    invocation
}

/// Reads the script's answer. `Err` is an answer the script can't have given.
pub fn read(
    reply: redis::Value,
    call: &Call<'_>,
    limits: &Limits<'_>,
    window: Duration,
) -> Result<Admission, String> {
    let parts: Vec<redis::Value> =
        redis::from_redis_value(reply).map_err(|e| format!("admission script: {e}"))?;
    // Lua numbers come back as integers, strings as bulk strings.
    let text = |i: usize| -> Result<Vec<u8>, String> {
        match parts.get(i) {
            Some(redis::Value::Int(n)) => Ok(n.to_string().into_bytes()),
            Some(redis::Value::BulkString(bytes)) => Ok(bytes.clone()),
            Some(redis::Value::SimpleString(text)) => Ok(text.clone().into_bytes()),
            Some(other) => Err(format!("admission script: unexpected {other:?}")),
            None => Err("admission script: short answer".to_string()),
        }
    };
    let number = |i: usize| -> Result<u64, String> {
        String::from_utf8_lossy(&text(i)?)
            .parse::<u64>()
            .map_err(|e| format!("admission script: {e}"))
    };
    let status = number(0)?;
    let refusal = |kind: &[u8], wait_us: u64| -> Option<Reject> {
        let session = call.session.unwrap_or("");
        let wait = Duration::from_micros(wait_us);
        let spend = |i: usize| {
            let charges = call.charges?;
            let charge = charges.budgets.get(i)?;
            // For a spend budget the script returns what was spent, not a wait.
            Some(crate::limits::budget::exhausted(
                charge,
                wait_us,
                charges.cost,
            ))
        };
        match kind {
            b"same" => limits
                .session
                .and_then(|s| s.max_same)
                .map(|max| crate::limits::session::same_again(call.tool, session, max)),
            b"spend-1" => spend(0),
            b"spend-2" => spend(1),
            b"rate-t" | b"t" => limits
                .tool_quota
                .map(|q| over_limit(call.agent, Some(call.tool), q, wait)),
            b"rate-a" | b"a" => limits
                .agent_quota
                .map(|q| over_limit(call.agent, None, q, wait)),
            b"budget" => limits
                .session
                .and_then(|s| s.max_calls)
                .map(|max| budget_spent(session, max)),
            b"loop" => limits
                .session
                .and_then(|s| s.max_repeats)
                .map(|max| looping(call.tool, session, max)),
            _ => None,
        }
    };
    match status {
        0 => Ok(Admission::Admitted {
            overridden: refusal(&text(1)?, number(2)?),
        }),
        1 | 2 => {
            let kind = text(1)?;
            let wait = if status == 1 || kind.starts_with(b"spend") {
                number(2)?
            } else {
                0
            };
            refusal(&kind, wait)
                .map(Admission::Refused)
                .ok_or_else(|| "admission script: unknown refusal".to_string())
        }
        3 => {
            let held = record::read(&text(1)?);
            let reused = match &held {
                Held::Running { fingerprint } | Held::Settled { fingerprint, .. } => {
                    *fingerprint != call.identity()
                }
                Held::Foreign => false,
            };
            if reused {
                return Ok(Admission::Refused(dedupe::reused_key(call, window)));
            }
            Ok(Admission::Joined { held })
        }
        _ => Err(format!("admission script: unknown status {status}")),
    }
}
