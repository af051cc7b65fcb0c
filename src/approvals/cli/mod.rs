//! `toolgate approvals`: the approver's side of the second gate from a shell (DESIGN §9).
//! A thin client of the approval API on the admin listener (`approvals::api`): it lists,
//! shows and decides approvals with an approver's bearer token and prints what the API
//! answers. It decides nothing itself; who may decide what is the sidecar's call.
//!
//! Invariants: the token comes from a file, never a flag (so it stays out of shell history
//! and `ps`), and is never printed. The exit code tells a script what went wrong without
//! parsing text ([`EXIT_CODES`]). Settings are read from the variables passed in, not the
//! process environment, so tests hand it a map.

use clap::{Args, Subcommand, ValueEnum};
use http::Method;
use percent_encoding::{utf8_percent_encode, AsciiSet, NON_ALPHANUMERIC};
use serde_json::json;
use std::collections::HashMap;
use std::io::Write as _;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use super::Status;
use admin::Admin;
use render::{block, decided, pretty, table};

mod admin;
mod render;

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
/// One page of the listing (summaries, no arguments) or one approval (arguments of at
/// most `limits.maxBodyBytes`) fits well within this.
const MAX_ANSWER: usize = 64 << 20;
/// Approvals asked for per page: the API's largest.
const PAGE: usize = 1000;
/// Pages followed at most: far more than `approvals.maxPending` approvals.
const MAX_PAGES: usize = 10_000;
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
            let answer = list(&Admin::open(&admin, vars)?, status).await?;
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

/// Every page of the listing, followed to its end, as one `{"approvals": [...]}`.
async fn list(admin: &Admin, status: Option<Status>) -> Result<serde_json::Value, Failure> {
    let mut approvals = Vec::new();
    let mut cursor: Option<String> = None;
    for _ in 0..MAX_PAGES {
        let mut query = form_urlencoded::Serializer::new(String::new());
        query.append_pair("limit", &PAGE.to_string());
        if let Some(status) = status {
            query.append_pair("status", status.as_str());
        }
        if let Some(cursor) = &cursor {
            query.append_pair("cursor", cursor);
        }
        let path = format!("/approvals?{}", query.finish());
        let mut answer = admin.send(Method::GET, &path, None).await?;
        if let Some(page) = answer["approvals"].as_array_mut() {
            approvals.append(page);
        }
        match answer["nextCursor"].as_str() {
            Some(next) if Some(next) != cursor.as_deref() => cursor = Some(next.to_string()),
            _ => return Ok(json!({ "approvals": approvals })),
        }
    }
    Err(Failure::Refused {
        status: 500,
        code: "UNEXPECTED_ANSWER".into(),
        message: format!("the listing did not end after {MAX_PAGES} pages"),
    })
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

#[cfg(test)]
mod tests {
    use super::admin::answer;
    use super::*;
    use http::StatusCode;
    use serde_json::Value;

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
