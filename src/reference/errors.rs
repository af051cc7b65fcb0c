//! `docs/errors.md`: the error contract as a user reads it, rendered from
//! [`Code`]'s table and from the MCP rendering (`proxy::mcp::reply`) itself.

use std::fmt::Write;

use crate::proxy::mcp::reply::{Form, Refusal};
use crate::vocab::{Code, Detail, Recovery, Reject};

/// Where the page lives, from the repository root.
pub const FILE: &str = "docs/errors.md";

const RECOVERIES: [(Recovery, &str); 6] = [
    (
        Recovery::FixArguments,
        "change the arguments and call again",
    ),
    (
        Recovery::AskUser,
        "ask the user for what is missing or wrong",
    ),
    (
        Recovery::Retry,
        "call again later (after `retryAfterMs` when given)",
    ),
    (
        Recovery::AwaitApproval,
        "wait until a person approves, then call again",
    ),
    (Recovery::Stop, "do not call again; report the refusal"),
    (
        Recovery::CallFirst,
        "make the call `details[].requires` names (successfully, in the same task or \
         session), then call again",
    ),
];

/// The whole page.
pub fn markdown() -> String {
    let mut page = String::new();
    page.push_str(
        "<!-- Generated from src/vocab/code.rs and src/proxy/mcp/reply.rs by \
         src/reference/errors.rs; do not edit. TOOLGATE_BLESS=1 cargo test --test reference \
         rewrites it. -->\n\n",
    );
    page.push_str("# Errors\n\n");
    page.push_str(
        "Every refusal, REST or MCP, carries the same JSON body, so an agent can act on it \
         without knowing which path it took. `code` says what happened, `recovery` what to \
         do next, `traceId` finds the decision in the audit log and in the trace.\n\n",
    );
    let example = Reject::new(
        Code::InvalidArguments,
        "window_minutes: \"30\" is not of type \"integer\"",
    )
    .with_details(vec![Detail {
        pointer: "/window_minutes".into(),
        keyword: "type".into(),
        ..Detail::default()
    }])
    .body("4bf92f3577b34da6a3ce929d0e0e4736");
    page.push_str("```json\n");
    page.push_str(&serde_json::to_string_pretty(&example).unwrap_or_default());
    page.push_str("\n```\n\n");
    page.push_str(
        "- `details`: for schema failures, where in the arguments (a JSON pointer) and which \
         schema keyword failed; for `CALL_ORDER_VIOLATION`, the tool to call first \
         (`requires`); empty otherwise.\n\
         - `rule`: the name of the CEL rule that refused the call, if one did.\n\
         - `retryAfterMs`: when a retry may succeed (`RATE_LIMITED`, a spent day budget); REST answers also \
         carry `Retry-After` in whole seconds, rounded up. A spend budget's \
         `BUDGET_EXHAUSTED` carries it too: the next midnight in the budget's time zone.\n\
         - Responses carry `X-Toolgate-Decision` (`allow`, `deny`, `shadow-deny`) and, \
         when refused, `X-Toolgate-Code`.\n\n",
    );
    page.push_str("## Recovery\n\n| recovery | the agent should |\n|---|---|\n");
    for (recovery, meaning) in RECOVERIES {
        let _ = writeln!(page, "| `{}` | {meaning} |", recovery.as_str());
    }
    page.push_str("\n## Codes\n\n");
    page.push_str(
        "| code | HTTP | retryable | recovery | when | MCP `tools/call` |\n\
         |---|---|---|---|---|---|\n",
    );
    for code in Code::ALL {
        let _ = writeln!(
            page,
            "| `{}` | {} | {} | `{}` | {} | {} |",
            code.as_str(),
            code.status(),
            if code.retryable() { "yes" } else { "no" },
            code.recovery().as_str(),
            code.when(),
            mcp_form(code),
        );
    }
    page.push_str("\nWhere a refusal departs from its row:\n\n");
    for code in Code::ALL {
        if let Some(varies) = code.varies() {
            let _ = writeln!(page, "- `{}`: {varies}.", code.as_str());
        }
    }
    page.push_str(MCP);
    page
}

/// How a refused tools/call of this code is answered over MCP.
fn mcp_form(code: Code) -> String {
    match code {
        // Refused while the HTTP request is read, before any message is: the size of the
        // body as a JSON-RPC error, the header count before MCP's dispatch, as REST.
        Code::PayloadTooLarge => return format!("HTTP {}, error `-32600`", code.status()),
        Code::HeadersTooLarge | Code::OriginNotAllowed => {
            return format!("HTTP {}, the REST body", code.status())
        }
        _ => {}
    }
    let refusal = Refusal::of_call(Reject::new(code, ""));
    match (refusal.form, code) {
        (Form::ToolError, _) => "result, `isError: true`".into(),
        (Form::Error(rpc), Code::Unauthenticated) => format!("HTTP 401, error `{rpc}`"),
        (Form::Error(rpc), _) => format!("error `{rpc}`"),
    }
}

const MCP: &str = "
## MCP

A refused `tools/call` is answered so the model sees the refusal and can correct itself:

- as a tool result: `result` with `isError: true`, the error body as `structuredContent` \
and the same JSON as one `text` item of `content`, HTTP 200;
- `UNKNOWN_TOOL` as JSON-RPC error `-32602` (invalid params), the body in `error.data`;
- a message that is not JSON (`-32700`) or not valid JSON-RPC (`-32600`), HTTP 400;
- `UNAUTHENTICATED` as HTTP 401 whose body is a JSON-RPC error (`-32010`, the body in \
`error.data`): MCP clients expect authorization failures at the HTTP level.

Refusals of other methods can't be tool results: a method the agent's policy does not \
grant in `mcpMethods` is error `-32601`, a failure of the backend `-32603`, each with the \
body in `error.data`. From protocol 2026-07-28 on, `-32602` is sent with HTTP 400 and \
`-32601` with HTTP 404; earlier revisions get HTTP 200.
";
