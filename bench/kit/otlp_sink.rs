//! An OTLP trace receiver that only counts spans: the far end of the full toolgate's
//! export, so the benchmark pays for real span export without a collector. gRPC, and
//! with `--http-listen` OTLP/HTTP too; each request is decoded, as a collector would.
//! Prints the count, and the bytes of protobuf they came in, once a second while spans
//! arrive.

use bytes::Bytes;
use http::{header, HeaderValue, Method, Request, Response, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use opentelemetry_proto::tonic::collector::trace::v1::trace_service_server::{
    TraceService, TraceServiceServer,
};
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use prost::Message;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpListener;
use tonic::transport::server::TcpIncoming;

#[derive(Clone, Default)]
struct Sink {
    spans: Arc<AtomicU64>,
    bytes: Arc<AtomicU64>,
}

impl Sink {
    fn count(&self, request: &ExportTraceServiceRequest) {
        self.bytes
            .fetch_add(request.encoded_len() as u64, Ordering::Relaxed);
        let count: usize = request
            .resource_spans
            .iter()
            .flat_map(|r| &r.scope_spans)
            .map(|s| s.spans.len())
            .sum();
        self.spans.fetch_add(count as u64, Ordering::Relaxed);
    }

    /// One OTLP/HTTP request: `POST /v1/traces` with a protobuf body.
    async fn http(&self, request: Request<Incoming>) -> Response<Full<Bytes>> {
        let status = if request.method() != Method::POST || request.uri().path() != "/v1/traces" {
            StatusCode::NOT_FOUND
        } else {
            let body = request.into_body().collect().await.ok();
            match body.and_then(|b| ExportTraceServiceRequest::decode(b.to_bytes()).ok()) {
                Some(decoded) => {
                    self.count(&decoded);
                    StatusCode::OK
                }
                None => StatusCode::BAD_REQUEST,
            }
        };
        let mut response = Response::new(Full::new(Bytes::from(
            ExportTraceServiceResponse::default().encode_to_vec(),
        )));
        *response.status_mut() = status;
        response.headers_mut().insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/x-protobuf"),
        );
        response
    }
}

#[tonic::async_trait]
impl TraceService for Sink {
    async fn export(
        &self,
        request: tonic::Request<ExportTraceServiceRequest>,
    ) -> Result<tonic::Response<ExportTraceServiceResponse>, tonic::Status> {
        self.count(&request.into_inner());
        Ok(tonic::Response::new(ExportTraceServiceResponse::default()))
    }
}

/// Receives OTLP/HTTP on `listener` until accepting fails.
async fn serve_http(sink: Sink, listener: TcpListener) -> anyhow::Result<()> {
    loop {
        let (stream, _) = listener.accept().await?;
        let _ = stream.set_nodelay(true);
        let sink = sink.clone();
        tokio::spawn(async move {
            let service = hyper::service::service_fn(move |request| {
                let sink = sink.clone();
                async move { Ok::<_, Infallible>(sink.http(request).await) }
            });
            let _ = hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(stream), service)
                .await;
        });
    }
}

pub async fn run(listen: SocketAddr, http_listen: Option<SocketAddr>) -> anyhow::Result<()> {
    let sink = Sink::default();
    if let Some(http_listen) = http_listen {
        let listener = TcpListener::bind(http_listen).await?;
        tokio::spawn(serve_http(sink.clone(), listener));
    }
    let (spans, bytes) = (sink.spans.clone(), sink.bytes.clone());
    tokio::spawn(async move {
        let mut last = 0;
        loop {
            tokio::time::sleep(Duration::from_secs(1)).await;
            let now = spans.load(Ordering::Relaxed);
            if now != last {
                let bytes = bytes.load(Ordering::Relaxed);
                println!("spans received: {now} ({bytes} bytes of requests)");
                last = now;
            }
        }
    });
    // TCP_NODELAY on every connection, as collectors set it (grpc-go does, and tonic when
    // it binds the address itself). Without it the sink's small HTTP/2 frames (window
    // updates, the answer's headers) wait on Nagle's algorithm, every export takes longer,
    // and a saturated full toolgate dropped 12,000-100,000 spans per 8 s and peaked at
    // 50-60 MB, against none and 35.5 MB with it (docs/bench-history.md, fourteenth round).
    let incoming = TcpIncoming::from(TcpListener::bind(listen).await?).with_nodelay(Some(true));
    tonic::transport::Server::builder()
        .serve_with_incoming(TraceServiceServer::new(sink), incoming)
        .await?;
    Ok(())
}
