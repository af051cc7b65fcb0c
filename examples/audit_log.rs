//! Writes a valid, hash-chained audit log for the policies in `examples/policies/`: what
//! `toolgate replay` reads, at any length, for `bench/replay.sh` (issue 23).
//!
//! ```text
//! cargo run --release --example audit_log -- --records N --out FILE [--policies DIR]
//! ```
//!
//! The log is what a sidecar running those policies would have written: a `start`
//! record, a `policy` record for version 1, then N `call` records of the agent `ops-bot`
//! — mostly allowed calls with captured `args` and `inputs`, some refused by a rule, by
//! the schema or for an approval, some with nothing captured (contracts without
//! `captureArguments`), a few decided by a rate limit. Every recorded decision is the one
//! those policies make, so replaying the log against them changes nothing; the mix is a
//! pure function of the record's number, so two runs write the same bytes. Records are
//! built, chained and written one at a time: memory doesn't grow with N.

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::PathBuf;
use std::time::{Duration, UNIX_EPOCH};

use anyhow::Context;
use clap::Parser;
use serde_json::{json, Value};
use toolgate::audit::record::{chain, ApprovalRef, Entry, Published, Record, Start, GENESIS};
use toolgate::vocab::Code;

#[derive(Parser)]
struct Cli {
    /// How many call records follow the `start` and `policy` records.
    #[arg(long, default_value_t = 1_000_000)]
    records: u64,
    /// The log to write (replaced if it exists).
    #[arg(long)]
    out: PathBuf,
    /// The policies the calls were decided under; only their digest is written.
    #[arg(long, default_value = concat!(env!("CARGO_MANIFEST_DIR"), "/examples/policies"))]
    policies: PathBuf,
}

/// What a call was, and so what the example policies decided.
#[derive(Clone, Copy)]
enum Kind {
    /// read_logs within the task's service and window.
    ReadLogs,
    /// read_logs wider than the task allows: OUT_OF_TASK_SCOPE, rule within-task-window.
    ReadLogsWider,
    /// read_logs of a service the schema doesn't list: INVALID_ARGUMENTS.
    ReadLogsInvalid,
    CreateIssue,
    /// project_key SEC: POLICY_DENIED, rule no-security-issues.
    CreateIssueSecurity,
    /// A lowercase project_key: INVALID_ARGUMENTS.
    CreateIssueInvalid,
    /// amount ≤ 100: no approval needed.
    Refund,
    /// amount > 100, run under a person's approval.
    RefundApproved,
    /// amount > 100, held: APPROVAL_REQUIRED.
    RefundHeld,
    /// No `captureArguments`: replay can only re-check the grant.
    GetStatus,
    /// get_status beyond its 4 a minute: decided by a limit, which replay skips.
    GetStatusLimited,
    /// Allowed; the example backend answers 500.
    ExportReport,
}

/// Out of every 100 calls, how many are of each kind (the shares add up to 100).
const MIX: [(u64, Kind); 12] = [
    (40, Kind::ReadLogs),
    (4, Kind::ReadLogsWider),
    (2, Kind::ReadLogsInvalid),
    (16, Kind::CreateIssue),
    (3, Kind::CreateIssueSecurity),
    (1, Kind::CreateIssueInvalid),
    (10, Kind::Refund),
    (3, Kind::RefundApproved),
    (1, Kind::RefundHeld),
    (14, Kind::GetStatus),
    (2, Kind::GetStatusLimited),
    (4, Kind::ExportReport),
];

/// 2026-12-01T00:00:00Z: fixed, so that the same N writes the same bytes.
const EPOCH_US: u64 = 1_796_083_200_000_000;
/// Calls of one session (an agent's conversation).
const SESSION_CALLS: u64 = 40;

