//! The one forward path for a call the gate let run, REST and MCP alike.
//!
//! ```text
//! idempotent:      session limits → send (with retries where the caller allows) → live
//! not idempotent:  claim ─ join a running identical call → its settled answer (replayed)
//!                        └ lead → session limits → send once, detached, buffered → settled
//! ```
//!
//! Session limits (budget, loop detection) run here, after the decision and duplicate
//! detection, so a duplicate never costs budget and a refused call never counts; under a
//! shadow policy their refusal is recorded as the one overridden and the call runs.
//!
//! How an at-most-once answer is read and kept is the front door's choice ([`Keep`]: the
//! body whole for REST, the JSON-RPC answer for MCP), made by the backend; when and how
//! often the backend is called is decided here only. It sends through the [`Backend`]
//! seam, so a test can run it without sockets.

use http::Response;
use hyper::body::Incoming;
use std::borrow::Cow;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::limits::dedupe::{Flight, Ran, Settled};
use crate::limits::once::{self, Clearance, Started};
use crate::limits::{Call, Ledger};
use crate::policy::agent_policy::Policy;
use crate::policy::contract::Contract;
use crate::proxy::action;
use crate::proxy::backend::exchange::{Exchange, Received};
use crate::proxy::backend::{Asked, Backend, Failure, Keep};
use crate::proxy::call::Ground;
use crate::proxy::conventions;
use crate::proxy::outcome::Outcome;
use crate::proxy::refund::Refund;
use crate::state::admit::Claim;
use crate::state::{self, admit::Admission, admit::Limits};
use crate::telemetry::convention_metrics::{self, ErrorType};
use crate::telemetry::metrics::Metrics;
use crate::telemetry::spans::{CallSpan, ClientSpan};
use crate::vocab::{Code, Reject};

/// A permitted call, ready to send.
pub struct Plan<'a> {
    pub contract: &'a Contract,
    /// The policy whose session limits the call meets.
    pub policy: &'a Policy,
    /// The call's one identity (`Verdict::call`): what duplicates, claims and session
    /// limits key on.
    pub call: &'a Call<'a>,
    /// Its approval was not taken because an identical call ran or runs (`Verdict`): it
    /// may join that call, and is refused rather than run if it would lead.
    pub joins_only: bool,
    pub exchange: Exchange,
    /// The call's server span, parent of the client span a send starts: started only
    /// when the request is really sent, so a duplicate or a refusal has none.
    pub parent: &'a CallSpan,
    /// An MCP `tools/call` (its client span and metric are MCP's), or a REST request.
    pub mcp: bool,
    /// An MCP call's JSON-RPC id as forwarded, for its client span.
    pub rpc_id: Option<&'a serde_json::Value>,
    /// An idempotent call may be retried where its answer can't yet have been seen (a
    /// failed connect, a 503). MCP sends once: its answer may be a stream already
    /// relayed in part.
    pub retry: bool,
    /// An at-most-once lead returns as soon as its send has started ([`Sent::Leading`]),
    /// to relay the call's progress while it runs; duplicates still get the outcome.
    pub live: bool,
}

/// What the backend gave; `B`: the body of a live response (hyper's for the sidecar).
pub enum Sent<B = Incoming> {
    /// An idempotent call's response, live (the body not read yet).
    Live {
        response: Response<B>,
        sent: Instant,
    },
    /// An at-most-once call this request leads, sent and still running (`Plan::live`):
    /// the caller relays its progress and waits for the flight's outcome itself.
    Leading { flight: Arc<Flight> },
    /// An at-most-once call's outcome, shared with its duplicates.
    Settled {
        settled: Arc<Settled>,
        /// A duplicate's copy of the first call's answer.
        replayed: bool,
    },
}

pub struct Forwarded<B> {
    pub sent: Sent<B>,
    /// The session limit a shadow policy overrode, if one would have refused the call.
    pub shadowed: Option<Reject>,
    /// The shared state couldn't be asked: the call's limits were not applied.
    pub state_failed_open: bool,
}

impl<B> Forwarded<B> {
    /// Notes in the call's outcome what the forward path found besides the answer.
    pub fn note(&self, outcome: &mut Outcome) {
        if let Some(reject) = &self.shadowed {
            outcome.shadowed(reject);
        }
        if self.state_failed_open {
            outcome.state_failed_open();
        }
    }
}

