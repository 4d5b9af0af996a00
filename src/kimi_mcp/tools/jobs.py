"""The job tools: wait for, read or cancel a job (``kimi_job``), list jobs (``kimi_jobs``), and send a
follow-up in the same Kimi conversation (``kimi_continue``)."""

from __future__ import annotations

import contextlib
import re
import sqlite3
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Literal

import anyio
import mcp_types
from fastmcp import Context
from fastmcp.dependencies import Depends
from fastmcp.tools import tool
from fastmcp.tools.base import ToolResult
from pydantic import Field

from .. import job_answers, prompts
from ..adapter import dry_run as _dry_run
from ..adapter import questions as _questions
from ..adapter.client import client_roots, error_result, to_tool_result
from ..adapter.isolation import Isolation, copy_of
from ..adapter.pipeline import (
    Backend,
    Call,
    Reply,
    cancel_and_wait,
    current_backend,
    not_blank,
    snapshot,
    stored_reply,
)
from ..adapter.tasks import TASK
from ..errors import BadInput, KimiMCPError, SessionError
from ..jobs import FINISHED, TICK, JobRecord, owner_alive
from ..models import (
    ErrorInfo,
    JobList,
    JobSummary,
    TaskResult,
)
from ..scope import Message
from ..workspace import resolve_workspace
from . import _groups
from ._lookups import CANCEL_WAIT_S, UNKNOWN_HINT, check_scope, job_record
from ._params import (
    IN_ONE_MESSAGE,
    MODEL_PATTERN,
    ApprovalsArg,
    DryRun,
    Files,
    GroupArg,
    MaxTokens,
    WaitS,
    reads,
    writes,
)

POLL_S = 0.5  # seconds between looks at the store while waiting for another server's job
_SESSION_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,127}")


Answer = Annotated[
    str | list[str] | None,
    Field(
        description="action 'answer': the answer to the job's question: an option's label, a list of labels "
        "(multi_select), or your own words (for an approval: 'approve', 'reject', or what to do instead)"
    ),
]
TurnModel = Annotated[
    str | None,
    Field(
        max_length=128,
        pattern=MODEL_PATTERN,
        description="The model for this turn (default: the conversation's model so far)",
    ),
]
JobIdOrNone = Annotated[
    str | None,
    Field(description="The job_id a kimi tool returned (required but for a group's cancel)", max_length=100),
]
GroupToCancel = Annotated[
    GroupArg, Field(description="action 'cancel' without job_id: cancel every unfinished job of this group")
]
QuestionId = Annotated[
    str | None,
    Field(
        max_length=64,
        description="action 'answer': the id of the question answered (question.id of the waiting result); "
        "the answer is refused if that question was already answered or dismissed (default: the one asked now)",
    ),
]


