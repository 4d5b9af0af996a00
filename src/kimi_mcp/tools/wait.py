"""``kimi_wait``: gather several jobs at once, the first of them (``until="any"``) or all of them, woken by
the jobs' own events (``jobs.Join``), with the result budget shared among the finished results."""

from __future__ import annotations

import contextlib
import functools
import time
from typing import Annotated, Literal

import anyio
import mcp_types
from fastmcp import Context
from fastmcp.dependencies import Depends
from fastmcp.tools import tool
from fastmcp.tools.base import ToolResult
from pydantic import Field

from ..adapter.budget import result_json, split_budget
from ..adapter.client import budgeted, error_text
from ..adapter.pipeline import Backend, Reply, current_backend
from ..adapter.submitted import SUBMITTED, Gathering
from ..adapter.tasks import TASK
from ..errors import BadInput, KimiMCPError
from ..jobs import Gathered, JobRecord, Join, Until
from ..models import ErrorInfo, PendingJob, TaskResult, WaitResult
from . import _groups
from ._params import GroupArg, reads

HEARTBEAT_S = 5.0  # a progress notification at least this often while nothing changes
JobIds = Annotated[list[Annotated[str, Field(max_length=100)]], Field(max_length=500)]


@tool(
    description=(
        "Wait for several Kimi jobs at once: job_ids and/or every job of a group (minus skip: the ids you "
        "collected already). until='any' (default) returns as soon as one is finished, with every job "
        "finished by then; 'all' once all are. A job that waits on a question returns at once (in pending, "
        "with its question: answer it with kimi_job(job_id, action='answer', answer=...)). Returns finished "
        "(each job's whole result as kimi_job returns it, the result budget shared among them), pending "
        "(job_id, status, progress, question, group) and timed_out (wait_s passed first)."
    ),
    annotations=reads("Kimi: wait for jobs"),
    output_schema=WaitResult.model_json_schema(),
    task=TASK,
)
async def kimi_wait(
    ctx: Context,
    job_ids: Annotated[
        JobIds | None, Field(description="The jobs to wait for (job_ids kimi tools returned)")
    ] = None,
    group: Annotated[
        GroupArg, Field(description="Also every job of this group (a Kimi tool's group=)")
    ] = None,
    until: Annotated[
        Literal["any", "all"],
        Field(description="any: return when one job is finished; all: when every one is"),
    ] = "any",
    wait_s: Annotated[float, Field(ge=0, le=3600, description="Seconds to wait at most")] = 60.0,
    skip: Annotated[
        JobIds | None, Field(description="Leave out these jobs (the ones you collected already)")
    ] = None,
    backend: Backend = Depends(current_backend),  # noqa: B008
) -> Reply:
    try:
        backend.check()
        found = await _jobs_of(ctx, backend, job_ids or [], group, skip or [])
    except KimiMCPError as exc:
        return _reply(WaitResult(success=False, until=until, error=ErrorInfo.from_exception(exc)))
    if isinstance(found, mcp_types.InputRequiredResult):
        return found
    records, notes = found
    join = Join(backend.jobs, records)
    if (submitted := await ctx.get_state(SUBMITTED)) is not None:  # an MCP task: the extension waits
        submitted.append(_gathering(backend, join, until, time.monotonic() + wait_s, notes))
        return ToolResult(content=[])  # never sent: the tasks extension answers with the task
    timed_out = not await _gather(ctx, join, until, wait_s)
    return await anyio.to_thread.run_sync(_answer, backend, join, until, timed_out, notes)


def _gathering(backend: Backend, join: Join, until: Until, end: float, notes: list[str]) -> Gathering:
    """The wait as an MCP task's: over once ready for ``until`` or at ``end`` (monotonic); its reply is the
    plain call's, built once."""

    def look() -> tuple[bool, str]:
        gathered = join.look()
        over = time.monotonic() >= end or gathered.ready(until)
        return over, f"{len(gathered.finished)} of {len(gathered.standings)} jobs finished"

    @functools.cache
    def reply() -> ToolResult:
        timed_out = time.monotonic() >= end
        return _answer(backend, join, until, timed_out, notes)

    return Gathering(list(join.records), look, reply)


