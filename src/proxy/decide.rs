//! The decision shared by REST and MCP once a call's tool, caller and arguments are
//! known: authorize → rate limit → validate → rules. Order matters: rules read the
//! validated arguments with defaults filled, so they never see input the schema would
//! refuse; the rate limit comes before validation so malformed floods are limited too.
//! With `state.backend: redis` the rate limit is spent at admission instead, in the same
//! round trip as the session's limits (`state::admit`).

use http::HeaderMap;
use serde_json::{json, Map, Value};
use std::borrow::Cow;

use crate::limits::Ledger;
use crate::policy::agent_policy::Policy;
use crate::policy::contract::Contract;
use crate::policy::rule::{Bindings, HeaderReads};
use crate::proxy::stage::authorize::authorize;
use crate::proxy::stage::validate::{validate, Arguments};
use crate::proxy::stage::{rules, task_scope};
use crate::proxy::task_token::Presented;
use crate::vocab::args::Args;
use crate::vocab::Agent;
use crate::vocab::Reject;

/// What rules may read of the request, besides arguments and identity.
pub struct RequestView<'a> {
    pub method: &'a str,
    pub path: &'a str,
    pub headers: &'a HeaderMap,
    pub session: Option<&'a str>,
    /// The task token (`X-Toolgate-Task`) a rule reading `task` needs, verified once.
    pub task: &'a Presented<'a>,
}

/// Where the limits decide reads live.
#[derive(Clone, Copy)]
pub enum Tallies<'a> {
    /// In this sidecar: rate limits are spent here, `session.calls` read here.
    Local(&'a Ledger),
    /// In the shared state: rate limits are spent at admission (`state::admit`), with the
    /// session's; `session.calls` was read for the rules beforehand.
    Shared { session_calls: u64 },
}

/// A call the decision let through.
#[derive(Debug)]
pub struct Decided {
    /// Validated, defaults filled.
    pub args: Arguments,
    /// The grant's `approval` asks for a person's approval before the call runs.
    pub needs_approval: bool,
}

pub fn decide(
    tallies: Tallies<'_>,
    policy: &Policy,
    agent: &Agent,
    contract: &Contract,
    args: Args,
    request: &RequestView<'_>,
    record: Option<&mut Option<Value>>,
) -> Result<Decided, Reject> {
    let permit = authorize(policy, &agent.id, &contract.tool)?;
    // Every request spends a cell, a duplicate's too (limits::rate).
    if let Tallies::Local(ledger) = tallies {
        ledger.check_rate(
            &agent.id,
            &contract.tool,
            policy.rate_limit.as_ref(),
            permit.grant.rate_limit.as_ref(),
        )?;
    }
    let args = validate(contract, args)?;
    // Read (and refused when ambiguous) before the rules, which only then bind them.
    let headers = match permit.grant.reads.request {
        true => Some(visible_headers(request.headers, &permit.grant.headers)?),
        false => None,
    };
    let needs_approval = judge(permit.grant, &args, record, |reads| Inputs {
        agent: reads.agent.then(|| agent.cel_value()),
        task: reads.task.then(|| request.task.claims().cloned()).flatten(),
        session: reads.session.then(|| {
            let calls = match tallies {
                Tallies::Local(ledger) => {
                    let counted = task_scope::counted(policy, request.task, request.session);
                    ledger.session_calls(&agent.id, counted.as_deref())
                }
                Tallies::Shared { session_calls } => session_calls,
            };
            json!({"id": request.session, "calls": calls})
        }),
        request: headers.filter(|_| reads.request).map(
            |headers| json!({"method": request.method, "path": request.path, "headers": headers}),
        ),
    })?;
    Ok(Decided {
        args,
        needs_approval,
    })
}

/// The variables besides `args` that a grant's rules read, as JSON: what `decide` binds
/// for a live call, and what the audit log keeps (`inputs`) for `toolgate replay`.
#[derive(Debug, Default, Clone)]
pub struct Inputs {
    pub agent: Option<Value>,
    pub task: Option<Value>,
    pub session: Option<Value>,
    pub request: Option<Value>,
}

/// The version of the audit record's `inputs` object.
pub const INPUTS_VERSION: u64 = 1;

impl Inputs {
    /// As the audit record keeps it.
    pub fn to_json(&self) -> Value {
        let mut map = Map::new();
        map.insert("v".into(), json!(INPUTS_VERSION));
        for (name, value) in [
            ("agent", &self.agent),
            ("task", &self.task),
            ("session", &self.session),
            ("request", &self.request),
        ] {
            if let Some(value) = value {
                map.insert(name.into(), value.clone());
            }
        }
        Value::Object(map)
    }

    /// From an audit record's `inputs`; `None` for another version.
    pub fn from_json(value: &Value) -> Option<Inputs> {
        if value.get("v").and_then(Value::as_u64) != Some(INPUTS_VERSION) {
            return None;
        }
        let get = |name: &str| value.get(name).filter(|v| !v.is_null()).cloned();
        Some(Inputs {
            agent: get("agent"),
            task: get("task"),
            session: get("session"),
            request: get("request"),
        })
    }
}

/// The decision on recorded inputs (`toolgate replay`): authorize → validate → rules and
/// the approval's `when`, the same stages as [`decide`]; rate limits are not replayed.
pub fn redecide(
    policy: &Policy,
    agent: &str,
    contract: &Contract,
    args: Args,
    inputs: &Inputs,
) -> Result<Decided, Reject> {
    let permit = authorize(policy, agent, &contract.tool)?;
    let args = validate(contract, args)?;
    let needs_approval = judge(permit.grant, &args, None, |_| inputs.clone())?;
    Ok(Decided {
        args,
        needs_approval,
    })
}

