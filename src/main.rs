//! The `toolgate` command line (README, "The two commands" and "Running the sidecar").

use anyhow::Context as _;
use clap::{Parser, Subcommand};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use toolgate::approvals::cli::{ApprovalsCommand, EXIT_CODES};
use toolgate::config::Settings;
use toolgate::sidecar::Sidecar;

/// Requests allocate and free small buffers on one worker and drop them on another;
/// mimalloc's per-thread heaps take that without glibc's arena locks (docs/bench-history.md, item 8).
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
        /// After the tour, keep the example backend and a sidecar up for calls by hand
        /// (curl examples printed) until Ctrl-C.
        #[arg(long)]
        serve: bool,
    },
    /// Lint ToolContract/AgentPolicy manifests offline.
    Check {
        #[arg(required = true)]
        paths: Vec<PathBuf>,
        /// Treat warnings (a grant for a tool no linted contract defines) as errors.
        #[arg(long)]
        strict: bool,
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
    /// Status on the objects: compile every ToolContract and AgentPolicy as `check --strict`
    /// does and write their `Accepted` condition (leader-elected; runs beside `inject`).
    Controller {
        /// The controller's settings file; without it, defaults and TOOLGATE_CONTROLLER_* variables.
        #[arg(long)]
        config: Option<PathBuf>,
    },
    /// Re-decide an audit log's calls against candidate policies (exit 0: changes within
    /// --max-changed; 1: more; 2: bad input).
    Replay {
        /// Audit log files, replayed in order.
        #[arg(long = "audit", required = true, num_args = 1..)]
        audit: Vec<PathBuf>,
        /// The candidate manifests: files or folders.
        #[arg(long = "policies", required = true, num_args = 1..)]
        policies: Vec<PathBuf>,
        /// `table` (default) or `json`.
        #[arg(long, default_value = "table")]
        format: String,
        /// How many changed decisions are acceptable.
        #[arg(long, default_value_t = 0)]
        max_changed: u64,
        /// Replay a log whose chain is broken instead of refusing it.
        #[arg(long)]
        allow_broken: bool,
        /// The audit.keyFile a keyed log was written with.
        #[arg(long)]
        key_file: Option<PathBuf>,
    },
    /// Draft ToolContracts from what a backend already describes, for review.
    Contracts {
        #[command(subcommand)]
        command: ContractsCommand,
    },
    /// Audit log tools.
    Audit {
        #[command(subcommand)]
        command: AuditCommand,
    },
    /// Decide human approvals through a sidecar's admin listener: list, show, approve, deny.
    #[command(after_help = EXIT_CODES)]
    Approvals {
        #[command(subcommand)]
        command: ApprovalsCommand,
    },
}

#[derive(Subcommand)]
enum AuditCommand {
    /// Verify an audit log's hash chain (exit 1 if tampered, 3 if only its end is missing).
    Verify {
        file: PathBuf,
        /// The audit.keyFile the log was written with (a keyed chain verifies only with it).
        #[arg(long)]
        key_file: Option<PathBuf>,
        /// The last seq the writer acknowledged (`/config`'s audit.lastSeq, or the
        /// sidecar's shutdown log line): a log ending before it was cut.
        #[arg(long)]
        expect_seq: Option<u64>,
    },
}

