//! `toolgate approvals`: the approver's side of the second gate from a shell (DESIGN §9).
//! A thin client of the approval API on the admin listener (`approvals::api`): it lists,
//! shows and decides approvals with an approver's bearer token and prints what the API
//! answers. It decides nothing itself; who may decide what is the sidecar's call.
//!
//! Invariants: the token comes from a file, never a flag (so it stays out of shell history
//! and `ps`), and is never printed. The exit code tells a script what went wrong without
//! parsing text ([`EXIT_CODES`]). Settings are read from the variables passed in, not the
//! process environment, so tests hand it a map.

use bytes::Bytes;
use clap::{Args, Subcommand, ValueEnum};
use http::{header, Method, Request, StatusCode, Uri};
use http_body_util::{BodyExt, Full, Limited};
use hyper_util::client::legacy::{connect::HttpConnector, Client};
use hyper_util::rt::TokioExecutor;
use percent_encoding::{utf8_percent_encode, AsciiSet, NON_ALPHANUMERIC};
use serde_json::{json, Value};
use std::collections::HashMap;
use std::io::Write as _;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use super::Status;

/// The help text's promise; [`Failure::exit_code`] keeps it.
pub const EXIT_CODES: &str = "\
Exit codes:
  0  done
  1  the API refused (4xx): no or an agent's credential, an approval outside your groups,
     an unknown id, one no longer pending
  2  a usage, token file or connection problem
  3  the sidecar failed (5xx)";

/// The admin listener's default port, on the pod's loopback or a `kubectl port-forward`.
const DEFAULT_ADMIN: &str = "http://127.0.0.1:15101";
const ADMIN_VAR: &str = "TOOLGATE_ADMIN_URL";
const TOKEN_VAR: &str = "TOOLGATE_APPROVER_TOKEN_FILE";
/// One request, from connecting to the answer's last byte: a person is waiting.
const TIMEOUT: Duration = Duration::from_secs(10);
/// A full list of a busy pod (`approvals.maxPending` approvals) fits well within this.
const MAX_ANSWER: usize = 64 << 20;
/// An id stays one path segment however it is spelled; the API matches ids unescaped,
/// so the characters ids are made of pass as they are.
const SEGMENT: &AsciiSet = &NON_ALPHANUMERIC.remove(b'-').remove(b'_').remove(b'.');

#[derive(Debug, Subcommand)]
pub enum ApprovalsCommand {
    /// List the approvals you may decide, oldest first.
    #[command(after_help = EXIT_CODES)]
    List {
        /// Only approvals in this state: pending, approved, denied, expired or used.
        #[arg(long, value_parser = parse_status)]
        status: Option<Status>,
        /// `table` for people, `json` (the API's answer) for scripts.
        #[arg(long, value_enum, default_value_t = Format::Table)]
        format: Format,
        #[command(flatten)]
        admin: AdminArgs,
    },
    /// Show one approval: its arguments (redacted) and the condition that asked for it.
    #[command(after_help = EXIT_CODES)]
    Show {
        /// The approval's id (apr-…), as the agent's APPROVAL_REQUIRED or `list` names it.
        id: String,
        /// `table` for people, `json` (the API's answer) for scripts.
        #[arg(long, value_enum, default_value_t = Format::Table)]
        format: Format,
        #[command(flatten)]
        admin: AdminArgs,
    },
    /// Approve a pending approval: the agent's identical call then runs once.
    #[command(after_help = EXIT_CODES)]
    Approve(DecideArgs),
    /// Deny a pending approval: the agent's call is refused with your reason.
    #[command(after_help = EXIT_CODES)]
    Deny(DecideArgs),
}

#[derive(Debug, Args)]
pub struct DecideArgs {
    /// The approval's id (apr-…), as the agent's APPROVAL_REQUIRED or `list` names it.
    id: String,
    /// Why; recorded in the audit log (and told to the agent on a denial).
    #[arg(long)]
    reason: Option<String>,
    #[command(flatten)]
    admin: AdminArgs,
}

