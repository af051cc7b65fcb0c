//! MCP over Streamable HTTP on `mcp.path` (README, "MCP"): the dispatch of one HTTP request.
//!
//! ```text
//! identify → POST: read body → parse (message | batch) → session owner → per message:
//!     tools/call  → withheld for drift? → govern → forward → shape the result  (call, tool)
//!     tools/list  → forward → filter to the agent's tools, as their contracts,
//!                   drift judged (list, listing, drift, tool_drift)
//!     initialize, ping, server/discover, notifications, responses → pass (forward)
//!     any other method → pass only if the policy's mcpMethods grant it
//! GET / DELETE → session owner → pass (streamed)
//! ```
//!
//! Every request is authenticated first, `initialize` and GET included. A session is
//! usable only by the agent it was issued to ([`session`]). Refusals are rendered by
//! [`reply`] from the same error body REST uses.
//!
//! Audit: a single `tools/call` POST is one call and its record is the request's; in a
//! batch every `tools/call` gets its own record, plus one for the batch. Any other HTTP
//! request (handshake, listing, streams) leaves one record without a tool.

pub mod answer;
pub mod batch;
pub mod forward;
pub mod jsonrpc;
pub mod oauth;
pub mod origin;
pub mod pending;
pub mod reply;
pub mod routing_headers;
pub mod session;
pub mod tools_call;
pub mod tools_list;

use bytes::Bytes;
use http::request::Parts;
use http::{Method, Response};
use hyper::body::Incoming;
use serde_json::Value;
use std::sync::Arc;
use std::time::Instant;

use crate::policy::Snapshot;
use crate::proxy::body::{read_body, Body};
use crate::proxy::gate::Gate;
use crate::proxy::headers::MCP_SESSION;
use crate::proxy::outcome::Outcome;
use crate::proxy::stage::authorize;
use crate::proxy::stage::identify::identify;
use crate::vocab::Agent;
use crate::vocab::{Code, Reject};
use jsonrpc::{Body as Parsed, Kind, Message, Unreadable};
use reply::Refusal;

/// One MCP HTTP request once its caller is known.
pub struct Inbound<'a> {
    pub gate: &'a Arc<Gate>,
    pub parts: &'a Parts,
    pub agent: &'a Agent,
    /// The session label (Mcp-Session-Id, else X-Toolgate-Session).
    pub session: Option<&'a str>,
    /// The request's `Idempotency-Key`, checked once by the pipeline.
    pub idempotency_key: Option<&'a str>,
    /// One snapshot for the whole request; `None` until policies load.
    pub snapshot: Option<Arc<Snapshot>>,
    /// The request speaks protocol 2026-07-28 or later.
    pub modern: bool,
    pub trace_id: String,
}

pub async fn handle(
    gate: &Arc<Gate>,
    parts: Parts,
    body: Incoming,
    session: Option<String>,
    idempotency_key: Option<String>,
    outcome: &mut Outcome,
) -> Result<Response<Body>, Reject> {
    // Before anything is read or forwarded: a browser-borne request from a foreign origin.
    gate.mcp_origins.check(&parts)?;
    let modern = routing_headers::is_modern(&parts.headers);
    let agent = match identify(
        &gate.identity,
        &parts.headers,
        parts.extensions.get::<crate::tls::PeerIdentity>(),
    )
    .await
    {
        Ok(agent) => agent,
        Err(refused) => {
            // HTTP 401 (403 for a missing scope), with a JSON-RPC error body the SDKs
            // surface (see reply), and the challenge that says what to send.
            outcome.refused(&refused.reject);
            let mut response = Refusal::unauthenticated(refused.reject).response(
                &Value::Null,
                outcome.trace_id(),
                modern,
            );
            response
                .headers_mut()
                .insert(http::header::WWW_AUTHENTICATE, refused.challenge);
            return Ok(response);
        }
    };
    outcome.identified(&agent);
    let snapshot = gate.snapshots.load();
    outcome.under_policy(snapshot.as_ref().map(|s| s.version));
    let ex = Inbound {
        gate,
        parts: &parts,
        agent: &agent,
        session: session.as_deref(),
        idempotency_key: idempotency_key.as_deref(),
        snapshot,
        modern,
        trace_id: outcome.trace_id().to_string(),
    };
    match parts.method {
        Method::POST => Ok(post(&ex, body, outcome).await),
        Method::GET | Method::DELETE => {
            ex.check_session().await?;
            forward::stream(&ex, outcome).await
        }
        _ => Err(Reject::new(
            Code::MalformedRequest,
            "MCP over HTTP uses POST, GET and DELETE",
        )
        .with_status(405)),
    }
}