@tool(
    description=(
        "Wait for, read, answer or cancel a Kimi job. Every kimi tool call is a job; a call that returned "
        "status 'running' (its wait_s ran out) goes on in the background. action='wait' (default) blocks up to "
        "wait_s seconds and returns the job's whole result once it is done (the same fields its tool "
        "returns), else its progress; it returns at once with status 'waiting' and a question when Kimi asks "
        "one: action='answer' with answer= (an option's label, a list of labels if multi_select, or your own "
        "words) types it into Kimi, then waits like 'wait'; 'status' returns at once; 'cancel' interrupts Kimi "
        "and returns the partial result (files already changed); 'cancel' with group= instead of job_id "
        "cancels every unfinished job of that group and lists them in cancelled. Finished results survive a "
        "server restart."
    ),
    annotations=writes("Kimi: job"),
    output_schema=TaskResult.model_json_schema(),
)
async def kimi_job(
    ctx: Context,
    job_id: JobIdOrNone = None,
    action: Annotated[
        Literal["wait", "status", "answer", "cancel"], Field(description="What to do")
    ] = "wait",
    wait_s: Annotated[
        float, Field(ge=0, le=3600, description="Seconds to wait (actions 'wait', 'answer')")
    ] = 60.0,
    answer: Answer = None,
    question_id: QuestionId = None,
    group: GroupToCancel = None,
    backend: Backend = Depends(current_backend),  # noqa: B008
) -> Reply:
    jobs = backend.jobs
    try:
        backend.check()
        if (resumed := _questions.resumed_job(ctx, jobs)) is not None:  # a form's answer (2026-07-28)
            job, answered = resumed
            return await Call(ctx, backend, job.cls).wait(job, wait_s, own=False, ask=answered)
        if group is not None or job_id is None:
            return await _groups.without_job_id(ctx, backend, job_id, action, group)
        record = await job_record(backend, job_id)
        if isinstance(scope := await check_scope(ctx, record.workspace), mcp_types.InputRequiredResult):
            return scope
        if action == "answer":
            await anyio.to_thread.run_sync(job_answers.answer, jobs, record, answer, question_id)
        elif answer is not None or question_id is not None:
            given = "answer" if answer is not None else "question_id"
            raise BadInput(f"{given} is only taken by action 'answer', not {action!r}")
    except KimiMCPError as exc:
        return _failure(backend, exc)
    job = jobs.local(job_id)
    if job is not None:  # running in this server
        if action == "cancel":
            await cancel_and_wait(job)
        elif action in ("wait", "answer"):  # a cancelled wait leaves the job alone
            return await Call(ctx, backend, job.cls).wait(job, wait_s, own=False)
        return to_tool_result(await snapshot(job), backend.settings)
    if action == "cancel" and record.status not in FINISHED:
        await anyio.to_thread.run_sync(jobs.store.request_cancel, job_id)
        record = await _poll(ctx, backend, job_id, CANCEL_WAIT_S)
    elif action in ("wait", "answer") and record.status not in FINISHED:
        record = await _poll(ctx, backend, job_id, wait_s, answered=action == "answer")
    return stored_reply(backend, record)


@tool(
    description=(
        "List recent Kimi jobs (of every kimi-mcp server sharing the job store), newest first: job_id, "
        "tool, workspace, status, start time, duration, session_id (for kimi_continue) and a one-line "
        "summary. A client that has MCP roots sees only the jobs in its roots."
    ),
    annotations=reads("Kimi: list jobs"),
    output_schema=JobList.model_json_schema(),
)
async def kimi_jobs(
    ctx: Context,
    limit: Annotated[int, Field(ge=1, le=500, description="How many jobs")] = 20,
    status: Annotated[
        Literal["done", "running", "starting", "queued", "waiting", "failed", "cancelled", "interrupted"]
        | None,
        Field(description="Only jobs with this status"),
    ] = None,
    work_dir: Annotated[str | None, Field(description="Only jobs in this workspace")] = None,
    group: Annotated[GroupArg, Field(description="Only the jobs of this group")] = None,
    backend: Backend = Depends(current_backend),  # noqa: B008
) -> Reply:
    workspace = str(Path(work_dir).expanduser().resolve()) if work_dir else None
    jobs = backend.jobs
    if isinstance(roots := await client_roots(ctx), mcp_types.InputRequiredResult):
        return roots

    def listing() -> list[JobRecord]:
        backend.check()
        store = jobs.store  # opening the store may fail: a structured error
        query = {"limit": limit, "status": status, "workspace": workspace, "group": group, "within": roots}
        records = store.list(**query)
        if any(jobs.orphaned(record) for record in records):
            jobs.settle_orphans()
            records = store.list(**query)
        return records

    try:
        listed = JobList(jobs=[_summary(record) for record in await anyio.to_thread.run_sync(listing)])
    except (KimiMCPError, sqlite3.Error, OSError) as exc:
        error = exc if isinstance(exc, KimiMCPError) else SessionError(f"cannot read the job store: {exc}")
        listed = JobList(success=False, error=ErrorInfo.from_exception(error))
    payload = listed.model_dump(mode="json")
    return ToolResult(
        content=listed.model_dump_json(), structured_content=payload, is_error=not listed.success
    )