#[derive(Subcommand)]
enum ContractsCommand {
    /// Print ToolContract YAML (one document per tool) drafted from an MCP server's
    /// tools/list or an OpenAPI 3.0/3.1 document; `# review:` comments mark what a person
    /// must decide. The output passes `toolgate check`. Exit 2 on bad input.
    Draft {
        /// The MCP server's Streamable HTTP endpoint (http:// or https://).
        #[arg(long, value_name = "URL", conflicts_with_all = ["from_openapi", "base_path"], required_unless_present = "from_openapi")]
        from_mcp: Option<String>,
        /// A file holding the bearer token the MCP server wants (never printed).
        #[arg(long, value_name = "F", requires = "from_mcp")]
        token_file: Option<PathBuf>,
        /// An OpenAPI 3.0 or 3.1 document, YAML or JSON.
        #[arg(long, value_name = "FILE")]
        from_openapi: Option<PathBuf>,
        /// The prefix of every binding's path (default: the path of servers[0].url).
        #[arg(long, value_name = "P", requires = "from_openapi")]
        base_path: Option<String>,
        /// How long each request to the MCP server may take, connecting included.
        #[arg(long, value_name = "N", default_value_t = 30, value_parser = clap::value_parser!(u64).range(1..=3600))]
        timeout_seconds: u64,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Run { config } => runtime().and_then(|rt| until_done(rt, run(config))),
        Command::Demo {
            otlp_endpoint,
            serve,
        } => runtime().and_then(|rt| rt.block_on(demo(otlp_endpoint, serve))),
        Command::Check { paths, strict } => Ok(check(&paths, strict)),
        Command::Crds { out } => crds(out.as_deref()),
        Command::Inject { config } => runtime().and_then(|rt| until_done(rt, inject(config))),
        Command::Controller { config } => {
            runtime().and_then(|rt| until_done(rt, controller(config)))
        }
        Command::Audit {
            command:
                AuditCommand::Verify {
                    file,
                    key_file,
                    expect_seq,
                },
        } => verify(&file, key_file.as_deref(), expect_seq),
        Command::Replay {
            audit,
            policies,
            format,
            max_changed,
            allow_broken,
            key_file,
        } => replay(
            &audit,
            &policies,
            &format,
            max_changed,
            allow_broken,
            key_file.as_deref(),
        ),
        Command::Contracts {
            command:
                ContractsCommand::Draft {
                    from_mcp,
                    token_file,
                    from_openapi,
                    base_path,
                    timeout_seconds,
                },
        } => draft_contracts(
            from_mcp.as_deref(),
            token_file.as_deref(),
            from_openapi.as_deref(),
            base_path.as_deref(),
            timeout_seconds,
        ),
        Command::Approvals { command } => runtime()
            .map(|rt| rt.block_on(toolgate::approvals::cli::run(command, std::env::vars()))),
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("toolgate: {e:#}");
            ExitCode::from(2)
        }
    }
}

fn replay(
    audit: &[PathBuf],
    policies: &[PathBuf],
    format: &str,
    max_changed: u64,
    allow_broken: bool,
    key_file: Option<&Path>,
) -> anyhow::Result<ExitCode> {
    anyhow::ensure!(
        matches!(format, "table" | "json"),
        "--format is table or json, not {format}"
    );
    let key = key_file.map(toolgate::audit::AuditKey::load).transpose()?;
    let request = toolgate::replay::Request {
        audit,
        policies,
        key: key.as_ref(),
        allow_broken,
    };
    let report = toolgate::replay::run(&request)?;
    if format == "json" {
        let mut out = std::io::BufWriter::new(std::io::stdout().lock());
        report.write_json(&mut out)?;
        std::io::Write::write_all(&mut out, b"\n")?;
        std::io::Write::flush(&mut out)?;
    } else {
        print!("{}", report.table());
    }
    Ok(if report.changed > max_changed {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    })
}

/// How long, once a server has shut down, work left on the blocking pool may hold the
/// process: a policy reload stuck reading a file must not keep a stopped sidecar alive
/// (dropping the runtime would wait for it forever).
const EXIT_GRACE: std::time::Duration = std::time::Duration::from_secs(1);

/// Runs a server to its end, then stops the runtime without waiting on stuck work.
fn until_done(
    rt: tokio::runtime::Runtime,
    server: impl std::future::Future<Output = anyhow::Result<ExitCode>>,
) -> anyhow::Result<ExitCode> {
    let result = rt.block_on(server);
    rt.shutdown_timeout(EXIT_GRACE);
    result
}

