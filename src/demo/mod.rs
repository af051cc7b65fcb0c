//! `toolgate demo`: a self-contained tour on loopback. It starts the example backend and
//! a sidecar in front of it with the example policies (embedded from `examples/`, plus
//! the MCP tool of `mcp.yaml`), plays a scripted agent session over REST ([`script`])
//! and another over MCP ([`mcp`]), and prints one row per call; then it verifies the
//! audit log and replays it against a tightened policy. With `--serve`, [`serve`] then
//! keeps the backend and a sidecar up for calls by hand until Ctrl-C.
//!
//! Everything lives in one folder per process under the temp folder ([`Home`]), so the
//! sidecar `--serve` starts continues the tour's audit chain.

mod backend;
mod home;
mod mcp;
mod script;
mod serve;

pub use serve::serve;

use anyhow::Context as _;
use bytes::Bytes;
use http::Request;
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::{connect::HttpConnector, Client};
use hyper_util::rt::TokioExecutor;
use std::io::Write;
use std::path::{Path, PathBuf};

use crate::sidecar::Sidecar;
use home::Home;
use script::{APPROVER_TOKEN, STEPS};

const CONTRACTS: &str = include_str!("../../examples/policies/contracts.yaml");
const AGENTS: &str = include_str!("../../examples/policies/agents.yaml");
/// The MCP tool and the agent that calls it.
const MCP_POLICIES: &str = include_str!("mcp.yaml");
/// The token of `support-bot`, the agent of [`MCP_POLICIES`].
const SUPPORT_TOKEN: &str = "demo-support-token";
/// The demo orchestrator's key (see examples/keys/README.md: demo only).
const ORCHESTRATOR_KEY: &[u8] = include_bytes!("../../examples/keys/orchestrator-demo.pem");

type HttpClient = Client<HttpConnector, Full<Bytes>>;

/// One printed row.
#[derive(Debug, Clone)]
pub struct Row {
    pub scenario: &'static str,
    pub tool: &'static str,
    pub decision: String,
    pub code: String,
    pub status: u16,
    pub told: String,
}

pub struct Report {
    pub rows: Vec<Row>,
    pub audit: PathBuf,
    pub audit_records: usize,
}

/// Runs the tour, writing the table to `out`; spans go to `otlp_endpoint` (OTLP/gRPC) if given.
pub async fn run(out: &mut impl Write, otlp_endpoint: Option<String>) -> anyhow::Result<Report> {
    let home = Home::prepare()?;
    let _ = std::fs::remove_file(&home.audit);
    let (backend, sidecar) = home.start(otlp_endpoint).await?;
    writeln!(
        out,
        "toolgate demo: example backend on {backend}, sidecar on {}\n",
        sidecar.agent_addr
    )?;
    writeln!(
        out,
        "{:<2} {:<38} {:<14} {:<9} {:<20} {:<5} what the agent is told",
        "#", "scenario", "tool", "decision", "code", "HTTP"
    )?;
    let client: HttpClient = Client::builder(TokioExecutor::new()).build_http();
    let mut rows = rest_tour(out, &client, &sidecar).await?;
    writeln!(
        out,
        "   support-bot speaks MCP (POST /mcp): tools/list shows it {}",
        mcp::listed(&client, &sidecar).await?
    )?;
    for row in mcp::tour(&client, &sidecar).await? {
        print_row(out, rows.len() + 1, &row)?;
        rows.push(row);
    }
    sidecar.shutdown().await;
    let text = std::fs::read_to_string(&home.audit)?;
    let summary = crate::audit::verify::verify(&text, None)
        .map_err(|b| anyhow::anyhow!("audit chain broken at line {}: {}", b.line, b.reason))?;
    let audit_records = summary.calls as usize;
    writeln!(
        out,
        "\naudit log: {} ({audit_records} decisions, {} records with the start, policy and approval records, hash chain intact)",
        home.audit.display(),
        summary.records
    )?;
    writeln!(
        out,
        "verify it yourself: toolgate audit verify {}",
        home.audit.display()
    )?;
    replay_tightened(out, &home.dir, &home.audit)?;
    Ok(Report {
        rows,
        audit: home.audit,
        audit_records,
    })
}

