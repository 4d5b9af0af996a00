"""The dashboard's live updates: server-sent events carrying the HTML of each part of a view that
changed (htmx's SSE extension swaps it in by the event's name). The store is looked at every ``POLL_S``
seconds for the jobs table, every ``JOB_POLL_S`` for a job's page (its screen is written to the store
within ``jobs.SCREEN_TICK`` of changing), so a change reaches the page within a second; a part that did not
change is not sent."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable

import anyio
from sse_starlette.sse import EventSourceResponse

POLL_S = 0.5
JOB_POLL_S = 0.25
IDLE_S = 5.0  # a finished job's stream stays open (a closed one would be reopened by the page), quiet
PING_S = 15  # a comment line keeps proxies from closing a quiet stream

#: a look at a view: its parts' HTML by event name, and whether they will not change any more
Look = Callable[[], tuple[dict[str, str], bool]]


def stream(look: Look, every: float = POLL_S) -> EventSourceResponse:
    """The event stream of one view: every part at once, then each part again whenever it changed (looked
    at every ``every`` seconds)."""
    return EventSourceResponse(_changes(look, every), ping=PING_S, headers={"x-accel-buffering": "no"})


async def _changes(look: Look, every: float) -> AsyncIterator[dict[str, str]]:
    sent: dict[str, str] = {}
    final = False
    while True:
        if not final:
            parts, final = await anyio.to_thread.run_sync(look)
            for name, html in parts.items():
                if sent.get(name) != html:
                    sent[name] = html
                    yield {"event": name, "data": html}
        await anyio.sleep(IDLE_S if final else every)
