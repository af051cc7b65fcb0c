//! A REST tool call: the request's method and path name the tool (a contract's `http`
//! binding), path + query + JSON body are its arguments.
//!
//! ```text
//! snapshot → identify → read body → classify → govern → forward → respond (shape)
//! ```
//!
//! Governing and sending are the one call sequence's (`proxy::call::run`), the same
//! one MCP `tools/call` runs; what is REST's own is how a request becomes a proposal
//! ([`classify`]), the request the backend gets and how its answer goes back
//! ([`respond`]).

pub mod classify;
pub mod respond;

use http::request::Parts;
use http::Response;
use hyper::body::Incoming;
use std::sync::Arc;

use crate::proxy::backend::Keep;
use crate::proxy::body::{read_body, Body};
use crate::proxy::call::{self, Delivery, Door};
use crate::proxy::forward::Sent;
use crate::proxy::gate::Gate;
use crate::proxy::govern::{Proposal, Verdict};
use crate::proxy::outcome::Outcome;
use crate::proxy::render::into_response;
use crate::proxy::stage::identify::identify;
use crate::tls::PeerIdentity;
use crate::vocab::{Agent, Code, Reject};
use classify::classify;

/// One REST request; `session` and `idempotency_key` are its headers, already checked.
pub async fn handle(
    gate: &Arc<Gate>,
    parts: Parts,
    body: Incoming,
    session: Option<String>,
    idempotency_key: Option<String>,
    outcome: &mut Outcome,
) -> Result<Response<Body>, Reject> {
    // Fail closed: without a snapshot nothing is known to be allowed.
    let snapshot = gate
        .snapshots
        .load()
        .ok_or_else(|| Reject::new(Code::NotReady, "no policy is loaded yet"))?;
    outcome.under_policy(Some(snapshot.version));
    let agent = match who_asks(gate, &parts, outcome).await {
        Ok(agent) => agent,
        Err(challenge) => return Ok(challenge),
    };
    let body = read_body(&gate.limits, &parts.headers, body).await?;
    // The body checked as JSON must be the body the backend parses (proxy::media).
    if !body.is_empty() {
        crate::proxy::media::check_json(&parts.headers)?;
    }
    // The audit digest and a session's fingerprint read every call's arguments.
    let reads_args = outcome.audited() || session.is_some();
    let (path, query) = (parts.uri.path(), parts.uri.query());
    let call = classify(&snapshot, &parts.method, path, query, &body, reads_args)?;
    let trace_id = outcome.trace_id().to_string();
    let proposal = Proposal {
        tool: call.tool,
        args: call.args,
        round: None,
        idempotency_key: idempotency_key.as_deref(),
        agent: &agent,
        method: parts.method.as_str(),
        path,
        headers: &parts.headers,
        session: session.as_deref(),
        trace_id: &trace_id,
    };
    // The backend runs what was checked: filled defaults travel with the call.
    let request = |verdict: &Verdict<'_>| {
        let body = match call.json_body && verdict.args.filled {
            true => respond::with_defaults(verdict.args.value(), &call.url_keys),
            false => body,
        };
        let tool = &verdict.contract.tool;
        respond::exchange(&parts, body, &agent.id, session.as_deref(), tool)
    };
    let door = Door {
        rpc_id: None,
        retry: true,
        live: false,
        // An at-most-once answer is kept whole for its duplicates, and kept small.
        keep: Keep::Body,
    };
    let delivery = call::run(&gate.ground(), &snapshot, proposal, request, door, outcome).await?;
    deliver(gate, delivery).await
}

/// Who asks comes first, as on the MCP endpoint: a caller without a credential learns
/// nothing of the routes, and an agent's own mistakes (a malformed body, an unknown
/// route) are recorded as its own, never counted as an anonymous flood. `Err`: the
/// challenge to answer with.
async fn who_asks(
    gate: &Gate,
    parts: &Parts,
    outcome: &mut Outcome,
) -> Result<Agent, Response<Body>> {
    let peer = parts.extensions.get::<PeerIdentity>();
    match identify(&gate.identity, &parts.headers, peer).await {
        Ok(agent) => {
            outcome.identified(&agent);
            Ok(agent)
        }
        Err(refused) => {
            outcome.refused(&refused.reject);
            let mut response = into_response(&refused.reject, outcome.trace_id());
            response
                .headers_mut()
                .insert(http::header::WWW_AUTHENTICATE, refused.challenge);
            Err(response)
        }
    }
}

/// What the backend gave, as the agent's response.
async fn deliver(gate: &Gate, delivery: Delivery<'_>) -> Result<Response<Body>, Reject> {
    let Delivery { contract, sent, .. } = delivery;
    match sent {
        Sent::Live { response, sent } => respond::streamed(gate, contract, response, sent).await,
        // Not asked for (`live: false`): REST answers once the call is settled.
        Sent::Leading { .. } => Err(Reject::new(
            Code::NotReady,
            "the gateway failed to handle the call",
        )),
        Sent::Settled { settled, .. } => respond::buffered(contract, &settled),
    }
}
