//! How `toolgate approvals` prints what the API answered: a table of approvals, one
//! approval as a block (its redacted arguments pretty-printed), a decision as a line.

use serde_json::Value;

use super::super::Status;

pub(super) fn pretty(value: &Value) -> String {
    format!(
        "{}\n",
        serde_json::to_string_pretty(value).unwrap_or_default()
    )
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
pub(super) fn table(answer: &Value, status: Option<Status>) -> String {
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
pub(super) fn block(approval: &Value) -> String {
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
pub(super) fn decided(approval: &Value) -> String {
    format!(
        "{} {} (tool {}, agent {})\n",
        text(approval, "status"),
        text(approval, "id"),
        text(approval, "tool"),
        text(approval, "agent")
    )
}