/// The plain (unkeyed) digest call records carry.
fn args_digest(args: &serde_json::Value) -> String {
    toolgate::audit::privacy::Privacy::new(None, &[]).args_digest(args)
}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    // Compiled as replay compiles a candidate, so that the `policy` record names the
    // digest a sidecar would publish for these sources.
    let snapshot = toolgate::replay::candidate(std::slice::from_ref(&cli.policies))
        .map_err(|e| anyhow::anyhow!("{}: {e}", cli.policies.display()))?;
    let file = File::create(&cli.out).with_context(|| cli.out.display().to_string())?;
    let mut out = BufWriter::with_capacity(1 << 16, file);
    let start = Record::Start(Start {
        ts: timestamp(0),
        toolgate: env!("CARGO_PKG_VERSION"),
        // A sidecar digests its settings; this has none, but the field keeps that form.
        settings_digest: args_digest(&json!({"generator": "examples/audit_log.rs"})),
        chain: "sha256",
        key_id: None,
        truncated_bytes: None,
    });
    let policy = Record::Policy(Published {
        ts: timestamp(0),
        policy_version: 1,
        digest: snapshot.digest.clone(),
    });
    let mut prev = GENESIS.to_string();
    let records = [start, policy]
        .into_iter()
        .chain((0..cli.records).map(|n| Record::Call(Box::new(call(n)))));
    for (seq, record) in (1..).zip(records) {
        let (line, hash) = chain(&record, seq, &prev, None);
        out.write_all(line.as_bytes())?;
        out.write_all(b"\n")?;
        prev = hash;
    }
    out.flush()?;
    Ok(())
}

/// Call number `n`: its kind, arguments and outcome all follow from `n`.
fn call(n: u64) -> Entry {
    let r = mix(n);
    let kind = kind(r % 100);
    // Higher bits pick the details, independently of the kind.
    let pick = r >> 8;
    let proposed = propose(kind, n, pick);
    // Every identified call keeps its arguments' digest, captured or not.
    let digest = proposed.args.as_ref().map_or_else(
        || args_digest(&json!({"service": service(pick)})),
        args_digest,
    );
    let mut entry = Entry {
        ts: timestamp(n),
        // 32 hex digits like an OpenTelemetry trace id; distinct, since `mix` is a
        // bijection and the low half is `mix(n)`.
        trace_id: format!("{:016x}{:016x}", mix(!n), mix(n)),
        agent: Some("ops-bot".into()),
        issuer: Some("tokens".into()),
        session: Some(format!("sess-{:07}", n / SESSION_CALLS)),
        tool: Some(proposed.tool.into()),
        args_digest: Some(digest),
        args: proposed.args,
        decision: "allow",
        code: None,
        rule: None,
        policy_version: Some(1),
        upstream_status: Some(200),
        latency_us: 900 + pick % 4000,
        state: None,
        approval: proposed.approval,
        replayed: false,
        task: None,
        inputs: proposed.inputs,
    };
    if let Some((code, rule)) = refusal(kind) {
        entry.decision = "deny";
        entry.code = Some(code.as_str());
        entry.rule = rule.map(str::to_string);
        entry.upstream_status = None;
        // A refusal is decided in the gate, without a round trip to the backend.
        entry.latency_us = 40 + pick % 200;
    } else if let Kind::ExportReport = kind {
        entry.upstream_status = Some(500);
    }
    entry
}

/// What a call's record keeps of what it proposed.
struct Proposed {
    tool: &'static str,
    /// With `captureArguments`: the arguments after validation (defaults filled).
    args: Option<Value>,
    /// What the rules read besides `args`, recorded once the rules ran: a call refused by
    /// the schema never got that far, and has none.
    inputs: Option<Value>,
    approval: Option<ApprovalRef>,
}

fn propose(kind: Kind, n: u64, pick: u64) -> Proposed {
    let uncaptured = |tool| Proposed {
        tool,
        args: None,
        inputs: None,
        approval: None,
    };
    match kind {
        Kind::ReadLogs | Kind::ReadLogsWider | Kind::ReadLogsInvalid => read_logs(kind, n, pick),
        Kind::CreateIssue | Kind::CreateIssueSecurity | Kind::CreateIssueInvalid => {
            create_issue(kind, pick)
        }
        Kind::Refund | Kind::RefundApproved | Kind::RefundHeld => issue_refund(kind, n, pick),
        Kind::GetStatus | Kind::GetStatusLimited => uncaptured("get_status"),
        Kind::ExportReport => uncaptured("export_report"),
    }
}

