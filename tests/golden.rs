//! Golden tests of the policy decision: from YAML manifests to what the compiled snapshot
//! decides for each call, with the library's own decision code and no sockets.
//!
//! Each folder `tests/fixtures/golden/<case>/` holds:
//!
//! - `policies.yaml`: ToolContracts and AgentPolicies, as a policy file would.
//! - `calls.yaml`: the calls, decided in order against one rate/session ledger on a fake
//!   clock. Each is a map:
//!   - `agent` (required) and `claims` (the identity's claims, `{}` if left out);
//!   - either `rest: "METHOD /path?query"` with an optional JSON `body`, or `mcp: TOOL`
//!     (a `tools/call`) with optional `arguments`;
//!   - optional `session` (the session id, sent as `X-Toolgate-Session`), `headers`
//!     (name: value), `task` (claims the demo orchestrator signs into an
//!     `X-Toolgate-Task` token for this agent) and `advanceMs` (moves the fake clock
//!     before the call).
//! - `options.yaml` (optional): `allowShadow: true` to honour `mode: shadow`
//!   (`policies.allowShadow`; off by default, as in the sidecar).
//! - `expected.txt`: the build's errors and unserved grants, then each call and its
//!   outcome: `allow ARGS` (after defaults), `deny CODE …` or
//!   `shadow-deny CODE … -> forwards ARGS`, with `rule=`, `recovery=`,
//!   `retry_after_ms=` and `details=[pointer keyword, …]` (`(root)` for the arguments
//!   object itself) where the refusal has them.
//!
//! A call runs what the REST and MCP paths run: classify (or the tool's name), then the
//! one call sequence `proxy::call::run` — the governing core (policy lookup, authorize,
//! rate limit, validate, rules; a shadow policy's refusal recorded and the call
//! forwarded), then the forward path (an action's owner, duplicates, session budget and
//! loop detection) — sending through a backend of this test's own that answers every
//! call without a socket. An identical call that must run at most once joins the first
//! within its contract's dedupe window, as in the sidecar. Objects that fail to build are
//! left out of the snapshot the calls run against: what a sidecar fed from the cluster
//! serves. A sidecar reading files refuses the whole change instead.
//!
//! The shared manifests of `tests/fixtures/policies/` are checked here too: each builds
//! without errors.
//!
//! `TOOLGATE_BLESS=1 cargo test --test golden` rewrites the `expected.txt` files; read
//! the diff before committing it.

use bytes::Bytes;
use http::{HeaderMap, HeaderName, HeaderValue, Method};
use serde::Deserialize;
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::future::Future;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use toolgate::crd::parse_documents;
use toolgate::identity::task::TaskTokens;
use toolgate::limits::dedupe::{Buffered, Settled};
use toolgate::limits::{Capacity, Clock, Ledger};
use toolgate::policy::{BuildOptions, Snapshot};
use toolgate::proxy::backend::exchange::{Exchange, Received};
use toolgate::proxy::backend::upstream::Upstream;
use toolgate::proxy::backend::{Backend, Failure, Keep};
use toolgate::proxy::call::{self, Door, Ground};
use toolgate::proxy::forward::Sent;
use toolgate::proxy::govern::{Governor, Proposal};
use toolgate::proxy::outcome::Outcome;
use toolgate::proxy::rest::classify::classify;
use toolgate::telemetry::metrics::Metrics;
use toolgate::telemetry::spans::{CallSpan, Tracing};
use toolgate::vocab::args::Args;
use toolgate::vocab::{Agent, Code, Reject};

const ROOT: &str = env!("CARGO_MANIFEST_DIR");
const CASE_FILES: [&str; 4] = [
    "policies.yaml",
    "calls.yaml",
    "options.yaml",
    "expected.txt",
];
const ORCHESTRATOR: &str = "orchestrator";
const TRACE_ID: &str = "0af7651916cd43dd8448eb211c80319c";
const ORCHESTRATOR_KEY: &[u8] = include_bytes!("../examples/keys/orchestrator-demo.pem");

