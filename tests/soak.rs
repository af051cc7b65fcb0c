//! The short soak (issue 19): `bench/soak.sh` in miniature, run by `cargo test`.
//!
//! The debug `toolgate` binary runs with the benchmark's full profile (schema, three CEL
//! rules, a task token, audit to a file, spans to an in-test OTLP collector) in front of
//! an in-test backend, and takes a steady open-loop load for `TOOLGATE_SOAK_SECONDS`
//! (default 50) while its `/proc` entry and `/metrics` are sampled. It passes when no
//! call failed, RSS stayed within ±10% of its median after the warm-up, open fds,
//! threads and alive Tokio tasks did not grow, and the audit log verifies with exactly
//! one call record per request sent.
//!
//! The sidecar is a separate process (not the in-process harness) so that its RSS, fds
//! and threads are its own, not the test's client, backend and collector too.
//!
//! Built not to flake on a loaded 2-core machine: the rate leaves a debug build most of
//! a core to spare, each bound below says which noise it absorbs, and the end of the
//! run is compared with its start through the lowest of the last samples, so one busy
//! moment can't fail it while a leak, which never shrinks, still does.

mod common;

use bytes::Bytes;
use common::collector::Collector;
use common::{Backend, Seen};
use http_body_util::{BodyExt, Full};
use hyper_util::rt::TokioIo;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpStream;
use tokio::time::Instant;

/// Calls per second. A debug build of the full profile takes a few ms of CPU per call
/// and the test's own client, backend and collector (debug too) about as much again;
/// at this rate the whole test keeps well under one of two cores busy, so other work on
/// the machine delays calls without making the load outrun the sidecar.
const RATE: u32 = 250;
/// Keep-alive connections sharing the rate: enough that a call held up by a stall
/// doesn't hold up the schedule.
const CONNECTIONS: u32 = 8;
const SAMPLE_EVERY: Duration = Duration::from_secs(2);
/// A call slower than this is an error rather than a hung test.
const CALL_TIMEOUT: Duration = Duration::from_secs(10);

#[derive(Debug, Clone, Copy)]
struct Sample {
    at: Duration,
    rss_kib: u64,
    fds: u64,
    threads: u64,
    tasks: u64,
}

#[derive(Debug, Default)]
struct Tally {
    sent: u64,
    ok: u64,
    errors: Vec<String>,
}

/// Kills the sidecar if the test ends early, so a failure never leaves it running.
struct Sidecar(Child);

