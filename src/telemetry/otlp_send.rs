//! Sends encoded OTLP trace requests ([`super::otlp_encode`]) to the collector, over gRPC
//! (tonic's client and channel) or HTTP (`application/x-protobuf` to `/v1/traces`).
//!
//! The exporter has a runtime of its own: a Tokio runtime with one worker thread. The
//! connection to the collector, its tasks and every buffer an export allocates live and
//! die on that thread, so the export traffic neither queues behind calls on the
//! sidecar's workers nor spreads its memory over their allocator heaps (bench/SOAK.md,
//! "The exporter on a runtime of its own"). The worker keeps running between batches,
//! so the connection still answers the collector's pings and graceful shutdown: a
//! runtime driven only while a batch is sent left a restarting collector waiting on it
//! (`tests/telemetry.rs`, `spans_reach_a_collector_restarted_between_exports`).
//!
//! A request that fails in a way the OTLP specification calls transient (the collector
//! unreachable or overloaded, a connection lost under it) is retried twice, 100 and
//! 200 ms apart; anything else fails its batch at once. While the worker waits, new
//! spans queue up to `maxQueuedSpans` and past it are dropped and counted, so a slow
//! collector never reaches a call.

use bytes::{Buf, BufMut, Bytes};
use http::uri::PathAndQuery;
use opentelemetry_http::HttpClient;
use std::time::Duration;
use tokio::runtime::Runtime;
use tonic::codec::{Codec, DecodeBuf, Decoder, EncodeBuf, Encoder};
use tonic::transport::{Channel, Endpoint};
use tonic::{Code, Status};

use super::export::RuntimeHttpClient;
use crate::input::url::shown;

/// The gRPC method of `opentelemetry/proto/collector/trace/v1/trace_service.proto`.
const EXPORT: &str = "/opentelemetry.proto.collector.trace.v1.TraceService/Export";
/// Waits before the retries of a transient failure.
const RETRIES: [Duration; 2] = [Duration::from_millis(100), Duration::from_millis(200)];

/// Where and how spans are sent, and the runtime that sends them.
#[derive(Debug)]
pub struct Sender {
    runtime: OwnRuntime,
    to: Collector,
    /// Where requests go, for the operator's log.
    endpoint: String,
}

#[derive(Debug, Clone)]
enum Collector {
    Grpc {
        grpc: tonic::client::Grpc<Channel>,
        timeout: Duration,
    },
    Http {
        // Boxed: the client is far larger than the gRPC variant, and a sender is made once.
        client: Box<RuntimeHttpClient>,
        url: http::Uri,
    },
}

/// The exporter's runtime. Shut down without waiting when dropped: a sender may be
/// dropped inside the sidecar's runtime (a failed start, a test), where blocking is
/// not allowed, and nothing is left to wait for once the span worker stops sending.
#[derive(Debug)]
struct OwnRuntime(Option<Runtime>);

impl OwnRuntime {
    fn new() -> Result<OwnRuntime, String> {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("toolgate-otlp")
            .enable_all()
            .build()
            .map(|runtime| OwnRuntime(Some(runtime)))
            .map_err(|e| format!("cannot start the exporter's runtime: {e}"))
    }

    fn get(&self) -> &Runtime {
        self.0.as_ref().expect("taken only when dropped")
    }
}

impl Drop for OwnRuntime {
    fn drop(&mut self) {
        if let Some(runtime) = self.0.take() {
            runtime.shutdown_background();
        }
    }
}

/// Why a request failed, and whether trying again may help.
#[derive(Debug)]
struct Failure {
    message: String,
    transient: bool,
}

impl Sender {
    /// OTLP/gRPC to `endpoint` (`http://host:4317`). The channel connects lazily, on the
    /// first export.
    pub fn grpc(endpoint: &str, timeout: Duration) -> Result<Sender, String> {
        let endpoint = Endpoint::from_shared(endpoint.to_string())
            .map_err(|e| format!("invalid endpoint {}: {e}", shown(endpoint)))?;
        if endpoint.uri().scheme_str() != Some("http") {
            return Err(format!(
                "{}: only plain-text (http://) collectors are supported",
                shown(&endpoint.uri().to_string())
            ));
        }
        let runtime = OwnRuntime::new()?;
        let name = endpoint.uri().to_string();
        // The channel's worker task is spawned where it is made: on the exporter's runtime.
        let channel = {
            let _on = runtime.get().enter();
            endpoint.timeout(timeout).connect_lazy()
        };
        Ok(Sender {
            runtime,
            to: Collector::Grpc {
                grpc: tonic::client::Grpc::new(channel),
                timeout,
            },
            endpoint: name,
        })
    }

    /// OTLP/HTTP with protobuf to `url` (the full `/v1/traces` URL).
    pub fn http(url: &str, timeout: Duration) -> Result<Sender, String> {
        let url: http::Uri = url
            .parse()
            .map_err(|e| format!("invalid endpoint {}: {e}", shown(url)))?;
        if url.scheme_str() != Some("http") || url.authority().is_none() {
            return Err(format!(
                "{}: only plain-text (http://host:port) collectors are supported",
                shown(&url.to_string())
            ));
        }
        let runtime = OwnRuntime::new()?;
        let client = {
            let _on = runtime.get().enter();
            Box::new(RuntimeHttpClient::new(timeout))
        };
        Ok(Sender {
            endpoint: url.to_string(),
            runtime,
            to: Collector::Http { client, url },
        })
    }

