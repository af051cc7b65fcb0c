"""Scripted MCP client for toolgate integration tests, built on the official SDK (mcp 2.x).

    python client.py --url URL [--token T | --oauth] [--header K=V ...] [--mode legacy|auto|modern]
                     [--timeout SECONDS] SCENARIO [ARGS...]

Scenarios (one per run):
    list                  -> {"tools": [name, ...], "listed": [each tool as listed], "protocolVersion": "..."}
    call NAME JSON_ARGS   -> {"isError": bool, "structuredContent": ..., "content": [...], "protocolVersion": ...}
    resources             -> {"resources": [uri, ...], "protocolVersion": ...}
    prompts               -> {"prompts": [name, ...], "protocolVersion": ...}
    call-interactive NAME JSON_ARGS [--repeat N] [--concurrent K] [--call-timeout S]
                          -> one summary object, see below

call-interactive: a session that serves the server's requests and records what arrives.
Its ClientSession has a sampling callback (answers SAMPLED_TEXT from SAMPLED_MODEL), an
elicitation callback (accepts ELICITED), a logging callback, and a progress callback
per call (so every call carries a progressToken). It calls NAME N times in sequence
(--repeat, default 1), or K identical calls at once (--concurrent K, default 1; N
rounds of K). Every "{i}" in JSON_ARGS becomes the call's index (0-based), so repeated
calls can differ: toolgate's never-twice would otherwise answer the same call in the
same session with a replay. Each call has its own timeout (--call-timeout, default 10 s):
a call that times out is a stall, reported and not waited on. After 3 failed calls
(stalled, a JSON-RPC error, or a wrong result) the run stops ("aborted": true), so a
broken path reports in seconds rather than running into --timeout. For each call it
records, in arrival order, "progress", "log", "sampling", "elicitation", then "result"
(or "stall" / "error"). Output:
    {"calls": int,                 # calls finished (ok or not)
     "ok": int,                    # result arrived, not isError, and correct for NAME
     "stalls": int,                # calls with no answer within --call-timeout
     "timeouts": int,              # calls answered with toolgate's BACKEND_TIMEOUT error
     "errors": [str, ...] (first 5), "aborted": bool,
     "order_violations": int,      # calls where an event came after the result, the
                                   # result was missing, or --expect kinds were missing
                                   # before it
     "expect": [kind, ...],        # the kinds each call must see before its result
                                   # (--expect, default progress,log,sampling,elicitation)
     "first_order": [kind, ...],   # the first call's arrivals
     "orders": {"k1,k2,...": count},  # every distinct arrival order, how often
     "results": [structuredContent of each call of the first round],
     "first_result": structuredContent of the first call,
     "tool_responses": [{"content_type", "replayed"}] of the HTTP responses to tools/call
                                   # (in arrival order; the first 10)
     "replayed": int,              # tools/call responses with X-Toolgate-Replayed: true
     "min_ms": int, "max_ms": int, "total_ms": int, "protocolVersion": str}
"correct" for deliberate: structuredContent echoes the topic, opinion == SAMPLED_TEXT,
model == SAMPLED_MODEL, approved/note == ELICITED, progress_sent == 3. For any other
tool: not isError.

A JSON-RPC error answering the scenario's request (the SDK raises MCPError) prints
    {"error": {"code": int, "message": str, "data": ...}, "http_status": int | null}
Any failure while connecting / negotiating, or any other exception, prints
    {"exception": "TypeName", "message": str, "code": int|null, "data": ..., "http_status": int|null}
"http_status" is the status of the last HTTP response the SDK received that was >= 400
(the SDK itself hides it: a bare 401/403/5xx becomes MCPError -32603).
Always prints exactly one JSON object on stdout and exits 0 (2 on bad usage).

--oauth: authorize with the SDK's OAuth client (mcp.client.auth.OAuthClientProvider as the
httpx auth of the transport), knowing nothing but --url. On the server's 401 the SDK reads
`resource_metadata` from WWW-Authenticate, fetches that RFC 9728 metadata, then the
authorization server's RFC 8414 metadata, registers (RFC 7591), sends the user to the
authorization endpoint and exchanges the code (PKCE, `resource` per RFC 8707). There is no
browser: the redirect handler GETs the authorization URL itself and takes `code`, `state`
and `iss` from the redirect's Location (an auto-approving server such as auth_server.py);
the callback handler hands them back. Tokens live in memory for the run. The output gains
    "oauth": {"requests": [[method, url-without-query, status], ...],  # every HTTP exchange
              "www_authenticate": str | null,    # the first 401's challenge
              "resource_metadata": str | null,   # the URL in it
              "protected_resource": {...} | null, # the RFC 9728 document the SDK accepted
              "authorization_server": str | null, # the issuer the SDK chose from it
              "token_endpoint": str | null, "resource": str | null,  # what the token is for
              "scope": str | null}                # granted scope
(also on failure, next to "exception").

--mode legacy (default): ClientSession.initialize() handshake (protocol 2025-11-25).
--mode modern: ClientSession.discover() (server/discover, protocol 2026-07-28, no session).
--mode auto: what mcp.client.Client does by default: discover, fall back to initialize.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
from typing import Any

import anyio
import mcp.types as types
from mcp.client._probe import negotiate_auto
from mcp.client.auth import OAuthClientProvider, TokenStorage
from mcp.client.session import ClientSession
from mcp.client.streamable_http import create_mcp_http_client, streamable_http_client
from mcp.shared.auth import AuthorizationCodeResult, OAuthClientInformationFull, OAuthClientMetadata, OAuthToken
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
        if args.oauth:
            OAUTH_REQUESTS.append(
                [response.request.method, str(response.request.url).split("?")[0], response.status_code]
            )
            if response.status_code == 401 and OAUTH["www_authenticate"] is None:
                OAUTH["www_authenticate"] = response.headers.get("www-authenticate")
        if response.status_code >= 400:
            statuses.append(response.status_code)
        if args.scenario == "call-interactive" and response.request.method == "POST":
            try:
                sent = json.loads(response.request.content or b"null")
            except (ValueError, RuntimeError):
                sent = None
            if isinstance(sent, dict) and sent.get("method") == "tools/call":
                TOOL_RESPONSES.append(
                    {
                        "content_type": response.headers.get("content-type", ""),
                        "replayed": response.headers.get("x-toolgate-replayed") == "true",
                    }
                )

    auth = _oauth_provider(args.url) if args.oauth else None
    http_client = create_mcp_http_client(headers=headers, auth=auth)
    http_client.event_hooks = {"response": [on_response]}
    async with http_client, streamable_http_client(args.url, http_client=http_client) as (read, write):
        interactive = Interactive() if args.scenario == "call-interactive" else None
        callbacks = interactive.callbacks() if interactive else {}
        async with ClientSession(read, write, **callbacks) as session:
            if args.mode == "legacy":
                await session.initialize()
            elif args.mode == "modern":
                await session.discover()
            else:
                await negotiate_auto(session)
            pv = session.protocol_version
            try:
                if interactive is not None:
                    out = await interactive.run(session, args)
                else:
                    out = await _scenario(session, args)
            except MCPError as e:
                out = {"error": {"code": e.code, "message": e.message, "data": e.data}}
                out["http_status"] = statuses[-1] if statuses else None
            out["protocolVersion"] = pv
            return out


# --oauth: every HTTP exchange of the run, and what the provider discovered.
OAUTH_REQUESTS: list[list[Any]] = []
OAUTH: dict[str, Any] = {"www_authenticate": None, "provider": None}
REDIRECT_URI = "http://127.0.0.1:9/callback"  # never contacted: the redirect is read, not followed


class MemoryStorage(TokenStorage):
    def __init__(self) -> None:
        self.tokens: OAuthToken | None = None
        self.client_info: OAuthClientInformationFull | None = None

    async def get_tokens(self) -> OAuthToken | None:
        return self.tokens

    async def set_tokens(self, tokens: OAuthToken) -> None:
        self.tokens = tokens

    async def get_client_info(self) -> OAuthClientInformationFull | None:
        return self.client_info

    async def set_client_info(self, client_info: OAuthClientInformationFull) -> None:
        self.client_info = client_info


def _oauth_provider(url: str) -> OAuthClientProvider:
    import httpx2
    from urllib.parse import parse_qs, urlsplit

    answer: dict[str, str | None] = {}

    async def redirect_handler(authorization_url: str) -> None:
        # The "user agent": one GET, the auto-approving server answers with a redirect.
        OAUTH_REQUESTS.append(["GET", authorization_url.split("?")[0], None])
        async with httpx2.AsyncClient(follow_redirects=False, timeout=10) as browser:
            response = await browser.get(authorization_url)
        OAUTH_REQUESTS[-1][2] = response.status_code
        location = response.headers.get("location")
        if response.status_code not in (301, 302, 303, 307, 308) or not location:
            raise RuntimeError(f"authorization endpoint answered {response.status_code}: {response.text[:200]}")
        if not location.startswith(REDIRECT_URI):
            raise RuntimeError(f"redirected elsewhere than the redirect_uri: {location}")
        query = {k: v[0] for k, v in parse_qs(urlsplit(location).query).items()}
        if "error" in query:
            raise RuntimeError(f"authorization refused: {query}")
        answer.clear()
        answer.update(code=query.get("code"), state=query.get("state"), iss=query.get("iss"))

    async def callback_handler() -> AuthorizationCodeResult:
        return AuthorizationCodeResult(code=answer.get("code") or "", state=answer.get("state"), iss=answer.get("iss"))

    provider = OAuthClientProvider(
        server_url=url,
        client_metadata=OAuthClientMetadata(
            client_name="toolgate test client",
            redirect_uris=[REDIRECT_URI],
            grant_types=["authorization_code", "refresh_token"],
            response_types=["code"],
            token_endpoint_auth_method="none",
        ),
        storage=MemoryStorage(),
        redirect_handler=redirect_handler,
        callback_handler=callback_handler,
    )
    OAUTH["provider"] = provider
    return provider


def _oauth_report() -> dict[str, Any]:
    provider = OAUTH["provider"]
    ctx = provider.context if provider is not None else None
    resource_metadata = None
    challenge = OAUTH["www_authenticate"]
    if challenge:
        m = re.search(r'resource_metadata="([^"]*)"', challenge)
        resource_metadata = m.group(1) if m else None
    prm = ctx.protected_resource_metadata if ctx else None
    asm = ctx.oauth_metadata if ctx else None
    tokens = ctx.current_tokens if ctx else None
    return {
        "requests": OAUTH_REQUESTS,
        "www_authenticate": challenge,
        "resource_metadata": resource_metadata,
        "protected_resource": prm.model_dump(mode="json", exclude_none=True) if prm else None,
        "authorization_server": ctx.auth_server_url if ctx else None,
        "token_endpoint": str(asm.token_endpoint) if asm else None,
        "resource": ctx.get_resource_url() if ctx and prm else None,
        "scope": tokens.scope if tokens else None,
    }


async def _scenario(session: ClientSession, args: argparse.Namespace) -> dict[str, Any]:
    if args.scenario == "list":
        result = await session.list_tools()
        return {
            "tools": [t.name for t in result.tools],
            "listed": [t.model_dump(mode="json", by_alias=True, exclude_none=True) for t in result.tools],
        }
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


SAMPLED_TEXT = "a fixed opinion from the client's model"
SAMPLED_MODEL = "fixed-model-1"
ELICITED = {"approved": True, "note": "fine by me"}
DEFAULT_EXPECT = "progress,log,sampling,elicitation"
MAX_FAILURES = 3
# The HTTP responses to tools/call POSTs (call-interactive), filled by the response hook.
TOOL_RESPONSES: list[dict[str, Any]] = []


class Interactive:
    """call-interactive: serves the server's requests, records what arrives for each call."""

    def __init__(self) -> None:
        # The event list of the call running now: session-wide callbacks (log, sampling,
        # elicitation) land in it; progress has a callback per call.
        self.current: list[str] | None = None
        self.stray: list[str] = []  # arrivals while no call was running

    def _record(self, kind: str) -> None:
        (self.current if self.current is not None else self.stray).append(kind)

    def callbacks(self) -> dict[str, Any]:
        async def sampling(context: Any, params: types.CreateMessageRequestParams) -> types.CreateMessageResult:
            self._record("sampling")
            return types.CreateMessageResult(
                role="assistant",
                content=types.TextContent(type="text", text=SAMPLED_TEXT),
                model=SAMPLED_MODEL,
                stop_reason="endTurn",
            )

        async def elicitation(context: Any, params: types.ElicitRequestParams) -> types.ElicitResult:
            self._record("elicitation")
            return types.ElicitResult(action="accept", content=dict(ELICITED))

        async def logging(params: types.LoggingMessageNotificationParams) -> None:
            self._record("log")

        return {"sampling_callback": sampling, "elicitation_callback": elicitation, "logging_callback": logging}

    async def run(self, session: ClientSession, args: argparse.Namespace) -> dict[str, Any]:
        if len(args.args) != 2:
            raise SystemExit("usage: call-interactive NAME JSON_ARGS")
        name, template = args.args
        expect = [k for k in args.expect.split(",") if k]
        calls = ok = stalls = timeouts = violations = 0
        errors: list[str] = []
        orders: dict[str, int] = {}
        first_order: list[str] | None = None
        results: list[Any] = []
        durations: list[float] = []
        aborted = False
        started = time.monotonic()

        async def one(i: int, events: list[str], slot: list[Any]) -> None:
            async def progress(progress: float, total: float | None, message: str | None) -> None:
                events.append("progress")

            arguments = json.loads(template.replace("{i}", str(i)))
            t0 = time.monotonic()
            with anyio.move_on_after(args.call_timeout) as scope:
                try:
                    result = await session.call_tool(name, arguments, progress_callback=progress)
                except MCPError as e:
                    events.append("error")
                    slot.append(("error", f"MCPError {e.code}: {e.message}"))
                else:
                    events.append("result")
                    slot.append(("result", result, arguments))
            if scope.cancelled_caught:
                events.append("stall")
                slot.append(("stall", f"call {i} got no result within {args.call_timeout} s"))
            durations.append(time.monotonic() - t0)

        for round_ in range(args.repeat):
            # K identical calls at once share the round's index, so they are duplicates.
            events_of = [[] for _ in range(args.concurrent)]
            slots: list[list[Any]] = [[] for _ in range(args.concurrent)]
            if args.concurrent == 1:
                self.current = events_of[0]
                await one(round_, events_of[0], slots[0])
            else:
                # Session-wide arrivals can't be told apart between concurrent calls:
                # they are recorded in the first call's list.
                self.current = events_of[0]
                async with anyio.create_task_group() as tg:
                    for k in range(args.concurrent):
                        tg.start_soon(one, round_, events_of[k], slots[k])
            # Late arrivals (after the result) still count against the call they follow.
            await anyio.sleep(0)
            self.current = None
            for events, slot in zip(events_of, slots):
                calls += 1
                kind = slot[0][0] if slot else "stall"
                if first_order is None:
                    first_order = list(events)
                key = ",".join(events)
                orders[key] = orders.get(key, 0) + 1
                if kind == "result":
                    _, result, arguments = slot[0]
                    if round_ == 0:
                        results.append(result.structured_content)
                    if _correct(name, result, arguments):
                        ok += 1
                    elif _timed_out(result):
                        timeouts += 1
                    elif len(errors) < 5:
                        errors.append(f"call {round_}: wrong result {result.model_dump(mode='json', by_alias=True)}")
                    before = events[: events.index("result")]
                    if events[-1] != "result" or any(k not in before for k in expect):
                        violations += 1
                else:
                    violations += 1
                    if kind == "stall":
                        stalls += 1
                    if len(errors) < 5:
                        errors.append(f"call {round_}: {slot[0][1] if slot else 'no outcome'}")
            if calls - ok >= MAX_FAILURES:
                aborted = True
                break
        return {
            "calls": calls,
            "ok": ok,
            "stalls": stalls,
            "timeouts": timeouts,
            "errors": errors,
            "aborted": aborted,
            "order_violations": violations,
            "expect": expect,
            "first_order": first_order,
            "orders": orders,
            "stray": self.stray,
            "results": results,
            "first_result": results[0] if results else None,
            "tool_responses": TOOL_RESPONSES[:10],
            "replayed": sum(r["replayed"] for r in TOOL_RESPONSES),
            "min_ms": round(min(durations) * 1000) if durations else None,
            "max_ms": round(max(durations) * 1000) if durations else None,
            "total_ms": round((time.monotonic() - started) * 1000),
        }


