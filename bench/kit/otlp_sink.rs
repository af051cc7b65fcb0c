//! An OTLP/gRPC trace receiver that only counts spans: the far end of the full
//! toolgate's export, so the benchmark pays for real span export without a collector.
//! Prints the count, and the bytes of protobuf they came in, once a second while spans
//! arrive.

use opentelemetry_proto::tonic::collector::trace::v1::trace_service_server::{
    TraceService, TraceServiceServer,
};
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use prost::Message;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpListener;

#[derive(Clone, Default)]
struct Sink {
    spans: Arc<AtomicU64>,
    bytes: Arc<AtomicU64>,
}

#[tonic::async_trait]
impl TraceService for Sink {
    async fn export(
        &self,
        request: tonic::Request<ExportTraceServiceRequest>,
    ) -> Result<tonic::Response<ExportTraceServiceResponse>, tonic::Status> {
        let request = request.into_inner();
        self.bytes
            .fetch_add(request.encoded_len() as u64, Ordering::Relaxed);
        let count: usize = request
            .resource_spans
            .iter()
            .flat_map(|r| &r.scope_spans)
            .map(|s| s.spans.len())
            .sum();
        self.spans.fetch_add(count as u64, Ordering::Relaxed);
        Ok(tonic::Response::new(ExportTraceServiceResponse {
            partial_success: None,
        }))
    }
}

pub async fn run(listen: SocketAddr) -> anyhow::Result<()> {
    let sink = Sink::default();
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
    let listener = TcpListener::bind(listen).await?;
    tonic::transport::Server::builder()
        .serve_with_incoming(
            TraceServiceServer::new(sink),
            tokio_stream::wrappers::TcpListenerStream::new(listener),
        )
        .await?;
    Ok(())
}