    /// Sends one request, retrying a transient failure; blocks the calling thread (the
    /// span worker) while the exporter's worker sends it. Must not be called from
    /// inside a Tokio runtime. The error names the endpoint.
    pub fn send(&self, request: Vec<u8>) -> Result<(), String> {
        let request = Bytes::from(request);
        let mut waits = RETRIES.iter();
        loop {
            // On the exporter's worker, where the connection's own tasks run.
            let runtime = self.runtime.get();
            let sent = runtime.block_on(runtime.spawn(self.to.clone().send(request.clone())));
            let sent = sent.unwrap_or_else(|e| {
                Err(Failure {
                    transient: false,
                    message: format!("export task failed: {e}"),
                })
            });
            match sent {
                Ok(()) => return Ok(()),
                Err(failure) => match waits.next() {
                    Some(wait) if failure.transient => std::thread::sleep(*wait),
                    _ => return Err(format!("{}: {}", self.endpoint, failure.message)),
                },
            }
        }
    }
}

impl Collector {
    async fn send(self, request: Bytes) -> Result<(), Failure> {
        match self {
            Collector::Grpc { mut grpc, timeout } => {
                let call = async {
                    grpc.ready()
                        .await
                        .map_err(|e| Status::unavailable(e.to_string()))?;
                    let path = PathAndQuery::from_static(EXPORT);
                    grpc.unary(tonic::Request::new(request), path, Raw)
                        .await
                        .map(drop)
                };
                // The channel's own timeout covers the request; this bounds a connect to
                // a collector that never answers as well.
                let answer = tokio::time::timeout(timeout, call)
                    .await
                    .unwrap_or_else(|_| Err(Status::deadline_exceeded("export timed out")));
                answer.map_err(|status| Failure {
                    transient: grpc_transient(status.code()),
                    message: format!(
                        "collector answered {:?}: {}",
                        status.code(),
                        status.message()
                    ),
                })
            }
            Collector::Http { client, url } => {
                let sent = http::Request::post(url)
                    .header(http::header::CONTENT_TYPE, "application/x-protobuf")
                    .body(request)
                    .map_err(|e| Failure {
                        transient: false,
                        message: e.to_string(),
                    })?;
                match client.send_bytes(sent).await {
                    Ok(answer) if answer.status().is_success() => Ok(()),
                    Ok(answer) => Err(Failure {
                        transient: http_transient(answer.status()),
                        message: format!("collector answered {}", answer.status()),
                    }),
                    // Unreachable, reset or timed out.
                    Err(e) => Err(Failure {
                        transient: true,
                        message: format!("collector unreachable: {e}"),
                    }),
                }
            }
        }
    }
}

/// The codes the OTLP specification lists as retryable.
fn grpc_transient(code: Code) -> bool {
    matches!(
        code,
        Code::Cancelled
            | Code::DeadlineExceeded
            | Code::Aborted
            | Code::OutOfRange
            | Code::Unavailable
            | Code::DataLoss
    )
}

fn http_transient(status: http::StatusCode) -> bool {
    matches!(status.as_u16(), 429 | 502 | 503 | 504)
}

/// A gRPC codec that sends bytes already encoded and ignores the answer's body (an
/// `ExportTraceServiceResponse`, whose partial-success counts nothing here acts on).
#[derive(Debug, Clone, Copy, Default)]
struct Raw;

impl Codec for Raw {
    type Encode = Bytes;
    type Decode = ();
    type Encoder = Raw;
    type Decoder = Raw;

    fn encoder(&mut self) -> Raw {
        Raw
    }

    fn decoder(&mut self) -> Raw {
        Raw
    }
}

impl Encoder for Raw {
    type Item = Bytes;
    type Error = Status;

    fn encode(&mut self, item: Bytes, dst: &mut EncodeBuf<'_>) -> Result<(), Status> {
        dst.put_slice(&item);
        Ok(())
    }
}

impl Decoder for Raw {
    type Item = ();
    type Error = Status;

    fn decode(&mut self, src: &mut DecodeBuf<'_>) -> Result<Option<()>, Status> {
        src.advance(src.remaining());
        Ok(Some(()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_transient_failures_are_the_specifications() {
        assert!(grpc_transient(Code::Unavailable) && grpc_transient(Code::DeadlineExceeded));
        assert!(!grpc_transient(Code::InvalidArgument) && !grpc_transient(Code::Unauthenticated));
        assert!(http_transient(http::StatusCode::SERVICE_UNAVAILABLE));
        assert!(http_transient(http::StatusCode::TOO_MANY_REQUESTS));
        assert!(!http_transient(http::StatusCode::BAD_REQUEST));
    }

    #[tokio::test]
    async fn only_plain_text_endpoints_are_taken() {
        assert!(Sender::grpc("http://127.0.0.1:4317", Duration::from_secs(1)).is_ok());
        assert!(Sender::grpc("https://collector:4317", Duration::from_secs(1)).is_err());
        assert!(Sender::http("http://127.0.0.1:4318/v1/traces", Duration::from_secs(1)).is_ok());
        assert!(Sender::http("https://collector/v1/traces", Duration::from_secs(1)).is_err());
        assert!(Sender::http("not a url", Duration::from_secs(1)).is_err());
    }
}
