"""What the dashboard reads: the job store every kimi-mcp server of the user shares, opened as a server
opens it but without an executor (it runs no job) and without pruning (the servers prune, with what their
pruned jobs held); what it shows masked as results are (the configured secrets and key-shaped strings)."""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .. import config
from ..errors import BadInput
from ..jobs import FINISHED, STORE_FILE, JobManager, JobRecord, JobStore
from ..secrets import Redactor, configured_secrets
from ._workers import BrokerWorkers

UNKNOWN_JOB = "The jobs page lists the recent jobs; a finished job is kept for KIMI_MCP_JOB_TTL_DAYS."


class Source:
    """The job store of ``settings`` / ``env`` (the same one a server started with them uses), its jobs and
    their isolated copies; ``close_live``: closes a live Kimi conversation before its copy is discarded
    (the server's own runner, when the dashboard is served by ``--http``; None in ``kimi-mcp dashboard``,
    which has no Kimi of its own); and the workers of the broker when one is configured."""

    def __init__(
        self,
        settings: config.Settings,
        env: dict[str, str],
        *,
        close_live: Callable[[str], None] | None = None,
    ) -> None:
        self.settings = settings
        self.state_dir: Path = config.state_dir(settings, env)
        self.redactor = Redactor(configured_secrets(env))
        #: answers and cancellations go to each job's server through the store, as ``kimi_job``'s do for
        #: a job another server runs (this manager runs none)
        self.jobs = JobManager(self.state_dir / STORE_FILE, ttl_days=math.inf, mask=self.redactor.mask_tree)
        self.close_live = close_live
        #: the broker's workers (None: no ``KIMI_MCP_BROKER``, every job runs in its server)
        self.workers = BrokerWorkers(settings.broker) if settings.broker else None
        self._finished: dict[str, tuple[float | None, str | None]] = {}  # job_id → (cost, worker): final

    @property
    def store(self) -> JobStore:
        """The store (opened at the first use: a dead server's jobs are recorded as interrupted then)."""
        return self.jobs.store

    def mask(self, value: Any) -> Any:
        """``value`` (a string, or every string in a dict or list) with the secrets masked."""
        return self.redactor.mask_tree(value)

    def listing(
        self, *, limit: int, status: str | None = None, group: str | None = None, workspace: str | None = None
    ) -> list[JobRecord]:
        """The newest ``limit`` jobs of these filters, a dead server's running jobs recorded first as
        interrupted (as ``kimi_jobs`` does)."""
        query = {"limit": limit, "status": status, "group": group, "workspace": workspace}
        records = self.store.list(**query)
        if any(self.jobs.orphaned(record) for record in records):
            self.jobs.settle_orphans()
            records = self.store.list(**query)
        return records

    def cost_and_worker(self, records: list[JobRecord]) -> dict[str, tuple[float | None, str | None]]:
        """(cost in USD, worker) of each finished job of ``records``, read from their results once."""
        missing = [r.job_id for r in records if r.status in FINISHED and r.job_id not in self._finished]
        if missing:
            found = self.store.cost_and_worker(missing)
            self._finished.update({job_id: found.get(job_id, (None, None)) for job_id in missing})
        return {r.job_id: self._finished[r.job_id] for r in records if r.job_id in self._finished}

    def record(self, job_id: str) -> JobRecord:
        """One job with its result (``BadInput`` if there is none by that id), as ``kimi_job`` finds it."""
        record = self.store.get(job_id.strip())
        if record is None:
            raise BadInput(f"unknown job_id {job_id!r}", suggestion=UNKNOWN_JOB)
        if self.jobs.orphaned(record):
            self.jobs.settle_orphans()
            record = self.store.get(record.job_id) or record
        return record

    def close(self) -> None:
        self.jobs.shutdown()
