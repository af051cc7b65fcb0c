//! Scale curves: what one call costs with 10, 1,000 and 10,000 contracts and policies
//! (route match, tool lookup, policy lookup, then the decision), and how long a snapshot
//! of 10,000 objects takes to build.
//!
//! ```text
//! cargo bench --bench scale
//! ```
//!
//! Calls rotate over agents and tools spread through the whole set: 10 of them (`hot`,
//! the lookups' own cost) or up to 1,024 (`spread`, a working set that outgrows CPU
//! caches as it would with many active agents).
//! `cargo run --release --example benchkit -- session-memory` gives the memory curve.

mod common;

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion};
use http::{HeaderMap, Method};
use std::time::Duration;

use toolgate::limits::{Capacity, Clock, Ledger};
use toolgate::policy::{BuildOptions, Snapshot};
use toolgate::proxy::decide::{decide, RequestView, Tallies};
use toolgate::proxy::rest::classify::classify;
use toolgate::proxy::stage::authorize;
use toolgate::proxy::task_token::Presented;
use toolgate::vocab::Agent;

/// The allocator the toolgate binary ships with, so the numbers are its numbers.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Which of `n` agents/tools the k-th call uses: a fixed spread over the whole range.
fn pick(k: usize, n: usize) -> usize {
    (k.wrapping_mul(2_654_435_761) >> 7) % n
}

fn per_call(c: &mut Criterion) {
    let sizes: &[usize] = if common::measuring() {
        &[10, 1_000, 10_000]
    } else {
        &[10, 100]
    };
    let body =
        bytes::Bytes::from_static(br#"{"query":"status:shipped","limit":100,"tags":["eu"]}"#);
    let headers = HeaderMap::new();
    let ledger = Ledger::new(
        Capacity::from_settings(&toolgate::config::Limits::default()),
        Clock::real(),
    );
    for &n in sizes {
        let snapshot = common::snapshot_of(&common::scaled_objects(n));
        // `hot`: the same 10 agents and tools whatever the size, spread through the
        // tables: what a bigger policy set costs the lookups themselves. `spread`: up to
        // 1,024 different ones, so the working set grows with the set (CPU caches miss).
        for (variant, distinct) in [("hot", 10), ("spread", 1024)] {
            let calls: Vec<(String, String, Agent)> = (0..distinct)
                .map(|k| {
                    let i = if variant == "hot" {
                        k * n / distinct
                    } else {
                        pick(k, n)
                    };
                    let agent = Agent {
                        id: format!("agent-{i}").into(),
                        issuer: "tokens".into(),
                        claims: serde_json::json!({}),
                    };
                    (format!("/t{i}/search/orders"), format!("tool_{i}"), agent)
                })
                .collect();
            let mut k = 0;
            let mut group = c.benchmark_group(format!("scale/call_{variant}"));
            group.bench_with_input(BenchmarkId::from_parameter(n), &n, |b, _| {
                b.iter(|| {
                    let (path, name, agent) = &calls[k % calls.len()];
                    k += 1;
                    let call = classify(&snapshot, &Method::POST, path, None, &body, true).unwrap();
                    // The MCP path looks tools up by name instead of by route.
                    assert_eq!(snapshot.tool(name), Some(call.tool));
                    let policy = authorize::policy(&snapshot, &agent.id).unwrap();
                    let view = RequestView {
                        method: "POST",
                        path,
                        headers: &headers,
                        session: None,
                        task: &Presented::new(&headers, &agent.id, None),
                    };
                    let contract = snapshot.contract(call.tool);
                    decide(
                        Tallies::Local(&ledger),
                        policy,
                        agent,
                        contract,
                        call.args,
                        &view,
                        None,
                    )
                    .unwrap()
                })
            });
            group.finish();
        }
    }
}

fn snapshot_build(c: &mut Criterion) {
    // 10,000 objects: half contracts, half policies (each with two CEL rules).
    let pairs = if common::measuring() { 5_000 } else { 50 };
    let objects = common::scaled_objects(pairs);
    let mut group = c.benchmark_group("scale/snapshot_build");
    group.sample_size(10);
    group.measurement_time(Duration::from_secs(15));
    group.bench_function(BenchmarkId::from_parameter(objects.len()), |b| {
        b.iter(|| {
            let (snapshot, errors) = Snapshot::build(&objects, &BuildOptions::default(), 1);
            assert!(errors.is_empty());
            snapshot
        })
    });
    group.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(3));
    targets = per_call, snapshot_build
}
criterion_main!(benches);
