//! A small in-test MCP server speaking Streamable HTTP with hyper, for protocol tests
//! that need exact control: JSON or SSE answers, events held until the test releases
//! them, backend failures, and a record of every request that reached it.
#![allow(dead_code)]

use bytes::Bytes;
use http::{HeaderMap, Method, Request, Response, StatusCode};
use http_body_util::{combinators::BoxBody, BodyExt, Full, StreamBody};
use hyper::body::{Frame, Incoming};
use hyper_util::rt::TokioIo;
use serde_json::{json, Value};
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::net::TcpListener;
use tokio::sync::{mpsc, Notify};

type Body = BoxBody<Bytes, Infallible>;

/// One request as the backend saw it.
#[derive(Debug, Clone)]
pub struct Seen {
    pub method: Method,
    pub headers: HeaderMap,
    pub body: Value,
}

pub struct McpBackend {
    pub addr: SocketAddr,
    pub seen: Arc<Mutex<Vec<Seen>>>,
    /// Lets held events go (`slow_stream` results, the GET stream's second event).
    pub release: Arc<Notify>,
}

const LINES: &str =
    r#"{"lines":[{"msg":"order 17 shipped","client_ip":"10.1.2.3"}],"host":"db-7.internal"}"#;

impl McpBackend {
    pub async fn start() -> McpBackend {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let seen = Arc::new(Mutex::new(Vec::new()));
        let release = Arc::new(Notify::new());
        let sessions = Arc::new(AtomicUsize::new(0));
        let (record, hold) = (seen.clone(), release.clone());
        tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let (record, hold, sessions) = (record.clone(), hold.clone(), sessions.clone());
                tokio::spawn(async move {
                    let service = hyper::service::service_fn(move |req: Request<Incoming>| {
                        let (record, hold, sessions) =
                            (record.clone(), hold.clone(), sessions.clone());
                        async move {
                            let (parts, body) = req.into_parts();
                            let bytes = body
                                .collect()
                                .await
                                .map(|b| b.to_bytes())
                                .unwrap_or_default();
                            let body: Value = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
                            let seen = Seen {
                                method: parts.method,
                                headers: parts.headers,
                                body,
                            };
                            record.lock().unwrap().push(seen.clone());
                            Ok::<_, Infallible>(respond(&seen, &hold, &sessions).await)
                        }
                    });
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), service)
                        .await;
                });
            }
        });
        McpBackend {
            addr,
            seen,
            release,
        }
    }

    /// The JSON-RPC bodies of the POSTs received, in order.
    pub fn posts(&self) -> Vec<Value> {
        let seen = self.seen.lock().unwrap();
        seen.iter()
            .filter(|s| s.method == Method::POST)
            .map(|s| s.body.clone())
            .collect()
    }

    /// The tools really called, in order.
    pub fn calls(&self) -> Vec<String> {
        self.posts()
            .iter()
            .filter(|b| b["method"] == "tools/call")
            .map(|b| b["params"]["name"].as_str().unwrap_or("").to_string())
            .collect()
    }

    pub fn last(&self) -> Seen {
        self.seen
            .lock()
            .unwrap()
            .last()
            .cloned()
            .expect("a request")
    }
}

fn json_body(status: u16, value: &Value) -> Response<Body> {
    let mut response = Response::new(Full::new(Bytes::from(value.to_string())).boxed());
    *response.status_mut() = StatusCode::from_u16(status).unwrap();
    response
        .headers_mut()
        .insert("content-type", "application/json".parse().unwrap());
    response
}

fn result(id: &Value, result: Value) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "result": result})
}

fn event(value: &Value) -> Bytes {
    Bytes::from(format!("event: message\r\ndata: {value}\r\n\r\n"))
}

/// What an SSE response waits for between its first events and the rest.
enum Hold {
    Nothing,
    Release(Arc<Notify>),
    Sleep(Duration),
}

