//! The floor: a pass-through reverse proxy on the same stack as toolgate (hyper-util's
//! auto server, its pooled legacy client, Tokio), doing nothing else. Bodies stream both
//! ways; hop-by-hop headers are not even stripped, so it is a lower bound, not a product.

use http::{Request, Response, Uri};
use http_body_util::{combinators::BoxBody, BodyExt};
use hyper::body::Incoming;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpListener;

type Body = BoxBody<bytes::Bytes, hyper::Error>;

struct Proxy {
    client: Client<HttpConnector, Incoming>,
    base: String,
}

pub async fn run(listen: SocketAddr, upstream: String) -> anyhow::Result<()> {
    serve(TcpListener::bind(listen).await?, upstream).await
}

/// Serves on a bound listener, so `inproc` can run the floor on an ephemeral port.
pub async fn serve(listener: TcpListener, upstream: String) -> anyhow::Result<()> {
    let mut connector = HttpConnector::new();
    connector.set_nodelay(true);
    // The pool settings toolgate's own upstream client uses (proxy::upstream).
    let client = Client::builder(TokioExecutor::new())
        .pool_idle_timeout(Duration::from_secs(60))
        .pool_max_idle_per_host(512)
        .build(connector);
    let proxy = Arc::new(Proxy {
        client,
        base: upstream.trim_end_matches('/').to_string(),
    });
    let builder = Arc::new(auto::Builder::new(TokioExecutor::new()));
    loop {
        let (stream, _) = listener.accept().await?;
        let _ = stream.set_nodelay(true);
        let proxy = proxy.clone();
        let builder = builder.clone();
        tokio::spawn(async move {
            let service = hyper::service::service_fn(move |request| {
                let proxy = proxy.clone();
                async move { proxy.forward(request).await }
            });
            let _ = builder
                .serve_connection(TokioIo::new(stream), service)
                .await;
        });
    }
}

impl Proxy {
    async fn forward(&self, request: Request<Incoming>) -> Result<Response<Body>, anyhow::Error> {
        let (mut parts, body) = request.into_parts();
        let path = parts.uri.path_and_query().map_or("/", |p| p.as_str());
        parts.uri = format!("{}{path}", self.base).parse::<Uri>()?;
        let response = self
            .client
            .request(Request::from_parts(parts, body))
            .await?;
        Ok(response.map(BodyExt::boxed))
    }
}