/// One entry of `calls.yaml`.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct CallSpec {
    agent: String,
    #[serde(default)]
    claims: Option<Value>,
    #[serde(default)]
    rest: Option<String>,
    #[serde(default)]
    body: Option<Value>,
    #[serde(default)]
    mcp: Option<String>,
    #[serde(default)]
    arguments: Option<Value>,
    #[serde(default)]
    session: Option<String>,
    #[serde(default)]
    headers: BTreeMap<String, String>,
    #[serde(default)]
    task: Option<Value>,
    #[serde(default)]
    advance_ms: u64,
}

/// `options.yaml`.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct CaseOptions {
    #[serde(default)]
    allow_shadow: bool,
}

fn golden_root() -> PathBuf {
    Path::new(ROOT).join("tests/fixtures/golden")
}

/// The case folders, in name order.
fn cases() -> Vec<PathBuf> {
    let mut cases: Vec<PathBuf> = std::fs::read_dir(golden_root())
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.is_dir())
        .collect();
    cases.sort();
    cases
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn compact(value: &Value) -> String {
    serde_json::to_string(value).unwrap()
}

/// `CODE rule=… recovery=… retry_after_ms=… details=[…]`, each part only when present.
fn reasons(reject: &Reject) -> String {
    let mut line = reject.code.to_string();
    if let Some(rule) = &reject.rule {
        write!(line, " rule={rule}").unwrap();
    }
    if let Some(recovery) = reject.recovery {
        write!(line, " recovery={}", recovery.as_str()).unwrap();
    }
    if let Some(ms) = reject.retry_after_ms {
        write!(line, " retry_after_ms={ms}").unwrap();
    }
    if !reject.details.is_empty() {
        let details: Vec<String> = reject
            .details
            .iter()
            .map(|d| match d.pointer.as_str() {
                "" => format!("(root) {}", d.keyword),
                pointer => format!("{pointer} {}", d.keyword),
            })
            .collect();
        write!(line, " details=[{}]", details.join(", ")).unwrap();
    }
    line
}

fn deny(reject: &Reject) -> String {
    format!("deny {}", reasons(reject))
}

/// The call as one line: who, what, and whatever else it carries.
fn describe(call: &CallSpec) -> String {
    let mut line = call.agent.clone();
    match (&call.rest, &call.mcp) {
        (Some(rest), _) => write!(line, " {rest}").unwrap(),
        (None, Some(tool)) => write!(line, " mcp {tool}").unwrap(),
        (None, None) => {}
    }
    if let Some(body) = call.body.as_ref().or(call.arguments.as_ref()) {
        write!(line, " {}", compact(body)).unwrap();
    }
    if let Some(claims) = &call.claims {
        write!(line, " claims={}", compact(claims)).unwrap();
    }
    if let Some(session) = &call.session {
        write!(line, " session={session}").unwrap();
    }
    for (name, value) in &call.headers {
        write!(line, " {name}: {value}").unwrap();
    }
    if let Some(task) = &call.task {
        write!(line, " task={}", compact(task)).unwrap();
    }
    if call.advance_ms > 0 {
        write!(line, " (after {} ms)", call.advance_ms).unwrap();
    }
    line
}

/// A task token for `agent` with `claims`, signed as the demo orchestrator signs them.
fn task_token(agent: &str, claims: &Value) -> String {
    let mut payload = json!({
        "iss": ORCHESTRATOR,
        "exp": toolgate::identity::jwks::now_seconds() + 3600,
        "agent": agent,
    });
    let task = claims.as_object().expect("task: a map of claims");
    for (name, value) in task {
        payload[name] = value.clone();
    }
    let key = jsonwebtoken::EncodingKey::from_ed_pem(ORCHESTRATOR_KEY).unwrap();
    let mut header = jsonwebtoken::Header::new(jsonwebtoken::Algorithm::EdDSA);
    header.kid = Some("orchestrator-demo".into());
    jsonwebtoken::encode(&header, &payload, &key).unwrap()
}

fn task_tokens() -> TaskTokens {
    TaskTokens::load(
        &[toolgate::config::TaskIssuer {
            issuer: ORCHESTRATOR.into(),
            jwks: Some(Path::new(ROOT).join("examples/keys/task-jwks.json").into()),
            discovery: false,
            audience: None,
            require_agent: true,
        }],
        &toolgate::identity::remote::Fetcher::new(Default::default()),
    )
    .expect("the demo orchestrator's keys")
}

