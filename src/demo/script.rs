//! The tour's scripted REST session: one agent (`ops-bot`) through every kind of
//! decision, in an order where each row shows one rule (the loop needs the three checks
//! before it, the replayed refund the approval before it, the refund the lookup before
//! it, the spent budget the refund before it).

/// The token of `ops-bot`, the agent of the example policies.
pub const TOKEN: &str = "demo-ops-token";
/// The scripted approver: alice, in finance-leads.
pub const APPROVER_TOKEN: &str = "demo-approver-token";

/// One scripted call.
pub struct Step {
    pub scenario: &'static str,
    pub tool: &'static str,
    pub method: &'static str,
    pub path: &'static str,
    pub token: Option<&'static str>,
    /// Send the task token the orchestrator signed for "30 minutes of orders logs".
    pub task: bool,
    pub body: &'static str,
    /// Before the call, the scripted approver approves the approval the last call was
    /// held for, on the admin API.
    pub approve_first: bool,
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

pub const STEPS: &[Step] = &[
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
        "a refund of an order never looked up",
        "issue_refund",
        "POST",
        "/refunds",
        REFUND,
    ),
    step(
        "look the order up",
        "get_order",
        "GET",
        "/orders/A-1042",
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
    step(
        "look another order up",
        "get_order",
        "GET",
        "/orders/A-1043",
        "",
    ),
    step(
        "a refund past the day's budget (300)",
        "issue_refund",
        "POST",
        "/refunds",
        SECOND_REFUND,
    ),
];

const REFUND: &str = r#"{"order_id":"A-1042","amount":250,"note":"damaged in transit"}"#;
const SECOND_REFUND: &str = r#"{"order_id":"A-1043","amount":90,"note":"late delivery"}"#;
