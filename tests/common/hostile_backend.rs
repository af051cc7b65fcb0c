//! A backend that serves REST and MCP (Streamable HTTP) on one port and can turn
//! hostile on request: bodies and SSE events of 100 MB, streams that never end, a flood
//! of response headers. Hostile bodies are generated as they are sent (never held
//! whole), and the bytes handed out are counted, so a test can prove the gateway stopped
//! reading early. Every request that reaches it is counted.

use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body_util::{combinators::BoxBody, BodyExt, Full, StreamBody};
use hyper::body::{Frame, Incoming};
use hyper_util::rt::TokioIo;
use serde_json::{json, Value};
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpListener;

type Body = BoxBody<Bytes, Infallible>;

/// 100 MB: the size of every oversized answer.
pub const HUGE: u64 = 100 * 1024 * 1024;

static PAD: [u8; 64 * 1024] = [b'a'; 64 * 1024];

#[derive(Default)]
pub struct Counters {
    /// Requests received, of any kind.
    pub requests: AtomicUsize,
    /// Bytes of hostile bodies handed to the connection so far.
    pub streamed: AtomicU64,
    /// Requests that arrived asking for a protocol upgrade.
    pub upgrades: AtomicUsize,
}

pub struct HostileBackend {
    pub addr: SocketAddr,
    pub counters: Arc<Counters>,
}

impl HostileBackend {
    pub async fn start() -> HostileBackend {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let counters = Arc::new(Counters::default());
        let shared = counters.clone();
        tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let counters = shared.clone();
                tokio::spawn(async move {
                    let service = hyper::service::service_fn(move |req: Request<Incoming>| {
                        let counters = counters.clone();
                        async move { Ok::<_, Infallible>(respond(req, &counters).await) }
                    });
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), service)
                        .await;
                });
            }
        });
        HostileBackend { addr, counters }
    }

    pub fn requests(&self) -> usize {
        self.counters.requests.load(Ordering::SeqCst)
    }

    pub fn upgrades(&self) -> usize {
        self.counters.upgrades.load(Ordering::SeqCst)
    }

    pub fn streamed(&self) -> u64 {
        self.counters.streamed.load(Ordering::SeqCst)
    }
}

async fn respond(req: Request<Incoming>, counters: &Arc<Counters>) -> Response<Body> {
    counters.requests.fetch_add(1, Ordering::SeqCst);
    let (parts, body) = req.into_parts();
    if parts.headers.contains_key("upgrade") || parts.headers.contains_key("http2-settings") {
        counters.upgrades.fetch_add(1, Ordering::SeqCst);
    }
    let bytes = body
        .collect()
        .await
        .map(|b| b.to_bytes())
        .unwrap_or_default();
    let path = parts.uri.path().to_string();
    match (parts.method.as_str(), path.as_str()) {
        ("POST", "/mcp") => mcp(&bytes, counters),
        ("GET", "/mcp") => sse(counters, Stream::Endless),
        ("GET", "/huge") => {
            let head = Bytes::from_static(b"{\"pad\":\"");
            streamed("application/json", head, counters, Stream::Huge)
        }
        ("GET", "/endless") => streamed(
            "application/json",
            Bytes::from_static(b"{"),
            counters,
            Stream::Endless,
        ),
        ("GET", "/flood") => {
            let mut response = json_body(200, &json!({}));
            for i in 0..400 {
                let name = http::HeaderName::try_from(format!("x-flood-{i}")).unwrap();
                response.headers_mut().insert(name, "1".parse().unwrap());
            }
            response
        }
        ("POST", "/issues") => json_body(201, &json!({"id": "OPS-1"})),
        ("GET", p) if p.starts_with("/logs/") => json_body(
            200,
            &json!({"lines": [{"msg": "order 17 shipped", "client_ip": "10.1.2.3"}]}),
        ),
        _ => json_body(200, &json!({})),
    }
}

