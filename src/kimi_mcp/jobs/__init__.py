"""Jobs: each tool call's Kimi turn as a job that can outlive the call (``_manager``), kept in a SQLite
job store shared by every kimi-mcp server of the user (``_store``); waiting for several of them at once
(``_join``)."""

from __future__ import annotations

from ..job_spec import JobSpec
from ._join import Gathered, Join, Standing, Until
from ._manager import DAY_S, TICK, Job, JobManager, record_result, status_of
from ._store import FINISHED, STORE_FILE, JobRecord, JobRef, JobStore, owner_alive, owner_id

__all__ = [
    "DAY_S",
    "FINISHED",
    "Gathered",
    "STORE_FILE",
    "Standing",
    "TICK",
    "Until",
    "Job",
    "JobManager",
    "JobRecord",
    "JobRef",
    "JobSpec",
    "JobStore",
    "Join",
    "owner_alive",
    "owner_id",
    "record_result",
    "status_of",
]
