"""The broker's workers (``KIMI_MCP_BROKER``) as the jobs page shows them: who they are and when each was last
heard from (Docket's own list of the workers of kimi-mcp's docket, from its heartbeats), and how many jobs each
runs now (the running executions of Docket's snapshot, of the shared docket and of each worker's own docket,
where its follow-ups go). Read at most every ``FRESH_S`` seconds (a worker beats every 2 s), whatever number
of pages is open; a broker that does not answer within ``TIMEOUT_S`` is said to be unreachable, and asked
again ``RETRY_S`` later. Docket and redis load only here, and only when a broker is configured."""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass, field
from html import escape

import anyio

from ..job_text import human_age
from ._render import text

FRESH_S = 2.0
TIMEOUT_S = 2.0  # a broker that does not answer in this long is reported as unreachable...
RETRY_S = 10.0  # ...and asked again after this long (the jobs table, read with it, does not wait on it)


@dataclass(frozen=True, slots=True)
class WorkerRow:
    name: str
    jobs: int  # running now, on the shared docket and on its own
    last_seen: float  # its last heartbeat (seconds since the epoch)


@dataclass(frozen=True, slots=True)
class Workers:
    """One reading of the broker: its live workers by name, or why it could not be read."""

    host: str
    rows: list[WorkerRow] = field(default_factory=list)
    problem: str | None = None
    taken: float = 0.0


class BrokerWorkers:
    """The workers of the broker at ``url`` (never shown: it may carry the password; only its host is)."""

    def __init__(self, url: str) -> None:
        self.url = url
        self._last: Workers | None = None

    async def read(self) -> Workers:
        """The workers now (a reading younger than ``FRESH_S`` is given again)."""
        last = self._last
        keep = FRESH_S if last is None or last.problem is None else RETRY_S
        if last is not None and time.monotonic() - last.taken < keep:
            return last
        self._last = await self._read()
        return self._last

    async def _read(self) -> Workers:
        # a plug-in seam: the broker's side (Docket, redis) loads only when a broker is configured
        from ..remote import broker

        host = broker.broker_host(self.url)
        try:
            with anyio.fail_after(TIMEOUT_S):
                async with broker.open_docket(self.url) as docket:
                    shared = await docket.snapshot()  # its workers (Docket.workers()) and running executions
                running = Counter(execution.worker for execution in shared.running)
                for info in shared.workers:
                    async with broker.open_docket(self.url, broker.worker_docket(info.name)) as own:
                        running.update(execution.worker for execution in (await own.snapshot()).running)
        except Exception as exc:
            return Workers(host, problem=broker.unreachable(host, exc).message, taken=time.monotonic())
        rows = [WorkerRow(w.name, running[w.name], w.last_seen.timestamp()) for w in shared.workers]
        return Workers(host, sorted(rows, key=lambda row: row.name), taken=time.monotonic())


def workers_view(workers: Workers, *, now: float | None = None) -> str:
    """The workers section's inside: a table of name, jobs running, last seen; or why there is none."""
    now = time.time() if now is None else now
    title = f"<h2>Workers <small>of the broker on {text(workers.host)} (KIMI_MCP_BROKER)</small></h2>"
    if workers.problem is not None:
        return f'{title}<p class="error">{text(workers.problem)}</p>'
    if not workers.rows:
        return f'{title}<p class="hint">No kimi-mcp worker is listening on the broker: its jobs wait.</p>'
    rows = "".join(
        f'<tr data-worker="{escape(w.name)}"><td>{text(w.name)}</td><td class="num jobs-running">{w.jobs}</td>'
        f'<td class="num">{human_age(now - w.last_seen)} ago</td></tr>'
        for w in workers.rows
    )
    return (
        f'{title}<table class="workers"><thead><tr><th>Worker</th><th>Jobs running</th><th>Last seen</th>'
        f"</tr></thead><tbody>{rows}</tbody></table>"
    )
