//! The OTLP/HTTP exporters' HTTP client, run on the runtime it is made in: the span
//! exporter's own ([`super::otlp_send`]) or, for metrics, the sidecar's.

use bytes::Bytes;
use http_body_util::{BodyExt, Full, Limited};
use hyper_util::client::legacy::{connect::HttpConnector, Client};
use hyper_util::rt::TokioExecutor;
use opentelemetry_http::{HttpClient, HttpError, Request, Response};
use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

/// The HTTP client of an OTLP/HTTP exporter. Its callers' threads have no Tokio reactor,
/// so each request is spawned onto the runtime the client was made in.
#[derive(Debug, Clone)]
pub struct RuntimeHttpClient {
    client: Client<HttpConnector, Full<Bytes>>,
    runtime: tokio::runtime::Handle,
    timeout: Duration,
}

impl RuntimeHttpClient {
    /// Must be called inside the Tokio runtime its requests are to run on.
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
