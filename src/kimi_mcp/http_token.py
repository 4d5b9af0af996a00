"""The rule for serving kimi-mcp over HTTP (``--http`` and ``kimi-mcp dashboard``): loopback only, unless a
bearer token (``KIMI_MCP_HTTP_TOKEN``) is configured. Without the MCP SDK: the dashboard checks it
without loading it."""

from __future__ import annotations

import hmac
import ipaddress

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


def required_token(host: str, token: str | None) -> str | None:
    """The bearer token serving HTTP on ``host`` requires (None: none, on loopback only); ConfigError when
    the combination is unsafe: off loopback without a token, or a token too short. The rule of ``--http``
    and of ``kimi-mcp dashboard``."""
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
    return token


def token_matches(offered: str, token: str) -> bool:
    """Whether ``offered`` is ``token`` (a constant-time comparison)."""
    return hmac.compare_digest(offered.encode(), token.encode())
