"""The job store's reads of what jobs spent: the tokens of the daily budget's window, usage per day and model
(the dashboard's chart), and a finished job's cost and worker. Read-only aggregate queries over the ``jobs``
table (:class:`~._store.JobStore` is the rest of the store)."""

from __future__ import annotations

import builtins
from collections.abc import Sequence

from ._database import Database


class Spending(Database):
    """What the jobs in the store spent (the store's base: ``JobStore`` adds the jobs themselves)."""

    def tokens_since(self, since: float) -> int:
        """The tokens every job spent that finished after ``since`` (unix time) or is still going."""
        rows = self._query(
            "SELECT COALESCE(SUM(tokens), 0) FROM jobs WHERE finished_at IS NULL OR finished_at >= ?",
            (since,),
        )
        return int(rows[0][0])

    def usage(self, since: float) -> builtins.list[tuple[str, str, int, float | None]]:
        """Tokens (and cost, where ``KIMI_MCP_PRICES`` priced them) per UTC day and model of the jobs that
        started since ``since`` (unix time): (YYYY-MM-DD, model or "", tokens, USD or None), oldest first."""
        rows = self._query(
            "SELECT date(started_at, 'unixepoch'), COALESCE(model, ''), SUM(tokens), "
            "SUM(json_extract(result, '$.usage.cost_usd')) FROM jobs WHERE started_at >= ? "
            "GROUP BY 1, 2 ORDER BY 1, 2",
            (since,),
        )
        return [(day, model, int(tokens or 0), cost) for day, model, tokens, cost in rows]

    def cost_and_worker(self, job_ids: Sequence[str]) -> dict[str, tuple[float | None, str | None]]:
        """Of the finished ones among ``job_ids``: (cost in USD where ``KIMI_MCP_PRICES`` priced it, the
        broker's worker that ran it), from their results (what a finished job's result says never changes)."""
        found: dict[str, tuple[float | None, str | None]] = {}
        for start in range(0, len(job_ids), 500):  # SQLite's limit on host parameters is 999 or more
            chunk = list(job_ids[start : start + 500])
            rows = self._query(
                "SELECT job_id, json_extract(result, '$.usage.cost_usd'), json_extract(result, '$.worker') "
                f"FROM jobs WHERE finished_at IS NOT NULL AND job_id IN ({', '.join('?' * len(chunk))})",
                tuple(chunk),
            )
            found.update({job_id: (cost, worker) for job_id, cost, worker in rows})
        return found
