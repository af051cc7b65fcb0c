//! Whole calls in one process, for counting instructions with callgrind:
//!
//! ```text
//! valgrind --tool=callgrind --callgrind-out-file=cg.out \
//!     target/release/examples/benchkit inproc --profile full --requests 2000
//! ```
//!
//! A backend, a sidecar with `bench/policies/{profile}.yaml` and a client share one
//! runtime; the client sends `requests` calls one after another on one connection, after
//! a warm-up of 200: REST calls (the load benchmark's body and headers), or with
//! `--load mcp` `tools/call`s as `bench/wrk/mcp.lua` sends them (a fresh id and cursor
//! each, answered by the load benchmark's backend). Instruction counts don't depend on
//! what else the machine is doing, so two builds compare exactly; `--profile direct`
//! counts the backend and client alone, to subtract, and `--profile bare` the bare
//! pass-through proxy, the floor minimal is measured against. `full-jwt` is full with
//! the agent identified by a verified JWT instead of a static token; `full-budget` and
//! `full-requires` are full with a spend budget and with a call order (whose earlier
//! call is made once before the warm-up), what DESIGN §16's rules add read against full.

#[path = "../../benches/common/inproc.rs"]
mod common;

use bytes::Bytes;
use http::Request;
use http_body_util::Full;
use std::time::Instant;

const BODY: &[u8] = include_bytes!("../body.json");

pub async fn run(profile: &str, load: &str, requests: u64, task: String) -> anyhow::Result<()> {
    let mcp = match load {
        "rest" => false,
        "mcp" => true,
        other => anyhow::bail!("unknown load {other:?}: rest or mcp"),
    };
    let dir = std::env::temp_dir().join(format!("toolgate-inproc-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let audit = dir.join("audit.log");
    let backend = if mcp {
        // The load benchmark's backend: it answers tools/call in JSON-RPC.
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        tokio::spawn(crate::backend::serve(listener));
        addr
    } else {
        common::backend().await
    };
    let sidecar = match profile {
        "direct" | "bare" => None,
        "minimal" => Some(common::sidecar(backend, "minimal", "off").await),
        // full, and full with one of §16's rules: what each adds, subtracted from full.
        "full" | "full-budget" | "full-requires" => {
            Some(common::sidecar(backend, profile, &audit.to_string_lossy()).await)
        }
        // full with the agent identified by a verified (then cached) JWT, as bench/run.sh's
        // full-jwt target.
        "full-jwt" => {
            let mut settings = common::settings(backend, "full", &audit.to_string_lossy());
            settings.identity.tokens = None;
            settings.identity.jwt = vec![serde_yaml::from_str(&format!(
                "{{issuer: agents, audience: toolgate-bench, jwks: {}/examples/keys/task-jwks.json}}",
                env!("CARGO_MANIFEST_DIR")
            ))?];
            Some(common::start(settings).await)
        }
        other => anyhow::bail!(
            "unknown profile {other:?}: direct, bare, minimal, full, full-jwt, full-budget or full-requires"
        ),
    };
    let addr = match &sidecar {
        Some(sidecar) => sidecar.agent_addr,
        None if profile == "bare" => bare_proxy(backend).await?,
        None => backend,
    };
    let mut sender = common::connect(addr).await;
    let credential = match profile {
        "full-jwt" => format!("Bearer {}", crate::task_token::sign_agent("bench-bot")?),
        _ => "Bearer bench-token".to_string(),
    };
    let arguments = std::str::from_utf8(BODY)?.trim_end().trim_end_matches('}');
    let mut sent = 0u64;
    let mut request = || {
        sent += 1;
        let builder = Request::post(if mcp { "/mcp" } else { "/search" })
            .header("host", "bench")
            .header("content-type", "application/json")
            .header("authorization", credential.as_str())
            .header("x-toolgate-task", task.as_str());
        if !mcp {
            return builder.body(Full::new(Bytes::from_static(BODY)));
        }
        let message = format!(
            r#"{{"jsonrpc":"2.0","id":{sent},"method":"tools/call","params":{{"name":"mcp_search_logs","arguments":{arguments},"cursor":"c-{sent}"}}}}}}"#
        );
        builder
            .header("accept", "application/json, text/event-stream")
            .body(Full::new(Bytes::from(message)))
    };
    if profile == "full-requires" {
        // The earlier call `search_logs` requires, once, in the load's task.
        let prior = Request::post("/order")
            .header("host", "bench")
            .header("content-type", "application/json")
            .header("authorization", "Bearer bench-token")
            .header("x-toolgate-task", task.as_str())
            .body(Full::new(Bytes::from_static(br#"{"service":"orders"}"#)))?;
        common::call(&mut sender, prior).await;
    }
    // A refused tools/call is a 200 too: the first answer must be a result.
    let first = common::call(&mut sender, request()?).await;
    let answer: serde_json::Value = serde_json::from_slice(&first)?;
    anyhow::ensure!(
        !mcp || answer.get("result").is_some(),
        "the sidecar did not run the call: {answer}"
    );
    for _ in 1..200 {
        common::call(&mut sender, request()?).await;
    }
    let started = Instant::now();
    for _ in 0..requests {
        common::call(&mut sender, request()?).await;
    }
    let took = started.elapsed();
    println!(
        "profile={profile} load={load} requests={requests} total_ms={} per_call_us={:.1}",
        took.as_millis(),
        took.as_secs_f64() * 1e6 / requests.max(1) as f64
    );
    if let Some(sidecar) = sidecar {
        sidecar.shutdown().await;
    }
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}

/// The bare proxy in front of `backend`, on an ephemeral port.
async fn bare_proxy(backend: std::net::SocketAddr) -> anyhow::Result<std::net::SocketAddr> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    tokio::spawn(crate::bare_proxy::serve(
        listener,
        format!("http://{backend}"),
    ));
    Ok(addr)
}
