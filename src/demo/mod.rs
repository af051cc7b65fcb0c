//! `toolgate demo`: a self-contained tour on loopback. It starts the example backend and
//! a sidecar in front of it with the example policies (embedded from `examples/`), plays
//! a scripted agent session, and prints one row per call.

mod backend;

use anyhow::Context as _;
use bytes::Bytes;
use http::Request;
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use std::io::Write;
use std::path::PathBuf;

use crate::config::{
    Approvals, Approvers, Audit, Identity, Policies, Settings, TaskIssuer, Telemetry,
};
use crate::identity::tokens::digest_hex;
use crate::sidecar::Sidecar;

const CONTRACTS: &str = include_str!("../../examples/policies/contracts.yaml");
const AGENTS: &str = include_str!("../../examples/policies/agents.yaml");
const TOKEN: &str = "demo-ops-token";
/// The demo orchestrator's key (see examples/keys/README.md: demo only).
const ORCHESTRATOR_KEY: &[u8] = include_bytes!("../../examples/keys/orchestrator-demo.pem");
const ORCHESTRATOR_JWKS: &str = include_str!("../../examples/keys/task-jwks.json");

/// One scripted call.
struct Step {
    scenario: &'static str,
    tool: &'static str,
    method: &'static str,
    path: &'static str,
    token: Option<&'static str>,
    /// Send the task token the orchestrator signed for "30 minutes of orders logs".
    task: bool,
    body: &'static str,
    /// Before the call, the scripted approver approves the approval the last call was
    /// held for, on the admin API.
    approve_first: bool,
}

const fn step(
    scenario: &'static str,
    tool: &'static str,
    method: &'static str,
    path: &'static str,
    body: &'static str,
) -> Step {
    Step {
        scenario,
        tool,
        method,
        path,
        token: Some(TOKEN),
        task: false,
        body,
        approve_first: false,
    }
}

const fn approved(mut s: Step) -> Step {
    s.approve_first = true;
    s
}

const fn with_task(mut s: Step) -> Step {
    s.task = true;
    s
}

const fn anonymous(mut s: Step) -> Step {
    s.token = None;
    s
}

const STEPS: &[Step] = &[
    with_task(step(
        "allowed call (task: 30 min of orders)",
        "read_logs",
        "GET",
        "/logs/orders?window_minutes=30",
        "",
    )),
    with_task(step(
        "schema error",
        "read_logs",
        "GET",
        "/logs/orders?window_minutes=thirty",
        "",
    )),
    step(
        "missing argument",
        "create_issue",
        "POST",
        "/issues",
        r#"{"title":"disk full"}"#,
    ),
    with_task(step(
        "outside the confirmed task",
        "read_logs",
        "GET",
        "/logs/orders?window_minutes=43200",
        "",
    )),
    step(
        "no task token",
        "read_logs",
        "GET",
        "/logs/orders?window_minutes=30",
        "",
    ),
    step(
        "policy rule",
        "create_issue",
        "POST",
        "/issues",
        r#"{"project_key":"SEC","title":"rotate keys"}"#,
    ),
    step(
        "unknown tool",
        "-",
        "POST",
        "/admin/shell",
        r#"{"cmd":"rm -rf /"}"#,
    ),
    step(
        "tool not allowed",
        "delete_logs",
        "DELETE",
        "/logs/orders",
        "",
    ),
    anonymous(step(
        "no credential",
        "read_logs",
        "GET",
        "/logs/orders",
        "",
    )),
    step(
        "backend error, internals hidden",
        "export_report",
        "GET",
        "/reports/2026-10",
        "",
    ),
    step(
        "allowed write",
        "create_issue",
        "POST",
        "/issues",
        r#"{"project_key":"OPS","title":"disk full"}"#,
    ),
    step(
        "same write again (a retry)",
        "create_issue",
        "POST",
        "/issues",
        r#"{"project_key":"OPS","title":"disk full"}"#,
    ),
    step("status check", "get_status", "GET", "/status/orders", ""),
    step(
        "same check again",
        "get_status",
        "GET",
        "/status/orders",
        "",
    ),
    step("and again", "get_status", "GET", "/status/orders", ""),
    step(
        "a fourth time: a loop",
        "get_status",
        "GET",
        "/status/orders",
        "",
    ),
    step(
        "past the rate limit",
        "get_status",
        "GET",
        "/status/payments",
        "",
    ),
    step(
        "a large refund: held for a person",
        "issue_refund",
        "POST",
        "/refunds",
        REFUND,
    ),
    approved(step(
        "approved by finance: runs once",
        "issue_refund",
        "POST",
        "/refunds",
        REFUND,
    )),
    step(
        "the same refund again",
        "issue_refund",
        "POST",
        "/refunds",
        REFUND,
    ),
];

