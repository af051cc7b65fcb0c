//! Whole calls in one process, for counting instructions with callgrind:
//!
//! ```text
//! valgrind --tool=callgrind --callgrind-out-file=cg.out \
//!     target/release/examples/benchkit inproc --profile full --requests 2000
//! ```
//!
//! A backend, a sidecar with `bench/policies/{profile}.yaml` and a client share one
//! runtime; the client sends `requests` REST calls (the load benchmark's body and
//! headers) one after another on one connection, after a warm-up of 200. Instruction
//! counts don't depend on what else the machine is doing, so two builds compare
//! exactly; `--profile direct` counts the backend and client alone, to subtract.

#[path = "../../benches/common/inproc.rs"]
mod common;

use bytes::Bytes;
use http::Request;
use http_body_util::Full;
use std::time::Instant;

const BODY: &[u8] = include_bytes!("../body.json");

pub async fn run(profile: &str, requests: u64, task: String) -> anyhow::Result<()> {
    let dir = std::env::temp_dir().join(format!("toolgate-inproc-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let audit = dir.join("audit.log");
    let backend = common::backend().await;
    let sidecar = match profile {
        "direct" => None,
        "minimal" => Some(common::sidecar(backend, "minimal", "off").await),
        "full" => Some(common::sidecar(backend, "full", &audit.to_string_lossy()).await),
        other => anyhow::bail!("unknown profile {other:?}: direct, minimal or full"),
    };
    let addr = sidecar.as_ref().map_or(backend, |s| s.agent_addr);
    let mut sender = common::connect(addr).await;
    let request = || {
        Request::post("/search")
            .header("host", "bench")
            .header("content-type", "application/json")
            .header("authorization", "Bearer bench-token")
            .header("x-toolgate-task", task.as_str())
            .body(Full::new(Bytes::from_static(BODY)))
    };
    for _ in 0..200 {
        common::call(&mut sender, request()?).await;
    }
    let started = Instant::now();
    for _ in 0..requests {
        common::call(&mut sender, request()?).await;
    }
    let took = started.elapsed();
    println!(
        "profile={profile} requests={requests} total_ms={} per_call_us={:.1}",
        took.as_millis(),
        took.as_secs_f64() * 1e6 / requests.max(1) as f64
    );
    if let Some(sidecar) = sidecar {
        sidecar.shutdown().await;
    }
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}