impl Drop for Sidecar {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn full_profile_holds_steady_under_load() {
    let seconds: u64 = std::env::var("TOOLGATE_SOAK_SECONDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(50);
    // Allocator arenas, pools and the span queue fill in the first seconds; a debug
    // build's first calls are slower too. 20% of the run, 10 to 60 s.
    let warmup = Duration::from_secs((seconds / 5).clamp(10, 60));
    let root = env!("CARGO_MANIFEST_DIR");
    let backend = Backend::start(Arc::new(|_: &Seen| {
        let json = ("content-type", "application/json".to_string());
        (
            200,
            vec![json],
            r#"{"ok":true,"matches":3}"#.into(),
            Duration::ZERO,
        )
    }))
    .await;
    let (collector, otlp, _otlp_task) = Collector::grpc().await;
    let dir = tempfile::tempdir().unwrap();
    let audit = dir.path().join("audit.log");
    // Two free ports, held together so they can't be the same one.
    let (a, b) = (
        std::net::TcpListener::bind("127.0.0.1:0").unwrap(),
        std::net::TcpListener::bind("127.0.0.1:0").unwrap(),
    );
    let (port, admin) = (
        a.local_addr().unwrap().port(),
        b.local_addr().unwrap().port(),
    );
    drop((a, b));
    let settings = dir.path().join("toolgate.yaml");
    std::fs::write(
        &settings,
        format!(
            "\
listen: 127.0.0.1:{port}
admin: 127.0.0.1:{admin}
upstream: http://{upstream}
policies: {{files: [{root}/bench/policies/full.yaml]}}
identity:
  tokens: {root}/bench/tokens.yaml
  taskIssuers: [{{issuer: orchestrator, jwks: {root}/examples/keys/task-jwks.json}}]
audit: {{path: {audit}}}
telemetry: {{otlpEndpoint: '{otlp}', serviceName: toolgate-soak}}
",
            upstream = backend.addr,
            audit = audit.display()
        ),
    )
    .unwrap();
    let child = Command::new(env!("CARGO_BIN_EXE_toolgate"))
        .args(["run", "--config"])
        .arg(&settings)
        .env("TOOLGATE_LOG", "warn")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let pid = child.id();
    let mut sidecar = Sidecar(child);
    let scraper = hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
        .build_http::<Full<Bytes>>();
    let metrics = format!("http://127.0.0.1:{admin}/metrics");
    wait_ready(&scraper, &format!("http://127.0.0.1:{admin}/readyz")).await;

    let started = Instant::now();
    let end = started + Duration::from_secs(seconds);
    let call = Arc::new(Call {
        addr: format!("127.0.0.1:{port}"),
        body: Bytes::from(std::fs::read(format!("{root}/bench/body.json")).unwrap()),
        task: task_token(root),
    });
    let interval = Duration::from_secs_f64(f64::from(CONNECTIONS) / f64::from(RATE));
    let load: Vec<_> = (0..CONNECTIONS)
        .map(|i| {
            let call = call.clone();
            let first = started + interval * i / CONNECTIONS;
            tokio::spawn(async move { connection(&call, first, interval, end).await })
        })
        .collect();
    let mut samples = Vec::new();
    let mut tick = tokio::time::interval(SAMPLE_EVERY);
    let cpu_before = cpu_ticks(pid);
    loop {
        tick.tick().await;
        // Only samples under load: after `end` the connections close.
        if Instant::now() >= end {
            break;
        }
        let (rss_kib, threads, fds) = read_proc(pid);
        let tasks = alive_tasks(&scraper, &metrics).await;
        samples.push(Sample {
            at: started.elapsed(),
            rss_kib,
            fds,
            threads,
            tasks,
        });
    }
    let mut tally = Tally::default();
    for connection in load {
        let part = connection.await.unwrap();
        tally.sent += part.sent;
        tally.ok += part.ok;
        tally.errors.extend(part.errors);
    }
    let loaded = started.elapsed();
    // What the rate costs the debug sidecar, so the headroom can be seen in the output.
    let cpu = (cpu_ticks(pid) - cpu_before) as f64 / 100.0 / loaded.as_secs_f64();

    // A clean stop flushes the audit log.
    let _ = Command::new("kill")
        .args(["-TERM", &pid.to_string()])
        .status();
    let status = tokio::task::spawn_blocking(move || {
        let status = sidecar.0.wait();
        drop(sidecar);
        status
    })
    .await
    .unwrap()
    .unwrap();
    assert!(status.success(), "toolgate exited with {status}");

    let failures = verdict(&samples, warmup, &tally, seconds, &audit);
    let spans = collector.spans.lock().unwrap().len();
    let report = format!(
        "{seconds} s at {RATE}/s over {CONNECTIONS} connections ({loaded:.1?}), sidecar CPU \
         {:.0}% of a core: {} sent, {} ok, {} errors, {spans} spans, {} backend calls\n{}",
        cpu * 100.0,
        tally.sent,
        tally.ok,
        tally.errors.len(),
        backend.count(),
        table(&samples, warmup)
    );
    eprintln!("{report}");
    assert!(failures.is_empty(), "{}\n{report}", failures.join("\n"));
    assert!(spans > 0, "no span reached the collector\n{report}");
}

/// The criteria; returns what failed.
fn verdict(
    samples: &[Sample],
    warmup: Duration,
    tally: &Tally,
    seconds: u64,
    audit: &Path,
) -> Vec<String> {
    let mut failures = Vec::new();
    if !tally.errors.is_empty() || tally.ok != tally.sent {
        failures.push(format!(
            "{} of {} calls failed, first: {:?}",
            tally.sent - tally.ok,
            tally.sent,
            tally.errors.first()
        ));
    }
    // A broken connection stops sending, so the whole schedule must have gone out (each
    // connection's share is rounded: 1% and a call per connection).
    let planned = u64::from(RATE) * seconds;
    if tally.sent + planned / 100 + u64::from(CONNECTIONS) < planned {
        failures.push(format!("{} calls sent of {planned} planned", tally.sent));
    }
    let after: Vec<Sample> = samples.iter().copied().filter(|s| s.at >= warmup).collect();
    if after.len() < 6 {
        failures.push(format!("only {} samples after the warm-up", after.len()));
        return failures;
    }
    let mut rss: Vec<u64> = after.iter().map(|s| s.rss_kib).collect();
    rss.sort_unstable();
    let median = rss[rss.len() / 2] as f64;
    let (low, high) = (rss[0] as f64 / median, rss[rss.len() - 1] as f64 / median);
    if !(0.9..=1.1).contains(&low) || !(0.9..=1.1).contains(&high) {
        failures.push(format!(
            "RSS left ±10% of its median {median} KiB: {low:.3} .. {high:.3}"
        ));
    }
    // Start: highest of the first 3 post-warm-up samples; end: lowest of the last 3.
    // Slack: a stall can put every connection's call in flight at once, and the
    // upstream pool then keeps one more connection (an fd and a task) per client
    // connection until its idle timeout; the blocking pool adds threads when file jobs
    // overlap and retires them after 10 s idle; a scrape has a connection of its own.
    // Leaking one of anything per few hundred calls passes these within the run.
    let slack = u64::from(CONNECTIONS) + 4;
    for (name, pick, slack) in [
        ("fds", (|s: &Sample| s.fds) as fn(&Sample) -> u64, slack),
        ("threads", |s: &Sample| s.threads, 8),
        ("tasks", |s: &Sample| s.tasks, slack),
    ] {
        let values: Vec<u64> = after.iter().map(pick).collect();
        let start = values[..3].iter().max().copied().unwrap_or(0);
        let end = values[values.len() - 3..]
            .iter()
            .min()
            .copied()
            .unwrap_or(0);
        if end > start + slack {
            failures.push(format!("{name} grew: {start} -> {end} (slack {slack})"));
        }
    }
    let out = Command::new(env!("CARGO_BIN_EXE_toolgate"))
        .args(["audit", "verify"])
        .arg(audit)
        .output()
        .unwrap();
    if !out.status.success() {
        failures.push(format!(
            "audit verify: {}",
            String::from_utf8_lossy(&out.stdout)
        ));
    }
    // Call records are `kind: call` or carry no kind; `start` and `policy` records
    // describe the sidecar, not a call.
    let text = std::fs::read_to_string(audit).unwrap();
    let calls = text
        .lines()
        .filter(|l| l.contains(r#""kind":"call""#) || !l.contains(r#""kind":"#))
        .count() as u64;
    if calls != tally.sent {
        failures.push(format!("{calls} call records for {} calls", tally.sent));
    }
    failures
}

/// One line per sample, for the failure message and `--nocapture`.
fn table(samples: &[Sample], warmup: Duration) -> String {
    let mut out = format!(
        "{:>6} {:>9} {:>5} {:>7} {:>6}\n",
        "s", "RSS KiB", "fds", "threads", "tasks"
    );
    for s in samples {
        let mark = if s.at < warmup { " (warm-up)" } else { "" };
        out += &format!(
            "{:>6.1} {:>9} {:>5} {:>7} {:>6}{mark}\n",
            s.at.as_secs_f64(),
            s.rss_kib,
            s.fds,
            s.threads,
            s.tasks
        );
    }
    out
}

struct Call {
    addr: String,
    body: Bytes,
    task: String,
}

/// One keep-alive connection sending on its schedule (open loop: a late call is sent at
/// once, never skipped) until `end`; stops at its first failure, which fails the test.
async fn connection(call: &Call, first: Instant, interval: Duration, end: Instant) -> Tally {
    let mut tally = Tally::default();
    let stream = match TcpStream::connect(&call.addr).await {
        Ok(stream) => stream,
        Err(e) => {
            tally.errors.push(format!("connect: {e}"));
            return tally;
        }
    };
    let _ = stream.set_nodelay(true);
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .unwrap();
    tokio::spawn(conn);
    let mut scheduled = first;
    while scheduled < end {
        tokio::time::sleep_until(scheduled).await;
        scheduled += interval;
        let request = http::Request::post("/search")
            .header("host", &call.addr)
            .header("content-type", "application/json")
            .header("authorization", "Bearer bench-token")
            .header("x-toolgate-task", &call.task)
            .body(Full::new(call.body.clone()))
            .unwrap();
        tally.sent += 1;
        let answer = tokio::time::timeout(CALL_TIMEOUT, async {
            let response = sender.send_request(request).await?;
            let status = response.status();
            let body = response.into_body().collect().await?.to_bytes();
            Ok::<_, hyper::Error>((status, body))
        })
        .await;
        match answer {
            Ok(Ok((status, _))) if status.is_success() => tally.ok += 1,
            Ok(Ok((status, body))) => {
                tally
                    .errors
                    .push(format!("{status}: {}", String::from_utf8_lossy(&body)));
                return tally;
            }
            Ok(Err(e)) => {
                tally.errors.push(format!("transport: {e}"));
                return tally;
            }
            Err(_) => {
                tally.errors.push(format!("no answer in {CALL_TIMEOUT:?}"));
                return tally;
            }
        }
    }
    tally
}

/// VmRSS (KiB), threads and open fds of a process.
fn read_proc(pid: u32) -> (u64, u64, u64) {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let field = |name: &str| -> u64 {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.split_whitespace().next())
            .and_then(|v| v.parse().ok())
            .unwrap_or(0)
    };
    let fds = std::fs::read_dir(format!("/proc/{pid}/fd")).map_or(0, |d| d.count() as u64);
    (field("VmRSS:"), field("Threads:"), fds)
}

/// User and system CPU of a process, in clock ticks (USER_HZ, 100 on Linux).
fn cpu_ticks(pid: u32) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // The fields after the command name, which is in parentheses and may hold spaces.
    let fields: Vec<&str> = stat
        .rsplit_once(") ")
        .map_or(vec![], |(_, rest)| rest.split(' ').collect());
    let field = |i: usize| -> u64 { fields.get(i).and_then(|v| v.parse().ok()).unwrap_or(0) };
    field(11) + field(12)
}

type Scraper = hyper_util::client::legacy::Client<
    hyper_util::client::legacy::connect::HttpConnector,
    Full<Bytes>,
>;

/// `toolgate_runtime_alive_tasks` from `/metrics` (0 if the scrape fails: that sample
/// then can't look like growth).
async fn alive_tasks(scraper: &Scraper, url: &str) -> u64 {
    let Ok(Ok(response)) =
        tokio::time::timeout(Duration::from_secs(5), scraper.get(url.parse().unwrap())).await
    else {
        return 0;
    };
    let body = response.into_body().collect().await.map(|b| b.to_bytes());
    let text = body
        .map(|b| String::from_utf8_lossy(&b).into_owned())
        .unwrap_or_default();
    text.lines()
        .find_map(|l| l.strip_prefix("toolgate_runtime_alive_tasks "))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0)
}

async fn wait_ready(scraper: &Scraper, url: &str) {
    for _ in 0..400 {
        if let Ok(r) = scraper.get(url.parse().unwrap()).await {
            if r.status() == 200 {
                return;
            }
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("toolgate never became ready");
}

/// A task token as the demo orchestrator signs it, with the claims the full profile's
/// `within-task` rule compares the body with.
fn task_token(root: &str) -> String {
    let pem = std::fs::read(format!("{root}/examples/keys/orchestrator-demo.pem")).unwrap();
    let key = jsonwebtoken::EncodingKey::from_ed_pem(&pem).unwrap();
    let mut header = jsonwebtoken::Header::new(jsonwebtoken::Algorithm::EdDSA);
    header.kid = Some("orchestrator-demo".into());
    let claims = serde_json::json!({
        "iss": "orchestrator",
        "exp": common::keys::now() + 3600,
        "agent": "bench-bot",
        "service": "orders",
        "window_minutes": 60,
    });
    jsonwebtoken::encode(&header, &claims, &key).unwrap()
}