fn draft_contracts(
    from_mcp: Option<&str>,
    token_file: Option<&Path>,
    from_openapi: Option<&Path>,
    base_path: Option<&str>,
    timeout_seconds: u64,
) -> anyhow::Result<ExitCode> {
    use toolgate::contracts;
    let drafted = match (from_mcp, from_openapi) {
        (Some(url), _) => {
            let timeout = std::time::Duration::from_secs(timeout_seconds);
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()?;
            rt.block_on(contracts::mcp::draft(url, token_file, timeout))?
        }
        (None, Some(file)) => contracts::openapi::draft(file, base_path)?,
        (None, None) => anyhow::bail!("give --from-mcp URL or --from-openapi FILE"),
    };
    let mut out = std::io::stdout().lock();
    std::io::Write::write_all(&mut out, contracts::render::render(&drafted).as_bytes())?;
    std::io::Write::flush(&mut out)?;
    for warning in &drafted.warnings {
        eprintln!("warning: {}", contracts::render::comment(warning));
    }
    eprintln!("{}", drafted.summary());
    Ok(ExitCode::SUCCESS)
}

fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    Ok(tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?)
}

/// Logs to stderr: `TOOLGATE_LOG` filters (else `default`), `TOOLGATE_LOG_FORMAT` is
/// `text` or `json` (`toolgate::telemetry::logs`).
fn init_logs(default: &str) -> anyhow::Result<()> {
    Ok(toolgate::telemetry::logs::init(default)?)
}

async fn run(config: Option<PathBuf>) -> anyhow::Result<ExitCode> {
    init_logs("info")?;
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
    init_logs("info")?;
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

async fn controller(config: Option<PathBuf>) -> anyhow::Result<ExitCode> {
    init_logs("info")?;
    let settings = toolgate::controller::settings::ControllerSettings::load(
        config.as_deref(),
        std::env::vars(),
    )?;
    let controller = toolgate::controller::Controller::start(settings).await?;
    shutdown_signal()
        .await
        .context("installing signal handlers")?;
    tracing::info!("shutdown requested; releasing the lease");
    controller.shutdown().await;
    Ok(ExitCode::SUCCESS)
}

async fn demo(otlp_endpoint: Option<String>, serve: bool) -> anyhow::Result<ExitCode> {
    let serve_otlp_endpoint = otlp_endpoint.clone();
    // Keep the table readable: only the sidecar's warnings and errors.
    init_logs("warn")?;
    toolgate::demo::run(&mut std::io::stdout(), otlp_endpoint).await?;
    if serve {
        let until = async {
            if let Err(e) = shutdown_signal().await {
                tracing::error!(error = %e, "cannot wait for Ctrl-C; stopping");
            }
        };
        toolgate::demo::serve(&mut std::io::stdout(), serve_otlp_endpoint, until).await?;
    }
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

fn check(paths: &[PathBuf], strict: bool) -> ExitCode {
    let report = toolgate::check::check(paths);
    for error in &report.errors {
        println!("error: {error}");
    }
    let label = if strict { "error" } else { "warning" };
    for warning in &report.warnings {
        println!("{label}: {warning} (the grant applies only where a contract defines the tool)");
    }
    let failures = report.errors.len() + if strict { report.warnings.len() } else { 0 };
    if failures == 0 {
        println!(
            "ok: {} objects in {} files, {} warnings",
            report.objects,
            report.files,
            report.warnings.len()
        );
        ExitCode::SUCCESS
    } else {
        println!("{failures} errors");
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

fn verify(
    file: &Path,
    key_file: Option<&Path>,
    expect_seq: Option<u64>,
) -> anyhow::Result<ExitCode> {
    use toolgate::audit::verify::{verify_reader, Breach};
    let key = key_file.map(toolgate::audit::AuditKey::load).transpose()?;
    let reader =
        std::fs::File::open(file).with_context(|| format!("reading {}", file.display()))?;
    let reader = std::io::BufReader::with_capacity(1 << 16, reader);
    match verify_reader(reader, key.as_ref(), expect_seq) {
        Ok(summary) => {
            println!(
                "ok: {} records ({}), last seq {}, chain intact{}",
                summary.records,
                summary.by_kind(),
                summary.last_seq,
                if key.is_some() { " with the key" } else { "" }
            );
            Ok(ExitCode::SUCCESS)
        }
        Err(broken) if broken.breach == Breach::Truncated => {
            println!("truncated at line {}: {}", broken.line, broken.reason);
            Ok(ExitCode::from(3))
        }
        Err(broken) => {
            println!("broken at line {}: {}", broken.line, broken.reason);
            Ok(ExitCode::from(1))
        }
    }
}