/// The backend the calls are sent to: it answers every call `200 {}` without a
/// socket, and counts what it was sent, so a decision to forward is seen to forward.
struct Unsent {
    /// Only named in client spans, never connected to.
    upstream: Upstream,
    sent: Arc<AtomicUsize>,
}

impl Backend for Unsent {
    type Body = ();

    fn upstream(&self) -> &Upstream {
        &self.upstream
    }

    async fn send(&self, _: Exchange, _: Duration, _: bool) -> Result<http::Response<()>, Failure> {
        self.sent.fetch_add(1, Ordering::SeqCst);
        Ok(http::Response::new(()))
    }

    fn buffer(
        &self,
        _: Exchange,
        _: Keep,
        _: Duration,
        _: usize,
    ) -> impl Future<Output = Received> + Send + 'static {
        self.sent.fetch_add(1, Ordering::SeqCst);
        std::future::ready(Received {
            settled: Settled::Answered(Buffered {
                status: http::StatusCode::OK,
                headers: HeaderMap::new(),
                body: Bytes::from_static(b"{}"),
                interim: false,
            }),
            status: Some(200),
        })
    }
}

/// What a case's calls run against besides the snapshot: one ledger on a fake clock,
/// the demo orchestrator's task tokens, the backend, and the runtime the forward path
/// spawns its at-most-once sends on.
struct Sidecar {
    ledger: Ledger,
    tasks: TaskTokens,
    backend: Unsent,
    metrics: Arc<Metrics>,
    tracing: Tracing,
    limits: toolgate::config::Limits,
    runtime: tokio::runtime::Runtime,
}

impl Sidecar {
    fn new() -> Sidecar {
        let limits = toolgate::config::Limits::default();
        Sidecar {
            ledger: Ledger::new(Capacity::from_settings(&limits), Clock::fake()),
            tasks: task_tokens(),
            backend: Unsent {
                upstream: Upstream::new("http://backend.invalid:8080").unwrap(),
                sent: Arc::default(),
            },
            metrics: Arc::new(Metrics::new()),
            tracing: Tracing::disabled(),
            limits,
            runtime: tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap(),
        }
    }

    /// The one sequence's view of this sidecar, as `Gate::ground` gives the real one's.
    fn ground(&self) -> Ground<'_, Unsent> {
        Ground {
            governor: Governor {
                ledger: &self.ledger,
                shared: None,
                tasks: Some(&self.tasks),
                audit_refuses: false,
                approvals: None,
            },
            ledger: &self.ledger,
            shared: None,
            metrics: &self.metrics,
            tracing: &self.tracing,
            limits: &self.limits,
            backend: &self.backend,
        }
    }
}

