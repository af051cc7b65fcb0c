//! Listing an MCP server's tools the way an MCP client does: `initialize` (offering the
//! newest revision the official SDKs negotiate, accepting any revision they still speak),
//! `notifications/initialized`, then `tools/list` page by page following `nextCursor`,
//! and finally the session's DELETE.
//!
//! Bounded: at most [`MAX_PAGES`] pages and [`MAX_TOOLS`] tools; a cursor the server
//! repeats ends the listing with an error instead of a loop.

use http::HeaderValue;
use serde_json::{json, Value};
use std::collections::HashSet;

use super::transport::{Endpoint, Session};
use crate::contracts::DraftError;

/// The revision offered: the newest one reachable through `initialize`.
pub const OFFERED: &str = "2025-11-25";
/// Revisions a server may answer with and still be listed: every `initialize`-era
/// revision the official SDKs speak.
pub const SPOKEN: [&str; 4] = ["2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25"];
pub const MAX_PAGES: usize = 1_000;
pub const MAX_TOOLS: usize = 10_000;

/// What the server said about itself, and its tools in listing order.
pub struct Listing {
    pub server: String,
    pub protocol: String,
    pub tools: Vec<Value>,
}

/// Runs the whole conversation; the session is ended on every path once it exists.
pub async fn list(endpoint: &Endpoint) -> Result<Listing, DraftError> {
    let (session, server, protocol) = initialize(endpoint).await?;
    let listed = async {
        let initialized = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
        endpoint
            .notify("notifications/initialized", &initialized, &session)
            .await?;
        pages(endpoint, &session).await
    }
    .await;
    endpoint.close(&session).await;
    Ok(Listing {
        server,
        protocol,
        tools: listed?,
    })
}

async fn initialize(endpoint: &Endpoint) -> Result<(Session, String, String), DraftError> {
    let request = json!({
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {
            "protocolVersion": OFFERED,
            "capabilities": {},
            "clientInfo": {"name": "toolgate-contracts-draft", "version": env!("CARGO_PKG_VERSION")}
        }
    });
    let reply = endpoint
        .call("initialize", &request, &Session::default())
        .await?;
    let result = result_of(endpoint, "initialize", reply.message)?;
    let protocol = result
        .get("protocolVersion")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string();
    if !SPOKEN.contains(&protocol.as_str()) {
        return Err(endpoint.protocol(
            "initialize",
            format!(
                "the server chose protocol revision {:?}; this client speaks {}",
                crate::contracts::render::comment(&protocol),
                SPOKEN.join(", ")
            ),
        ));
    }
    let server = match result.get("serverInfo") {
        Some(info) => format!(
            "{} {}",
            info.get("name")
                .and_then(Value::as_str)
                .unwrap_or("unnamed"),
            info.get("version").and_then(Value::as_str).unwrap_or("")
        ),
        None => "unnamed".into(),
    };
    let session = Session {
        id: reply.session,
        // A revision from SPOKEN is a valid header value.
        protocol: HeaderValue::from_str(&protocol).ok(),
    };
    Ok((session, server.trim().to_string(), protocol))
}

async fn pages(endpoint: &Endpoint, session: &Session) -> Result<Vec<Value>, DraftError> {
    let mut tools = Vec::new();
    let mut cursor: Option<Value> = None;
    let mut seen = HashSet::new();
    for page in 0..MAX_PAGES {
        let params = match &cursor {
            Some(cursor) => json!({"cursor": cursor}),
            None => json!({}),
        };
        let request =
            json!({"jsonrpc": "2.0", "id": page + 2, "method": "tools/list", "params": params});
        let reply = endpoint.call("tools/list", &request, session).await?;
        let result = result_of(endpoint, "tools/list", reply.message)?;
        match result.get("tools") {
            Some(Value::Array(listed)) => tools.extend(listed.iter().cloned()),
            _ => {
                return Err(endpoint.protocol("tools/list", "the result has no `tools` list".into()))
            }
        }
        if tools.len() > MAX_TOOLS {
            return Err(endpoint.protocol(
                "tools/list",
                format!("the server lists more than {MAX_TOOLS} tools"),
            ));
        }
        match result.get("nextCursor") {
            None | Some(Value::Null) => return Ok(tools),
            Some(next) => {
                if !seen.insert(next.to_string()) {
                    return Err(endpoint.protocol(
                        "tools/list",
                        "the server repeated a nextCursor: its pages loop".into(),
                    ));
                }
                cursor = Some(next.clone());
            }
        }
    }
    Err(endpoint.protocol(
        "tools/list",
        format!("more than {MAX_PAGES} pages of tools"),
    ))
}

/// The `result` of a response, or its `error` as a [`DraftError::Rpc`].
fn result_of(
    endpoint: &Endpoint,
    method: &'static str,
    message: Value,
) -> Result<Value, DraftError> {
    if let Some(error) = message.get("error") {
        let text = error
            .get("message")
            .and_then(Value::as_str)
            .unwrap_or("no message");
        return Err(DraftError::Rpc {
            url: endpoint.shown.clone(),
            method,
            code: error.get("code").and_then(Value::as_i64).unwrap_or(0),
            message: crate::contracts::render::comment(&text.chars().take(300).collect::<String>()),
        });
    }
    match message.get("result") {
        Some(result @ Value::Object(_)) => Ok(result.clone()),
        _ => Err(endpoint.protocol(method, "the response has no result object".into())),
    }
}
