//! Open-loop load at a fixed rate, for "added latency at 1,000 requests/s": wrk can't
//! pace requests and wrk2 isn't packaged here.
//!
//! `connections` keep-alive HTTP/1.1 connections share the rate; each sends on its own
//! schedule (`connections / rate` apart, staggered). A request's latency counts from its
//! scheduled time when the connection was still busy with the previous one (the server
//! fell behind: coordinated omission is not hidden), and from the moment it was actually
//! sent otherwise, so the generator's own timer slack (Tokio timers tick in
//! milliseconds) is not blamed on the server. Prints one line of `key=value` pairs.

use bytes::Bytes;
use http::{HeaderName, HeaderValue, Method, Request, Uri};
use http_body_util::{BodyExt, Full};
use hyper_util::rt::TokioIo;
use std::path::PathBuf;
use std::time::Duration;
use tokio::net::TcpStream;
use tokio::time::Instant;

#[derive(clap::Args)]
pub struct Options {
    /// `http://host:port/path` on loopback.
    #[arg(long)]
    url: Uri,
    /// Requests per second, across all connections.
    #[arg(long, default_value_t = 1000)]
    rate: u32,
    /// Measured seconds (after the warm-up).
    #[arg(long, default_value_t = 5)]
    seconds: u64,
    #[arg(long, default_value_t = 1)]
    warmup: u64,
    #[arg(long, default_value_t = 16)]
    connections: u32,
    #[arg(long, default_value = "POST")]
    method: Method,
    /// The request body, read from this file.
    #[arg(long)]
    body_file: Option<PathBuf>,
    /// `Name: value`, repeatable.
    #[arg(long = "header")]
    headers: Vec<String>,
}

struct Plan {
    uri: Uri,
    method: Method,
    body: Bytes,
    headers: Vec<(HeaderName, HeaderValue)>,
    interval: Duration,
    start: Instant,
    measure_from: Instant,
    end: Instant,
}

#[derive(Default)]
struct Tally {
    latencies_us: Vec<u32>,
    errors: u64,
    /// Every request sent, warm-up included: what the server's CPU time was spent on.
    sent: u64,
}

pub async fn run(options: Options) -> anyhow::Result<()> {
    let connections = options.connections.max(1);
    let body = match &options.body_file {
        Some(path) => Bytes::from(std::fs::read(path)?),
        None => Bytes::new(),
    };
    let mut headers = Vec::new();
    for line in &options.headers {
        let (name, value) = line
            .split_once(':')
            .ok_or_else(|| anyhow::anyhow!("--header wants `Name: value`, got {line:?}"))?;
        headers.push((
            HeaderName::from_bytes(name.trim().as_bytes())?,
            HeaderValue::from_str(value.trim())?,
        ));
    }
    let start = Instant::now() + Duration::from_millis(100);
    let measure_from = start + Duration::from_secs(options.warmup);
    let plan = std::sync::Arc::new(Plan {
        uri: options.url.clone(),
        method: options.method.clone(),
        body,
        headers,
        interval: Duration::from_secs_f64(f64::from(connections) / f64::from(options.rate.max(1))),
        start,
        measure_from,
        end: measure_from + Duration::from_secs(options.seconds),
    });
    let stagger = Duration::from_secs_f64(1.0 / f64::from(options.rate.max(1)));
    let mut tasks = Vec::new();
    for i in 0..connections {
        let plan = plan.clone();
        tasks.push(tokio::spawn(async move {
            connection(&plan, plan.start + stagger * i).await
        }));
    }
    let mut all = Tally::default();
    for task in tasks {
        let tally = task.await??;
        all.latencies_us.extend(tally.latencies_us);
        all.errors += tally.errors;
        all.sent += tally.sent;
    }
    all.latencies_us.sort_unstable();
    let at = |q: f64| -> u32 {
        let n = all.latencies_us.len();
        if n == 0 {
            return 0;
        }
        all.latencies_us[((n as f64 * q).ceil() as usize).clamp(1, n) - 1]
    };
    println!(
        "rate={} seconds={} connections={} requests={} errors={} sent={} p50_us={} p90_us={} p99_us={} p999_us={} max_us={}",
        options.rate,
        options.seconds,
        connections,
        all.latencies_us.len(),
        all.errors,
        all.sent,
        at(0.50),
        at(0.90),
        at(0.99),
        at(0.999),
        all.latencies_us.last().copied().unwrap_or(0),
    );
    Ok(())
}

/// One keep-alive connection sending on its schedule until the plan ends.
async fn connection(plan: &Plan, first: Instant) -> anyhow::Result<Tally> {
    let authority = plan
        .uri
        .authority()
        .ok_or_else(|| anyhow::anyhow!("the URL needs host:port"))?
        .clone();
    let stream = TcpStream::connect(authority.as_str()).await?;
    stream.set_nodelay(true)?;
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream)).await?;
    tokio::spawn(conn);
    let path = plan.uri.path_and_query().map_or("/", |p| p.as_str());
    let mut tally = Tally::default();
    let mut scheduled = first;
    while scheduled < plan.end {
        let now = Instant::now();
        // Busy past the schedule: the server's delay, counted from the schedule.
        let counted_from = if now > scheduled {
            scheduled
        } else {
            tokio::time::sleep_until(scheduled).await;
            Instant::now()
        };
        let mut request = Request::builder()
            .method(plan.method.clone())
            .uri(path)
            .header(http::header::HOST, authority.as_str());
        for (name, value) in &plan.headers {
            request = request.header(name, value);
        }
        let request = request.body(Full::new(plan.body.clone()))?;
        tally.sent += 1;
        let ok = match sender.send_request(request).await {
            Ok(response) => {
                let status = response.status();
                response.into_body().collect().await.is_ok() && status.is_success()
            }
            Err(_) => false,
        };
        if scheduled >= plan.measure_from {
            if ok {
                let took = counted_from.elapsed().as_micros();
                tally
                    .latencies_us
                    .push(u32::try_from(took).unwrap_or(u32::MAX));
            } else {
                tally.errors += 1;
            }
        }
        if !ok {
            // A broken connection can't send again; the rest of its schedule is lost.
            if sender.ready().await.is_err() {
                break;
            }
        }
        scheduled += plan.interval;
    }
    Ok(tally)
}
