//! `toolgate-jaeger`: a local Jaeger UI for toolgate's spans, for development only.
//!
//! It keeps the most recent traces in memory (the `otlp-embedded` crate: an OTLP trace
//! receiver, the Jaeger UI build and the part of the Jaeger query API the UI uses) and
//! serves three listeners:
//!
//! - OTLP/gRPC on `--otlp` (default `127.0.0.1:4317`): toolgate's default `otlpProtocol`;
//! - OTLP/HTTP protobuf on `--otlp-http` (default `127.0.0.1:4318`, `POST /v1/traces`);
//! - the UI and `/api/traces?service=X&limit=N` on `--ui` (default `127.0.0.1:16686`).
//!
//! Spans get the `span.kind` and `error` tags a real Jaeger derives (see `receiver`).
//! A trace is listed once its root span has arrived (a span whose parent was never
//! exported keeps its trace hidden; open it by id at `/api/traces/{traceId}`). Nothing is
//! persisted: restarting the viewer forgets every trace.

#![forbid(unsafe_code)]

mod receiver;

use std::net::SocketAddr;
use std::time::Duration;

use axum::body::Bytes;
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::{Extension, Router};
use otlp_embedded::proto::collector::trace::v1::ExportTraceServiceRequest;
use otlp_embedded::{ui_app, Config, State, StateRef, TraceService, TraceServiceServer};
use prost::Message as _;

use receiver::Receiver;

const USAGE: &str = "\
toolgate-jaeger: an in-memory OTLP receiver with the Jaeger UI (development only)

usage: cargo run --release --manifest-path tools/jaeger/Cargo.toml -- [options]

  --otlp ADDR        OTLP/gRPC listener            (default 127.0.0.1:4317)
  --otlp-http ADDR   OTLP/HTTP protobuf listener   (default 127.0.0.1:4318)
  --ui ADDR          Jaeger UI and query API       (default 127.0.0.1:16686)
  --max-traces N     traces kept, oldest evicted   (default 1000)
";

/// Where to listen and how much to keep.
#[derive(Debug, PartialEq)]
struct Options {
    otlp: SocketAddr,
    otlp_http: SocketAddr,
    ui: SocketAddr,
    max_traces: u32,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            otlp: SocketAddr::from(([127, 0, 0, 1], 4317)),
            otlp_http: SocketAddr::from(([127, 0, 0, 1], 4318)),
            ui: SocketAddr::from(([127, 0, 0, 1], 16686)),
            max_traces: 1000,
        }
    }
}

/// Parses the command line (without the program name); `Ok(None)` means `--help`.
fn parse_args(args: impl IntoIterator<Item = String>) -> Result<Option<Options>, String> {
    let mut options = Options::default();
    let mut args = args.into_iter();
    while let Some(flag) = args.next() {
        if flag == "-h" || flag == "--help" {
            return Ok(None);
        }
        let value = args.next().ok_or_else(|| format!("{flag} needs a value"))?;
        let addr = || {
            value
                .parse::<SocketAddr>()
                .map_err(|e| format!("{flag} {value}: {e} (expected e.g. 127.0.0.1:4317)"))
        };
        match flag.as_str() {
            "--otlp" => options.otlp = addr()?,
            "--otlp-http" => options.otlp_http = addr()?,
            "--ui" => options.ui = addr()?,
            "--max-traces" => {
                options.max_traces = value
                    .parse()
                    .map_err(|e| format!("--max-traces {value}: {e}"))?
            }
            _ => return Err(format!("unknown option {flag}")),
        }
    }
    Ok(Some(options))
}

/// OTLP/HTTP with protobuf bodies (`otlpProtocol: http`), fed to the same store as gRPC.
fn otlp_http_app(state: StateRef) -> Router {
    Router::new()
        .route("/v1/traces", post(export_http))
        .layer(Extension(state))
}

async fn export_http(Extension(state): Extension<StateRef>, body: Bytes) -> Response {
    let request = match ExportTraceServiceRequest::decode(body) {
        Ok(request) => request,
        Err(e) => {
            let msg = format!("not an OTLP protobuf ExportTraceServiceRequest: {e}");
            return (StatusCode::BAD_REQUEST, msg).into_response();
        }
    };
    match Receiver::new(state)
        .export(tonic::Request::new(request))
        .await
    {
        Ok(answer) => (
            [(header::CONTENT_TYPE, "application/x-protobuf")],
            answer.into_inner().encode_to_vec(),
        )
            .into_response(),
        Err(status) => (
            StatusCode::INTERNAL_SERVER_ERROR,
            status.message().to_string(),
        )
            .into_response(),
    }
}