/// Why a call that the gate let through got no answer.
pub enum Stopped {
    /// A session limit refused it (or the shared state couldn't take its claim): it never
    /// ran, and the decision is `deny`.
    Denied(Reject),
    /// It was sent, or joined one that was, and failed (or its outcome is unknown).
    Failed(Reject),
}

/// Sends the call: idempotent ones live, others at most once, their answer read and
/// kept as `keep` says.
pub async fn forward<S: Backend>(
    ground: &Ground<'_, S>,
    plan: Plan<'_>,
    keep: Keep,
) -> Result<Forwarded<S::Body>, Stopped> {
    let backend = Client {
        mcp: plan.mcp,
        method: conventions::static_method(&plan.exchange.method),
    };
    if plan.contract.idempotent {
        return forward_idempotent(ground, plan, backend).await;
    }
    forward_once(ground, plan, keep, backend).await
}

/// A call that is not idempotent: claimed against its duplicates, its lead admitted
/// and sent once, detached; every claimant gets the one settled outcome.
async fn forward_once<S: Backend>(
    ground: &Ground<'_, S>,
    plan: Plan<'_>,
    keep: Keep,
    backend: Client,
) -> Result<Forwarded<S::Body>, Stopped> {
    let Plan {
        contract,
        policy,
        call,
        joins_only,
        mut exchange,
        parent,
        mcp,
        rpc_id,
        live,
        ..
    } = plan;
    // At most once. The send runs detached, bounded by the dedupe window, so a duplicate
    // can still get its answer after this request stops waiting.
    let window = contract.dedupe_window.max(contract.timeout);
    // One action (`dedupeKey`), one caller: checked before anything is claimed or counted.
    let ownership = action::claim(ground, call, parent.trace_id(), contract.dedupe_window)
        .await
        .map_err(Stopped::Denied)?;
    // Taken by the send; left here if the call never gets that far.
    let ownership = Mutex::new(ownership);
    // With shared state, the claim every replica sees; the local table still goes first,
    // so this pod's duplicates join here and only a local lead asks Redis.
    let claim = ground.shared.map(|shared| shared.claim_for(call));
    // Whether the lead's admission charged its spend budgets (not under a shadow
    // override): then a send no connection carried gives the charge back.
    let charged = AtomicBool::new(false);
    // Made only for a lead the session admitted: the one request really sent.
    let send = || {
        let span = start_client(
            ground,
            parent,
            contract,
            &mut exchange,
            mcp.then_some(rpc_id),
        );
        let max = ground.limits.max_response_bytes;
        // Boxed: the buffering future is kilobytes (the client exchange and the answer's
        // collection), and the send is moved whole into the task `once::start` spawns.
        let buffered = Box::pin(ground.backend.buffer(exchange, keep, window, max));
        let sent = Sending {
            span,
            backend,
            claim: claim.clone(),
            ownership: ownership.lock().ok().and_then(|mut o| o.take()),
            refund: charged
                .load(Ordering::Relaxed)
                .then(|| Refund::of(ground, call))
                .flatten(),
        };
        sent.finish(ground, &contract.tool, buffered)
    };
    let mut shadowed = None;
    let mut denied = false;
    let (shadowed_at, denied_at, claim_at) = (&mut shadowed, &mut denied, &claim);
    let charged_at = &charged;
    let plan_of_lead = Lead {
        contract,
        policy,
        call,
        joins_only,
    };
    let admit = move || {
        let (shadowed, denied, claim) = (shadowed_at, denied_at, claim_at);
        async move {
            let lead = admit_lead(ground, &plan_of_lead, claim.as_ref(), window).await;
            let sends = matches!(lead.cleared, Ok(Clearance::Send));
            charged_at.store(sends && lead.shadowed.is_none(), Ordering::Relaxed);
            *shadowed = lead.shadowed;
            *denied = lead.denied;
            lead.cleared
        }
    };
    let dedupe = ground.ledger.dedupe();
    let started = once::start(dedupe, call, contract.dedupe_window, admit, send).await;
    if started.is_err() {
        if let Some(ownership) = ownership.lock().ok().and_then(|mut o| o.take()) {
            ownership.release();
        }
    }
    delivered(started, live, contract.timeout, shadowed, denied).await
}

