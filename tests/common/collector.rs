//! A real OTLP receiver: the opentelemetry-proto tonic `TraceService` and `MetricsService`
//! on loopback, and an OTLP/HTTP endpoint decoding protobuf (`/v1/traces`,
//! `/v1/metrics`), all collecting every span and metric they are sent.
#![allow(dead_code)]

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use opentelemetry_proto::tonic::collector::metrics::v1::metrics_service_server::{
    MetricsService, MetricsServiceServer,
};
use opentelemetry_proto::tonic::collector::metrics::v1::{
    ExportMetricsServiceRequest, ExportMetricsServiceResponse,
};
use opentelemetry_proto::tonic::collector::trace::v1::trace_service_server::{
    TraceService, TraceServiceServer,
};
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use opentelemetry_proto::tonic::common::v1::any_value::Value as AnyValue;
use opentelemetry_proto::tonic::common::v1::KeyValue;
use opentelemetry_proto::tonic::metrics::v1::Metric;
use opentelemetry_proto::tonic::resource::v1::Resource;
use opentelemetry_proto::tonic::trace::v1::Span;
use prost::Message;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::net::TcpListener;
use tonic::server::NamedService;
use tonic::transport::server::TcpIncoming;

#[derive(Clone, Default)]
pub struct Collector {
    pub spans: Arc<Mutex<Vec<Span>>>,
    /// Every metric of every export, in arrival order (a cumulative metric arrives again
    /// with each export).
    pub metrics: Arc<Mutex<Vec<Metric>>>,
    /// The resource of each metrics export.
    pub metric_resources: Arc<Mutex<Vec<Resource>>>,
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

#[tonic::async_trait]
impl MetricsService for Collector {
    async fn export(
        &self,
        request: tonic::Request<ExportMetricsServiceRequest>,
    ) -> Result<tonic::Response<ExportMetricsServiceResponse>, tonic::Status> {
        self.collect_metrics(request.into_inner());
        Ok(tonic::Response::new(ExportMetricsServiceResponse {
            partial_success: None,
        }))
    }
}

impl Collector {
    fn collect_metrics(&self, request: ExportMetricsServiceRequest) {
        let mut metrics = self.metrics.lock().unwrap();
        let mut resources = self.metric_resources.lock().unwrap();
        for resource in request.resource_metrics {
            if let Some(r) = resource.resource {
                resources.push(r);
            }
            for scope in resource.scope_metrics {
                metrics.extend(scope.metrics);
            }
        }
    }

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
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (collector, task) = Collector::grpc_until(listener, std::future::pending());
        (collector, format!("http://{addr}"), task)
    }

    /// OTLP/gRPC on `listener` until `stop` completes; then the server shuts down
    /// gracefully (GOAWAY, connections closed) and its task ends.
    pub fn grpc_until(
        listener: TcpListener,
        stop: impl std::future::Future<Output = ()> + Send + 'static,
    ) -> (Collector, tokio::task::JoinHandle<()>) {
        let collector = Collector::default();
        let service = Otlp {
            traces: TraceServiceServer::new(collector.clone()),
            metrics: MetricsServiceServer::new(collector.clone()),
        };
        // TCP_NODELAY, as a collector sets it: without it its small frames wait on
        // Nagle's algorithm and every export is slower than against a real one.
        let incoming = TcpIncoming::from(listener).with_nodelay(Some(true));
        let task = tokio::spawn(async move {
            let _ = tonic::transport::Server::builder()
                .serve_with_incoming_shutdown(service, incoming, stop)
                .await;
        });
        (collector, task)
    }

    /// OTLP/HTTP (protobuf) on loopback: `/v1/traces` and `/v1/metrics`.
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
                                assert_eq!(
                                    request.headers()["content-type"],
                                    "application/x-protobuf"
                                );
                                let path = request.uri().path().to_string();
                                let body = request.into_body().collect().await.unwrap().to_bytes();
                                let mut response = http::Response::new(Full::new(Bytes::new()));
                                match path.as_str() {
                                    "/v1/traces" => sink
                                        .collect(ExportTraceServiceRequest::decode(body).unwrap()),
                                    "/v1/metrics" => sink.collect_metrics(
                                        ExportMetricsServiceRequest::decode(body).unwrap(),
                                    ),
                                    _ => *response.status_mut() = http::StatusCode::NOT_FOUND,
                                }
                                Ok::<_, std::convert::Infallible>(response)
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

