//! A fast backend: answers every request at once with a small JSON body, so what the
//! benchmark measures is the proxy in front of it. A POST to `/mcp` gets a JSON-RPC
//! `tools/call` result echoing the request's id; anything else a fixed REST answer.

use bytes::Bytes;
use http::{header, HeaderValue, Method, Request, Response};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use serde_json::Value;
use std::convert::Infallible;
use std::net::SocketAddr;
use tokio::net::TcpListener;

const REST_ANSWER: &str =
    r#"{"ok":true,"matches":3,"items":[{"ts":"2026-11-30T06:00:00Z","msg":"order 17 shipped"}]}"#;

pub async fn run(listen: SocketAddr) -> anyhow::Result<()> {
    serve(TcpListener::bind(listen).await?).await
}

/// Serves `listener` until accepting fails.
pub async fn serve(listener: TcpListener) -> anyhow::Result<()> {
    loop {
        let (stream, _) = listener.accept().await?;
        let _ = stream.set_nodelay(true);
        tokio::spawn(async move {
            let service = hyper::service::service_fn(|request| async {
                Ok::<_, Infallible>(answer(request).await)
            });
            let _ = hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(stream), service)
                .await;
        });
    }
}

async fn answer(request: Request<Incoming>) -> Response<Full<Bytes>> {
    let mcp = request.method() == Method::POST && request.uri().path() == "/mcp";
    let body = request
        .into_body()
        .collect()
        .await
        .map(|b| b.to_bytes())
        .unwrap_or_default();
    let text = if mcp {
        Bytes::from(mcp_answer(&body))
    } else {
        Bytes::from_static(REST_ANSWER.as_bytes())
    };
    let mut response = Response::new(Full::new(text));
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    response
}

/// The result of a `tools/call`, with the request's id.
fn mcp_answer(body: &[u8]) -> String {
    #[derive(serde::Deserialize)]
    struct Id {
        id: Option<Value>,
    }
    let id = serde_json::from_slice::<Id>(body)
        .ok()
        .and_then(|m| m.id)
        .unwrap_or(Value::Null);
    format!(
        r#"{{"jsonrpc":"2.0","id":{id},"result":{{"content":[{{"type":"text","text":"3 matches"}}],"isError":false}}}}"#
    )
}