/// An SSE response whose events a task sends, holding between the first and the rest.
fn sse(first: Vec<Bytes>, rest: Vec<Bytes>, hold: Hold) -> Response<Body> {
    let (tx, rx) = mpsc::channel::<Bytes>(8);
    tokio::spawn(async move {
        for chunk in first {
            let _ = tx.send(chunk).await;
        }
        match hold {
            Hold::Nothing => {}
            Hold::Release(notify) => notify.notified().await,
            Hold::Sleep(delay) => tokio::time::sleep(delay).await,
        }
        for chunk in rest {
            let _ = tx.send(chunk).await;
        }
    });
    let frames = futures_util::stream::unfold(rx, |mut rx| async move {
        let chunk = rx.recv().await?;
        Some((Ok::<_, Infallible>(Frame::data(chunk)), rx))
    });
    let mut response = Response::new(BodyExt::boxed(StreamBody::new(frames)));
    response
        .headers_mut()
        .insert("content-type", "text/event-stream".parse().unwrap());
    response
}

fn logs_result(id: &Value) -> Value {
    let structured: Value = serde_json::from_str(LINES).unwrap();
    result(
        id,
        json!({"content": [{"type": "text", "text": LINES}], "structuredContent": structured}),
    )
}

fn tool(name: &str) -> Value {
    json!({"name": name, "inputSchema": {"type": "object"},
           "outputSchema": {"type": "object", "required": ["host"], "properties": {"host": {"type": "string"}}}})
}

async fn respond(seen: &Seen, hold: &Arc<Notify>, sessions: &AtomicUsize) -> Response<Body> {
    let progress =
        json!({"jsonrpc": "2.0", "method": "notifications/progress", "params": {"progress": 1}});
    match seen.method {
        // A resumed stream replays a call's result before going on.
        Method::GET if seen.headers.contains_key("last-event-id") => {
            let replay = vec![event(&logs_result(&json!(5))), event(&progress)];
            return sse(replay, vec![], Hold::Nothing);
        }
        Method::GET => {
            return sse(
                vec![event(&progress)],
                vec![event(&progress)],
                Hold::Release(hold.clone()),
            )
        }
        Method::DELETE => return json_body(200, &json!({})),
        _ => {}
    }
    let body = &seen.body;
    if body.is_array() {
        // Like the 2.x Python server: batches are not accepted upstream.
        return json_body(
            400,
            &json!({"jsonrpc": "2.0", "id": null, "error": {"code": -32600, "message": "no batches"}}),
        );
    }
    let id = body["id"].clone();
    let method = body["method"].as_str().unwrap_or("");
    if body.get("id").is_none() || body.get("method").is_none() {
        let mut response = Response::new(Full::new(Bytes::new()).boxed());
        *response.status_mut() = StatusCode::ACCEPTED;
        return response;
    }
    match method {
        "initialize" => {
            let n = sessions.fetch_add(1, Ordering::SeqCst);
            let mut response = json_body(
                200,
                &result(
                    &id,
                    json!({"protocolVersion": "2025-11-25", "capabilities": {}, "serverInfo": {"name": "t", "version": "1"}}),
                ),
            );
            response
                .headers_mut()
                .insert("mcp-session-id", format!("sess-{n}").parse().unwrap());
            response
        }
        "ping" | "resources/list" => json_body(200, &result(&id, json!({"resources": []}))),
        "tools/list" => {
            let tools = [
                "read_logs",
                "create_issue",
                "echo",
                "secret_tool",
                "stream_logs",
            ]
            .map(tool);
            let listing = result(&id, json!({"tools": tools}));
            let note = json!({"jsonrpc": "2.0", "method": "notifications/message", "params": {"level": "info", "data": "listing"}});
            sse(vec![event(&note)], vec![event(&listing)], Hold::Nothing)
        }
        "tools/call" => call(seen, &id, hold).await,
        _ => json_body(
            200,
            &json!({"jsonrpc": "2.0", "id": id, "error": {"code": -32601, "message": "Method not found"}}),
        ),
    }
}