#[derive(Debug, Args)]
pub struct AdminArgs {
    /// The sidecar's admin listener (http:// only) [env: TOOLGATE_ADMIN_URL] [default: http://127.0.0.1:15101]
    #[arg(long, value_name = "URL")]
    admin: Option<String>,
    /// A file holding your approver bearer token [env: TOOLGATE_APPROVER_TOKEN_FILE]
    #[arg(long, value_name = "FILE")]
    token_file: Option<PathBuf>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Format {
    Table,
    Json,
}

fn parse_status(text: &str) -> Result<Status, String> {
    Status::parse(text)
        .ok_or_else(|| "expected pending, approved, denied, expired or used".to_string())
}

/// What stopped a command, by whose fault: the exit code says which.
#[derive(Debug, thiserror::Error)]
pub enum Failure {
    #[error("{0}")]
    Usage(String),
    #[error("can't read the token file {path}: {error}")]
    TokenFile { path: String, error: std::io::Error },
    #[error("can't reach the admin listener at {url}: {error} (is the sidecar running and its admin port reachable, e.g. through kubectl port-forward?)")]
    Unreachable { url: String, error: String },
    /// The API answered with an error body (or something that isn't toolgate's).
    #[error("{code} ({status}): {message}")]
    Refused {
        status: u16,
        code: String,
        message: String,
    },
    #[error("can't write the output: {0}")]
    Output(std::io::Error),
}

impl Failure {
    pub fn exit_code(&self) -> u8 {
        match self {
            Failure::Refused { status, .. } if (400..500).contains(status) => 1,
            // 5xx, or a success that isn't the API's answer: the sidecar's side failed.
            Failure::Refused { .. } => 3,
            _ => 2,
        }
    }
}

/// Runs one command, prints its result (or `error: …` on stderr) and says how it ended.
/// `vars` are the process environment's variables (or a test's).
pub async fn run(
    command: ApprovalsCommand,
    vars: impl IntoIterator<Item = (String, String)>,
) -> ExitCode {
    let vars: HashMap<String, String> = vars.into_iter().collect();
    let printed = execute(command, &vars).await.and_then(|text| {
        let mut out = std::io::stdout().lock();
        out.write_all(text.as_bytes())
            .and_then(|()| out.flush())
            .map_err(Failure::Output)
    });
    match printed {
        Ok(()) => ExitCode::SUCCESS,
        Err(failure) => {
            eprintln!("error: {failure}");
            ExitCode::from(failure.exit_code())
        }
    }
}

/// The text a command prints.
async fn execute(
    command: ApprovalsCommand,
    vars: &HashMap<String, String>,
) -> Result<String, Failure> {
    match command {
        ApprovalsCommand::List {
            status,
            format,
            admin,
        } => {
            let path = match status {
                Some(status) => format!("/approvals?status={}", status.as_str()),
                None => "/approvals".to_string(),
            };
            let answer = Admin::open(&admin, vars)?
                .send(Method::GET, &path, None)
                .await?;
            Ok(match format {
                Format::Json => pretty(&answer),
                Format::Table => table(&answer, status),
            })
        }
        ApprovalsCommand::Show { id, format, admin } => {
            let path = format!("/approvals/{}", utf8_percent_encode(&id, SEGMENT));
            let answer = Admin::open(&admin, vars)?
                .send(Method::GET, &path, None)
                .await?;
            Ok(match format {
                Format::Json => pretty(&answer),
                Format::Table => block(&answer),
            })
        }
        ApprovalsCommand::Approve(args) => decide(args, "approve", vars).await,
        ApprovalsCommand::Deny(args) => decide(args, "deny", vars).await,
    }
}

async fn decide(
    args: DecideArgs,
    verb: &str,
    vars: &HashMap<String, String>,
) -> Result<String, Failure> {
    let path = format!(
        "/approvals/{}/{verb}",
        utf8_percent_encode(&args.id, SEGMENT)
    );
    let body = json!({ "reason": args.reason });
    let answer = Admin::open(&args.admin, vars)?
        .send(Method::POST, &path, Some(body))
        .await?;
    Ok(decided(&answer))
}

fn pretty(value: &Value) -> String {
    format!(
        "{}\n",
        serde_json::to_string_pretty(value).unwrap_or_default()
    )
}

/// The admin listener with the approver's credential, ready to send.
struct Admin {
    client: Client<HttpConnector, Full<Bytes>>,
    /// The URL without a trailing slash; request paths are appended to it.
    base: String,
    authorization: header::HeaderValue,
}

impl Admin {
    /// Flags first, then the variables, then the default. Checks the URL and reads the
    /// token before anything is sent, so a usage problem never looks like a refusal.
    fn open(args: &AdminArgs, vars: &HashMap<String, String>) -> Result<Admin, Failure> {
        let url = args
            .admin
            .clone()
            .or_else(|| vars.get(ADMIN_VAR).cloned())
            .unwrap_or_else(|| DEFAULT_ADMIN.to_string());
        let base = check_url(&url)?;
        let path = args
            .token_file
            .clone()
            .or_else(|| vars.get(TOKEN_VAR).map(PathBuf::from))
            .ok_or_else(|| {
                Failure::Usage(format!(
                    "no approver token: pass --token-file FILE (or set {TOKEN_VAR})"
                ))
            })?;
        let shown = path.display().to_string();
        let text = std::fs::read_to_string(&path).map_err(|error| Failure::TokenFile {
            path: shown.clone(),
            error,
        })?;
        let token = text.trim();
        if token.is_empty() {
            return Err(Failure::Usage(format!("the token file {shown} is empty")));
        }
        let mut authorization =
            header::HeaderValue::from_str(&format!("Bearer {token}")).map_err(|_| {
                Failure::Usage(format!(
                    "the token file {shown} holds characters no bearer token has"
                ))
            })?;
        authorization.set_sensitive(true);
        let mut connector = HttpConnector::new();
        connector.set_connect_timeout(Some(TIMEOUT));
        Ok(Admin {
            client: Client::builder(TokioExecutor::new()).build(connector),
            base,
            authorization,
        })
    }

