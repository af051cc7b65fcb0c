//! Micro-benchmarks of the hot path, one stage at a time, then whole calls.
//!
//! ```text
//! cargo bench --bench hot_path              # all
//! cargo bench --bench hot_path -- decide    # a filter
//! ```
//!
//! Fixtures are the load benchmark's *full* profile (`bench/policies/full.yaml`, the
//! ~1 KiB body of `bench/body.json`): an 11-property schema, three CEL rules (one reading
//! the task token), rate limits on agent and tool.

mod common;

use criterion::{criterion_group, criterion_main, BatchSize, Criterion};
use http::{Method, Request};
use http_body_util::Full;
use std::fmt::Write as _;
use std::hint::black_box;
use std::time::Duration;

use toolgate::audit::privacy::Privacy;
use toolgate::audit::record::{chain, now, GENESIS};
use toolgate::audit::{AuditKey, Entry, Record};
use toolgate::crd::RateLimit;
use toolgate::limits::dedupe::{Buffered, Settled, Turn};
use toolgate::limits::{Call, Capacity, Clock, Ledger};
use toolgate::policy::quota::Quota;
use toolgate::proxy::decide::{decide, RequestView, Tallies};
use toolgate::proxy::rest::classify::classify;
use toolgate::proxy::stage::authorize;
use toolgate::proxy::stage::identify::identify;
use toolgate::proxy::stage::validate::validate;
use toolgate::proxy::task_token::Presented;
use toolgate::telemetry::metrics::Metrics;
use toolgate::vocab::args::Args;

use common::{inproc, AGENT};

/// The allocator the toolgate binary ships with, so the numbers are its numbers.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn ledger() -> Ledger {
    Ledger::new(
        Capacity::from_settings(&toolgate::config::Limits::default()),
        Clock::real(),
    )
}

/// The benchmark call's request as rules see it; its task token not yet verified, as
/// each call's is.
fn view<'a>(headers: &'a http::HeaderMap, task: &'a Presented<'a>) -> RequestView<'a> {
    RequestView {
        method: "POST",
        path: "/search",
        headers,
        session: None,
        task,
    }
}

