"""Groups of jobs (every Kimi tool's ``group``): finding the jobs a call names, within the client's roots,
and cancelling the unfinished jobs of a group (``kimi_job(action="cancel", group=...)``)."""

from __future__ import annotations

import anyio
import mcp_types
from fastmcp import Context

from ..adapter.client import to_tool_result
from ..adapter.pipeline import Backend, Reply, cancel_and_wait
from ..errors import BadInput
from ..jobs import FINISHED, JobRecord, Join, Standing
from ..models import GroupCancelResult
from ._lookups import CANCEL_WAIT_S, check_scope, job_record

GROUP_JOBS = 500  # the newest jobs of a group a call reaches
_NO_GROUP_HINT = "kimi_jobs(group=...) lists a group's jobs; a Kimi tool's group= puts its job in one."


async def group_records(backend: Backend, group: str) -> list[JobRecord]:
    """The newest jobs of ``group`` (``bad_input`` naming it when it has none)."""
    store = await anyio.to_thread.run_sync(lambda: backend.jobs.store)
    records = await anyio.to_thread.run_sync(lambda: store.list(limit=GROUP_JOBS, group=group))
    if not records:
        raise BadInput(
            f"unknown group {group!r}: no job of the job store belongs to it", suggestion=_NO_GROUP_HINT
        )
    return records


async def named_records(backend: Backend, job_ids: list[str]) -> list[JobRecord]:
    """The jobs ``job_ids`` (each once, in order); ``bad_input`` naming every unknown one."""
    records: list[JobRecord] = []
    unknown: list[str] = []
    for job_id in dict.fromkeys(j.strip() for j in job_ids):
        try:
            records.append(await job_record(backend, job_id))
        except BadInput:
            unknown.append(job_id)
    if unknown:
        raise BadInput(
            f"unknown job_id {', '.join(map(repr, unknown))} (or kept longer than KIMI_MCP_JOB_TTL_DAYS)",
            details={"unknown": unknown},
            suggestion="kimi_jobs lists recent jobs with their job_id.",
        )
    return records


async def in_scope(
    ctx: Context, records: list[JobRecord], named: set[str]
) -> tuple[list[JobRecord], list[str]] | mcp_types.InputRequiredResult:
    """The jobs among ``records`` in the client's roots (``check_scope``, once per workspace), and the ids
    of those left out; a job the caller ``named`` outside them is ``bad_input``."""
    outside: dict[str, BadInput] = {}
    for workspace in dict.fromkeys(record.workspace for record in records):
        try:
            asked = await check_scope(ctx, workspace)
            if isinstance(asked, mcp_types.InputRequiredResult):
                return asked
        except BadInput as exc:
            outside[workspace] = exc
    kept = [record for record in records if record.workspace not in outside]
    dropped = [record.job_id for record in records if record.workspace in outside]
    for record in records:
        if record.job_id in named and record.workspace in outside:
            exc = outside[record.workspace]
            raise BadInput(f"job {record.job_id}: {exc.message}", suggestion=exc.suggestion)
    return kept, dropped


async def without_job_id(
    ctx: Context, backend: Backend, job_id: str | None, action: str, group: str | None
) -> Reply:
    """``kimi_job`` without a job_id: a group's cancel (:func:`cancel_group`), or the caller's error."""
    if job_id is not None:
        raise BadInput("give job_id or group, not both (group is taken by action 'cancel' without a job_id)")
    if action != "cancel" or group is None:
        raise BadInput(
            f"action {action!r} needs a job_id"
            + ("" if action == "cancel" else " (a group is only cancelled)"),
            suggestion="kimi_jobs lists recent jobs with their job_id; kimi_wait(group=...) waits for a group.",
        )
    return await cancel_group(ctx, backend, group)


async def cancel_group(ctx: Context, backend: Backend, group: str) -> Reply:
    """Cancel every unfinished job of ``group`` in the client's roots and wait until they stopped (another
    server's: up to ``jobs.CANCEL_WAIT_S``); the result names them."""
    found = await in_scope(ctx, await group_records(backend, group), set())
    if isinstance(found, mcp_types.InputRequiredResult):
        return found
    records, dropped = found
    unfinished = [record for record in records if record.status not in FINISHED]
    jobs = backend.jobs
    async with anyio.create_task_group() as stopping:
        for record in unfinished:
            job = jobs.local(record.job_id)
            if job is not None:
                stopping.start_soon(cancel_and_wait, job)
            else:
                await anyio.to_thread.run_sync(jobs.store.request_cancel, record.job_id)
    join = Join(jobs, unfinished)
    with anyio.move_on_after(CANCEL_WAIT_S):
        while True:
            seen = jobs.events.generation
            if not (await anyio.to_thread.run_sync(join.look)).pending:
                break
            await anyio.to_thread.run_sync(jobs.events.wait_change, seen, join.step, abandon_on_cancel=True)
    final = (await anyio.to_thread.run_sync(join.look)).standings
    stopped = [s.job_id for s in final if s.status == "cancelled" or not s.finished]  # or stopping
    result = GroupCancelResult(
        success=True, status="cancelled", group=group, cancelled=stopped, notes=_notes(group, final, dropped)
    )
    return to_tool_result(result, backend.settings)


def _notes(group: str, final: list[Standing], dropped: list[str]) -> list[str]:
    """What a group's cancel did: the jobs cancelled, still stopping, or that ended on their own meanwhile."""
    cancelled = [s.job_id for s in final if s.status == "cancelled"]
    notes = [f"Cancelled {len(cancelled)} unfinished job(s) of group {group!r}: {', '.join(cancelled)}."]
    if not final:
        notes = [f"No job of group {group!r} was unfinished: nothing to cancel."]
    if still := [s.job_id for s in final if not s.finished]:
        notes.append(f"Asked to stop, still stopping (another server runs them): {', '.join(still)}.")
    if ended := [f"{s.job_id} ({s.status})" for s in final if s.finished and s.status != "cancelled"]:
        notes.append(f"Ended on their own before the cancel reached them: {', '.join(ended)}.")
    if dropped:
        notes.append(f"{len(dropped)} job(s) of the group are outside this client's roots: left alone.")
    return notes
