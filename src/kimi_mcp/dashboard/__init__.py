"""The web dashboard (``kimi-mcp dashboard``, and ``/dashboard`` of the HTTP transport): every job of the
job store live, a job's screen, result, question and change, and the buttons that answer, cancel, apply and
discard, by the rules of the MCP tools that do the same.

- :mod:`._source` — the job store and what is shown of it (masked);
- :mod:`._actions` — the buttons, on the tools' domain functions;
- :mod:`._gate` — the token (``KIMI_MCP_HTTP_TOKEN``), its cookie, the CSRF token, loopback;
- :mod:`._views` — the endpoints; :mod:`._events` — their server-sent events;
- :mod:`._render`, :mod:`._job_page`, :mod:`._usage` — the HTML of the views;
- ``static/`` — the page's stylesheet and script, and the vendored libraries (``static/vendor/``).
"""

from __future__ import annotations

from pathlib import Path

from starlette.applications import Starlette
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.types import ASGIApp

from ._gate import Gate, new_csrf
from ._source import Source
from ._views import Views

__all__ = ["Source", "create_app"]

STATIC = Path(__file__).parent / "static"


def create_app(source: Source, *, token: str | None, csrf: str | None = None) -> ASGIApp:
    """The dashboard as an ASGI app over ``source``; ``token``: what every request must present (None:
    loopback only, see ``_gate``); ``csrf``: the POSTs' token (default: a fresh one)."""
    views = Views(source, csrf or new_csrf())
    routes = [
        Route("/", views.jobs),
        Route("/events/jobs", views.jobs_events),
        Route("/job/{job_id}", views.job),
        Route("/events/job/{job_id}", views.job_events),
        Route("/job/{job_id}/{action:str}", views.act, methods=["POST"]),
        Route("/usage", views.usage),
        Mount("/static", app=StaticFiles(directory=STATIC), name="static"),
    ]
    return Gate(Starlette(routes=routes), token)
