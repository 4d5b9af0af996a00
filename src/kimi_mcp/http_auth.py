"""Who may use the HTTP transport: loopback only, unless a bearer token is configured.

The token (``KIMI_MCP_HTTP_TOKEN``) is checked by FastMCP's own token verifier with a constant-time
comparison; it is never logged. Browser ``Origin``/``Host`` protection stays on for loopback hosts.
"""

from __future__ import annotations

import hmac
import ipaddress
import json

from fastmcp.server.auth import TokenVerifier
from fastmcp.server.auth.providers.debug import DebugTokenVerifier
from mcp.server.auth.middleware.bearer_auth import AuthenticatedUser
from starlette.middleware import Middleware
from starlette.types import ASGIApp, Receive, Scope, Send

from .config import ConfigError

MIN_TOKEN_CHARS = 16


def is_loopback(host: str) -> bool:
    name = host.strip().strip("[]").lower()
    if name == "localhost":
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


def http_auth(host: str, token: str | None) -> TokenVerifier | None:
    """The verifier for ``--http`` on ``host``; ConfigError when the combination is unsafe."""
    token = (token or "").strip() or None
    if token is None:
        if is_loopback(host):
            return None
        raise ConfigError(
            f"refusing to serve HTTP on {host} without authentication: every tool (shell commands in your "
            "workspace included) would be open to anyone who can reach the port. Set KIMI_MCP_HTTP_TOKEN "
            f"(at least {MIN_TOKEN_CHARS} characters, e.g. `openssl rand -hex 32`) and give clients "
            "`Authorization: Bearer <token>`, or serve on 127.0.0.1."
        )
    if len(token) < MIN_TOKEN_CHARS:
        raise ConfigError(f"KIMI_MCP_HTTP_TOKEN is too short: use at least {MIN_TOKEN_CHARS} characters")
    expected = token.encode()

    def valid(offered: str) -> bool:
        return hmac.compare_digest(offered.encode(), expected)

    return StaticToken(validate=valid, client_id="kimi-mcp-http")


NO_TOKEN = (
    "kimi-mcp needs a bearer token on every HTTP request: send `Authorization: Bearer <token>` with the value "
    "of the server's KIMI_MCP_HTTP_TOKEN."
)
WRONG_TOKEN = (
    "The bearer token does not match the server's KIMI_MCP_HTTP_TOKEN. It is one static token (not OAuth: "
    "there is nothing to renew): send `Authorization: Bearer <token>` with exactly the value the "
    "server was started with."
)


class StaticToken(DebugTokenVerifier):
    """One static bearer token, whose refusals say what a static token needs (FastMCP's own wording is
    about OAuth clients re-registering)."""

    def get_middleware(self) -> list:
        return [*super().get_middleware(), Middleware(_ExplainRefusal)]


class _ExplainRefusal:
    """Answers an unauthenticated request itself (after the authentication middleware looked at its
    token), with a 401 that says what is missing or wrong."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if (
            scope["type"] != "http"
            or scope.get("method") == "OPTIONS"
            or isinstance(scope.get("user"), AuthenticatedUser)
        ):
            await self.app(scope, receive, send)
            return
        sent = any(name.lower() == b"authorization" for name, _value in scope.get("headers") or [])
        error, description = ("invalid_token", WRONG_TOKEN) if sent else ("unauthorized", NO_TOKEN)
        body = json.dumps({"error": error, "error_description": description}).encode()
        challenge = f'Bearer error="{error}", error_description="{description}"' if sent else "Bearer"
        headers = [
            (b"content-type", b"application/json"),
            (b"content-length", str(len(body)).encode()),
            (b"www-authenticate", challenge.replace("`", "'").encode()),
        ]
        await send({"type": "http.response.start", "status": 401, "headers": headers})
        await send({"type": "http.response.body", "body": body})