fn mcp(bytes: &[u8], counters: &Arc<Counters>) -> Response<Body> {
    let message: Value = serde_json::from_slice(bytes).unwrap_or(Value::Null);
    let id = message["id"].clone();
    if message.get("id").is_none() {
        return empty(202);
    }
    let result = |value: Value| json!({"jsonrpc": "2.0", "id": id, "result": value});
    match message["method"].as_str().unwrap_or("") {
        "initialize" => {
            let mut response = json_body(
                200,
                &result(
                    json!({"protocolVersion": "2025-06-18", "capabilities": {"tools": {}},
                               "serverInfo": {"name": "hostile", "version": "1"}}),
                ),
            );
            response
                .headers_mut()
                .insert("mcp-session-id", "hostile-session-1".parse().unwrap());
            response
        }
        "tools/call" => match message["params"]["name"].as_str().unwrap_or("") {
            "mcp_logs" => json_body(
                200,
                &result(json!({"content": [{"type": "text", "text": "ok"}],
                               "structuredContent": {"lines": ["ok"]}})),
            ),
            "endless_sse" => sse(counters, Stream::Endless),
            "huge_event" | "huge_event_once" => sse(counters, Stream::Huge),
            "huge_json" => {
                let head = format!(r#"{{"jsonrpc":"2.0","id":{id},"result":{{"pad":""#);
                streamed(
                    "application/json",
                    Bytes::from(head),
                    counters,
                    Stream::Huge,
                )
            }
            _ => json_body(
                200,
                &json!({"jsonrpc": "2.0", "id": id, "error": {"code": -32602, "message": "Unknown tool"}}),
            ),
        },
        _ => json_body(200, &result(json!({}))),
    }
}

/// How a generated body goes on.
#[derive(Debug, Clone, Copy)]
enum Stream {
    /// 100 MB of padding, then whatever closes it (never reached if the reader stops).
    Huge,
    /// A small piece every 20 ms, forever.
    Endless,
}

fn sse(counters: &Arc<Counters>, kind: Stream) -> Response<Body> {
    let head = match kind {
        Stream::Huge => Bytes::from_static(b"event: message\ndata: "),
        Stream::Endless => Bytes::new(),
    };
    streamed("text/event-stream", head, counters, kind)
}

/// A body made as it is read: `head`, then the stream's pieces, counted.
fn streamed(
    content_type: &str,
    head: Bytes,
    counters: &Arc<Counters>,
    kind: Stream,
) -> Response<Body> {
    let counters = counters.clone();
    let state = (Some(head), 0u64);
    let frames = futures_util::stream::unfold(state, move |(head, sent)| {
        let counters = counters.clone();
        async move {
            if let Some(head) = head {
                return Some((Ok(Frame::data(head)), (None, sent)));
            }
            let piece = match kind {
                Stream::Huge if sent >= HUGE => return None,
                Stream::Huge => Bytes::from_static(&PAD),
                Stream::Endless => {
                    tokio::time::sleep(Duration::from_millis(20)).await;
                    let progress = json!({"jsonrpc": "2.0", "method": "notifications/progress",
                                          "params": {"progressToken": 1, "progress": sent}});
                    Bytes::from(format!("event: message\ndata: {progress}\n\n"))
                }
            };
            let len = piece.len() as u64;
            counters.streamed.fetch_add(len, Ordering::SeqCst);
            Some((Ok::<_, Infallible>(Frame::data(piece)), (None, sent + len)))
        }
    });
    let mut response = Response::new(BodyExt::boxed(StreamBody::new(frames)));
    response
        .headers_mut()
        .insert("content-type", content_type.parse().unwrap());
    response
}

fn json_body(status: u16, value: &Value) -> Response<Body> {
    let mut response = Response::new(Full::new(Bytes::from(value.to_string())).boxed());
    *response.status_mut() = StatusCode::from_u16(status).unwrap();
    response
        .headers_mut()
        .insert("content-type", "application/json".parse().unwrap());
    response
}

fn empty(status: u16) -> Response<Body> {
    let mut response = Response::new(Full::new(Bytes::new()).boxed());
    *response.status_mut() = StatusCode::from_u16(status).unwrap();
    response
}
