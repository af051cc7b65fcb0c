//! `toolgate demo --serve`: after the tour, the example backend and a sidecar stay up on
//! loopback for calls by hand — the tour's policies (edit them: the sidecar applies a
//! change within a second), tokens and audit log (its chain continued) — until the
//! future given completes (`main` passes Ctrl-C or SIGTERM). It prints a `curl` for each
//! kind of decision, each with the answer it gets on a fresh sidecar.

use std::future::Future;
use std::io::Write;
use std::net::SocketAddr;

use super::script::TOKEN;
use super::{Home, SUPPORT_TOKEN};

/// Serves until `until` completes, writing the addresses and examples to `out`.
pub async fn serve(
    out: &mut impl Write,
    otlp_endpoint: Option<String>,
    until: impl Future<Output = ()>,
) -> anyhow::Result<()> {
    let home = Home::prepare()?;
    let (backend, sidecar) = home.start(otlp_endpoint).await?;
    writeln!(
        out,
        "\nserving until Ctrl-C: example backend on {backend}, sidecar on {} (admin {})",
        sidecar.agent_addr, sidecar.admin_addr
    )?;
    writeln!(
        out,
        "policies: {} (edit them: the sidecar applies a change within a second)",
        home.policies.display()
    )?;
    writeln!(
        out,
        "audit log: {} (the chain goes on)\n",
        home.audit.display()
    )?;
    for (what, command) in examples(sidecar.agent_addr, sidecar.admin_addr) {
        writeln!(out, "  # {what}\n  {command}")?;
    }
    out.flush()?;
    until.await;
    sidecar.shutdown().await;
    writeln!(
        out,
        "\nstopped; verify the whole log: toolgate audit verify {}",
        home.audit.display()
    )?;
    Ok(())
}

/// `(what it shows, the command)`: what each gets is in its first words, `HTTP CODE`.
fn examples(agent: SocketAddr, admin: SocketAddr) -> Vec<(&'static str, String)> {
    let ops = format!("-H 'Authorization: Bearer {TOKEN}'");
    let support = format!(
        "-H 'Authorization: Bearer {SUPPORT_TOKEN}' -H 'Content-Type: application/json' -H 'Accept: application/json, text/event-stream'"
    );
    let json = "-H 'Content-Type: application/json'";
    let mcp_call = |order: &str| {
        format!(
            r#"{{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{{"name":"lookup_order","arguments":{{"order_id":"{order}"}}}}}}"#
        )
    };
    vec![
        (
            "201 allowed: ops-bot opens an issue (again within 10 minutes: the same answer, replayed, not run twice)",
            format!(
                r#"curl -s -w '\n' {ops} {json} -d '{{"project_key":"OPS","title":"printer jammed"}}' http://{agent}/issues"#
            ),
        ),
        (
            "403 POLICY_DENIED: the rule no-security-issues",
            format!(
                r#"curl -s -w '\n' {ops} {json} -d '{{"project_key":"SEC","title":"rotate keys"}}' http://{agent}/issues"#
            ),
        ),
        (
            "200 allowed: a status check (a fourth identical one in a session is LOOP_DETECTED)",
            format!("curl -s -w '\\n' {ops} http://{agent}/status/orders"),
        ),
        (
            "404 UNKNOWN_TOOL: no contract, never forwarded",
            format!("curl -s -w '\\n' -X POST {ops} http://{agent}/admin/shell"),
        ),
        (
            "401 UNAUTHENTICATED: no credential",
            format!("curl -s -w '\\n' http://{agent}/status/orders"),
        ),
        (
            "200 allowed: support-bot calls lookup_order over MCP",
            format!(
                "curl -s -w '\\n' {support} -d '{}' http://{agent}/mcp",
                mcp_call("A-1042")
            ),
        ),
        (
            "200 INVALID_ARGUMENTS: refused over MCP as a tool result with isError",
            format!(
                "curl -s -w '\\n' {support} -d '{}' http://{agent}/mcp",
                mcp_call("order 1042")
            ),
        ),
        (
            "200: what the sidecar enforces, and its decisions so far",
            format!(
                "curl -s http://{admin}/config; echo; curl -s http://{admin}/metrics | grep '^toolgate_calls_total'"
            ),
        ),
    ]
}
