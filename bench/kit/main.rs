//! The load benchmark's helpers, one binary so `bench/run.sh` links once:
//!
//! ```text
//! benchkit backend    --listen ADDR                  a fast backend (REST and MCP answers)
//! benchkit bare-proxy --listen ADDR --upstream URL   the floor: a pass-through on hyper
//! benchkit otlp-sink  --listen ADDR                  an OTLP/gRPC receiver that counts spans
//!                     [--http-listen ADDR]           (and OTLP/HTTP, `POST /v1/traces`)
//! benchkit paced      --url URL --rate N ...         open-loop load at a fixed rate
//! benchkit task-token --agent ID                     a task token signed by the demo key
//! benchkit agent-token --agent ID                    an agent JWT signed by the demo key
//! benchkit session-memory [--count N]                RSS with N active sessions
//! benchkit inproc --profile P --requests N            whole calls in one process (callgrind)
//! benchkit redis-rtt --url URL -- COMMAND ...         one Redis round trip, toolgate's client
//! ```
//!
//! Built with `cargo build --release --example benchkit`; only loopback addresses are
//! meant (the script binds 127.0.0.1).

mod backend;
mod bare_proxy;
mod inproc;
mod otlp_sink;
mod paced;
mod redis_rtt;
mod session_memory;
mod task_token;

use clap::{Parser, Subcommand};
use std::net::SocketAddr;

/// The same allocator as the toolgate binary, so the bare proxy stays a fair floor.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[derive(Parser)]
#[command(name = "benchkit", about = "helpers for bench/run.sh")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// A fast backend: any request gets a small JSON answer (a JSON-RPC result on /mcp).
    Backend {
        #[arg(long)]
        listen: SocketAddr,
    },
    /// A bare pass-through proxy on the same hyper stack as toolgate: the floor.
    BareProxy {
        #[arg(long)]
        listen: SocketAddr,
        #[arg(long)]
        upstream: String,
    },
    /// An OTLP/gRPC trace receiver that counts what it is sent.
    OtlpSink {
        #[arg(long)]
        listen: SocketAddr,
        /// Also receive OTLP/HTTP (protobuf, `POST /v1/traces`) here.
        #[arg(long)]
        http_listen: Option<SocketAddr>,
    },
    /// Sends requests at a fixed rate and prints latency percentiles.
    Paced(paced::Options),
    /// Prints a task token (`X-Toolgate-Task`) signed with examples/keys/orchestrator-demo.pem.
    TaskToken {
        #[arg(long)]
        agent: String,
    },
    /// Prints an agent JWT (`Authorization: Bearer`) from the `agents` issuer, signed with
    /// the same key.
    AgentToken {
        #[arg(long)]
        agent: String,
    },
    /// Resident memory of the limits state with this many active sessions.
    SessionMemory {
        #[arg(long, default_value_t = 100_000)]
        count: u64,
    },
    /// Whole calls through an in-process sidecar, one at a time (for callgrind).
    Inproc {
        /// `direct` (backend alone), `bare` (the bare proxy), `minimal` or `full`.
        #[arg(long, default_value = "full")]
        profile: String,
        /// `rest` (POST /search) or `mcp` (tools/call on /mcp), as in `bench/wrk/`.
        #[arg(long, default_value = "rest")]
        load: String,
        #[arg(long, default_value_t = 2000)]
        requests: u64,
    },
    /// Times a Redis command sent one at a time through toolgate's own Redis client.
    RedisRtt {
        #[arg(long)]
        url: String,
        #[arg(long, default_value_t = 20_000)]
        requests: usize,
        /// The command and its arguments, as `redis-cli` takes them.
        #[arg(last = true, required = true)]
        command: Vec<String>,
    },
}

fn main() -> anyhow::Result<()> {
    match Cli::parse().command {
        Command::Backend { listen } => runtime()?.block_on(backend::run(listen)),
        Command::BareProxy { listen, upstream } => {
            runtime()?.block_on(bare_proxy::run(listen, upstream))
        }
        Command::OtlpSink {
            listen,
            http_listen,
        } => runtime()?.block_on(otlp_sink::run(listen, http_listen)),
        Command::Paced(options) => {
            // One thread: the generator should take as little of the machine as it can.
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()?;
            rt.block_on(paced::run(options))
        }
        Command::TaskToken { agent } => {
            println!("{}", task_token::sign(&agent)?);
            Ok(())
        }
        Command::AgentToken { agent } => {
            println!("{}", task_token::sign_agent(&agent)?);
            Ok(())
        }
        Command::SessionMemory { count } => session_memory::run(count),
        Command::Inproc {
            profile,
            load,
            requests,
        } => {
            let task = task_token::sign("bench-bot")?;
            runtime()?.block_on(inproc::run(&profile, &load, requests, task))
        }
        Command::RedisRtt {
            url,
            requests,
            command,
        } => runtime()?.block_on(redis_rtt::run(url, requests, command)),
    }
}

/// The servers use Tokio's default multi-thread runtime, as toolgate does.
fn runtime() -> std::io::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
}
