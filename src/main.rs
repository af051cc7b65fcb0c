//! The `toolgate` command line (DESIGN §1).

use anyhow::Context as _;
use clap::{Parser, Subcommand};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use toolgate::config::Settings;
use toolgate::sidecar::Sidecar;

/// Requests allocate and free small buffers on one worker and drop them on another;
/// mimalloc's per-thread heaps take that without glibc's arena locks (BENCHMARKS.md).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[derive(Parser)]
#[command(
    name = "toolgate",
    version,
    about = "A deterministic gateway for AI-agent tool calls"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run the sidecar.
    Run {
        /// Settings file; default ./toolgate.yaml when present.
        #[arg(long)]
        config: Option<PathBuf>,
    },
    /// A self-contained tour on loopback: example backend, sidecar, scripted agent.
    Demo {
        /// Also export the tour's spans to this OTLP/gRPC endpoint (e.g. a local Jaeger).
        #[arg(long)]
        otlp_endpoint: Option<String>,
    },
    /// Lint ToolContract/AgentPolicy manifests offline.
    Check {
        #[arg(required = true)]
        paths: Vec<PathBuf>,
    },
    /// Print the CustomResourceDefinitions (the bytes of crds/*.yaml), or write them.
    Crds {
        /// Write one file per definition into this folder instead of printing.
        #[arg(long)]
        out: Option<PathBuf>,
    },
    /// The mutating admission webhook that injects the sidecar (HTTPS).
    Inject {
        /// The injector's settings file; without it, defaults and TOOLGATE_INJECT_* variables.
        #[arg(long)]
        config: Option<PathBuf>,
    },
    /// Audit log tools.
    Audit {
        #[command(subcommand)]
        command: AuditCommand,
    },
}

#[derive(Subcommand)]
enum AuditCommand {
    /// Verify an audit log's hash chain.
    Verify { file: PathBuf },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Run { config } => runtime().and_then(|rt| rt.block_on(run(config))),
        Command::Demo { otlp_endpoint } => {
            runtime().and_then(|rt| rt.block_on(demo(otlp_endpoint)))
        }
        Command::Check { paths } => Ok(check(&paths)),
        Command::Crds { out } => crds(out.as_deref()),
        Command::Inject { config } => runtime().and_then(|rt| rt.block_on(inject(config))),
        Command::Audit {
            command: AuditCommand::Verify { file },
        } => verify(&file),
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("toolgate: {e:#}");
            ExitCode::from(2)
        }
    }
}

fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    Ok(tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?)
}

fn init_logs(default: &str) {
    let filter = tracing_subscriber::EnvFilter::try_from_env("TOOLGATE_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_target(false)
        .init();
}

async fn run(config: Option<PathBuf>) -> anyhow::Result<ExitCode> {
    init_logs("info");
    let default = Path::new("toolgate.yaml");
    let file = config.or_else(|| default.exists().then(|| default.to_path_buf()));
    let settings = Settings::load(file.as_deref(), std::env::vars())?;
    let sidecar = Sidecar::start(settings).await?;
    shutdown_signal()
        .await
        .context("installing signal handlers")?;
    tracing::info!("shutdown requested; draining");
    sidecar.shutdown().await;
    Ok(ExitCode::SUCCESS)
}

// --- inject (issue 8) ---
async fn inject(config: Option<PathBuf>) -> anyhow::Result<ExitCode> {
    init_logs("info");
    let settings =
        toolgate::inject::settings::InjectSettings::load(config.as_deref(), std::env::vars())?;
    let injector = toolgate::inject::server::Injector::start(settings).await?;
    shutdown_signal()
        .await
        .context("installing signal handlers")?;
    tracing::info!("shutdown requested; draining");
    injector.shutdown().await;
    Ok(ExitCode::SUCCESS)
}
// --- end inject ---

async fn demo(otlp_endpoint: Option<String>) -> anyhow::Result<ExitCode> {
    // Keep the table readable: only the sidecar's warnings and errors.
    init_logs("warn");
    toolgate::demo::run(&mut std::io::stdout(), otlp_endpoint).await?;
    Ok(ExitCode::SUCCESS)
}

async fn shutdown_signal() -> std::io::Result<()> {
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    tokio::select! {
        _ = term.recv() => {},
        result = tokio::signal::ctrl_c() => result?,
    }
    Ok(())
}

fn check(paths: &[PathBuf]) -> ExitCode {
    let report = toolgate::check::check(paths);
    for error in &report.errors {
        println!("error: {error}");
    }
    if report.errors.is_empty() {
        println!("ok: {} objects in {} files", report.objects, report.files);
        ExitCode::SUCCESS
    } else {
        println!("{} errors", report.errors.len());
        ExitCode::from(1)
    }
}

fn crds(out: Option<&Path>) -> anyhow::Result<ExitCode> {
    if let Some(dir) = out {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    for (file, yaml) in toolgate::crd::definition::render() {
        match out {
            Some(dir) => {
                let path = dir.join(file);
                std::fs::write(&path, yaml)
                    .with_context(|| format!("writing {}", path.display()))?;
            }
            None => print!("{yaml}"),
        }
    }
    Ok(ExitCode::SUCCESS)
}

fn verify(file: &Path) -> anyhow::Result<ExitCode> {
    let text =
        std::fs::read_to_string(file).with_context(|| format!("reading {}", file.display()))?;
    match toolgate::audit::verify::verify(&text) {
        Ok(n) => {
            println!("ok: {n} records, chain intact");
            Ok(ExitCode::SUCCESS)
        }
        Err(broken) => {
            println!("broken at line {}: {}", broken.line, broken.reason);
            Ok(ExitCode::from(1))
        }
    }
}
