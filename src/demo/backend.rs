//! The demo's example backend: a small HTTP service behind the sidecar. It answers the
//! example tools, and fails `export_report` the way real backends fail (a 500 with a
//! stack trace and a hostname), so the demo can show that none of it reaches the agent.
//! On `/mcp` it is a stateless MCP server (Streamable HTTP, JSON answers) with one tool,
//! `lookup_order`.

use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use serde_json::{json, Value};
use std::convert::Infallible;
use std::net::SocketAddr;
use tokio::net::TcpListener;

pub async fn start() -> std::io::Result<SocketAddr> {
    let listener = TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            tokio::spawn(async move {
                let service = hyper::service::service_fn(|request| async {
                    Ok::<_, Infallible>(answer(request).await)
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), service)
                    .await;
            });
        }
    });
    Ok(addr)
}

async fn answer(request: Request<Incoming>) -> Response<Full<Bytes>> {
    let method = request.method().clone();
    let path = request.uri().path().to_string();
    let body = request
        .into_body()
        .collect()
        .await
        .map(|b| b.to_bytes())
        .unwrap_or_default();
    let (status, text) = match (method.as_str(), path.as_str()) {
        ("GET", p) if p.starts_with("/logs/") => (
            StatusCode::OK,
            r#"{"lines":[{"ts":"2026-11-30T06:00:00Z","msg":"order 17 shipped","client_ip":"10.1.2.3"}],"node":"ip-10-1-2-3.internal"}"#.to_string(),
        ),
        ("GET", p) if p.starts_with("/status/") => (StatusCode::OK, r#"{"healthy":true}"#.to_string()),
        ("GET", p) if p.starts_with("/orders/") => (
            StatusCode::OK,
            format!(r#"{{"order_id":"{}","status":"delivered"}}"#, &p["/orders/".len()..]),
        ),
        ("POST", "/issues") => (
            StatusCode::CREATED,
            format!(r#"{{"id":"OPS-{}","received":{}}}"#, body.len(), String::from_utf8_lossy(&body)),
        ),
        ("POST", "/refunds") => (
            StatusCode::CREATED,
            format!(r#"{{"refund":"RF-{}","received":{}}}"#, body.len(), String::from_utf8_lossy(&body)),
        ),
        ("POST", "/mcp") => return mcp(&body),
        ("GET", p) if p.starts_with("/reports/") => (
            StatusCode::INTERNAL_SERVER_ERROR,
            "Traceback (most recent call last): psycopg2.OperationalError: could not connect to db-7.internal:5432".to_string(),
        ),
        _ => (StatusCode::NOT_FOUND, r#"{"error":"no such route"}"#.to_string()),
    };
    json_response(status, text)
}

fn json_response(status: StatusCode, text: String) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(Bytes::from(text)));
    *response.status_mut() = status;
    response.headers_mut().insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static("application/json"),
    );
    response
}

/// One JSON-RPC message: `initialize`, `tools/list` and `tools/call` of `lookup_order`
/// are answered; a notification is accepted with 202.
fn mcp(body: &[u8]) -> Response<Full<Bytes>> {
    let message: Value = serde_json::from_slice(body).unwrap_or_default();
    let Some(id) = message
        .get("id")
        .filter(|_| message.get("method").is_some())
    else {
        let mut accepted = Response::new(Full::new(Bytes::new()));
        *accepted.status_mut() = StatusCode::ACCEPTED;
        return accepted;
    };
    let result = match message["method"].as_str().unwrap_or("") {
        "initialize" => json!({"protocolVersion": "2025-06-18", "capabilities": {"tools": {}},
            "serverInfo": {"name": "toolgate-demo-backend", "version": env!("CARGO_PKG_VERSION")}}),
        "tools/list" => json!({"tools": [{"name": "lookup_order",
            "description": "Look up one order's status.",
            "inputSchema": {"type": "object", "required": ["order_id"],
                "properties": {"order_id": {"type": "string"}}}}]}),
        "tools/call" if message["params"]["name"] == "lookup_order" => {
            let order = message["params"]["arguments"]["order_id"].clone();
            let status = json!({"order_id": order, "status": "shipped", "carrier": "DHL"});
            json!({"content": [{"type": "text", "text": status.to_string()}], "structuredContent": status})
        }
        _ => {
            let error = json!({"jsonrpc": "2.0", "id": id, "error": {"code": -32601, "message": "Method not found"}});
            return json_response(StatusCode::OK, error.to_string());
        }
    };
    let answer = json!({"jsonrpc": "2.0", "id": id, "result": result});
    json_response(StatusCode::OK, answer.to_string())
}
