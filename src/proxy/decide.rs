//! The decision shared by REST and MCP once a call's tool, caller and arguments are
//! known: authorize → rate limit → validate → rules. Order matters: rules read the
//! validated arguments with defaults filled, so they never see input the schema would
//! refuse; the rate limit comes before validation so malformed floods are limited too.

use http::HeaderMap;
use serde_json::{json, Map, Value};

use crate::control::contract::Contract;
use crate::control::policy::Policy;
use crate::control::rule::Bindings;
use crate::identity::task::TaskTokens;
use crate::limits::Ledger;
use crate::proxy::reject::{Code, Reject};
use crate::proxy::stage::authorize::authorize;
use crate::proxy::stage::identify::Agent;
use crate::proxy::stage::rules;
use crate::proxy::stage::validate::{validate, Arguments};

/// What rules may read of the request, besides arguments and identity.
pub struct RequestView<'a> {
    pub method: &'a str,
    pub path: &'a str,
    pub headers: &'a HeaderMap,
    pub session: Option<&'a str>,
}

pub fn decide(
    ledger: &Ledger,
    policy: &Policy,
    agent: &Agent,
    contract: &Contract,
    args: Value,
    request: &RequestView<'_>,
    tasks: Option<&TaskTokens>,
) -> Result<Arguments, Reject> {
    let permit = authorize(policy, &agent.id, &contract.tool)?;
    // Every request spends a cell, a duplicate's too (limits::rate).
    ledger.check_rate(
        &agent.id,
        &contract.tool,
        policy.rate_limit.as_ref(),
        permit.grant.rate_limit.as_ref(),
    )?;
    let args = validate(contract, args)?;
    if !permit.grant.rules.is_empty() {
        // The task token is verified only when a rule will read it.
        let task = if permit.grant.rules.iter().any(|r| r.reads_task) {
            task_claims(request.headers, &agent.id, tasks)
        } else {
            None
        };
        let bindings = Bindings::new(
            &args.value,
            &agent.cel_value(),
            task.as_ref(),
            &json!({"id": request.session, "calls": ledger.session_calls(&agent.id, request.session)}),
            &json!({"method": request.method, "path": request.path, "headers": visible_headers(request.headers)}),
        )
        .map_err(|e| Reject::new(Code::InvalidArguments, format!("the arguments can't be checked by rules: {e}")))?;
        rules::check(permit.grant, &bindings)?;
    }
    Ok(args)
}

fn task_claims(headers: &HeaderMap, agent: &str, tasks: Option<&TaskTokens>) -> Option<Value> {
    let token = headers.get(crate::proxy::headers::TASK)?.to_str().ok()?;
    tasks?.claims(token.trim(), agent)
}

/// Request headers as rules see them: lowercase names, text values, no credentials.
fn visible_headers(headers: &HeaderMap) -> Value {
    let mut map = Map::new();
    for (name, value) in headers {
        if name == http::header::AUTHORIZATION || name.as_str() == crate::proxy::headers::TASK {
            continue;
        }
        if let Ok(text) = value.to_str() {
            map.insert(name.as_str().to_string(), Value::String(text.to_string()));
        }
    }
    Value::Object(map)
}
