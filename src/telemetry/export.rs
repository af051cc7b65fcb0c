//! The OTLP/HTTP exporter's HTTP client, run on the sidecar's own runtime.

use bytes::Bytes;
use http_body_util::{BodyExt, Full, Limited};
use hyper_util::client::legacy::{connect::HttpConnector, Client};
use hyper_util::rt::TokioExecutor;
use opentelemetry_http::{HttpClient, HttpError, Request, Response};
use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

/// The HTTP client of the OTLP/HTTP exporter. The span batcher runs on its own thread
/// with no Tokio reactor, so each request is spawned onto the sidecar's runtime.
#[derive(Debug, Clone)]
pub struct RuntimeHttpClient {
    client: Client<HttpConnector, Full<Bytes>>,
    runtime: tokio::runtime::Handle,
    timeout: Duration,
}

impl RuntimeHttpClient {
    /// Must be called inside the Tokio runtime.
    pub fn new(timeout: Duration) -> RuntimeHttpClient {
        RuntimeHttpClient {
            client: Client::builder(TokioExecutor::new()).build_http(),
            runtime: tokio::runtime::Handle::current(),
            timeout,
        }
    }
}

const MAX_RESPONSE: usize = 1 << 20;

impl HttpClient for RuntimeHttpClient {
    fn send_bytes<'a, 'b>(
        &'a self,
        request: Request<Bytes>,
    ) -> Pin<Box<dyn Future<Output = Result<Response<Bytes>, HttpError>> + Send + 'b>>
    where
        'a: 'b,
        Self: 'b,
    {
        let client = self.client.clone();
        let timeout = self.timeout;
        let task = self.runtime.spawn(async move {
            let (parts, body) = request.into_parts();
            let response = tokio::time::timeout(
                timeout,
                client.request(Request::from_parts(parts, Full::new(body))),
            )
            .await??;
            let (parts, body) = response.into_parts();
            let body = Limited::new(body, MAX_RESPONSE).collect().await?.to_bytes();
            Ok::<_, HttpError>(Response::from_parts(parts, body))
        });
        Box::pin(async move { task.await? })
    }
}
