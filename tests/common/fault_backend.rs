//! A raw TCP backend that misbehaves on demand: it refuses connections, resets them in
//! the middle of a response, hangs, or answers with bytes that are not HTTP. Raw TCP,
//! not hyper, because a well-behaved HTTP server can't be made to break the protocol.
//!
//! Every request whose head arrived is recorded with the fault in force, so a test can
//! tell how many times the backend really saw a call. A healthy answer always says
//! `connection: close`: no pooled connection outlives a fault change, so switching to
//! [`Fault::Refuse`] really refuses the next call.
#![allow(dead_code)]

use serde_json::{json, Value};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;

/// What the backend does with the next request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// A correct answer: `{"lines": []}`, or a JSON-RPC result on `/mcp`.
    Healthy,
    /// Nothing listens on the port.
    Refuse,
    /// Half a response head, then a TCP reset (`SO_LINGER` 0).
    ResetHead,
    /// A whole head and part of the body it announces, then a TCP reset.
    ResetBody,
    /// Reads the request and never answers, holding the connection open.
    Hang,
    /// Bytes that are not HTTP, with backend internals in them, then a clean close.
    Garbage,
}

/// The internals the garbage carries: none of them may reach an agent.
pub const GARBAGE_SECRETS: [&str; 3] = ["Traceback", "db-7.internal", "SELECT"];
const GARBAGE: &[u8] =
    b"Traceback (most recent call last):\n  psycopg2 at db-7.internal:5432 SELECT * FROM secrets\n\x00\xff\xfe";

/// One request whose head reached the backend.
#[derive(Debug, Clone)]
pub struct Hit {
    pub method: String,
    pub path: String,
    pub fault: Fault,
}

pub struct FaultBackend {
    pub addr: SocketAddr,
    state: Arc<Mutex<State>>,
    accept: Mutex<Option<JoinHandle<()>>>,
}

struct State {
    fault: Fault,
    hits: Vec<Hit>,
}

impl FaultBackend {
    pub async fn start() -> FaultBackend {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let state = Arc::new(Mutex::new(State {
            fault: Fault::Healthy,
            hits: Vec::new(),
        }));
        let accept = tokio::spawn(accept_loop(listener, state.clone()));
        FaultBackend {
            addr,
            state,
            accept: Mutex::new(Some(accept)),
        }
    }

    /// Switches the fault for the next requests. `Refuse` closes the listener; any other
    /// fault opens it again on the same port.
    pub async fn set(&self, fault: Fault) {
        self.state.lock().unwrap().fault = fault;
        let running = self.accept.lock().unwrap().take();
        match (fault, running) {
            (Fault::Refuse, Some(task)) => {
                task.abort();
                let _ = task.await;
            }
            (Fault::Refuse, None) => {}
            (_, Some(task)) => *self.accept.lock().unwrap() = Some(task),
            (_, None) => {
                // tokio binds with SO_REUSEADDR, so the port is free again at once.
                let listener = TcpListener::bind(self.addr).await.unwrap();
                let task = tokio::spawn(accept_loop(listener, self.state.clone()));
                *self.accept.lock().unwrap() = Some(task);
            }
        }
    }

    /// The requests that reached the backend under `fault` for `path`.
    pub fn hits(&self, fault: Fault, path: &str) -> usize {
        self.state
            .lock()
            .unwrap()
            .hits
            .iter()
            .filter(|h| h.fault == fault && h.path == path)
            .count()
    }

    pub fn all_hits(&self) -> Vec<Hit> {
        self.state.lock().unwrap().hits.clone()
    }
}

impl Drop for FaultBackend {
    fn drop(&mut self) {
        if let Some(task) = self.accept.lock().unwrap().take() {
            task.abort();
        }
    }
}

async fn accept_loop(listener: TcpListener, state: Arc<Mutex<State>>) {
    while let Ok((stream, _)) = listener.accept().await {
        tokio::spawn(serve(stream, state.clone()));
    }
}

async fn serve(mut stream: TcpStream, state: Arc<Mutex<State>>) {
    let Some((method, path, body)) = read_request(&mut stream).await else {
        return;
    };
    let fault = {
        let mut state = state.lock().unwrap();
        let fault = state.fault;
        state.hits.push(Hit {
            method,
            path: path.clone(),
            fault,
        });
        fault
    };
    let answer = healthy_body(&path, &body);
    match fault {
        Fault::Healthy | Fault::Refuse => {
            let head = format!(
                "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
                answer.len()
            );
            let _ = stream.write_all(head.as_bytes()).await;
            let _ = stream.write_all(answer.as_bytes()).await;
            let _ = stream.shutdown().await;
        }
        Fault::ResetHead => {
            reset_after(stream, b"HTTP/1.1 200 OK\r\ncontent-type: applic").await;
        }
        Fault::ResetBody => {
            let mut partial = format!(
                "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n",
                answer.len() + 64
            )
            .into_bytes();
            partial.extend_from_slice(&answer.as_bytes()[..answer.len() / 2]);
            reset_after(stream, &partial).await;
        }
        Fault::Hang => {
            // Held until the test's runtime ends: the connection never sees an answer.
            std::future::pending::<()>().await;
            drop(stream);
        }
        Fault::Garbage => {
            let _ = stream.write_all(GARBAGE).await;
            let _ = stream.shutdown().await;
        }
    }
}

/// Sends `bytes`, gives the peer a moment to read them (a reset discards what it has not
/// read yet), then resets the connection instead of closing it.
async fn reset_after(stream: TcpStream, bytes: &[u8]) {
    let mut stream = stream;
    let _ = stream.write_all(bytes).await;
    let _ = stream.flush().await;
    tokio::time::sleep(Duration::from_millis(50)).await;
    let _ = stream.set_zero_linger();
    drop(stream);
}

/// What a correct backend answers: a JSON-RPC result to the request's id on `/mcp`, the
/// shape of the REST tools' output elsewhere.
fn healthy_body(path: &str, body: &[u8]) -> String {
    if path.starts_with("/mcp") {
        let id = serde_json::from_slice::<Value>(body)
            .ok()
            .map(|v| v["id"].clone())
            .unwrap_or(Value::Null);
        let result = json!({"lines": []});
        json!({"jsonrpc": "2.0", "id": id, "result": {
            "content": [{"type": "text", "text": result.to_string()}],
            "structuredContent": result,
            "isError": false,
        }})
        .to_string()
    } else {
        r#"{"lines":[]}"#.to_string()
    }
}

/// Reads one HTTP/1.1 request: its method, path and body (`content-length` framed).
async fn read_request(stream: &mut TcpStream) -> Option<(String, String, Vec<u8>)> {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    let head_end = loop {
        if let Some(at) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break at + 4;
        }
        if buf.len() > 64 * 1024 {
            return None;
        }
        let n = stream.read(&mut chunk).await.ok()?;
        if n == 0 {
            return None;
        }
        buf.extend_from_slice(&chunk[..n]);
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).into_owned();
    let mut words = head.split_whitespace();
    let method = words.next()?.to_string();
    let path = words.next()?.to_string();
    let length = head
        .lines()
        .filter_map(|l| l.split_once(':'))
        .find(|(k, _)| k.trim().eq_ignore_ascii_case("content-length"))
        .and_then(|(_, v)| v.trim().parse::<usize>().ok())
        .unwrap_or(0);
    let mut body = buf[head_end..].to_vec();
    while body.len() < length {
        let n = stream.read(&mut chunk).await.ok()?;
        if n == 0 {
            return None;
        }
        body.extend_from_slice(&chunk[..n]);
    }
    Some((method, path, body))
}