/// What the at-most-once call this request `started` came to for it: a live lead back
/// at once, else the settled outcome (its own or the call it joined) within `timeout`.
/// `shadowed` and `denied` are what the lead's admission found: a refusal is the gate's
/// (`deny`) when the admission refused.
async fn delivered<B>(
    started: Result<Started, Reject>,
    live: bool,
    timeout: Duration,
    shadowed: Option<Reject>,
    denied: bool,
) -> Result<Forwarded<B>, Stopped> {
    let state_failed_open = false;
    let delivered = match started {
        Ok(Started::Led(flight)) if live => {
            return Ok(Forwarded {
                sent: Sent::Leading { flight },
                shadowed,
                state_failed_open,
            })
        }
        Ok(started) => started.wait(timeout).await,
        Err(reject) => Err(reject),
    };
    match delivered {
        Ok(delivered) => Ok(Forwarded {
            sent: Sent::Settled {
                settled: delivered.settled,
                replayed: delivered.replayed,
            },
            shadowed,
            state_failed_open,
        }),
        Err(reject) if denied => Err(Stopped::Denied(reject)),
        Err(reject) => Err(Stopped::Failed(reject)),
    }
}

/// The one real send of an at-most-once call, once its request is on its way: the
/// client span to end, the claim other replicas see, the action to give back.
struct Sending {
    span: ClientSpan,
    backend: Client,
    claim: Option<Claim>,
    ownership: Option<action::Ownership>,
    /// The spend its admission charged, given back if no connection carried the call.
    refund: Option<Refund>,
}

impl Sending {
    /// Waits for the backend's kept answer, then ends the client span and counts it,
    /// stores the outcome for other replicas' duplicates, gives the action back if the
    /// call certainly did not run, and the spend if no connection carried it. Borrows
    /// nothing: it runs detached.
    fn finish<F>(
        self,
        ground: &Ground<'_, impl Backend>,
        tool: &str,
        buffered: std::pin::Pin<Box<F>>,
    ) -> impl std::future::Future<Output = Settled> + Send + 'static
    where
        F: std::future::Future<Output = Received> + Send + 'static,
    {
        let metrics = ground.metrics.clone();
        let tool = tool.to_string();
        let shared = ground.shared.cloned().zip(self.claim);
        let (span, backend, ownership) = (self.span, self.backend, self.ownership);
        let refund = self.refund;
        async move {
            let sent = Instant::now();
            let Received { settled, status } = buffered.await;
            let failure = match &settled {
                Settled::Answered(_) => None,
                Settled::Failed { reject, .. } => Some(reject.code.as_str()),
            };
            backend.finish(span, &metrics, &tool, status, failure, sent);
            // The one round trip after the call: its outcome, for other replicas'
            // duplicates. Not awaited here: this pod's own wait on it for nothing.
            if let Some((shared, claim)) = shared {
                let kept = settled.clone();
                tokio::spawn(async move { shared.settle(&claim, &kept).await });
            }
            if let Settled::Failed { ran: Ran::No, .. } = &settled {
                if let Some(ownership) = ownership {
                    ownership.release();
                }
                // Spend comes back only when no answer came at all: a 503 says the
                // backend ran nothing, but a proxy in front of one that did says it too.
                if let (Some(refund), None) = (refund, status) {
                    refund.give_back().await;
                }
            }
            settled
        }
    }
}

/// What an at-most-once lead is admitted as: its contract, policy and identity.
struct Lead<'a> {
    contract: &'a Contract,
    policy: &'a Policy,
    call: &'a Call<'a>,
    joins_only: bool,
}

/// How a lead's admission went: cleared to send (or follow another replica's run), or
/// refused; with the session limit a shadow policy overrode, and whether a refusal is
/// the gate's (`deny`) rather than a failure.
struct Admitted {
    cleared: Result<Clearance, Reject>,
    shadowed: Option<Reject>,
    denied: bool,
}