    /// One request; `Ok` is the API's 200 answer, anything else a [`Failure`].
    async fn send(
        &self,
        method: Method,
        path: &str,
        body: Option<Value>,
    ) -> Result<Value, Failure> {
        let url = format!("{}{path}", self.base);
        let usage = |_| Failure::Usage(format!("{url} is not a URL toolgate can request"));
        let mut request = Request::builder()
            .method(method)
            .uri(url.parse::<Uri>().map_err(usage)?)
            .header(header::AUTHORIZATION, self.authorization.clone());
        let bytes = match body {
            Some(body) => {
                request = request.header(header::CONTENT_TYPE, "application/json");
                Bytes::from(body.to_string())
            }
            None => Bytes::new(),
        };
        let request = request
            .body(Full::new(bytes))
            .map_err(|_| Failure::Usage(format!("{url} is not a URL toolgate can request")))?;
        let unreachable = |error: String| Failure::Unreachable {
            url: self.base.clone(),
            error,
        };
        let exchange = async {
            let response = self.client.request(request).await.map_err(|e| {
                // The legacy client's own text ("client error (Connect)") hides the
                // cause: show the chain below it ("tcp connect error: Connection refused").
                let mut causes = Vec::new();
                let mut next = std::error::Error::source(&e);
                while let Some(cause) = next {
                    causes.push(cause.to_string());
                    next = cause.source();
                }
                unreachable(if causes.is_empty() {
                    e.to_string()
                } else {
                    causes.join(": ")
                })
            })?;
            let status = response.status();
            let body = Limited::new(response.into_body(), MAX_ANSWER)
                .collect()
                .await
                .map_err(|e| unreachable(format!("reading the answer: {e}")))?
                .to_bytes();
            Ok::<_, Failure>((status, body))
        };
        let (status, body) = tokio::time::timeout(TIMEOUT, exchange)
            .await
            .map_err(|_| unreachable(format!("no answer within {}s", TIMEOUT.as_secs())))??;
        answer(status, &body)
    }
}

/// The base URL of `url`, or why it can't be used.
fn check_url(url: &str) -> Result<String, Failure> {
    let uri: Uri = url
        .parse()
        .map_err(|_| Failure::Usage(format!("the admin URL {url:?} is not a URL")))?;
    match uri.scheme_str() {
        Some("http") if uri.authority().is_some() => Ok(url.trim_end_matches('/').to_string()),
        Some("https") => Err(Failure::Usage(format!(
            "the admin URL {url}: the admin listener serves plain HTTP on the pod's loopback; \
             use http:// (through kubectl port-forward from outside the pod)"
        ))),
        _ => Err(Failure::Usage(format!(
            "the admin URL {url:?} must be an http:// URL like {DEFAULT_ADMIN}"
        ))),
    }
}

/// The API's answer as a value or a refusal. An answer that isn't toolgate's (another
/// server behind `--admin`) is a refusal with its status, so the exit code still follows it.
fn answer(status: StatusCode, body: &[u8]) -> Result<Value, Failure> {
    let parsed = serde_json::from_slice::<Value>(body).ok();
    if status == StatusCode::OK {
        if let Some(value) = parsed {
            return Ok(value);
        }
    }
    let error = parsed.as_ref().map(|v| &v["error"]);
    match error.and_then(|e| e["code"].as_str()) {
        Some(code) => Err(Failure::Refused {
            status: status.as_u16(),
            code: code.to_string(),
            message: error.and_then(|e| e["message"].as_str()).unwrap_or("").to_string(),
        }),
        None => Err(Failure::Refused {
            status: status.as_u16(),
            code: "UNEXPECTED_ANSWER".to_string(),
            message: format!(
                "not the approval API's answer ({} bytes); is --admin the sidecar's admin listener?",
                body.len()
            ),
        }),
    }
}

/// A field as text: `-` for null or absent, lists joined.
fn text(approval: &Value, field: &str) -> String {
    match &approval[field] {
        Value::Null => "-".to_string(),
        Value::String(s) => s.clone(),
        Value::Array(items) => items
            .iter()
            .map(|i| i.as_str().map_or_else(|| i.to_string(), str::to_string))
            .collect::<Vec<_>>()
            .join(", "),
        other => other.to_string(),
    }
}

/// `2025-01-01T00:00:00.000Z` as `2025-01-01 00:00:00Z`: a table column has no room for
/// milliseconds. Anything else is shown as it is.
fn short_time(time: &str) -> String {
    match (time.get(..19), time.ends_with('Z')) {
        (Some(seconds), true) => format!("{}Z", seconds.replacen('T', " ", 1)),
        _ => time.to_string(),
    }
}

/// `list` for people: one aligned row per approval, oldest first; the condition last, as
/// it is the one column of any length.
fn table(answer: &Value, status: Option<Status>) -> String {
    let mut approvals: Vec<&Value> = answer["approvals"]
        .as_array()
        .map(|a| a.iter().collect())
        .unwrap_or_default();
    if approvals.is_empty() {
        return match status {
            Some(status) => format!("no {} approvals you may decide\n", status.as_str()),
            None => "no approvals you may decide\n".to_string(),
        };
    }
    // RFC 3339 in UTC, all written alike by the sidecar: text order is time order.
    approvals.sort_by_key(|a| text(a, "createdAt"));
    let mut rows = vec![[
        "ID",
        "STATUS",
        "TOOL",
        "AGENT",
        "CREATED",
        "EXPIRES",
        "CONDITION",
    ]
    .map(String::from)];
    rows.extend(approvals.iter().map(|a| {
        [
            text(a, "id"),
            text(a, "status"),
            text(a, "tool"),
            text(a, "agent"),
            short_time(&text(a, "createdAt")),
            short_time(&text(a, "expiresAt")),
            text(a, "condition"),
        ]
    }));
    let mut widths = [0; 7];
    for row in &rows {
        for (width, cell) in widths.iter_mut().zip(row) {
            *width = (*width).max(cell.chars().count());
        }
    }
    let mut out = String::new();
    for row in &rows {
        let cells: Vec<String> = row
            .iter()
            .zip(widths)
            .map(|(cell, width)| format!("{cell:width$}"))
            .collect();
        out.push_str(cells.join("  ").trim_end());
        out.push('\n');
    }
    out
}

/// `show` for people: every field on its own line, the arguments pretty-printed below.
fn block(approval: &Value) -> String {
    let mut out = String::new();
    for (label, field) in [
        ("id", "id"),
        ("status", "status"),
        ("tool", "tool"),
        ("agent", "agent"),
        ("session", "session"),
        ("condition", "condition"),
        ("approvers", "approvers"),
        ("created", "createdAt"),
        ("expires", "expiresAt"),
        ("decided by", "decidedBy"),
        ("reason", "reason"),
    ] {
        out.push_str(&format!(
            "{:<11} {}\n",
            format!("{label}:"),
            text(approval, field)
        ));
    }
    out.push_str("arguments (redacted):\n");
    let arguments = serde_json::to_string_pretty(&approval["arguments"]).unwrap_or_default();
    for line in arguments.lines() {
        out.push_str(&format!("  {line}\n"));
    }
    out
}

/// `approve` and `deny`: one line from the updated approval.
fn decided(approval: &Value) -> String {
    format!(
        "{} {} (tool {}, agent {})\n",
        text(approval, "status"),
        text(approval, "id"),
        text(approval, "tool"),
        text(approval, "agent")
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mk_approval() -> Value {
        json!({
            "id": "apr-1", "status": "pending", "tool": "refund", "agent": "ops-bot",
            "session": null, "arguments": {"amount": 500, "card": "[REDACTED]"},
            "condition": "args.amount > 100", "approvers": ["finance-leads", "cfo"],
            "createdAt": "2025-01-01T10:00:00.123Z", "expiresAt": "2025-01-01T10:15:00.123Z",
            "decidedBy": null, "reason": null
        })
    }

    fn with_admin(admin: Option<&str>, token_file: Option<PathBuf>) -> AdminArgs {
        AdminArgs {
            admin: admin.map(String::from),
            token_file,
        }
    }

    #[test]
    fn the_flag_wins_over_the_variable_and_the_variable_over_the_default() {
        let dir = tempfile::tempdir().unwrap();
        let token = dir.path().join("token");
        std::fs::write(&token, "  alice-token\n").unwrap();
        let vars = HashMap::from([
            (ADMIN_VAR.to_string(), "http://10.0.0.1:1/".to_string()),
            (TOKEN_VAR.to_string(), token.display().to_string()),
        ]);
        let admin = Admin::open(&with_admin(None, None), &vars).unwrap();
        assert_eq!(admin.base, "http://10.0.0.1:1");
        assert_eq!(admin.authorization, "Bearer alice-token");
        let admin = Admin::open(&with_admin(Some("http://[::1]:2"), None), &vars).unwrap();
        assert_eq!(admin.base, "http://[::1]:2");
        let admin = Admin::open(&with_admin(None, Some(token)), &HashMap::new()).unwrap();
        assert_eq!(admin.base, DEFAULT_ADMIN);
    }

    #[test]
    fn usage_problems_exit_2_before_anything_is_sent() {
        let dir = tempfile::tempdir().unwrap();
        let empty = dir.path().join("empty");
        std::fs::write(&empty, "\n").unwrap();
        let none = HashMap::new();
        for (args, says) in [
            (with_admin(None, None), "--token-file"),
            (with_admin(None, Some(dir.path().join("gone"))), "gone"),
            (with_admin(None, Some(empty.clone())), "is empty"),
            (
                with_admin(Some("https://pod:15101"), Some(empty.clone())),
                "plain HTTP",
            ),
            (
                with_admin(Some("pod:15101"), Some(empty)),
                "must be an http:// URL",
            ),
        ] {
            let failure = Admin::open(&args, &none).err().unwrap();
            assert_eq!(failure.exit_code(), 2, "{failure}");
            assert!(failure.to_string().contains(says), "{failure}");
        }
    }

    #[test]
    fn an_answer_is_a_value_a_refusal_or_a_server_failure() {
        let ok = answer(StatusCode::OK, br#"{"approvals": []}"#).unwrap();
        assert_eq!(ok, json!({"approvals": []}));
        let body =
            br#"{"status":"error","error":{"code":"TOOL_NOT_ALLOWED","message":"not yours"}}"#;
        let refused = answer(StatusCode::FORBIDDEN, body).unwrap_err();
        assert_eq!(refused.to_string(), "TOOL_NOT_ALLOWED (403): not yours");
        assert_eq!(refused.exit_code(), 1);
        let body = br#"{"status":"error","error":{"code":"STATE_UNAVAILABLE","message":"x"}}"#;
        assert_eq!(
            answer(StatusCode::SERVICE_UNAVAILABLE, body)
                .unwrap_err()
                .exit_code(),
            3
        );
        // Not toolgate behind the URL: the status still decides.
        assert_eq!(
            answer(StatusCode::NOT_FOUND, b"<html>")
                .unwrap_err()
                .exit_code(),
            1
        );
        assert_eq!(
            answer(StatusCode::OK, b"<html>").unwrap_err().exit_code(),
            3
        );
    }

    #[test]
    fn the_table_aligns_columns_and_ends_with_the_condition() {
        let mut older = mk_approval();
        older["id"] = json!("apr-22");
        older["createdAt"] = json!("2025-01-01T09:00:00.000Z");
        let shown = table(&json!({"approvals": [mk_approval(), older]}), None);
        let lines: Vec<&str> = shown.lines().collect();
        assert_eq!(lines.len(), 3, "{shown}");
        assert!(
            lines[0].starts_with("ID      STATUS   TOOL    AGENT"),
            "{shown}"
        );
        assert!(lines[1].starts_with("apr-22  pending  refund  ops-bot  2025-01-01 09:00:00Z"));
        assert!(
            lines[2].ends_with("2025-01-01 10:15:00Z  args.amount > 100"),
            "{shown}"
        );
        let none = table(&json!({"approvals": []}), Some(Status::Pending));
        assert_eq!(none, "no pending approvals you may decide\n");
    }

    #[test]
    fn show_prints_the_condition_and_the_redacted_arguments() {
        let shown = block(&mk_approval());
        assert!(shown.contains("condition:  args.amount > 100\n"), "{shown}");
        assert!(
            shown.contains("approvers:  finance-leads, cfo\n"),
            "{shown}"
        );
        assert!(shown.contains("session:    -\n"), "{shown}");
        assert!(shown.contains("\n    \"card\": \"[REDACTED]\""), "{shown}");
        assert_eq!(
            decided(&mk_approval()),
            "pending apr-1 (tool refund, agent ops-bot)\n"
        );
    }
}