async fn post(ex: &Inbound<'_>, body: Incoming, outcome: &mut Outcome) -> Response<Body> {
    let bytes = match read_body(&ex.gate.limits, &ex.parts.headers, body).await {
        Ok(bytes) => bytes,
        Err(reject) => return ex.refuse(outcome, Refusal::malformed(reject), &Value::Null),
    };
    // The message toolgate governs must be the one the server parses (proxy::media).
    if let Err(reject) = crate::proxy::media::check_json(&ex.parts.headers) {
        return ex.refuse(outcome, Refusal::malformed(reject), &Value::Null);
    }
    let parsed = match jsonrpc::parse(&bytes) {
        Ok(parsed) => parsed,
        Err(Unreadable::NotJson(reason)) => {
            let reject = Reject::new(Code::MalformedRequest, reason);
            return ex.refuse(outcome, Refusal::unparsable(reject), &Value::Null);
        }
        Err(Unreadable::Invalid(invalid)) => {
            let reject = Reject::new(Code::MalformedRequest, invalid.reason);
            return ex.refuse(outcome, Refusal::malformed(reject), &invalid.id);
        }
    };
    let id = match &parsed {
        Parsed::Single(message) => message.reply_id(),
        Parsed::Batch(_) => Value::Null,
    };
    if let Err(reject) = ex.check_session().await {
        return ex.refuse(outcome, Refusal::malformed(reject), &id);
    }
    match parsed {
        Parsed::Single(message) => single(ex, message, bytes, outcome).await,
        Parsed::Batch(items) => batch::answer(ex, items, outcome).await,
    }
}

async fn single(
    ex: &Inbound<'_>,
    message: Message,
    bytes: Bytes,
    outcome: &mut Outcome,
) -> Response<Body> {
    let id = message.reply_id();
    if let Some(method) = message.method.as_deref() {
        // What a prompt request names, for the span (tools/call: the tool).
        let target = message
            .params()
            .and_then(|p| p.get("name"))
            .and_then(serde_json::Value::as_str)
            .filter(|_| method == "prompts/get");
        outcome.mcp_message(method, message.id.as_ref(), target);
    }
    if let Err(refusal) = routing_headers::check_headers(&ex.parts.headers, &message, ex.modern) {
        return ex.refuse(outcome, refusal, &id);
    }
    match route(&message) {
        Route::Call => tools_call::single(ex, message, bytes, outcome).await,
        Route::List => tools_list::single(ex, &message, bytes, outcome).await,
        Route::Pass => forward::pass(ex, &message, bytes, outcome).await,
        Route::Guarded => match ex.method_permit(message.method.as_deref().unwrap_or_default()) {
            Ok(()) => forward::pass(ex, &message, bytes, outcome).await,
            Err(refusal) => ex.refuse(outcome, refusal, &id),
        },
    }
}

/// What toolgate does with a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Route {
    Call,
    List,
    Pass,
    /// A method the policy must grant (`mcpMethods`).
    Guarded,
}

