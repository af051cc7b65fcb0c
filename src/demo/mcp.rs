//! The tour's MCP session: `support-bot`, an assistant that speaks MCP (Streamable HTTP on
//! `/mcp`, JSON answers), opens a session, lists its tools, and calls `lookup_order`
//! twice: once as the contract allows, once with an order id of the wrong form. The
//! sidecar refuses the second as MCP says a tool's failure is reported — a result with
//! `isError` and the error body as `structuredContent` — so the model reads why.

use bytes::Bytes;
use http::Request;
use http_body_util::{BodyExt, Full};
use serde_json::{json, Value};

use super::{decision_of, told_by_error, HttpClient, Row, SUPPORT_TOKEN};
use crate::sidecar::Sidecar;

/// One scripted `tools/call`.
struct Call {
    scenario: &'static str,
    order_id: &'static str,
}

const CALLS: &[Call] = &[
    Call {
        scenario: "MCP tools/call (support-bot)",
        order_id: "A-1042",
    },
    Call {
        scenario: "MCP: an order id of the wrong form",
        order_id: "order 1042",
    },
];

/// Opens the session and lists the tools the sidecar lets `support-bot` see.
pub async fn listed(client: &HttpClient, sidecar: &Sidecar) -> anyhow::Result<String> {
    let init = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {},
        "clientInfo": {"name": "support-bot", "version": "1.0"}}});
    let (status, _, _) = post(client, sidecar, &init).await?;
    anyhow::ensure!(status == 200, "MCP initialize answered {status}");
    let initialized = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
    post(client, sidecar, &initialized).await?;
    let list = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"});
    let (_, _, answer) = post(client, sidecar, &list).await?;
    let names: Vec<&str> = answer["result"]["tools"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|t| t["name"].as_str())
        .collect();
    Ok(names.join(", "))
}

/// The two calls, as rows.
pub async fn tour(client: &HttpClient, sidecar: &Sidecar) -> anyhow::Result<Vec<Row>> {
    let mut rows = Vec::new();
    for (id, call) in (2..).zip(CALLS) {
        let message = json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
            "params": {"name": "lookup_order", "arguments": {"order_id": call.order_id}}});
        let (status, headers, answer) = post(client, sidecar, &message).await?;
        let (decision, code) = decision_of(&headers);
        let result = &answer["result"];
        let told = match told_by_error(&result["structuredContent"]["error"]) {
            Some(told) => format!("(isError) {told}"),
            None => result["content"][0]["text"]
                .as_str()
                .unwrap_or_default()
                .chars()
                .take(80)
                .collect(),
        };
        rows.push(Row {
            scenario: call.scenario,
            tool: "lookup_order",
            decision,
            code,
            status,
            told,
        });
    }
    Ok(rows)
}

/// One JSON-RPC message to the sidecar's MCP endpoint, as `support-bot`.
async fn post(
    client: &HttpClient,
    sidecar: &Sidecar,
    message: &Value,
) -> anyhow::Result<(u16, http::HeaderMap, Value)> {
    let request = Request::builder()
        .method("POST")
        .uri(format!("http://{}/mcp", sidecar.agent_addr))
        .header("authorization", format!("Bearer {SUPPORT_TOKEN}"))
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .body(Full::new(Bytes::from(message.to_string())))?;
    let response = client.request(request).await?;
    let status = response.status().as_u16();
    let headers = response.headers().clone();
    let body = response.into_body().collect().await?.to_bytes();
    Ok((
        status,
        headers,
        serde_json::from_slice(&body).unwrap_or_default(),
    ))
}