def _timed_out(result: types.CallToolResult) -> bool:
    """A gateway's BACKEND_TIMEOUT tool error (toolgate's, when the upstream stalled)."""
    sc = result.structured_content or {}
    return bool(result.is_error) and isinstance(sc.get("error"), dict) and sc["error"].get("code") == "BACKEND_TIMEOUT"


def _correct(name: str, result: types.CallToolResult, arguments: dict[str, Any]) -> bool:
    if result.is_error:
        return False
    if name != "deliberate":
        return True
    sc = result.structured_content or {}
    return (
        sc.get("topic") == arguments.get("topic")
        and sc.get("opinion") == SAMPLED_TEXT
        and sc.get("model") == SAMPLED_MODEL
        and sc.get("approved") == ELICITED["approved"]
        and sc.get("note") == ELICITED["note"]
        and sc.get("progress_sent") == 3
    )


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--url", required=True)
    p.add_argument("--token")
    p.add_argument("--oauth", action="store_true", help="authorize with the SDK's OAuthClientProvider")
    p.add_argument("--header", action="append", default=[], metavar="K=V")
    p.add_argument("--mode", choices=["legacy", "auto", "modern"], default="legacy")
    p.add_argument("--timeout", type=float, default=30.0)
    p.add_argument("--repeat", type=int, default=1, help="call-interactive: calls (or rounds) in sequence")
    p.add_argument("--concurrent", type=int, default=1, help="call-interactive: identical calls at once")
    p.add_argument("--call-timeout", type=float, default=10.0, help="call-interactive: seconds per call")
    p.add_argument("--expect", default=DEFAULT_EXPECT, help="call-interactive: kinds due before each result")
    p.add_argument("scenario", choices=["list", "call", "resources", "prompts", "call-interactive"])
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
    if args.oauth:
        out["oauth"] = _oauth_report()
    print(json.dumps(out), flush=True)


if __name__ == "__main__":
    main()