/// The grant's rules and approval condition over `args` and the other variables `inputs`
/// gives for what they read; `record` receives those variables first, so a refused
/// call's audit record keeps them too.
fn judge(
    grant: &crate::policy::agent_policy::Grant,
    args: &Arguments,
    record: Option<&mut Option<Value>>,
    inputs: impl FnOnce(&crate::policy::rule::Reads) -> Inputs,
) -> Result<bool, Reject> {
    if grant.rules.is_empty() && grant.approval.is_none() {
        if let Some(record) = record {
            *record = Some(Inputs::default().to_json());
        }
        return Ok(false);
    }
    // Only what the rules read is converted; the task token is verified only then.
    let reads = grant.reads;
    let inputs = inputs(&reads);
    if let Some(record) = record {
        *record = Some(inputs.to_json());
    }
    let bindings = Bindings {
        args: reads.args.then(|| Cow::Borrowed(args.value())),
        args_fields: Some(&grant.args),
        agent: inputs.agent.map(Cow::Owned),
        task: inputs.task.map(Cow::Owned),
        session: inputs.session.map(Cow::Owned),
        request: inputs.request.map(Cow::Owned),
    };
    rules::check(grant, &bindings)
}

/// Request headers as rules see them: lowercase names, text values, only those the
/// grant's rules read (`HeaderReads`), never the credential or the task token. A header
/// they read must have one value they can read: a rule judging one of two
/// `X-Auth-Token` values (or none, for a value that is not text) while the backend takes
/// the other is a rule the agent gets around, so that is `MALFORMED_REQUEST`.
fn visible_headers(headers: &HeaderMap, read: &HeaderReads) -> Result<Value, Reject> {
    let mut map = Map::new();
    if *read == HeaderReads::None {
        return Ok(Value::Object(map));
    }
    for name in headers.keys() {
        if name == http::header::AUTHORIZATION
            || name.as_str() == crate::proxy::headers::TASK
            || !read.keeps(name.as_str())
        {
            continue;
        }
        let mut values = headers.get_all(name).iter();
        let (Some(Ok(text)), None) = (values.next().map(|v| v.to_str()), values.next()) else {
            return Err(Reject::new(
                crate::vocab::Code::MalformedRequest,
                format!(
                    "the header {name} is read by this tool's rules and must be sent once, \
                     as text"
                ),
            ));
        };
        map.insert(name.as_str().to_string(), Value::String(text.to_string()));
    }
    Ok(Value::Object(map))
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::crd::parse_documents;
    use crate::limits::{Capacity, Clock};
    use crate::policy::{BuildOptions, Snapshot};
    use std::sync::Arc;

    const POLICIES: &str = r#"
apiVersion: toolgate.dev/v1alpha1
kind: ToolContract
metadata: {name: t}
spec: {tool: t, input: {type: object}}
---
apiVersion: toolgate.dev/v1alpha1
kind: AgentPolicy
metadata: {name: p}
spec:
  agents: [ops-bot]
  tools:
    - name: t
      rules:
        - {name: args, expr: "args.n == 1"}
        - {name: others, expr: "agent.id == 'ops-bot' && session.id == 's1' && session.calls == 0 && request.method == 'POST' && request.headers['x-env'] == 'prod'"}
"#;

    /// A snapshot of `policies` (which must compile) and an empty ledger on a fake clock:
    /// what a decision needs besides the call. Shared with `proxy::govern`'s tests.
    pub(crate) fn fixture(policies: &str) -> (Snapshot, Ledger) {
        let (snapshot, errors) = Snapshot::build(
            &parse_documents("t", policies).0,
            &BuildOptions::default(),
            1,
        );
        assert!(errors.is_empty(), "{errors:?}");
        let ledger = Ledger::new(
            Capacity::from_settings(&crate::config::Limits::default()),
            Clock::fake(),
        );
        (snapshot, ledger)
    }

    fn mk_decide(headers: &HeaderMap, args: Value) -> Result<Decided, Reject> {
        let (snapshot, ledger) = fixture(POLICIES);
        let agent = Agent {
            id: Arc::from("ops-bot"),
            issuer: Arc::from("tokens"),
            claims: json!({}),
        };
        let task = Presented::new(headers, "ops-bot", None);
        let view = RequestView {
            method: "POST",
            path: "/t",
            headers,
            session: Some("s1"),
            task: &task,
        };
        let policy = snapshot.policy_for("ops-bot").unwrap();
        let contract = snapshot.contract(snapshot.tool("t").unwrap());
        decide(
            Tallies::Local(&ledger),
            policy,
            &agent,
            contract,
            args.into(),
            &view,
            None,
        )
    }

    #[test]
    fn rules_see_every_variable_they_read() {
        let mut headers = HeaderMap::new();
        headers.insert("x-env", "prod".parse().unwrap());
        assert!(mk_decide(&headers, json!({"n": 1})).is_ok());
        assert_eq!(
            mk_decide(&headers, json!({"n": 2}))
                .unwrap_err()
                .rule
                .as_deref(),
            Some("args")
        );
        headers.insert("x-env", "dev".parse().unwrap());
        assert_eq!(
            mk_decide(&headers, json!({"n": 1}))
                .unwrap_err()
                .rule
                .as_deref(),
            Some("others")
        );
    }
}
