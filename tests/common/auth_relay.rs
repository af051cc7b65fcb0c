//! A relay that adds an agent's bearer token to every request and streams the answer back
//! as it comes: for clients that can't send headers of their own (the MCP conformance
//! suite), so they can be run against a sidecar that authenticates every call.
#![allow(dead_code)]

use bytes::Bytes;
use http::{HeaderValue, Request, Response};
use http_body_util::{combinators::BoxBody, BodyExt};
use hyper::body::Incoming;
use hyper_util::client::legacy::{connect::HttpConnector, Client};
use hyper_util::rt::{TokioExecutor, TokioIo};
use std::net::SocketAddr;
use tokio::net::TcpListener;

type Body = BoxBody<Bytes, hyper::Error>;

/// Listens on a free loopback port and relays to `target` with `token`.
pub async fn start(target: SocketAddr, token: &str) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let client: Client<HttpConnector, Incoming> =
        Client::builder(TokioExecutor::new()).build_http();
    let bearer = HeaderValue::from_str(&format!("Bearer {token}")).unwrap();
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let (client, bearer) = (client.clone(), bearer.clone());
            tokio::spawn(async move {
                let service = hyper::service::service_fn(move |req: Request<Incoming>| {
                    let (client, bearer) = (client.clone(), bearer.clone());
                    async move { relay(&client, target, bearer, req).await }
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), service)
                    .await;
            });
        }
    });
    addr
}

async fn relay(
    client: &Client<HttpConnector, Incoming>,
    target: SocketAddr,
    bearer: HeaderValue,
    request: Request<Incoming>,
) -> Result<Response<Body>, hyper::Error> {
    let (mut parts, body) = request.into_parts();
    let path = parts
        .uri
        .path_and_query()
        .map_or("/", |p| p.as_str())
        .to_string();
    parts.uri = format!("http://{target}{path}").parse().unwrap();
    parts.headers.insert(http::header::AUTHORIZATION, bearer);
    parts.headers.remove(http::header::HOST);
    match client.request(Request::from_parts(parts, body)).await {
        Ok(response) => Ok(response.map(BodyExt::boxed)),
        Err(e) => {
            let mut response = Response::new(
                http_body_util::Full::new(Bytes::from(format!("relay: {e}")))
                    .map_err(|never| match never {})
                    .boxed(),
            );
            *response.status_mut() = http::StatusCode::BAD_GATEWAY;
            Ok(response)
        }
    }
}
