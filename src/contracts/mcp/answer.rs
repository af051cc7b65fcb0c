//! A request's answer read from the wire: `application/json` whole, or an SSE stream
//! event by event until the JSON-RPC response with the request's id (notifications and
//! server requests before it are skipped: listing tools needs nothing from the client).
//! Every read counts against the run's total.

use http::header::CONTENT_TYPE;
use http_body_util::BodyExt;
use hyper::body::Incoming;
use serde_json::Value;
use std::sync::atomic::{AtomicUsize, Ordering};

use crate::proxy::backend::sse;

/// One JSON-RPC message (a `tools/list` page with large schemas fits many times over).
pub const MAX_MESSAGE: usize = 16 << 20;
/// All the bytes of one answer stream, notifications before the response included.
pub const MAX_STREAM: usize = 64 << 20;
/// All the bytes of every answer of one run, pages included.
pub const MAX_TOTAL: usize = 128 << 20;

pub async fn read(
    response: hyper::Response<Incoming>,
    id: &Value,
    read: &AtomicUsize,
) -> Result<Value, String> {
    let media = response
        .headers()
        .get(CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .split(';')
        .next()
        .unwrap_or("")
        .trim()
        .to_ascii_lowercase();
    let body = response.into_body();
    match media.as_str() {
        "application/json" => {
            let bytes = http_body_util::Limited::new(body, MAX_MESSAGE)
                .collect()
                .await
                .map_err(|e| format!("reading the answer: {e}"))?
                .to_bytes();
            count(read, bytes.len())?;
            let value: Value = serde_json::from_slice(&bytes)
                .map_err(|e| format!("the answer is not JSON: {e}"))?;
            find_response(value, id).ok_or_else(|| "the answer holds no response to it".into())
        }
        "text/event-stream" => read_stream(body, id, read).await,
        other => Err(format!(
            "the answer is {}, not application/json or text/event-stream",
            if other.is_empty() { "untyped" } else { other }
        )),
    }
}

/// Reads SSE events until the response with `id`; notifications and server requests
/// before it are skipped (listing tools needs nothing from the client).
async fn read_stream(mut body: Incoming, id: &Value, read: &AtomicUsize) -> Result<Value, String> {
    let mut parser = sse::Parser::new(MAX_MESSAGE);
    let mut total = 0usize;
    loop {
        let frame = body.frame().await;
        let eof = frame.is_none();
        if let Some(frame) = frame {
            let frame = frame.map_err(|e| format!("reading the stream: {e}"))?;
            if let Some(data) = frame.data_ref() {
                total += data.len();
                if total > MAX_STREAM {
                    return Err(format!(
                        "the stream passed {MAX_STREAM} bytes without answering"
                    ));
                }
                count(read, data.len())?;
                parser.push(data);
            }
        }
        while let Some(event) = parser.next_event(eof) {
            if !event.is_message() || event.data.is_empty() {
                continue;
            }
            let value: Value = serde_json::from_str(&event.data)
                .map_err(|e| format!("an event is not JSON: {e}"))?;
            if let Some(found) = find_response(value, id) {
                return Ok(found);
            }
        }
        parser.check().map_err(|e| e.to_string())?;
        if eof {
            return Err("the stream ended without a response to it".into());
        }
    }
}

/// Adds `n` to the run's total; an error past [`MAX_TOTAL`].
fn count(read: &AtomicUsize, n: usize) -> Result<(), String> {
    if read.fetch_add(n, Ordering::Relaxed) + n > MAX_TOTAL {
        return Err(format!(
            "the server's answers passed {MAX_TOTAL} bytes in all"
        ));
    }
    Ok(())
}

/// The response to `id` in a message or a batch of them.
fn find_response(value: Value, id: &Value) -> Option<Value> {
    let answers = |m: &Value| {
        m.get("id") == Some(id) && (m.get("result").is_some() || m.get("error").is_some())
    };
    match value {
        Value::Array(items) => items.into_iter().find(answers),
        single if answers(&single) => Some(single),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_response_is_found_by_id() {
        let id = json!(3);
        let batch = json!([{"jsonrpc": "2.0", "method": "notifications/progress"}, {"jsonrpc": "2.0", "id": 3, "result": {}}]);
        assert!(find_response(batch, &id).is_some());
        assert!(find_response(json!({"id": 2, "result": {}}), &id).is_none());
        assert!(find_response(json!({"id": 3, "method": "ping"}), &id).is_none());
    }
}
