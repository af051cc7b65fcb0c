//! A real OTLP receiver: the opentelemetry-proto tonic `TraceService` on loopback, and an
//! OTLP/HTTP endpoint decoding protobuf, both collecting every span they are sent.
#![allow(dead_code)]

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use opentelemetry_proto::tonic::collector::trace::v1::trace_service_server::{
    TraceService, TraceServiceServer,
};
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use opentelemetry_proto::tonic::common::v1::any_value::Value as AnyValue;
use opentelemetry_proto::tonic::trace::v1::Span;
use prost::Message;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::net::TcpListener;

#[derive(Clone, Default)]
pub struct Collector {
    pub spans: Arc<Mutex<Vec<Span>>>,
}

#[tonic::async_trait]
impl TraceService for Collector {
    async fn export(
        &self,
        request: tonic::Request<ExportTraceServiceRequest>,
    ) -> Result<tonic::Response<ExportTraceServiceResponse>, tonic::Status> {
        self.collect(request.into_inner());
        Ok(tonic::Response::new(ExportTraceServiceResponse {
            partial_success: None,
        }))
    }
}

impl Collector {
    fn collect(&self, request: ExportTraceServiceRequest) {
        let mut spans = self.spans.lock().unwrap();
        for resource in request.resource_spans {
            for scope in resource.scope_spans {
                spans.extend(scope.spans);
            }
        }
    }

    /// OTLP/gRPC on loopback; returns the collector and its `http://` endpoint.
    pub async fn grpc() -> (Collector, String, tokio::task::JoinHandle<()>) {
        let collector = Collector::default();
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let service = TraceServiceServer::new(collector.clone());
        let task = tokio::spawn(async move {
            let _ = tonic::transport::Server::builder()
                .serve_with_incoming(
                    service,
                    tokio_stream::wrappers::TcpListenerStream::new(listener),
                )
                .await;
        });
        (collector, format!("http://{addr}"), task)
    }

    /// OTLP/HTTP (protobuf) on loopback.
    pub async fn http() -> (Collector, SocketAddr) {
        let collector = Collector::default();
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let sink = collector.clone();
        tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let sink = sink.clone();
                tokio::spawn(async move {
                    let service = hyper::service::service_fn(
                        move |request: http::Request<hyper::body::Incoming>| {
                            let sink = sink.clone();
                            async move {
                                assert_eq!(request.uri().path(), "/v1/traces");
                                assert_eq!(
                                    request.headers()["content-type"],
                                    "application/x-protobuf"
                                );
                                let body = request.into_body().collect().await.unwrap().to_bytes();
                                sink.collect(ExportTraceServiceRequest::decode(body).unwrap());
                                Ok::<_, std::convert::Infallible>(http::Response::new(Full::new(
                                    Bytes::new(),
                                )))
                            }
                        },
                    );
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(hyper_util::rt::TokioIo::new(stream), service)
                        .await;
                });
            }
        });
        (collector, addr)
    }

    /// Waits until a span satisfying `pick` arrives.
    pub async fn wait_for(&self, pick: impl Fn(&Span) -> bool) -> Span {
        for _ in 0..100 {
            if let Some(span) = self.spans.lock().unwrap().iter().find(|s| pick(s)) {
                return span.clone();
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        panic!(
            "span never arrived; got {:?}",
            self.spans
                .lock()
                .unwrap()
                .iter()
                .map(|s| &s.name)
                .collect::<Vec<_>>()
        );
    }
}

/// An attribute's value as text.
pub fn attr(span: &Span, key: &str) -> Option<String> {
    span.attributes
        .iter()
        .find(|kv| kv.key == key)
        .and_then(|kv| match kv.value.as_ref()?.value.as_ref()? {
            AnyValue::StringValue(s) => Some(s.clone()),
            AnyValue::IntValue(i) => Some(i.to_string()),
            AnyValue::BoolValue(b) => Some(b.to_string()),
            other => Some(format!("{other:?}")),
        })
}