/// The outcome of one call, as the sidecar would decide it.
fn outcome(snapshot: &Snapshot, sidecar: &Sidecar, call: &CallSpec) -> String {
    let ledger = &sidecar.ledger;
    assert!(
        ledger
            .clock()
            .advance(Duration::from_millis(call.advance_ms)),
        "the ledger's clock is fake"
    );
    let agent = Agent {
        id: Arc::from(call.agent.as_str()),
        issuer: Arc::from("tokens"),
        claims: call.claims.clone().unwrap_or_else(|| json!({})),
    };
    let mut headers = HeaderMap::new();
    for (name, value) in &call.headers {
        headers.insert(
            HeaderName::from_bytes(name.as_bytes()).unwrap(),
            HeaderValue::from_str(value).unwrap(),
        );
    }
    if let Some(session) = &call.session {
        // Rules see the header the session id came in, as they would on the wire.
        headers
            .entry("x-toolgate-session")
            .or_insert(HeaderValue::from_str(session).unwrap());
    }
    if let Some(task) = &call.task {
        let token = task_token(&call.agent, task);
        headers.insert("x-toolgate-task", HeaderValue::from_str(&token).unwrap());
    }

    // Which tool, with which arguments: the REST route, or the MCP tool's name.
    let (tool, args, method, path) = match (&call.rest, &call.mcp) {
        (Some(rest), None) => {
            assert!(call.arguments.is_none(), "REST calls take a body");
            let (method, target) = rest.split_once(' ').expect("rest: \"METHOD /path\"");
            let method = Method::from_bytes(method.as_bytes()).unwrap();
            let (path, query) = match target.split_once('?') {
                Some((path, query)) => (path, Some(query)),
                None => (target, None),
            };
            let body = call
                .body
                .as_ref()
                .map_or_else(Bytes::new, |b| Bytes::from(serde_json::to_vec(b).unwrap()));
            // Audit is on by default, so the sidecar always reads the arguments.
            match classify(snapshot, &method, path, query, &body, true) {
                Ok(classified) => (
                    classified.tool,
                    classified.args,
                    method.to_string(),
                    path.to_string(),
                ),
                Err(reject) => return deny(&reject),
            }
        }
        (None, Some(name)) => {
            assert!(call.body.is_none(), "MCP calls take arguments");
            let Some(tool) = snapshot.tool(name) else {
                return deny(&Reject::new(Code::UnknownTool, "no such tool"));
            };
            let args = match &call.arguments {
                Some(Value::Null) | None => json!({}),
                Some(args) => args.clone(),
            };
            (tool, Args::from(args), "POST".into(), "/mcp".into())
        }
        _ => panic!("a call is either `rest` or `mcp`: {call:?}"),
    };

    let proposal = Proposal {
        tool,
        args,
        round: None,
        idempotency_key: None,
        agent: &agent,
        method: &method,
        path: &path,
        headers: &headers,
        session: call.session.as_deref(),
        trace_id: TRACE_ID,
    };
    // What the verdict forwards, seen where the sidecar builds the backend's request.
    let mut decided = None;
    let request = |verdict: &toolgate::proxy::govern::Verdict<'_>| {
        decided = Some((
            compact(verdict.args.value()),
            verdict.args.filled,
            verdict.shadowed.clone(),
        ));
        Exchange {
            method: Method::from_bytes(method.as_bytes()).unwrap(),
            path_and_query: path.clone(),
            headers: HeaderMap::new(),
            body: Bytes::new(),
        }
    };
    // What each front door asks of the forward path (`rest::handle`,
    // `mcp::tools_call`; a batch element's, which is not live).
    let rpc_id = json!(1);
    let door = match &call.mcp {
        None => Door {
            rpc_id: None,
            retry: true,
            live: false,
            keep: Keep::Body,
        },
        Some(_) => Door {
            rpc_id: Some(&rpc_id),
            retry: false,
            live: false,
            keep: Keep::Answer {
                id: rpc_id.clone(),
                tap: None,
            },
        },
    };
    let mut record = Outcome::new(
        CallSpan::detached(TRACE_ID.to_string()),
        Instant::now(),
        None,
    );
    let sends = sidecar.backend.sent.load(Ordering::SeqCst);
    let ground = sidecar.ground();
    let run = call::run(&ground, snapshot, proposal, request, door, &mut record);
    let delivery = match sidecar.runtime.block_on(run) {
        Ok(delivery) => delivery,
        Err(reject) => return deny(&reject),
    };
    let sent = sidecar.backend.sent.load(Ordering::SeqCst) - sends;
    let replayed = matches!(delivery.sent, Sent::Settled { replayed: true, .. });
    assert_eq!(
        sent,
        usize::from(!replayed),
        "a call let through is sent once, unless it joined an identical one"
    );
    let (forwards, filled, shadowed) = decided.expect("a call let through was governed");
    let line = match &shadowed {
        None => {
            let filled = if filled { " (defaults filled)" } else { "" };
            format!("allow {forwards}{filled}")
        }
        Some(reject) => format!("shadow-deny {} -> forwards {forwards}", reasons(reject)),
    };
    // A session limit a shadow policy overrode; the first would-be refusal is the one
    // recorded (`Outcome::shadowed`).
    match delivery.shadowed {
        Some(reject) if shadowed.is_none() => {
            format!("shadow-deny {} -> forwards {forwards}", reasons(&reject))
        }
        _ => line,
    }
}