/// Prints the number of traces held whenever it changes, so a user sees spans arrive.
async fn report(state: StateRef) {
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    let mut last = 0;
    loop {
        tick.tick().await;
        let held = state.read().await.len();
        if held != last {
            println!("{held} traces held");
            last = held;
        }
    }
}

async fn bind(addr: SocketAddr, what: &str) -> Result<tokio::net::TcpListener, String> {
    tokio::net::TcpListener::bind(addr).await.map_err(|e| {
        format!("cannot listen on {addr} for {what}: {e} (is another collector running? pick another address with the flag)")
    })
}

async fn serve(options: Options) -> Result<(), String> {
    let state = State::new(Config {
        max_length: options.max_traces,
        max_memory_usage: 256 << 20,
    });
    let ui = bind(options.ui, "the UI").await?;
    let otlp_http = bind(options.otlp_http, "OTLP/HTTP").await?;
    let otlp = bind(options.otlp, "OTLP/gRPC").await?;

    println!(
        "OTLP/gRPC on {}  (toolgate: telemetry.otlpEndpoint: http://{})",
        options.otlp, options.otlp
    );
    println!(
        "OTLP/HTTP on {}  (otlpProtocol: http, POST /v1/traces)",
        options.otlp_http
    );
    println!(
        "Jaeger UI on http://{}/  (API: /api/traces?service=toolgate-demo&limit=20)",
        options.ui
    );

    tokio::spawn(report(state.clone()));
    let ui_server = axum::serve(ui, ui_app(state.clone(), "/"));
    let http_server = axum::serve(otlp_http, otlp_http_app(state.clone()));
    let grpc_server = tonic::transport::Server::builder()
        .add_service(TraceServiceServer::new(Receiver::new(state)))
        .serve_with_incoming(tonic::transport::server::TcpIncoming::from(otlp));

    tokio::select! {
        r = ui_server => r.map_err(|e| format!("UI server: {e}")),
        r = http_server => r.map_err(|e| format!("OTLP/HTTP server: {e}")),
        r = grpc_server => r.map_err(|e| format!("OTLP/gRPC server: {e}")),
        _ = tokio::signal::ctrl_c() => Ok(()),
    }
}

#[tokio::main]
async fn main() {
    let options = match parse_args(std::env::args().skip(1)) {
        Ok(Some(options)) => options,
        Ok(None) => {
            print!("{USAGE}");
            return;
        }
        Err(e) => {
            eprint!("toolgate-jaeger: {e}\n\n{USAGE}");
            std::process::exit(2);
        }
    };
    if let Err(e) = serve(options).await {
        eprintln!("toolgate-jaeger: {e}");
        std::process::exit(1);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mk_args(args: &[&str]) -> Vec<String> {
        args.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn defaults_are_the_jaeger_ports_on_loopback() {
        let options = parse_args(mk_args(&[])).unwrap().unwrap();
        assert_eq!(options, Options::default());
        assert_eq!(options.otlp.to_string(), "127.0.0.1:4317");
        assert_eq!(options.ui.to_string(), "127.0.0.1:16686");
    }

    #[test]
    fn flags_set_addresses_and_bad_values_say_why() {
        let options = parse_args(mk_args(&["--otlp", "0.0.0.0:14317", "--ui", "[::1]:8080"]))
            .unwrap()
            .unwrap();
        assert_eq!(options.otlp.to_string(), "0.0.0.0:14317");
        assert_eq!(options.ui.to_string(), "[::1]:8080");
        assert!(parse_args(mk_args(&["--help"])).unwrap().is_none());
        let err = parse_args(mk_args(&["--ui", "localhost"])).unwrap_err();
        assert!(err.contains("--ui localhost"), "{err}");
        assert!(parse_args(mk_args(&["--ui"]))
            .unwrap_err()
            .contains("needs a value"));
        assert!(parse_args(mk_args(&["--bogus", "1"]))
            .unwrap_err()
            .contains("unknown"));
    }
}