/// Admits the lead of an at-most-once call: its session and rate limits, in memory or
/// with its shared claim (`claim`) in one round trip.
async fn admit_lead<S>(
    ground: &Ground<'_, S>,
    lead: &Lead<'_>,
    claim: Option<&Claim>,
    window: Duration,
) -> Admitted {
    let refused = |reject: Reject, denied: bool| Admitted {
        cleared: Err(reject),
        shadowed: None,
        denied,
    };
    let cleared = |shadowed: Option<Reject>, clearance: Clearance| Admitted {
        cleared: Ok(clearance),
        shadowed,
        denied: false,
    };
    // Only a lead is admitted: a call whose approval was waived as a duplicate found
    // nothing to join after all, so it needs an approval of its own.
    if lead.joins_only {
        let reject = Reject::new(
            Code::ApprovalRequired,
            "the identical call this one repeats is no longer kept, so this call \
             needs an approval of its own: repeat it to ask for one",
        );
        return refused(reject, true);
    }
    let (Some(shared), Some(claim)) = (ground.shared, claim) else {
        return match admit_session(ground.ledger, lead.call, lead.policy) {
            Ok(overridden) => cleared(overridden, Clearance::Send),
            Err(reject) => refused(reject, true),
        };
    };
    let limits = shared_limits(ground.limits, lead.contract, lead.policy);
    match shared
        .admit(lead.call, &limits, Some((claim, window)))
        .await
    {
        Ok(Admission::Admitted { overridden }) => cleared(overridden, Clearance::Send),
        Ok(Admission::Refused(reject)) => {
            let denied = reject.code != Code::MalformedRequest;
            refused(reject, denied)
        }
        Ok(Admission::Joined { held }) => {
            let (shared, claim) = (shared.clone(), claim.clone());
            let wait = lead.contract.timeout;
            let follow = async move { shared.follow(&claim, held, wait).await };
            cleared(None, Clearance::Follow(Box::pin(follow)))
        }
        // A claim fails closed: without it the call might run twice.
        Err(unavailable) => refused(state::unavailable(&unavailable), true),
    }
}

/// An idempotent call: admitted to its session and rate limits, then sent (retried where
/// the plan allows), its response handed back live.
async fn forward_idempotent<S: Backend>(
    ground: &Ground<'_, S>,
    plan: Plan<'_>,
    backend: Client,
) -> Result<Forwarded<S::Body>, Stopped> {
    let Plan {
        contract,
        policy,
        call,
        mut exchange,
        parent,
        mcp,
        rpc_id,
        retry,
        ..
    } = plan;
    let (shadowed, state_failed_open) = admit_idempotent(ground, contract, policy, call).await?;
    let span = start_client(
        ground,
        parent,
        contract,
        &mut exchange,
        mcp.then_some(rpc_id),
    );
    let sent = Instant::now();
    let response = ground.backend.send(exchange, contract.timeout, retry).await;
    // Admission charged the call's spend budgets (unless a shadow policy overrode a
    // limit, or the shared state failed open): a call no connection carried gets it back
    // (`proxy::refund`; a 503 is an answer, and stays charged).
    let charged = shadowed.is_none() && !state_failed_open;
    if let (Err(failure), true) = (&response, charged) {
        if *failure == Failure::Unreachable {
            if let Some(refund) = Refund::of(ground, call) {
                refund.give_back().await;
            }
        }
    }
    let response = response.map_err(|f| f.reject(Asked::call(true, contract.timeout)));
    let (status, failure) = match &response {
        Ok(response) => (Some(response.status().as_u16()), None),
        Err(reject) => (None, Some(reject.code.as_str())),
    };
    backend.finish(span, ground.metrics, &contract.tool, status, failure, sent);
    let response = response.map_err(Stopped::Failed)?;
    Ok(Forwarded {
        sent: Sent::Live { response, sent },
        shadowed,
        state_failed_open,
    })
}

/// Admits an idempotent call to its session and rate limits, in memory or in the shared
/// state (which fails open for limits). `Ok`: the limit a shadow policy overrode, and
/// whether the shared state failed open.
async fn admit_idempotent<S>(
    ground: &Ground<'_, S>,
    contract: &Contract,
    policy: &Policy,
    call: &Call<'_>,
) -> Result<(Option<Reject>, bool), Stopped> {
    let Some(shared) = ground.shared else {
        let shadowed = admit_session(ground.ledger, call, policy).map_err(Stopped::Denied)?;
        return Ok((shadowed, false));
    };
    let limits = shared_limits(ground.limits, contract, policy);
    // Nothing to count: no round trip. (§16: a spend budget is charged here too.)
    if call.session.is_none() && !limits.rated() && call.charges.is_none() {
        return Ok((None, false));
    }
    match shared.admit(call, &limits, None).await {
        Ok(Admission::Admitted { overridden }) => Ok((overridden, false)),
        Ok(Admission::Refused(reject)) => Err(Stopped::Denied(reject)),
        // Nothing is claimed for an idempotent call.
        Ok(Admission::Joined { .. }) => Ok((None, false)),
        Err(_) => Ok((None, true)),
    }
}