pub fn route(message: &Message) -> Route {
    if message.kind != Kind::Request {
        return Route::Pass;
    }
    match message.method.as_deref().unwrap_or_default() {
        "tools/call" => Route::Call,
        "tools/list" => Route::List,
        "initialize" | "ping" | "server/discover" => Route::Pass,
        _ => Route::Guarded,
    }
}

impl Inbound<'_> {
    pub fn trace_id(&self) -> &str {
        &self.trace_id
    }

    /// The `Mcp-Session-Id` the agent named, if any.
    pub fn mcp_session(&self) -> Option<&str> {
        self.parts
            .headers
            .get(MCP_SESSION)
            .and_then(|v| v.to_str().ok())
    }

    /// A named session must have been issued to this agent: by this pod, or, with shared
    /// state, by any replica (asked once, then remembered here).
    pub async fn check_session(&self) -> Result<(), Reject> {
        let Some(session) = self.mcp_session() else {
            return Ok(());
        };
        let local = self.gate.mcp_sessions.check(session, &self.agent.id);
        let (Err(refusal), Some(shared)) = (&local, &self.gate.shared) else {
            return local;
        };
        match shared.owner(session, session::IDLE).await {
            Ok(Some(owner)) if *owner == *self.agent.id => {
                self.gate.mcp_sessions.bind(session, &self.agent.id);
                Ok(())
            }
            Ok(_) => Err(refusal.clone()),
            Err(e) => {
                tracing::warn!(error = %e, "an MCP session unknown here could not be looked up in the shared state; refused as unknown");
                Err(refusal.clone())
            }
        }
    }

    /// Whether the agent's policy grants an MCP method beyond tools.
    pub fn method_permit(&self, method: &str) -> Result<(), Refusal> {
        let Some(snapshot) = &self.snapshot else {
            let reject = Reject::new(Code::NotReady, "no policy is loaded yet");
            return Err(Refusal::failed(reject));
        };
        let policy = authorize::policy(snapshot, &self.agent.id).map_err(Refusal::not_granted)?;
        if policy.allows_method(method) {
            return Ok(());
        }
        let reject = Reject::new(
            Code::ToolNotAllowed,
            format!(
                "agent {} may not use {method}: {} does not list it in spec.mcpMethods",
                self.agent.id, policy.object
            ),
        );
        Err(Refusal::not_granted(reject))
    }

    /// A batch element's refusal, as its JSON-RPC answer (batches predate 2026-07-28:
    /// the older revisions' form).
    pub fn refused(&self, refusal: &Refusal, id: &Value) -> Value {
        refusal.message(id, self.trace_id(), false)
    }

    /// Answers a single message with a refusal, and notes it in the request's outcome.
    pub fn refuse(&self, outcome: &mut Outcome, refusal: Refusal, id: &Value) -> Response<Body> {
        outcome.refused(&refusal.reject);
        refusal.response(id, self.trace_id(), self.modern)
    }

    /// With `mcp.onDrift: hide`, the refusal of a call of a tool the listing withholds
    /// because the backend lists it unlike its contract ([`tools_list::tool_drift`]). Checked before
    /// the call is governed, like a tool no contract covers, so it is `UNKNOWN_TOOL`.
    pub fn withheld_call(&self, message: &Message) -> Option<Reject> {
        let snapshot = self.snapshot.as_ref()?;
        let tool = message.params()?.get("name")?.as_str()?;
        self.gate.tool_drift.withheld(snapshot, tool)
    }

    /// A fresh outcome for one call of a batch.
    pub fn element_outcome(&self) -> Outcome {
        // Each call of a batch is a call of its own: its own server span.
        let mut outcome = Outcome::new(
            self.gate.tracing.start_call(&self.parts.headers),
            Instant::now(),
            self.gate.audit.privacy(),
        );
        outcome.requested(self.parts);
        outcome.identified(self.agent);
        outcome.in_session(self.session);
        outcome.under_policy(self.snapshot.as_ref().map(|s| s.version));
        outcome
    }
}
