"""Finding the job a tool call names: in the job store (a dead owner's job settled first) and within the
client's roots."""

from __future__ import annotations

import anyio
import mcp_types
from fastmcp import Context

from ..adapter.client import client_roots, in_roots
from ..adapter.pipeline import Backend
from ..errors import BadInput
from ..jobs import JobRecord

CANCEL_WAIT_S = 30.0  # how long `cancel` waits for another server to stop its job
UNKNOWN_HINT = "kimi_jobs lists recent jobs with their job_id and session_id."


async def job_record(backend: Backend, job_id: str) -> JobRecord:
    """The job, with an owner that died while it ran recorded as interrupted first."""
    store = await anyio.to_thread.run_sync(lambda: backend.jobs.store)  # opening it may adopt jobs: not here
    record = await anyio.to_thread.run_sync(store.get, job_id.strip())
    if record is None:
        raise BadInput(
            f"unknown job_id {job_id!r} (or kept longer than KIMI_MCP_JOB_TTL_DAYS)", suggestion=UNKNOWN_HINT
        )
    if backend.jobs.orphaned(record):
        await anyio.to_thread.run_sync(backend.jobs.settle_orphans)
        record = await anyio.to_thread.run_sync(store.get, record.job_id) or record
    return record


async def check_scope(ctx: Context, workspace: str) -> mcp_types.InputRequiredResult | None:
    """A client that names its roots reaches only jobs in them (an HTTP server may serve several)."""
    roots = await client_roots(ctx)
    if isinstance(roots, mcp_types.InputRequiredResult):
        return roots
    if not in_roots(workspace, roots):
        raise BadInput(
            f"that job's workspace {workspace} is outside this client's roots",
            suggestion="kimi_jobs(work_dir=...) lists the jobs of a workspace you work in.",
        )
    return None
