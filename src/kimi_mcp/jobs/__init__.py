"""Jobs: each tool call's Kimi turn as a job that can outlive the call (``_manager``), kept in a SQLite
job store shared by every kimi-mcp server of the user (``_store``)."""

from __future__ import annotations

from ..job_spec import JobSpec
from ._manager import DAY_S, TICK, Job, JobManager, record_result, status_of
from ._store import FINISHED, STORE_FILE, JobRecord, JobRef, JobStore, owner_alive, owner_id

__all__ = [
    "DAY_S",
    "FINISHED",
    "STORE_FILE",
    "TICK",
    "Job",
    "JobManager",
    "JobRecord",
    "JobRef",
    "JobSpec",
    "JobStore",
    "owner_alive",
    "owner_id",
    "record_result",
    "status_of",
]