@tool(
    description=(
        "Send a follow-up message to an earlier Kimi conversation (its session_id from a kimi tool's "
        "result or kimi_jobs): Kimi sees everything said and done before, in the same workspace and mode "
        "(a read-only session stays read-only). Returns Kimi's answer and the files this turn changed, "
        "like kimi_code_task. Live conversations are answered at once; older ones are resumed. While the "
        "conversation's job still runs, the message is queued as its next turn (kimi_steer mode 'queue') and "
        "that job's result is returned; its approvals and max_tokens hold for that turn (a model other "
        "than the job's is refused)."
    ),
    annotations=writes("Kimi: continue a conversation"),
    task=TASK,
    output_schema=TaskResult.model_json_schema(),
)
async def kimi_continue(
    ctx: Context,
    session_id: Annotated[str, Field(description="The conversation's session_id", max_length=128)],
    message: Annotated[str, Field(description="The follow-up for Kimi" + IN_ONE_MESSAGE)],
    wait_s: WaitS = None,
    context_files: Files = [],  # noqa: B006 - schema default, never mutated
    model: TurnModel = None,
    max_tokens: MaxTokens = None,
    approvals: ApprovalsArg = None,
    group: GroupArg = None,
    dry_run: DryRun = False,
    backend: Backend = Depends(current_backend),  # noqa: B008
) -> Reply:
    call = Call(ctx, backend, TaskResult)
    try:
        backend.check()
        if (resumed := _questions.resumed_job(ctx, backend.jobs)) is not None:  # a form's answer
            job, answered = resumed
            return await call.wait(job, wait_s, own=False, ask=answered)
        not_blank(message=message)()
        record = await _session(backend, session_id)
        if isinstance(scope := await check_scope(ctx, record.workspace), mcp_types.InputRequiredResult):
            return scope
        call.workspace = _workspace_of(backend, record)
        text = prompts.follow_up_prompt(message, call.files(context_files, "context_files"))
        if dry_run:  # nothing starts, nothing is queued
            how, meter = _isolation_of(record), call.meter(max_tokens)
            return call.done(
                _dry_run.preview(call, text, model=model or record.model, isolation=how, meter=meter)
            )
        if record.status not in FINISHED:  # its turn still runs: this message is its next turn
            queued = _queued(record, text, model=model, max_tokens=max_tokens, approvals=approvals)
            return await _queue(call, record, queued, wait_s)
        arguments = {"session_id": session_id, "message": message, "context_files": context_files}
        arguments |= {"max_tokens": max_tokens} if max_tokens else {}
        model = model or record.model  # the conversation keeps its model
        approvals = approvals or record.arguments.get("approvals")  # and how its approvals are given
        job = call.submit(
            "kimi_continue", arguments, text, read_only=record.read_only, session_id=record.session_id,
            model=model, isolation=_isolation_of(record), tokens=call.meter(max_tokens), approvals=approvals,
            group=group,
        )  # fmt: skip
    except KimiMCPError as exc:
        return call.fail(exc)
    return await call.reply([job], wait_s)


def _queued(
    record: JobRecord, text: str, *, model: str | None, max_tokens: int | None, approvals: str | None
) -> Message:
    """The follow-up as the next turn of the conversation's running job, with its own ``approvals`` and
    ``max_tokens`` for that turn; a ``model`` other than the job's cannot apply to it (``BadInput``)."""
    if model is not None and model != record.model:
        running = f"model {record.model!r}" if record.model else "the default model"
        raise BadInput(
            f"model {model!r} cannot apply to a queued turn: the conversation's job {record.job_id} still runs "
            f"on {running}, and this message would be its next turn",
            suggestion=f"Leave model out to queue it, or wait for the job (kimi_job(job_id={record.job_id!r})) "
            "and then send the follow-up with its model.",
        )
    return Message(text, "queue", approvals=approvals, max_tokens=max_tokens)  # type: ignore[arg-type]


