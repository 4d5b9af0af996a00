"""Who may use the HTTP transport: loopback only, unless a bearer token is configured.

The token (``KIMI_MCP_HTTP_TOKEN``) is checked by FastMCP's own token verifier with a constant-time
comparison; it is never logged. Browser ``Origin``/``Host`` protection stays on for loopback hosts.
"""

from __future__ import annotations

import hmac
import ipaddress

from fastmcp.server.auth import TokenVerifier
from fastmcp.server.auth.providers.debug import DebugTokenVerifier

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

    return DebugTokenVerifier(validate=valid, client_id="kimi-mcp-http")