    /// Waits until a metric named `name` arrives; the latest one of that name.
    pub async fn wait_for_metric(&self, name: &str) -> Metric {
        self.wait_for_metric_where(name, |_| true).await
    }

    /// Waits until a metric named `name` satisfying `pick` arrives; the latest such.
    pub async fn wait_for_metric_where(
        &self,
        name: &str,
        pick: impl Fn(&Metric) -> bool,
    ) -> Metric {
        for _ in 0..100 {
            if let Some(metric) = self
                .metrics
                .lock()
                .unwrap()
                .iter()
                .rev()
                .find(|m| m.name == name && pick(m))
            {
                return metric.clone();
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        panic!(
            "metric {name} never arrived as expected; got {:?}",
            self.metrics
                .lock()
                .unwrap()
                .iter()
                .map(|m| &m.name)
                .collect::<Vec<_>>()
        );
    }
}

/// The trace and metrics services on one gRPC server, routed by path (tonic's router
/// needs its `router` feature, which this crate doesn't build).
#[derive(Clone)]
struct Otlp {
    traces: TraceServiceServer<Collector>,
    metrics: MetricsServiceServer<Collector>,
}

impl tonic::codegen::Service<http::Request<tonic::body::Body>> for Otlp {
    type Response = http::Response<tonic::body::Body>;
    type Error = std::convert::Infallible;
    type Future = tonic::codegen::BoxFuture<Self::Response, Self::Error>;

    fn poll_ready(
        &mut self,
        _cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<(), Self::Error>> {
        std::task::Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: http::Request<tonic::body::Body>) -> Self::Future {
        let metrics = <MetricsServiceServer<Collector> as NamedService>::NAME;
        let path = request.uri().path();
        if path
            .strip_prefix('/')
            .is_some_and(|p| p.starts_with(metrics))
        {
            self.metrics.call(request)
        } else {
            self.traces.call(request)
        }
    }
}

/// An attribute's value as text.
pub fn attr(span: &Span, key: &str) -> Option<String> {
    kv(&span.attributes, key)
}

/// The value of `key` among `attributes` (a span's, a data point's, a resource's), as text.
pub fn kv(attributes: &[KeyValue], key: &str) -> Option<String> {
    attributes.iter().find(|kv| kv.key == key).and_then(|kv| {
        match kv.value.as_ref()?.value.as_ref()? {
            AnyValue::StringValue(s) => Some(s.clone()),
            AnyValue::IntValue(i) => Some(i.to_string()),
            AnyValue::BoolValue(b) => Some(b.to_string()),
            other => Some(format!("{other:?}")),
        }
    })
}

/// An OTLP/HTTP endpoint that answers every export with `status` (a collector that is up
/// but refuses: overloaded, misconfigured, behind a proxy that says no), counting the
/// requests it was sent by path.
pub async fn refusing_http(
    status: u16,
) -> (
    SocketAddr,
    Arc<Mutex<std::collections::BTreeMap<String, u64>>>,
) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let seen = Arc::new(Mutex::new(std::collections::BTreeMap::new()));
    let count = seen.clone();
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let count = count.clone();
            tokio::spawn(async move {
                let service = hyper::service::service_fn(
                    move |request: http::Request<hyper::body::Incoming>| {
                        let count = count.clone();
                        async move {
                            let path = request.uri().path().to_string();
                            let _ = request.into_body().collect().await;
                            *count.lock().unwrap().entry(path).or_insert(0) += 1;
                            let mut response =
                                http::Response::new(Full::new(Bytes::from_static(b"no")));
                            *response.status_mut() = http::StatusCode::from_u16(status).unwrap();
                            Ok::<_, std::convert::Infallible>(response)
                        }
                    },
                );
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(hyper_util::rt::TokioIo::new(stream), service)
                    .await;
            });
        }
    });
    (addr, seen)
}