async def _queue(call: Call, record: JobRecord, queued: Message, wait_s: float | None) -> Reply:
    """Queue ``queued`` as the next turn of the conversation's running job, and wait for that job."""
    backend = call.backend
    await anyio.to_thread.run_sync(backend.jobs.send, record.job_id, "message", queued.to_payload())
    job = backend.jobs.local(record.job_id)
    if job is not None:
        return await call.wait(job, wait_s, own=False)
    limit = backend.settings.wait_s if wait_s is None else wait_s
    record = await _poll(call.ctx, backend, record.job_id, 3600.0 if limit is None else limit)
    return stored_reply(backend, record)


# -- lookups -------------------------------------------------------------------------------------------
async def _poll(
    ctx: Context, backend: Backend, job_id: str, wait_s: float, *, answered: bool = False
) -> JobRecord:
    """Another server's job, re-read from the store until it is finished, waits on a question, or
    ``wait_s`` passed; its recorded progress is relayed to the client (``answered``: the question it
    waits on now was just answered: it is waited out, up to a few ticks)."""
    end = time.monotonic() + wait_s
    settle = time.monotonic() + 3 * TICK if answered else 0.0
    while True:
        record = await job_record(backend, job_id)
        waiting = record.status == "waiting" and time.monotonic() >= settle
        if record.status in FINISHED or waiting or time.monotonic() >= end:
            return record
        elapsed = time.time() - record.started_at
        activity = (record.progress or {}).get("activity") or record.status
        with contextlib.suppress(Exception):
            await ctx.report_progress(progress=round(elapsed, 1), message=f"{activity} ({elapsed:.0f}s)")
        await anyio.sleep(min(POLL_S, max(0.0, end - time.monotonic())))


async def _session(backend: Backend, session_id: str) -> JobRecord:
    """The newest job of the conversation ``session_id``, if a follow-up may be sent to it now (or queued
    on it: it still runs)."""
    session_id = session_id.strip()
    if not _SESSION_ID.fullmatch(session_id):
        raise BadInput(f"session_id {session_id!r} is not a Kimi session id", suggestion=UNKNOWN_HINT)
    jobs = backend.jobs
    record = await anyio.to_thread.run_sync(jobs.store.latest_for_session, session_id)
    if record is None:
        raise BadInput(
            f"unknown session_id {session_id!r} (or kept longer than KIMI_MCP_JOB_TTL_DAYS)",
            suggestion=UNKNOWN_HINT,
        )
    record = await job_record(backend, record.job_id)
    if record.status not in FINISHED:  # the follow-up is queued on it, also through the store
        return record
    if record.owner != jobs.owner and owner_alive(record.owner):
        pid = record.owner.split(":")[0]
        raise BadInput(
            f"the conversation {session_id} belongs to another running kimi-mcp server (pid {pid})",
            suggestion="Continue it from the client connected to that server, or start a new task here.",
        )
    return record


def _isolation_of(record: JobRecord) -> Isolation:
    """A conversation on an isolated copy goes on in that copy (its verify_command runs again)."""
    copy = copy_of(record.result)
    if copy is None:
        return Isolation()
    return Isolation("worktree", verify_command=record.arguments.get("verify_command"), copy=copy)


def _workspace_of(backend: Backend, record: JobRecord) -> Path:
    settings = backend.settings
    return resolve_workspace(record.workspace, [], None, allow_home=settings.allow_home_workspace)


def _summary(record: JobRecord) -> JobSummary:
    started = datetime.fromtimestamp(record.started_at, UTC).isoformat(timespec="seconds")
    return JobSummary(
        job_id=record.job_id, tool=record.tool, workspace=record.workspace, status=record.status,  # type: ignore[arg-type]
        started_at=started, duration_s=record.duration_s, session_id=record.session_id, group=record.group,
        summary=record.summary,
    )  # fmt: skip


def _failure(backend: Backend, exc: KimiMCPError) -> ToolResult:
    return to_tool_result(error_result(exc), backend.settings)