/// What one case renders: the build's complaints, then each call and its outcome.
fn render(case: &Path) -> String {
    let policies = read(&case.join("policies.yaml"));
    let calls: Vec<CallSpec> = serde_yaml::from_str(&read(&case.join("calls.yaml")))
        .unwrap_or_else(|e| panic!("{}/calls.yaml: {e}", case.display()));
    let options: CaseOptions = match std::fs::read_to_string(case.join("options.yaml")) {
        Ok(text) => serde_yaml::from_str(&text)
            .unwrap_or_else(|e| panic!("{}/options.yaml: {e}", case.display())),
        Err(_) => CaseOptions::default(),
    };
    let (objects, mut errors) = parse_documents("policies.yaml", &policies);
    let build = BuildOptions {
        allow_shadow: options.allow_shadow,
        pod_labels: None,
    };
    let (snapshot, build_errors) = Snapshot::build(&objects, &build, 1);
    errors.extend(build_errors);

    let mut out = String::from("build:\n");
    if errors.is_empty() && snapshot.unserved.is_empty() {
        out.push_str("  ok\n");
    }
    for error in &errors {
        writeln!(out, "  error {error}").unwrap();
    }
    for unserved in &snapshot.unserved {
        writeln!(out, "  unserved {unserved}").unwrap();
    }
    out.push_str("calls:\n");
    let sidecar = Sidecar::new();
    for (i, call) in calls.iter().enumerate() {
        writeln!(out, "  #{} {}", i + 1, describe(call)).unwrap();
        writeln!(out, "     {}", outcome(&snapshot, &sidecar, call)).unwrap();
    }
    out
}

#[test]
fn manifests_decide_the_golden_outcomes() {
    let bless = std::env::var_os("TOOLGATE_BLESS").is_some();
    let cases = cases();
    assert!(cases.len() >= 3, "golden cases missing: {cases:?}");
    let mut failed = Vec::new();
    for case in &cases {
        for entry in std::fs::read_dir(case).unwrap() {
            let name = entry.unwrap().file_name().to_string_lossy().into_owned();
            assert!(
                CASE_FILES.contains(&name.as_str()),
                "{}: {name} is not one of a golden case's files {CASE_FILES:?}",
                case.display()
            );
        }
        let text = render(case);
        let golden = case.join("expected.txt");
        if bless {
            std::fs::write(&golden, &text).unwrap();
        }
        let expected = std::fs::read_to_string(&golden).unwrap_or_else(|_| {
            panic!(
                "{} has no expected.txt: run TOOLGATE_BLESS=1 cargo test --test golden",
                case.display()
            )
        });
        if expected != text {
            failed.push(format!(
                "{}: the decisions differ from expected.txt:\n{}",
                case.display(),
                diff(&expected, &text)
            ));
        }
    }
    assert!(
        failed.is_empty(),
        "{}\n(TOOLGATE_BLESS=1 cargo test --test golden rewrites them; read the diff)",
        failed.join("\n")
    );
}

/// The lines that differ, expected (`-`) then actual (`+`), by position.
fn diff(expected: &str, actual: &str) -> String {
    let (e, a): (Vec<&str>, Vec<&str>) = (expected.lines().collect(), actual.lines().collect());
    let mut out = String::new();
    for i in 0..e.len().max(a.len()) {
        let (old, new) = (e.get(i), a.get(i));
        if old != new {
            if let Some(old) = old {
                writeln!(out, "  line {}: - {old}", i + 1).unwrap();
            }
            if let Some(new) = new {
                writeln!(out, "  line {}: + {new}", i + 1).unwrap();
            }
        }
    }
    out
}

/// The shared manifests of `tests/fixtures/policies/` build without errors, each on its
/// own (a grant for a tool another file defines is only unserved), so a test that reads
/// one fails on its own assertions, not on a typo in the fixture.
#[test]
fn the_shared_policy_fixtures_build() {
    let dir = Path::new(ROOT).join("tests/fixtures/policies");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
        .collect();
    files.sort();
    assert!(!files.is_empty());
    for file in files {
        let origin = file.display().to_string();
        let (objects, errors) = parse_documents(&origin, &read(&file));
        assert!(errors.is_empty(), "{errors:?}");
        assert!(!objects.is_empty(), "{origin} holds no manifest");
        let (_, errors) = Snapshot::build(&objects, &BuildOptions::default(), 1);
        assert!(errors.is_empty(), "{errors:?}");
    }
}
