"""Who may use the dashboard, on every path (pages, event streams, static files, actions).

With a token (``KIMI_MCP_HTTP_TOKEN``: required off loopback, the rule of ``--http``, ``http_token``) a
request presents it as ``Authorization: Bearer <token>``, or as the cookie a browser got by opening any
page once with ``?token=<token>`` (answered with a redirect to the same page without it, setting the
cookie: HttpOnly, SameSite=Strict). Without a token (loopback only) a request whose ``Host`` is not a
loopback name is refused (a page of another site that resolves its name to 127.0.0.1 reaches nothing).

Every state-changing request is a POST carrying the page's CSRF token (``csrf`` form field or
``X-CSRF-Token`` header): a random value of this process, only on pages the token let in. Every response
says: no caching, no framing, no referrer, scripts and styles from the dashboard only.
"""

from __future__ import annotations

import secrets
from urllib.parse import urlencode

from starlette.datastructures import URL, Headers, QueryParams
from starlette.responses import PlainTextResponse, RedirectResponse, Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ..http_token import is_loopback, token_matches

COOKIE = "kimi_mcp_dashboard"
CSRF_FIELD = "csrf"
CSRF_HEADER = "x-csrf-token"
NO_TOKEN = (
    "kimi-mcp dashboard: this page needs the token (KIMI_MCP_HTTP_TOKEN): open it once as ?token=<token>, "
    "or send Authorization: Bearer <token>."
)
NOT_LOOPBACK = "kimi-mcp dashboard: served on loopback only; open it as http://127.0.0.1:<port>/."
HEADERS = {
    "cache-control": "no-store",
    "x-frame-options": "DENY",
    "x-content-type-options": "nosniff",
    "referrer-policy": "no-referrer",
    "content-security-policy": "default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; "
    "img-src 'self' data:; object-src 'none'; frame-ancestors 'none'; base-uri 'none'; form-action 'self'",
}


def new_csrf() -> str:
    """A fresh CSRF token (one per dashboard process)."""
    return secrets.token_urlsafe(32)


def csrf_ok(offered: str | None, expected: str) -> bool:
    return bool(offered) and token_matches(str(offered), expected)


def offered_token(scope: Scope) -> str | None:
    """The token a request presents: its bearer header, else its cookie."""
    headers = Headers(scope=scope)
    scheme, _, value = headers.get("authorization", "").partition(" ")
    if scheme.lower() == "bearer" and value.strip():
        return value.strip()
    for part in headers.get("cookie", "").split(";"):
        name, _, value = part.strip().partition("=")
        if name == COOKIE and value:
            return value
    return None


class Gate:
    """The ASGI middleware in front of every path of the dashboard (see the module's docstring)."""

    def __init__(self, app: ASGIApp, token: str | None) -> None:
        self.app = app
        self.token = token

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        refusal = self._refusal(scope)
        if refusal is not None:
            await refusal(scope, receive, send)
            return

        async def with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                present = {name.lower() for name, _ in message.get("headers", [])}
                extra = [(k.encode(), v.encode()) for k, v in HEADERS.items() if k.encode() not in present]
                message["headers"] = [*message.get("headers", []), *extra]
            await send(message)

        await self.app(scope, receive, with_headers)

    def _refusal(self, scope: Scope) -> Response | None:
        """The answer to a request that may not pass (None: it passes)."""
        if self.token is None:
            host = Headers(scope=scope).get("host", "")
            name = host.rsplit(":", 1)[0] if not host.endswith("]") else host
            return None if is_loopback(name) else PlainTextResponse(NOT_LOOPBACK, 403, headers=HEADERS)
        params = QueryParams(scope.get("query_string", b""))
        given = params.get("token")
        if given is not None and token_matches(given, self.token):
            return self._set_cookie(scope, params)
        offered = offered_token(scope)
        if offered is not None and token_matches(offered, self.token):
            return None
        return PlainTextResponse(NO_TOKEN, 401, headers={**HEADERS, "www-authenticate": "Bearer"})

    def _set_cookie(self, scope: Scope, params: QueryParams) -> Response:
        """The same page without ``?token=``, and the cookie that stands for the token from now on."""
        url = URL(scope=scope)
        query = urlencode([(k, v) for k, v in params.multi_items() if k != "token"])
        redirect = RedirectResponse(url.path + (f"?{query}" if query else ""), 303, headers=HEADERS)
        assert self.token is not None
        root = scope.get("root_path", "") or "/"
        redirect.set_cookie(
            COOKIE, self.token, httponly=True, samesite="strict", path=root, secure=url.scheme == "https"
        )
        return redirect