const REFUND: &str = r#"{"order_id":"A-1042","amount":250,"note":"damaged in transit"}"#;
/// The scripted approver: alice, in finance-leads.
const APPROVER_TOKEN: &str = "demo-approver-token";

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
    let home = std::env::temp_dir().join(format!("toolgate-demo-{}", std::process::id()));
    let policies = home.join("policies");
    std::fs::create_dir_all(&policies).with_context(|| format!("creating {}", home.display()))?;
    std::fs::write(policies.join("contracts.yaml"), CONTRACTS)?;
    std::fs::write(policies.join("agents.yaml"), AGENTS)?;
    let tokens = home.join("tokens.yaml");
    std::fs::write(&tokens, format!("ops-bot: {}\n", digest_hex(TOKEN)))?;
    let approvers = home.join("approvers.yaml");
    std::fs::write(
        &approvers,
        format!(
            "alice: {{sha256: {}, groups: [finance-leads]}}\n",
            digest_hex(APPROVER_TOKEN)
        ),
    )?;
    let task_jwks = home.join("task-jwks.json");
    std::fs::write(&task_jwks, ORCHESTRATOR_JWKS)?;
    let task = task_token()?;
    let audit = home.join("audit.log");
    let _ = std::fs::remove_file(&audit);

    let backend = backend::start().await?;
    let defaults = Settings::default();
    let settings = Settings {
        listen: "127.0.0.1:0".parse()?,
        admin: "127.0.0.1:0".parse()?,
        upstream: format!("http://{backend}"),
        policies: Policies {
            files: vec![policies],
            ..defaults.policies.clone()
        },
        identity: Identity {
            tokens: Some(tokens),
            task_issuers: vec![TaskIssuer {
                issuer: "orchestrator".into(),
                jwks: Some(task_jwks.into()),
                discovery: false,
                audience: None,
                require_agent: true,
            }],
            ..defaults.identity.clone()
        },
        audit: Audit {
            path: audit.to_string_lossy().into_owned(),
            ..defaults.audit.clone()
        },
        telemetry: Telemetry {
            otlp_endpoint,
            service_name: "toolgate-demo".into(),
            ..defaults.telemetry.clone()
        },
        approvals: Approvals {
            approvers: Approvers {
                tokens: Some(approvers),
                jwt: Vec::new(),
            },
            ..defaults.approvals.clone()
        },
        ..defaults
    };
    let sidecar = Sidecar::start(settings).await?;
    for _ in 0..200 {
        if sidecar.control.snapshot().is_some() {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    anyhow::ensure!(
        sidecar.control.snapshot().is_some(),
        "the example policies did not load: {:?}",
        sidecar.control.errors()
    );

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
    let client: Client<_, Full<Bytes>> = Client::builder(TokioExecutor::new()).build_http();
    let mut rows = Vec::new();
    let mut held: Option<String> = None;
    for (i, step) in STEPS.iter().enumerate() {
        if step.approve_first {
            let id = held.take().context("no call was held for approval")?;
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
        let header = |name: &str| {
            response
                .headers()
                .get(name)
                .and_then(|v| v.to_str().ok())
                .unwrap_or("")
                .to_string()
        };
        let (decision, code, status) = (
            header("x-toolgate-decision"),
            header("x-toolgate-code"),
            response.status().as_u16(),
        );
        let replayed = header("x-toolgate-replayed") == "true";
        let body = response.into_body().collect().await?.to_bytes();
        let json: serde_json::Value = serde_json::from_slice(&body).unwrap_or_default();
        if let Some(id) = json["error"]["details"][0]["approvalId"].as_str() {
            held = Some(id.to_string());
        }
        let told = match json["error"]["message"].as_str() {
            Some(message) => format!(
                "{message} [{}]",
                json["error"]["recovery"].as_str().unwrap_or("")
            ),
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
            code: if code.is_empty() { "-".into() } else { code },
            status,
            told,
        };
        writeln!(
            out,
            "{:<2} {:<38} {:<14} {:<9} {:<20} {:<5} {}",
            i + 1,
            row.scenario,
            row.tool,
            row.decision,
            row.code,
            row.status,
            row.told
        )?;
        rows.push(row);
    }
    sidecar.shutdown().await;
    let text = std::fs::read_to_string(&audit)?;
    let summary = crate::audit::verify::verify(&text, None)
        .map_err(|b| anyhow::anyhow!("audit chain broken at line {}: {}", b.line, b.reason))?;
    let audit_records = summary.calls as usize;
    writeln!(
        out,
        "\naudit log: {} ({audit_records} decisions, {} records with the start, policy and approval records, hash chain intact)",
        audit.display(),
        summary.records
    )?;
    writeln!(
        out,
        "verify it yourself: toolgate audit verify {}",
        audit.display()
    )?;
    replay_tightened(out, &home, &audit)?;
    Ok(Report {
        rows,
        audit,
        audit_records,
    })
}

/// Replays the tour's own audit log against a tightened copy of the example policies:
/// create_issue's rule also refuses project OPS, and export_report is no longer granted.
fn replay_tightened(
    out: &mut impl Write,
    home: &std::path::Path,
    audit: &std::path::Path,
) -> anyhow::Result<()> {
    let candidate = home.join("candidate");
    std::fs::create_dir_all(&candidate)?;
    std::fs::write(candidate.join("contracts.yaml"), CONTRACTS)?;
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