fn stages(c: &mut Criterion) {
    let snapshot = common::snapshot_of(&common::policy_objects("full"));
    let body = common::body();
    let headers = common::headers();
    let identity = common::identity();
    let ledger = ledger();
    let tool = snapshot.tool("search_logs").unwrap();
    let contract = snapshot.contract(tool);
    let policy = snapshot.policy_for(AGENT).unwrap();
    let agent = futures_executor::block_on(identify(&identity, &headers, None)).unwrap();
    let args = Args::from(common::args());
    let tasks = identity.tasks.as_ref();

    // The minimal profile's contract: its schema accepts any object, so the body is only
    // checked (vocab::args).
    let open = common::snapshot_of(&common::policy_objects("minimal"));
    for (name, snapshot) in [
        ("classify/rest_1k_body", &snapshot),
        ("classify/rest_1k_body_open_schema", &open),
    ] {
        c.bench_function(name, |b| {
            b.iter(|| {
                let body = black_box(&body);
                classify(snapshot, &Method::POST, "/search", None, body, false).unwrap()
            })
        });
    }
    c.bench_function("identify/static_token", |b| {
        b.iter(|| {
            futures_executor::block_on(identify(&identity, black_box(&headers), None)).unwrap()
        })
    });
    c.bench_function("validate/11_properties", |b| {
        b.iter_batched(
            || args.clone(),
            |args| validate(contract, args).unwrap(),
            BatchSize::SmallInput,
        )
    });
    // Two limiters, as in full.yaml, but with quotas a tight loop can't spend (full.yaml's
    // million a second runs out here within a second).
    let unspendable = RateLimit {
        per_second: Some(u32::MAX),
        per_minute: None,
        burst: Some(u32::MAX),
    };
    let agent_quota = Quota::compile("rateLimit", &unspendable).unwrap();
    let tool_quota = Quota::compile("tools[0].rateLimit", &unspendable).unwrap();
    c.bench_function("limits/check_rate_agent_and_tool", |b| {
        b.iter(|| {
            ledger
                .check_rate(
                    &agent.id,
                    &contract.tool,
                    Some(&agent_quota),
                    Some(&tool_quota),
                )
                .unwrap()
        })
    });
    c.bench_function("decide/authorize_rate_validate_3_rules", |b| {
        b.iter_batched(
            || args.clone(),
            |args| {
                decide(
                    Tallies::Local(&ledger),
                    policy,
                    &agent,
                    contract,
                    args,
                    &view(&headers, &Presented::new(&headers, &agent.id, tasks)),
                    None,
                )
                .unwrap()
            },
            BatchSize::SmallInput,
        )
    });
    c.bench_function("limits/call_fingerprint", |b| {
        b.iter(|| Call::new(&agent.id, None, &contract.tool, black_box(&args), None).fingerprint())
    });
    // A distinct call each time (its own Idempotency-Key), led and settled: the dedupe
    // table's claim, insert, re-weigh and eviction at its default bound. Includes one
    // call_fingerprint (the reused-key check needs it).
    let answer = Settled::Answered(Buffered {
        status: http::StatusCode::OK,
        headers: http::HeaderMap::new(),
        body: bytes::Bytes::from_static(br#"{"hits":[],"cursor":null}"#),
        interim: false,
    });
    let mut n = 0u64;
    let mut id = String::new();
    c.bench_function("limits/dedupe_lead_and_settle", |b| {
        b.iter(|| {
            n += 1;
            id.clear();
            write!(id, "call-{n}").unwrap();
            let call = Call::new(&agent.id, None, &contract.tool, &args, Some(&id));
            match ledger.dedupe().claim(&call, Duration::from_secs(600)) {
                Ok(Turn::Lead(lead)) => lead.settle(answer.clone()),
                _ => panic!("a new key leads"),
            }
        })
    });
    let plain = Privacy::new(None, &[]);
    let keyed = Privacy::new(
        toolgate::audit::AuditKey::from_bytes(b"0123456789abcdef0123456789abcdef"),
        &[],
    );
    let entry = Entry {
        ts: now(),
        trace_id: "4bf92f3577b34da6a3ce929d0e0e4736".into(),
        agent: Some(AGENT.into()),
        issuer: Some("tokens".into()),
        session: Some("session-1".into()),
        tool: Some("search_logs".into()),
        args_digest: Some(plain.args_digest(args.value())),
        args: None,
        decision: "allow",
        code: None,
        rule: None,
        policy_version: Some(1),
        upstream_status: Some(200),
        latency_us: 412,
        state: None,
        approval: None,
        inputs: None,
        replayed: false,
        task: None,
    };
    c.bench_function("audit/args_digest_1k", |b| {
        b.iter(|| plain.args_digest(black_box(args.value())))
    });
    c.bench_function("audit/args_digest_1k_keyed", |b| {
        b.iter(|| keyed.args_digest(black_box(args.value())))
    });
    let record = Record::Call(Box::new(entry));
    c.bench_function("audit/chain_record", |b| {
        b.iter(|| chain(black_box(&record), 42, GENESIS, None))
    });
    let key = AuditKey::from_bytes(b"a-32-byte-secret-for-the-bench!!").unwrap();
    c.bench_function("audit/chain_record_keyed", |b| {
        b.iter(|| chain(black_box(&record), 42, GENESIS, Some(&key)))
    });
    let metrics = Metrics::new();
    c.bench_function("metrics/record_call", |b| {
        b.iter(|| metrics.record_call("search_logs", "allow", "OK", Duration::from_micros(300)))
    });

    // Everything the gate decides for one REST call, without sockets: classify, identify,
    // authorize, rate, validate, rules.
    c.bench_function("call/gate_decision", |b| {
        b.iter(|| {
            let call = classify(&snapshot, &Method::POST, "/search", None, &body, true).unwrap();
            let agent = futures_executor::block_on(identify(&identity, &headers, None)).unwrap();
            let policy = authorize::policy(&snapshot, &agent.id).unwrap();
            let contract = snapshot.contract(call.tool);
            let args = decide(
                Tallies::Local(&ledger),
                policy,
                &agent,
                contract,
                call.args,
                &view(&headers, &Presented::new(&headers, &agent.id, tasks)),
                None,
            )
            .unwrap();
            args
        })
    });
}

/// Whole HTTP calls on loopback: the backend alone, then through toolgate.
fn whole_calls(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    let body = common::body();
    let headers = common::headers();
    let dir = tempfile::tempdir().unwrap();
    let audit = dir.path().join("audit.log");
    let (backend, minimal, full) = rt.block_on(async {
        let backend = inproc::backend().await;
        let minimal = inproc::sidecar(backend, "minimal", "off").await;
        let full = inproc::sidecar(backend, "full", audit.to_str().unwrap()).await;
        (backend, minimal, full)
    });
    let request = || {
        let mut request = Request::post("/search")
            .header("host", "bench")
            .body(Full::new(body.clone()))
            .unwrap();
        request.headers_mut().extend(headers.clone());
        request
    };
    for (name, addr) in [
        ("call/http_backend_alone", backend),
        ("call/http_toolgate_minimal", minimal.agent_addr),
        ("call/http_toolgate_full", full.agent_addr),
    ] {
        let mut sender = rt.block_on(inproc::connect(addr));
        c.bench_function(name, |b| {
            b.iter(|| rt.block_on(inproc::call(&mut sender, request())))
        });
    }
    rt.block_on(async {
        minimal.shutdown().await;
        full.shutdown().await;
    });
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2));
    targets = stages, whole_calls
}
criterion_main!(benches);
