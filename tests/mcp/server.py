"""Upstream MCP server for toolgate integration tests, built on the official SDK (mcp 2.x).

    python server.py --port N [--json-response | --sse] [--stateless] [--count-file PATH] [--interactive]

Listens on http://127.0.0.1:N/mcp (Streamable HTTP). --port 0 picks a free port.
Prints exactly one line to stdout, flushed, once the socket is listening:
    READY <port>
Everything else (uvicorn / SDK logs) goes to stderr.

Tools:
  read_logs(service, window_minutes=15) -> {"service", "window_minutes", "lines": [{"msg", "client_ip"}]}
      window_minutes outside 1..1440 -> JSON-RPC error -32602 with data {"field", "min", "max", "got"}
  create_issue(project_key, title) -> {"id": "<KEY>-<n>", "project_key", "title"}
      project_key == "ERR" -> result with isError=true and structuredContent {"error", "project_key"}
  echo(text) -> text (text content only, no structuredContent, no outputSchema)
  secret_tool() -> a string; no contract in toolgate, so toolgate must hide it
Only with --interactive (the tests of live streaming, tests/mcp_live.rs):
  deliberate(topic) -> {"topic", "opinion", "model", "approved", "note", "progress_sent"}
      Interactive, on the tools/call's own SSE stream, in this order: progress 1/3, log
      "deliberating on <topic>", progress 2/3, sampling/createMessage (its text becomes
      "opinion", its model "model"), elicitation/create {approved: bool, note: str}
      (accepted content becomes "approved" / "note"; declined -> approved false), log
      "verdict ready", progress 3/3, then the result. Progress is sent only when the
      client sent a progressToken ("progress_sent" says how many went out).
  slow_count(n) -> {"n", "runs"}: progress 1/2, sleeps 1 s, progress 2/2, then the
      result; "runs" is how many times slow_count has run so far (so a replay is visible).
Plus resource "config://app" and prompt "summarize", so tests can check that
toolgate refuses resources/* and prompts/*.

--count-file PATH: JSON {tool_name: times_the_tool_function_actually_ran}, rewritten
atomically (write temp + rename) on every tool invocation; written as {} at startup.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Annotated

import anyio
import uvicorn
from mcp.server.mcpserver import Context, MCPServer
from mcp.shared.exceptions import MCPError
from mcp.types import CallToolResult, SamplingMessage, TextContent
from pydantic import BaseModel, Field
from typing_extensions import TypedDict  # pydantic needs this one on Python < 3.12

INVALID_PARAMS = -32602

mcp = MCPServer("toolgate-test-upstream", version="1.0.0")
_counts: dict[str, int] = {}
_count_file: str | None = None


def _count(tool: str) -> None:
    _counts[tool] = _counts.get(tool, 0) + 1
    _write_counts()


def _write_counts() -> None:
    if _count_file is None:
        return
    tmp = f"{_count_file}.tmp"
    with open(tmp, "w") as f:
        json.dump(_counts, f)
    os.replace(tmp, _count_file)


class LogLine(TypedDict):
    msg: str
    client_ip: str


class Logs(TypedDict):
    service: str
    window_minutes: int
    lines: list[LogLine]


class Issue(TypedDict):
    id: str
    project_key: str
    title: str


@mcp.tool(description="Read recent log lines of a service.")
def read_logs(service: str, window_minutes: int = 15) -> Logs:
    _count("read_logs")
    if not 1 <= window_minutes <= 1440:
        raise MCPError(
            code=INVALID_PARAMS,
            message="window_minutes out of range",
            data={"field": "window_minutes", "min": 1, "max": 1440, "got": window_minutes},
        )
    return {
        "service": service,
        "window_minutes": window_minutes,
        "lines": [
            {"msg": f"{service}: GET /health 200", "client_ip": "10.0.0.1"},
            {"msg": f"{service}: login failed for user alice", "client_ip": "10.0.0.2"},
        ],
    }


@mcp.tool(description="Create an issue in a project tracker.")
def create_issue(project_key: str, title: str) -> Annotated[CallToolResult, Issue]:
    _count("create_issue")
    if project_key == "ERR":
        err = {"error": "project not found", "project_key": project_key}
        return CallToolResult(content=[TextContent(type="text", text=json.dumps(err))], structured_content=err, is_error=True)
    issue: Issue = {"id": f"{project_key}-{_counts['create_issue']}", "project_key": project_key, "title": title}
    return CallToolResult(content=[TextContent(type="text", text=json.dumps(issue))], structured_content=dict(issue))


@mcp.tool(description="Echo the text back.", structured_output=False)
def echo(text: str) -> str:
    _count("echo")
    return text


@mcp.tool(description="A tool with no toolgate contract; toolgate must never expose or forward it.")
def secret_tool() -> str:
    _count("secret_tool")
    return "the secret"


class Approval(BaseModel):
    approved: bool = Field(description="Approve the verdict?")
    note: str = Field(default="", description="Anything to add")


class Deliberation(TypedDict):
    topic: str
    opinion: str
    model: str
    approved: bool
    note: str
    progress_sent: int


async def _progress(ctx: Context, sent: int, progress: float, total: float, message: str) -> int:
    """Reports progress only when the caller sent a progressToken; returns the new count."""
    meta = ctx.request_context.meta or {}
    if meta.get("progress_token") is None:
        return sent
    await ctx.report_progress(progress, total, message)
    return sent + 1


async def deliberate(topic: str, ctx: Context) -> Deliberation:
    _count("deliberate")
    sent = await _progress(ctx, 0, 1, 3, "thinking")
    await ctx.info(f"deliberating on {topic}")
    sent = await _progress(ctx, sent, 2, 3, "asking the model")
    # related_request_id: the request rides this tools/call's own SSE stream.
    sampled = await ctx.session.create_message(
        [SamplingMessage(role="user", content=TextContent(type="text", text=f"What do you think about {topic}?"))],
        max_tokens=64,
        related_request_id=ctx.request_id,
    )
    opinion = sampled.content.text if isinstance(sampled.content, TextContent) else ""
    answer = await ctx.elicit(f"Approve the verdict on {topic}?", Approval)
    approved, note = (answer.data.approved, answer.data.note) if answer.action == "accept" else (False, "")
    await ctx.info("verdict ready")
    sent = await _progress(ctx, sent, 3, 3, "done")
    return {
        "topic": topic,
        "opinion": opinion,
        "model": sampled.model,
        "approved": approved,
        "note": note,
        "progress_sent": sent,
    }


class SlowCount(TypedDict):
    n: int
    runs: int


async def slow_count(n: int, ctx: Context) -> SlowCount:
    _count("slow_count")
    runs = _counts["slow_count"]
    sent = await _progress(ctx, 0, 1, 2, "counting")
    await anyio.sleep(1.0)
    await _progress(ctx, sent, 2, 2, "counted")
    return {"n": n, "runs": runs}


@mcp.resource("config://app", name="app_config", description="Static app config.")
def app_config() -> str:
    return "debug=false"


@mcp.prompt(description="Ask for a summary.")
def summarize(text: str) -> str:
    return f"Summarize this: {text}"


async def _serve(args: argparse.Namespace) -> None:
    app = mcp.streamable_http_app(
        streamable_http_path="/mcp",
        json_response=args.json_response,
        stateless_http=args.stateless,
        host="127.0.0.1",
    )
    config = uvicorn.Config(app, host="127.0.0.1", port=args.port, log_level="warning")
    server = uvicorn.Server(config)

    async def announce() -> None:
        while not server.started:
            await anyio.sleep(0.02)
        port = server.servers[0].sockets[0].getsockname()[1]
        print(f"READY {port}", flush=True)

    async with anyio.create_task_group() as tg:
        tg.start_soon(announce)
        await server.serve()
        tg.cancel_scope.cancel()


def main() -> None:
    global _count_file
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--port", type=int, required=True)
    mode = p.add_mutually_exclusive_group()
    mode.add_argument("--json-response", action="store_true", help="answer POSTs with application/json")
    mode.add_argument("--sse", action="store_true", help="answer POSTs with text/event-stream (default)")
    p.add_argument("--stateless", action="store_true", help="no Mcp-Session-Id, fresh transport per request")
    p.add_argument("--count-file", help="JSON file of per-tool invocation counts")
    p.add_argument("--interactive", action="store_true", help="also serve deliberate and slow_count")
    args = p.parse_args()
    if args.interactive:
        mcp.add_tool(
            deliberate,
            description="Think about a topic: reports progress, logs, asks the client's model and its user.",
        )
        mcp.add_tool(slow_count, description="Count slowly: progress, a 1 s pause, progress, then the result.")
    _count_file = args.count_file
    _write_counts()
    try:
        anyio.run(_serve, args)
    except KeyboardInterrupt:
        pass
    sys.exit(0)


if __name__ == "__main__":
    main()
