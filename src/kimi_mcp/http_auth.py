"""Who may use the HTTP transport: loopback only, unless a bearer token is configured (the rule:
``http_token``, shared with ``kimi-mcp dashboard``).

The token (``KIMI_MCP_HTTP_TOKEN``) is checked by FastMCP's own token verifier with a constant-time
comparison; it is never logged. Browser ``Origin``/``Host`` protection stays on for loopback hosts.
"""

from __future__ import annotations

import json

from fastmcp.server.auth import TokenVerifier
from fastmcp.server.auth.providers.debug import DebugTokenVerifier
from mcp.server.auth.middleware.bearer_auth import AuthenticatedUser
from starlette.middleware import Middleware
from starlette.types import ASGIApp, Receive, Scope, Send

from .http_token import MIN_TOKEN_CHARS, is_loopback, required_token, token_matches

__all__ = ["MIN_TOKEN_CHARS", "http_auth", "is_loopback", "required_token"]


def http_auth(host: str, token: str | None) -> TokenVerifier | None:
    """The verifier for ``--http`` on ``host``; ConfigError when the combination is unsafe."""
    required = required_token(host, token)
    if required is None:
        return None

    def valid(offered: str) -> bool:
        return token_matches(offered, required)

    return StaticToken(validate=valid, client_id="kimi-mcp-http")


def _dashboard(path: str) -> bool:
    return path == DASHBOARD_PATH or path.startswith(DASHBOARD_PATH + "/")


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


DASHBOARD_PATH = "/dashboard"  # the dashboard's own gate checks the same token there (its cookie too)


class _ExplainRefusal:
    """Answers an unauthenticated request itself (after the authentication middleware looked at its
    token), with a 401 that says what is missing or wrong; the dashboard's paths are left to the
    dashboard, which requires the same token (as a bearer header, or the cookie its ``?token=`` set)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if (
            scope["type"] != "http"
            or scope.get("method") == "OPTIONS"
            or isinstance(scope.get("user"), AuthenticatedUser)
            or _dashboard(scope.get("path", ""))
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