async def _jobs_of(
    ctx: Context, backend: Backend, job_ids: list[str], group: str | None, skip: list[str]
) -> tuple[list[JobRecord], list[str]] | mcp_types.InputRequiredResult:
    """The jobs to wait for: ``job_ids`` ∪ the group's, minus ``skip``, within the client's roots; and what
    the caller should know about the choice."""
    if not [j for j in job_ids if j.strip()] and group is None:
        raise BadInput(
            "no job given: kimi_wait needs job_ids, a group, or both",
            suggestion="Pass the job_ids your kimi tool calls returned, or the group= you gave them.",
        )
    named = await _groups.named_records(backend, [j for j in job_ids if j.strip()])
    grouped = await _groups.group_records(backend, group) if group is not None else []
    skipped = {j.strip() for j in skip}
    records = [r for r in {r.job_id: r for r in [*named, *grouped]}.values() if r.job_id not in skipped]
    found = await _groups.in_scope(ctx, records, {r.job_id for r in named})
    if isinstance(found, mcp_types.InputRequiredResult):
        return found
    kept, dropped = found
    notes = (
        [f"{len(dropped)} job(s) of group {group!r} are outside this client's roots: left out."]
        if dropped
        else []
    )
    if not kept:
        notes.append("Every job named was skipped: nothing to wait for.")
    return kept, notes


async def _gather(ctx: Context, join: Join, until: Until, wait_s: float) -> bool:
    """Wait until the jobs are ready for ``until`` (True) or ``wait_s`` passed (False), woken by this
    server's job events and reading other servers' jobs from the store; tells the client how many are
    finished as that changes (and every ``HEARTBEAT_S``)."""
    jobs = join.jobs
    end = time.monotonic() + wait_s
    told, told_at = -1, 0.0
    while True:
        seen = jobs.events.generation  # before the look: an event after it ends the wait below at once
        gathered = await anyio.to_thread.run_sync(join.look)
        if gathered.ready(until):
            return True
        now = time.monotonic()
        if now >= end:
            return False
        finished = len(gathered.finished)
        if finished != told or now - told_at >= HEARTBEAT_S:
            told, told_at = finished, now
            await _progress(ctx, gathered)
        step = min(end - now, join.step, HEARTBEAT_S)
        await anyio.to_thread.run_sync(jobs.events.wait_change, seen, step, abandon_on_cancel=True)


async def _progress(ctx: Context, gathered: Gathered) -> None:
    total, finished = len(gathered.standings), len(gathered.finished)
    with contextlib.suppress(Exception):  # progress is a courtesy: never fails the wait
        await ctx.report_progress(
            progress=finished, total=total, message=f"{finished} of {total} jobs finished"
        )


def _answer(backend: Backend, join: Join, until: Until, timed_out: bool, notes: list[str]) -> ToolResult:
    """The reply (in a worker thread: results may be read from the store, trackers walked): every job
    finished by now with its result, the others with where they stand."""
    gathered = join.look(files=True)
    results = [join.result(job_id) for job_id in gathered.finished]
    pending = [
        PendingJob(job_id=s.job_id, status=s.status, progress=s.progress, question=s.question, group=s.group)  # type: ignore[arg-type]
        for s in gathered.pending
    ]
    limit = backend.settings.max_result_chars
    if len(results) > 1 and limit > 0:
        notes = [
            *notes,
            f"The {len(results)} finished results share the result budget (KIMI_MCP_MAX_RESULT_CHARS = {limit} "
            "characters): what was cut from one is listed in its truncated; kimi_job(job_id) returns it with "
            "the whole budget.",
        ]
    shell = WaitResult(
        until=until, pending=pending, timed_out=timed_out and not gathered.ready(until), notes=notes
    )
    return _reply(shell, _shared(results, limit, shell))


def _shared(results: list[TaskResult], limit: int, shell: WaitResult) -> list[dict]:
    """The finished results' payloads, the budget left by the rest of the reply split among them
    (``split_budget``: the smaller ones whole), each cut and masked as kimi_job cuts and masks one."""
    if limit <= 0:
        return [budgeted(result, 0)[1] for result in results]
    room = limit - len(result_json(shell.model_dump(mode="json"))) - max(0, len(results) - 1)
    sizes = [len(result_json(result.model_dump(mode="json"))) for result in results]
    return [
        budgeted(result, share)[1] for result, share in zip(results, split_budget(sizes, room), strict=True)
    ]


def _reply(result: WaitResult, finished: list[dict] | None = None) -> ToolResult:
    payload = result.model_dump(mode="json") | {"finished": finished or []}
    text = error_text(payload) if result.error is not None else result_json(payload)
    return ToolResult(
        content=[mcp_types.TextContent(type="text", text=text)],
        structured_content=payload,
        is_error=not result.success,
    )