async fn call(seen: &Seen, id: &Value, hold: &Arc<Notify>) -> Response<Body> {
    let params = &seen.body["params"];
    let progress =
        json!({"jsonrpc": "2.0", "method": "notifications/progress", "params": {"progress": 1}});
    match params["name"].as_str().unwrap_or("") {
        "read_logs" => json_body(200, &logs_result(id)),
        // The tool's own error, unshaped, in one JSON answer and on an event stream.
        "fails_softly" => json_body(
            200,
            &result(
                id,
                json!({"content": [{"type": "text", "text": "no order 7"}], "isError": true}),
            ),
        ),
        "fails_softly_sse" => sse(
            vec![event(&result(id, json!({"content": [], "isError": true})))],
            vec![],
            Hold::Nothing,
        ),
        // A response whose id is not the request's: clients take it as the answer anyway.
        "stray_id" => sse(
            vec![event(&logs_result(&json!("other")))],
            vec![],
            Hold::Nothing,
        ),
        "stream_logs" => sse(
            vec![event(&progress), event(&logs_result(id))],
            vec![],
            Hold::Nothing,
        ),
        // An event stream that ends without an event.
        "sse_empty" => sse(vec![], vec![], Hold::Nothing),
        // A JSON answer that promises more than it sends: the connection breaks mid-body.
        "cuts_json" => {
            let prefix = format!(r#"{{"jsonrpc":"2.0","id":{id},"result":{{"content":["#);
            // The head and the first bytes go out; a moment later the body ends short.
            let frames = futures_util::stream::unfold(Some(prefix), |prefix| async move {
                match prefix {
                    Some(prefix) => {
                        let frame = Ok::<_, Infallible>(Frame::data(Bytes::from(prefix)));
                        Some((frame, None))
                    }
                    None => {
                        tokio::time::sleep(Duration::from_millis(200)).await;
                        None
                    }
                }
            });
            let mut r = Response::new(BodyExt::boxed(StreamBody::new(frames)));
            let headers = r.headers_mut();
            headers.insert("content-type", "application/json".parse().unwrap());
            headers.insert("content-length", "4096".parse().unwrap());
            r
        }
        // The result first, then the stream stays open a while (a trailing note).
        name if name.starts_with("lingers") => sse(
            vec![event(&result(
                id,
                json!({"content": [{"type": "text", "text": "ok"}]}),
            ))],
            vec![event(&progress)],
            Hold::Sleep(Duration::from_secs(3)),
        ),
        name if name.starts_with("slow_stream") => {
            let done = result(id, json!({"content": [{"type": "text", "text": "done"}]}));
            let hold = match name {
                "slow_stream" => Hold::Release(hold.clone()),
                _ => Hold::Sleep(Duration::from_secs(2)),
            };
            sse(vec![event(&progress)], vec![event(&done)], hold)
        }
        // A multi-round call (2026-07-28): input first, then the result.
        "ask_twice" => match params.get("inputResponses") {
            None => json_body(
                200,
                &result(
                    id,
                    json!({"resultType": "input_required", "requestState": "round-1",
                           "inputRequests": {"confirm": {"method": "elicitation/create",
                               "params": {"message": "sure?", "requestedSchema": {"type": "object"}}}}}),
                ),
            ),
            Some(responses) => json_body(
                200,
                &result(
                    id,
                    json!({"resultType": "complete", "content": [{"type": "text",
                           "text": format!("done with {responses} after {}", params["requestState"])}],
                           "structuredContent": {"done": true, "secret": "s3"}}),
                ),
            ),
        },
        "create_issue" => {
            let args = params["arguments"].clone();
            json_body(
                200,
                &result(
                    id,
                    json!({"content": [], "structuredContent": {"args": args}}),
                ),
            )
        }
        "broken" => {
            let mut r = Response::new(
                Full::new(Bytes::from("Traceback: psycopg2 at db-7.internal")).boxed(),
            );
            *r.status_mut() = StatusCode::INTERNAL_SERVER_ERROR;
            r
        }
        "slow" => {
            tokio::time::sleep(Duration::from_millis(1500)).await;
            json_body(200, &logs_result(id))
        }
        "bad_output" => json_body(
            200,
            &result(
                id,
                json!({"content": [], "structuredContent": {"lines": "no"}}),
            ),
        ),
        "rejects" => json_body(
            400,
            &json!({"jsonrpc": "2.0", "id": id, "error": {"code": -32602, "message": "window too wide", "data": {"max": 60}}}),
        ),
        _ => json_body(
            200,
            &json!({"jsonrpc": "2.0", "id": id, "error": {"code": -32602, "message": "Unknown tool"}}),
        ),
    }
}