/// Counts the call against its agent's session (`limits::session`: `BUDGET_EXHAUSTED`,
/// `LOOP_DETECTED`) in this sidecar's ledger, just before it runs. `Ok(Some(_))`: a
/// refusal a shadow policy overrode (recorded as `shadow-deny`), the call runs anyway.
fn admit_session(
    ledger: &Ledger,
    call: &Call<'_>,
    policy: &Policy,
) -> Result<Option<Reject>, Reject> {
    match ledger.admit(call, policy.session.as_ref()) {
        Ok(()) => Ok(None),
        Err(reject) if policy.shadow => {
            tracing::info!(tool = %call.tool, agent = %call.agent, code = %reject.code, "shadow policy would deny; forwarding");
            Ok(Some(reject))
        }
        Err(reject) => Err(reject),
    }
}

/// The client span of a request about to be sent; its context goes into its headers.
/// `mcp`: an MCP `tools/call`, with its JSON-RPC id.
fn start_client<S: Backend>(
    ground: &Ground<'_, S>,
    parent: &CallSpan,
    contract: &Contract,
    exchange: &mut Exchange,
    mcp: Option<Option<&serde_json::Value>>,
) -> ClientSpan {
    let rpc_id = mcp.flatten();
    let mcp = mcp.is_some();
    let Exchange {
        method,
        path_and_query,
        headers,
        ..
    } = exchange;
    let describe = || {
        conventions::Outbound {
            method,
            path_and_query,
            route: contract
                .http
                .as_ref()
                .filter(|_| !mcp)
                .map(|(_, route)| route.as_str()),
            mcp_tool: mcp.then_some(contract.tool.as_str()),
            rpc_id,
        }
        .span(ground.backend.upstream())
    };
    ground.tracing.start_client(parent, describe, headers)
}

/// A backend request's `error.type` as the HTTP conventions give a client's: the status of
/// a 4xx or 5xx answer, else the code of what failed (no answer, or one that broke the
/// contract); `None` when it went well.
fn client_error_type(status: Option<u16>, failure: Option<&'static str>) -> ErrorType {
    match (status, failure) {
        (Some(status), _) if status >= 400 => Some(Cow::Owned(status.to_string())),
        (_, Some(code)) => Some(Cow::Borrowed(code)),
        (Some(_), None) => None,
        (None, None) => Some(Cow::Borrowed("_OTHER")),
    }
}

/// What a backend request is, for its client span and the conventions' client metric.
#[derive(Clone, Copy)]
struct Client {
    mcp: bool,
    method: &'static str,
}

impl Client {
    /// A request sent for `tool` at `sent` came to this: answered with `status` (if it
    /// was), failed with the code `failure` (if it did). Ends its span and counts it.
    fn finish(
        self,
        span: ClientSpan,
        metrics: &Metrics,
        tool: &str,
        status: Option<u16>,
        failure: Option<&'static str>,
        sent: Instant,
    ) {
        let elapsed = sent.elapsed();
        let error_type = client_error_type(status, failure);
        span.end(status, error_type.as_deref());
        let request = match self.mcp {
            true => convention_metrics::Sent::Mcp { tool, status },
            false => convention_metrics::Sent::Http {
                method: self.method,
                status,
            },
        };
        metrics.record_upstream(tool, &request, error_type, elapsed);
    }
}

/// What the shared state checks for a call under `policy`: the same quotas and session
/// limits the in-memory ledger would.
fn shared_limits<'a>(
    settings: &crate::config::Limits,
    contract: &Contract,
    policy: &'a Policy,
) -> Limits<'a> {
    Limits {
        agent_quota: policy.rate_limit.as_ref(),
        tool_quota: policy
            .grants
            .get(contract.tool.as_str())
            .and_then(|grant| grant.rate_limit.as_ref()),
        session: policy.session.as_ref(),
        shadow: policy.shadow,
        session_idle: Duration::from_secs(settings.session_idle_seconds.max(1)),
    }
}