/// The rule `within-task-window` compares the arguments with the task's claims.
fn read_logs(kind: Kind, n: u64, pick: u64) -> Proposed {
    let allowed = [15, 30, 60][(pick >> 1) as usize % 3];
    let window = match kind {
        Kind::ReadLogsWider => allowed * 2,
        _ => allowed - (pick >> 3) % 10,
    };
    let service = match kind {
        Kind::ReadLogsInvalid => "billing",
        _ => service(pick),
    };
    // The claims the orchestrator signed, as the task token verifier returns them; a
    // task lasts ten minutes from its first call.
    let task = json!({
        "iss": "orchestrator",
        "exp": EPOCH_US / 1_000_000 + n / 20 + 600,
        "agent": "ops-bot",
        "service": service,
        "window_minutes": allowed,
    });
    Proposed {
        tool: "read_logs",
        args: Some(json!({"service": service, "window_minutes": window})),
        inputs: (!matches!(kind, Kind::ReadLogsInvalid)).then(|| json!({"v": 1, "task": task})),
        approval: None,
    }
}

/// The rule `no-security-issues` reads only `args`: the inputs hold no other variable.
fn create_issue(kind: Kind, pick: u64) -> Proposed {
    let project = match kind {
        Kind::CreateIssueSecurity => "SEC",
        Kind::CreateIssueInvalid => "ops",
        _ => ["OPS", "WEB", "DATA"][(pick >> 1) as usize % 3],
    };
    let service = service(pick);
    let priority = ["low", "high"][((pick >> 2) & 1) as usize];
    let title = format!(
        "{service}: error rate above 2% since {}:00",
        (pick >> 4) % 24
    );
    Proposed {
        tool: "create_issue",
        args: Some(json!({"project_key": project, "title": title, "priority": priority})),
        inputs: (!matches!(kind, Kind::CreateIssueInvalid)).then(|| json!({"v": 1})),
        approval: None,
    }
}

/// The approval's `when` reads only `args.amount`.
fn issue_refund(kind: Kind, n: u64, pick: u64) -> Proposed {
    let amount = match kind {
        Kind::Refund => 1 + (pick >> 1) % 100,
        _ => 101 + (pick >> 1) % 900,
    };
    let approval = matches!(kind, Kind::RefundApproved).then(|| ApprovalRef {
        id: format!("apr-{n:010}"),
        approver: Some("dana@finance".into()),
        reason: Some("matches the customer's ticket".into()),
    });
    Proposed {
        tool: "issue_refund",
        args: Some(json!({
            "order_id": format!("A-{}", 100_000 + (pick >> 10) % 900_000),
            "amount": amount,
            "note": "damaged in transit",
        })),
        inputs: Some(json!({"v": 1})),
        approval,
    }
}

/// The code and rule of a refused kind, as the example policies refuse it.
fn refusal(kind: Kind) -> Option<(Code, Option<&'static str>)> {
    match kind {
        Kind::ReadLogsWider => Some((Code::OutOfTaskScope, Some("within-task-window"))),
        Kind::CreateIssueSecurity => Some((Code::PolicyDenied, Some("no-security-issues"))),
        Kind::ReadLogsInvalid | Kind::CreateIssueInvalid => Some((Code::InvalidArguments, None)),
        Kind::RefundHeld => Some((Code::ApprovalRequired, None)),
        Kind::GetStatusLimited => Some((Code::RateLimited, None)),
        _ => None,
    }
}

fn service(pick: u64) -> &'static str {
    ["orders", "payments"][(pick & 1) as usize]
}

fn kind(percent: u64) -> Kind {
    let mut below = 0;
    for (share, kind) in MIX {
        below += share;
        if percent < below {
            return kind;
        }
    }
    Kind::ReadLogs
}

/// About 37 ms between calls: a million calls span ten hours.
fn timestamp(n: u64) -> String {
    let us = EPOCH_US + n * 37_000 + mix(n) % 1_000;
    humantime::format_rfc3339_micros(UNIX_EPOCH + Duration::from_micros(us)).to_string()
}

/// SplitMix64: well-spread bits from a counter, without a random generator's state.
fn mix(n: u64) -> u64 {
    let mut z = n.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}
