"""Scripted MCP client for toolgate integration tests, built on the official SDK (mcp 2.x).

    python client.py --url URL [--token T] [--header K=V ...] [--mode legacy|auto|modern]
                     [--timeout SECONDS] SCENARIO [ARGS...]

Scenarios (one per run):
    list                  -> {"tools": [name, ...], "protocolVersion": "..."}
    call NAME JSON_ARGS   -> {"isError": bool, "structuredContent": ..., "content": [...], "protocolVersion": ...}
    resources             -> {"resources": [uri, ...], "protocolVersion": ...}
    prompts               -> {"prompts": [name, ...], "protocolVersion": ...}

A JSON-RPC error answering the scenario's request (the SDK raises MCPError) prints
    {"error": {"code": int, "message": str, "data": ...}, "http_status": int | null}
Any failure while connecting / negotiating, or any other exception, prints
    {"exception": "TypeName", "message": str, "code": int|null, "data": ..., "http_status": int|null}
"http_status" is the status of the last HTTP response the SDK received that was >= 400
(the SDK itself hides it: a bare 401/403/5xx becomes MCPError -32603).
Always prints exactly one JSON object on stdout and exits 0 (2 on bad usage).

--mode legacy (default): ClientSession.initialize() handshake (protocol 2025-11-25).
--mode modern: ClientSession.discover() (server/discover, protocol 2026-07-28, no session).
--mode auto: what mcp.client.Client does by default: discover, fall back to initialize.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

import anyio
from mcp.client._probe import negotiate_auto
from mcp.client.session import ClientSession
from mcp.client.streamable_http import create_mcp_http_client, streamable_http_client
from mcp.shared.exceptions import MCPError


def _leaf(exc: BaseException) -> BaseException:
    """Unwrap (nested) exception groups from anyio task groups down to the first real error."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return exc


async def _run(args: argparse.Namespace, statuses: list[int]) -> dict[str, Any]:
    headers = {}
    if args.token:
        headers["Authorization"] = f"Bearer {args.token}"
    for kv in args.header:
        k, _, v = kv.partition("=")
        headers[k] = v

    async def on_response(response: Any) -> None:
        if response.status_code >= 400:
            statuses.append(response.status_code)

    http_client = create_mcp_http_client(headers=headers)
    http_client.event_hooks = {"response": [on_response]}
    async with http_client, streamable_http_client(args.url, http_client=http_client) as (read, write):
        async with ClientSession(read, write) as session:
            if args.mode == "legacy":
                await session.initialize()
            elif args.mode == "modern":
                await session.discover()
            else:
                await negotiate_auto(session)
            pv = session.protocol_version
            try:
                out = await _scenario(session, args)
            except MCPError as e:
                out = {"error": {"code": e.code, "message": e.message, "data": e.data}}
                out["http_status"] = statuses[-1] if statuses else None
            out["protocolVersion"] = pv
            return out


async def _scenario(session: ClientSession, args: argparse.Namespace) -> dict[str, Any]:
    if args.scenario == "list":
        result = await session.list_tools()
        return {"tools": [t.name for t in result.tools]}
    if args.scenario == "call":
        if len(args.args) != 2:
            raise SystemExit("usage: call NAME JSON_ARGS")
        result = await session.call_tool(args.args[0], json.loads(args.args[1]))
        return {
            "isError": bool(result.is_error),
            "structuredContent": result.structured_content,
            "content": [c.model_dump(mode="json", by_alias=True, exclude_none=True) for c in result.content],
        }
    if args.scenario == "resources":
        result = await session.list_resources()
        return {"resources": [str(r.uri) for r in result.resources]}
    if args.scenario == "prompts":
        result = await session.list_prompts()
        return {"prompts": [p.name for p in result.prompts]}
    raise SystemExit(f"unknown scenario {args.scenario!r}")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--url", required=True)
    p.add_argument("--token")
    p.add_argument("--header", action="append", default=[], metavar="K=V")
    p.add_argument("--mode", choices=["legacy", "auto", "modern"], default="legacy")
    p.add_argument("--timeout", type=float, default=30.0)
    p.add_argument("scenario", choices=["list", "call", "resources", "prompts"])
    p.add_argument("args", nargs="*")
    args = p.parse_args()

    statuses: list[int] = []

    async def run() -> dict[str, Any]:
        with anyio.fail_after(args.timeout):
            return await _run(args, statuses)

    try:
        out = anyio.run(run)
    except SystemExit as e:
        print(e, file=sys.stderr)
        sys.exit(2)
    except BaseException as e:  # noqa: BLE001 - report every failure as data
        leaf = _leaf(e)
        if isinstance(leaf, SystemExit):
            print(leaf, file=sys.stderr)
            sys.exit(2)
        out = {
            "exception": type(leaf).__name__,
            "message": str(leaf),
            "code": leaf.code if isinstance(leaf, MCPError) else None,
            "data": leaf.data if isinstance(leaf, MCPError) else None,
            "http_status": statuses[-1] if statuses else None,
        }
    print(json.dumps(out), flush=True)


if __name__ == "__main__":
    main()
