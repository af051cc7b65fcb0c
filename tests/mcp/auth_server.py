"""A small local OAuth 2.1 authorization server for toolgate's MCP OAuth tests.

    python auth_server.py --port N --jwks PATH [--subject ops-bot] [--log PATH]

Listens on http://127.0.0.1:N (issuer: exactly that URL, no trailing slash). --port 0
picks a free port. On start it generates an RSA key, writes the public JWKS (one RS256
key with a `kid`) to --jwks, then prints one line, `READY <port>`, on stdout once the
socket is listening (logs go to stderr).

Endpoints:
  GET  /.well-known/oauth-authorization-server   RFC 8414 metadata
  POST /register                                 RFC 7591 dynamic client registration
                                                 (public clients, token_endpoint_auth_method "none")
  GET  /authorize                                auto-approves: 302 to redirect_uri with
                                                 `code`, `state` and `iss` (RFC 9207)
  POST /token                                    authorization_code (PKCE S256 required) and
                                                 refresh_token grants; issues an RS256 JWT
                                                 {iss, aud: the `resource` parameter (RFC 8707),
                                                 sub: --subject, scope, client_id, iat, exp}

--log PATH: every request is appended to PATH as one JSON line
{"method", "path", "query": {...}, "form": {...}} so a test can see what the client sent
(for example the `resource` parameter).
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import json
import secrets
import sys
import time
from typing import Any
from urllib.parse import urlencode

import anyio
import jwt
import uvicorn
from cryptography.hazmat.primitives.asymmetric import rsa
from jwt.algorithms import RSAAlgorithm
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, RedirectResponse, Response
from starlette.routing import Route

KID = "test-as-1"
TOKEN_LIFETIME = 300


class AuthServer:
    def __init__(self, subject: str, log_path: str | None) -> None:
        self.key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        self.subject = subject
        self.log_path = log_path
        self.issuer = ""  # set once the port is known
        self.clients: dict[str, dict[str, Any]] = {}
        # code -> {client_id, redirect_uri, code_challenge, scope, resource}
        self.codes: dict[str, dict[str, Any]] = {}
        # refresh token -> {client_id, scope, resource}
        self.refresh: dict[str, dict[str, Any]] = {}

    def jwks(self) -> dict[str, Any]:
        jwk = json.loads(RSAAlgorithm.to_jwk(self.key.public_key()))
        jwk.pop("key_ops", None)
        jwk.update({"kid": KID, "use": "sig", "alg": "RS256"})
        return {"keys": [jwk]}

    def _log(self, request: Request, form: dict[str, str] | None) -> None:
        if not self.log_path:
            return
        entry = {"method": request.method, "path": request.url.path, "query": dict(request.query_params)}
        if form is not None:
            entry["form"] = form
        with open(self.log_path, "a") as f:
            f.write(json.dumps(entry) + "\n")

    # --- endpoints -------------------------------------------------------------------

    async def metadata(self, request: Request) -> Response:
        self._log(request, None)
        i = self.issuer
        return JSONResponse(
            {
                "issuer": i,
                "authorization_endpoint": f"{i}/authorize",
                "token_endpoint": f"{i}/token",
                "registration_endpoint": f"{i}/register",
                "response_types_supported": ["code"],
                "grant_types_supported": ["authorization_code", "refresh_token"],
                "code_challenge_methods_supported": ["S256"],
                "token_endpoint_auth_methods_supported": ["none"],
                "authorization_response_iss_parameter_supported": True,
            }
        )

    async def register(self, request: Request) -> Response:
        try:
            body = await request.json()
        except ValueError:
            body = None
        self._log(request, body if isinstance(body, dict) else {})
        if not isinstance(body, dict) or not body.get("redirect_uris"):
            return JSONResponse({"error": "invalid_client_metadata"}, status_code=400)
        client_id = "client-" + secrets.token_urlsafe(8)
        record = dict(body)
        record.update(
            {
                "client_id": client_id,
                "client_id_issued_at": int(time.time()),
                "token_endpoint_auth_method": "none",
                "grant_types": ["authorization_code", "refresh_token"],
                "response_types": ["code"],
            }
        )
        self.clients[client_id] = record
        return JSONResponse(record, status_code=201)

    async def authorize(self, request: Request) -> Response:
        q = dict(request.query_params)
        self._log(request, None)
        client = self.clients.get(q.get("client_id", ""))
        redirect_uri = q.get("redirect_uri", "")
        if client is None or redirect_uri not in client.get("redirect_uris", []):
            # Never redirect to an unregistered URI.
            return JSONResponse({"error": "invalid_request", "error_description": "unknown client or redirect_uri"}, 400)
        back: dict[str, str] = {"iss": self.issuer}
        if q.get("state") is not None:
            back["state"] = q["state"]
        if (
            q.get("response_type") != "code"
            or q.get("code_challenge_method") != "S256"
            or not q.get("code_challenge")
        ):
            back["error"] = "invalid_request"
        else:
            code = secrets.token_urlsafe(24)
            self.codes[code] = {
                "client_id": client["client_id"],
                "redirect_uri": redirect_uri,
                "code_challenge": q["code_challenge"],
                "scope": q.get("scope", ""),
                "resource": q.get("resource"),
            }
            back["code"] = code
        sep = "&" if "?" in redirect_uri else "?"
        return RedirectResponse(f"{redirect_uri}{sep}{urlencode(back)}", status_code=302)

    async def token(self, request: Request) -> Response:
        form = {k: str(v) for k, v in (await request.form()).items()}
        self._log(request, form)
        grant = form.get("grant_type")
        if grant == "authorization_code":
            entry = self.codes.pop(form.get("code", ""), None)  # one use only
            if entry is None:
                return _error("invalid_grant", "unknown or used code")
            if form.get("client_id") != entry["client_id"] or form.get("redirect_uri") != entry["redirect_uri"]:
                return _error("invalid_grant", "client_id or redirect_uri mismatch")
            verifier = form.get("code_verifier", "")
            challenge = base64.urlsafe_b64encode(hashlib.sha256(verifier.encode()).digest()).rstrip(b"=").decode()
            if not verifier or challenge != entry["code_challenge"]:
                return _error("invalid_grant", "PKCE verification failed")
            resource = form.get("resource") or entry["resource"]
            if entry["resource"] and resource != entry["resource"]:
                return _error("invalid_target", "resource differs from the authorization request")
        elif grant == "refresh_token":
            entry = self.refresh.pop(form.get("refresh_token", ""), None)
            if entry is None or form.get("client_id") != entry["client_id"]:
                return _error("invalid_grant", "unknown refresh token")
            resource = form.get("resource") or entry["resource"]
        else:
            return _error("unsupported_grant_type", str(grant))
        if not resource:
            return _error("invalid_target", "a resource parameter (RFC 8707) is required")
        now = int(time.time())
        scope = entry["scope"]
        claims = {
            "iss": self.issuer,
            "aud": resource,
            "sub": self.subject,
            "scope": scope,
            "client_id": entry["client_id"],
            "iat": now,
            "exp": now + TOKEN_LIFETIME,
        }
        access = jwt.encode(claims, self.key, algorithm="RS256", headers={"kid": KID})
        refresh = secrets.token_urlsafe(24)
        self.refresh[refresh] = {"client_id": entry["client_id"], "scope": scope, "resource": resource}
        body = {
            "access_token": access,
            "token_type": "Bearer",
            "expires_in": TOKEN_LIFETIME,
            "refresh_token": refresh,
        }
        if scope:
            body["scope"] = scope
        return JSONResponse(body, headers={"Cache-Control": "no-store"})


def _error(code: str, description: str) -> Response:
    return JSONResponse({"error": code, "error_description": description}, status_code=400)


async def serve(args: argparse.Namespace) -> None:
    server_state = AuthServer(args.subject, args.log)
    app = Starlette(
        routes=[
            Route("/.well-known/oauth-authorization-server", server_state.metadata, methods=["GET"]),
            Route("/register", server_state.register, methods=["POST"]),
            Route("/authorize", server_state.authorize, methods=["GET"]),
            Route("/token", server_state.token, methods=["POST"]),
        ]
    )
    config = uvicorn.Config(app, host="127.0.0.1", port=args.port, log_level="warning")
    server = uvicorn.Server(config)

    async def announce() -> None:
        while not server.started:
            await anyio.sleep(0.01)
        port = server.servers[0].sockets[0].getsockname()[1]
        server_state.issuer = f"http://127.0.0.1:{port}"
        with open(args.jwks, "w") as f:
            json.dump(server_state.jwks(), f)
        print(f"READY {port}", flush=True)

    async with anyio.create_task_group() as tg:
        tg.start_soon(announce)
        await server.serve()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--jwks", required=True, help="where to write the public JWKS")
    p.add_argument("--subject", default="ops-bot", help="the `sub` of every token")
    p.add_argument("--log", help="append every request as a JSON line here")
    args = p.parse_args()
    try:
        anyio.run(serve, args)
    except KeyboardInterrupt:
        sys.exit(0)


if __name__ == "__main__":
    main()