/// Plays [`STEPS`], printing each row.
async fn rest_tour(
    out: &mut impl Write,
    client: &HttpClient,
    sidecar: &Sidecar,
) -> anyhow::Result<Vec<Row>> {
    let task = task_token()?;
    let mut rows = Vec::new();
    let mut held: Option<String> = None;
    for (i, step) in STEPS.iter().enumerate() {
        if step.approve_first {
            let id = held.take().context("no call was held for approval")?;
            approve(client, sidecar, &id).await?;
            writeln!(
                out,
                "   approver alice (finance-leads) approves {id} on the admin API: \"customer photo checked\""
            )?;
        }
        let mut request = Request::builder()
            .method(step.method)
            .uri(format!("http://{}{}", sidecar.agent_addr, step.path))
            .header("x-toolgate-session", "demo-session");
        if let Some(token) = step.token {
            request = request.header("authorization", format!("Bearer {token}"));
        }
        if step.task {
            request = request.header("x-toolgate-task", task.as_str());
        }
        if !step.body.is_empty() {
            request = request.header("content-type", "application/json");
        }
        let response = client
            .request(request.body(Full::new(Bytes::from_static(step.body.as_bytes())))?)
            .await?;
        let (decision, code) = decision_of(response.headers());
        let status = response.status().as_u16();
        let replayed = response
            .headers()
            .get("x-toolgate-replayed")
            .is_some_and(|v| v == "true");
        let body = response.into_body().collect().await?.to_bytes();
        let json: serde_json::Value = serde_json::from_slice(&body).unwrap_or_default();
        if let Some(id) = json["error"]["details"][0]["approvalId"].as_str() {
            held = Some(id.to_string());
        }
        let told = match told_by_error(&json["error"]) {
            Some(told) => told,
            None if replayed => format!(
                "(replayed, not run again) {}",
                String::from_utf8_lossy(&body)
                    .chars()
                    .take(60)
                    .collect::<String>()
            ),
            None => String::from_utf8_lossy(&body).chars().take(80).collect(),
        };
        let row = Row {
            scenario: step.scenario,
            tool: step.tool,
            decision,
            code,
            status,
            told,
        };
        print_row(out, i + 1, &row)?;
        rows.push(row);
    }
    Ok(rows)
}

/// The scripted approver approves `id` on the admin API.
async fn approve(client: &HttpClient, sidecar: &Sidecar, id: &str) -> anyhow::Result<()> {
    let approved = client
        .request(
            Request::builder()
                .method("POST")
                .uri(format!(
                    "http://{}/approvals/{id}/approve",
                    sidecar.admin_addr
                ))
                .header("authorization", format!("Bearer {APPROVER_TOKEN}"))
                .body(Full::new(Bytes::from_static(
                    br#"{"reason":"customer photo checked"}"#,
                )))?,
        )
        .await?;
    anyhow::ensure!(
        approved.status().is_success(),
        "the scripted approver could not approve {id}: {}",
        approved.status()
    );
    Ok(())
}

/// `X-Toolgate-Decision` and `X-Toolgate-Code` (`-` when there is none).
fn decision_of(headers: &http::HeaderMap) -> (String, String) {
    let header = |name: &str| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .to_string()
    };
    let code = header("x-toolgate-code");
    (
        header("x-toolgate-decision"),
        if code.is_empty() { "-".into() } else { code },
    )
}

/// What a refusal body's `error` tells the agent: its message and next move.
fn told_by_error(error: &serde_json::Value) -> Option<String> {
    let message = error["message"].as_str()?;
    Some(format!(
        "{message} [{}]",
        error["recovery"].as_str().unwrap_or("")
    ))
}

fn print_row(out: &mut impl Write, number: usize, row: &Row) -> std::io::Result<()> {
    writeln!(
        out,
        "{:<2} {:<38} {:<14} {:<9} {:<20} {:<5} {}",
        number, row.scenario, row.tool, row.decision, row.code, row.status, row.told
    )
}

/// Replays the tour's own audit log against a tightened copy of the example policies:
/// create_issue's rule also refuses project OPS, and export_report is no longer granted.
fn replay_tightened(out: &mut impl Write, home: &Path, audit: &Path) -> anyhow::Result<()> {
    let candidate = home.join("candidate");
    std::fs::create_dir_all(&candidate)?;
    std::fs::write(candidate.join("contracts.yaml"), CONTRACTS)?;
    std::fs::write(candidate.join("mcp.yaml"), MCP_POLICIES)?;
    let tightened = AGENTS
        .replace(
            "expr: \"args.project_key != 'SEC'\"",
            "expr: \"args.project_key != 'SEC' && args.project_key != 'OPS'\"",
        )
        .replace("    - name: export_report\n", "");
    anyhow::ensure!(
        tightened != AGENTS,
        "the example policies changed; the demo's candidate no longer tightens them"
    );
    std::fs::write(candidate.join("agents.yaml"), tightened)?;
    let report = crate::replay::run(&crate::replay::Request {
        audit: &[audit.to_path_buf()],
        policies: std::slice::from_ref(&candidate),
        key: None,
        allow_broken: false,
    })?;
    writeln!(
        out,
        "\nreplay: the same calls against a tightened policy (create_issue also refuses OPS; export_report no longer granted):\n  toolgate replay --audit {} --policies {}",
        audit.display(),
        candidate.display()
    )?;
    for line in report.table().lines() {
        writeln!(out, "  {line}")?;
    }
    Ok(())
}

/// What the demo orchestrator signs once the user confirms "the last 30 minutes of the
/// orders logs".
fn task_token() -> anyhow::Result<String> {
    let key = jsonwebtoken::EncodingKey::from_ed_pem(ORCHESTRATOR_KEY)?;
    let mut header = jsonwebtoken::Header::new(jsonwebtoken::Algorithm::EdDSA);
    header.kid = Some("orchestrator-demo".into());
    let claims = serde_json::json!({
        "iss": "orchestrator",
        "exp": crate::identity::jwks::now_seconds() + 600,
        "agent": "ops-bot",
        "service": "orders",
        "window_minutes": 30,
    });
    Ok(jsonwebtoken::encode(&header, &claims, &key)?)
}
