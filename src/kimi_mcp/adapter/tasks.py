"""MCP tasks (the ``io.modelcontextprotocol/tasks`` extension, SEP-2663): a Kimi call that a client asks
to run as a task becomes a *background task whose id is its job's id*.

The call runs inline up to the job's submission (arguments, workspace and the client's roots, context
files, prompt: an error or a roots request is answered at once, as without tasks); then, instead of
waiting, the ``tools/call`` returns a ``CreateTaskResult``. ``tasks/get`` reads the job (its progress as
``statusMessage``, its events for the client as log notifications; once finished, the tool's own result,
budget and masking included), ``tasks/cancel`` interrupts its turn like ``kimi_job(action="cancel")``. A task
is the job: ``kimi_job`` and ``kimi_jobs`` see it, and the job store keeps its result whatever becomes of the
task. A client that does not declare the extension on a call (handshake-era connections, ``claude -p``) gets
today's behaviour (``wait_s``).

Nothing of ``fastmcp-tasks`` (Docket) is imported: its import costs seconds at every start, it runs the tool
body as a queued execution and re-enters it per answer, while here the job already is the durable,
cancellable unit of work. What the SDK lacks, producing the claimed ``resultType: "task"`` result on
``tools/call`` (it only consumes it), is :func:`_task_results_allowed`.
"""

from __future__ import annotations

import contextlib
import threading
import time
import uuid
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from types import ModuleType
from typing import TYPE_CHECKING, Any, Literal

import anyio
import mcp_types
import mcp_types.methods as _methods
from fastmcp.server.dependencies import _is_client_tool_call
from fastmcp.server.extensions import MethodBinding, ServerExtension, read_client_extension_settings
from fastmcp.utilities.tasks import TASKS_EXTENSION_ID, TaskConfig
from mcp.server.context import ServerRequestContext
from mcp.shared.exceptions import MCPError
from mcp_types import INVALID_PARAMS, RequestParams, Result
from mcp_types.version import MODERN_PROTOCOL_VERSIONS
from pydantic import ConfigDict, Field

from .._logging import CLIENT_EVENTS, get_logger
from ..models import GOING
from .submitted import SUBMITTED, Gathering

if TYPE_CHECKING:
    from fastmcp import Context
    from fastmcp.server.extensions import ToolCallContinuation, ToolCallOutcome
    from fastmcp.tools.base import Tool

    from ..jobs import Job
    from .pipeline import Backend, Call, Submitted

log = get_logger("tasks")

TASK = TaskConfig(mode="optional", poll_interval=timedelta(seconds=1))
"""The Kimi tools run as MCP tasks when the client asks for one on the call, never only so."""

FILES_EVERY_S = 2.0  # the files-changed-so-far part of a status message is refreshed at most this often
CANCEL_WAIT_S = 3.0  # tasks/cancel acknowledges once the job stopped, or after this long
KEEP_FINISHED = 64  # finished tasks kept in memory; older ones are answered from the job store
STATUS_CHARS = 300  # a status message is one line a client shows as it is
POLL_MS = int(TASK.poll_interval.total_seconds() * 1000)  # the Kimi tools' poll interval
GATHER_PREFIX = "wait-"  # the id of a kimi_wait task (a job id never starts so)

TaskStatus = Literal["working", "input_required", "completed", "failed", "cancelled"]


# -- the wire shapes (SEP-2663: flat task fields, camelCase) -------------------------------------------
class _TaskFields(Result):
    model_config = ConfigDict(populate_by_name=True)

    task_id: str = Field(serialization_alias="taskId")
    status: TaskStatus
    created_at: str = Field(serialization_alias="createdAt")
    last_updated_at: str = Field(serialization_alias="lastUpdatedAt")
    ttl_ms: int | None = Field(serialization_alias="ttlMs")
    status_message: str | None = Field(default=None, serialization_alias="statusMessage")
    poll_interval_ms: int | None = Field(default=None, serialization_alias="pollIntervalMs")


class CreateTaskResult(_TaskFields):
    """The ``tools/call`` result of a call that became a task."""

    result_type: Literal["task"] = Field(default="task", serialization_alias="resultType")


class GetTaskResult(_TaskFields):
    """``tasks/get``: the task, with the tool's result inlined once it completed."""

    result_type: Literal["complete"] = Field(default="complete", serialization_alias="resultType")
    result: dict[str, Any] | None = None
    error: dict[str, Any] | None = None
    input_requests: dict[str, Any] | None = Field(default=None, serialization_alias="inputRequests")


class AckResult(Result):
    """``tasks/update`` and ``tasks/cancel``: an empty acknowledgement."""

    result_type: Literal["complete"] = Field(default="complete", serialization_alias="resultType")


class TaskParams(RequestParams):
    model_config = ConfigDict(populate_by_name=True)

    task_id: str = Field(alias="taskId")


class UpdateParams(TaskParams):
    input_responses: dict[str, Any] = Field(default_factory=dict, alias="inputResponses")


# -- one task -------------------------------------------------------------------------------------------
@dataclass
class Task:
    """A call running as a task: its pipeline call (for the result's budget and masking) and its jobs (one,
    or one per attempt; the task's id is the first one's)."""

    call: Call | None  # None: a task this server adopted with its job (its server stopped; a worker runs it)
    jobs: list[Job]
    created_at: str = field(default_factory=lambda: datetime.now(UTC).isoformat())
    cancelled: bool = False
    poll_interval_ms: int = POLL_MS  # how often the client should poll tasks/get (the tool's task config)
    _files: list[str] = field(default_factory=list)
    _files_at: float = 0.0
    _refreshing: bool = False

    @property
    def task_id(self) -> str:
        return self.jobs[0].job_id

    def finished(self) -> bool:
        return all(job.done.is_set() for job in self.jobs)

    def asking(self) -> Job | None:
        """The job of the task whose question waits for an answer, if one does."""
        return next((job for job in self.jobs if job.asking.is_set() and not job.done.is_set()), None)

    def status(self) -> tuple[TaskStatus, str]:
        """The task's status and status message (``completed`` also for a failed job: its result says so;
        ``input_required`` while Kimi's question waits: tasks/update answers it)."""
        if (job := self.asking()) is not None and (info := job.question) is not None:
            return "input_required", f"Kimi asks: {info.text} · job {job.job_id}"[:STATUS_CHARS]
        if not self.finished():
            return "working", self.status_message()
        if self.cancelled and all(job.result and job.result.status == "cancelled" for job in self.jobs):
            return "cancelled", "cancelled"
        return "completed", "done"

    def status_message(self) -> str:
        """One line: Kimi's latest activity, the elapsed time, the files changed so far (cached: listing
        them walks the tracker, refreshed in a thread at most every ``FILES_EVERY_S``)."""
        running = [job for job in self.jobs if not job.done.is_set()] or self.jobs
        job = running[0]
        self._refresh_files()
        elapsed = time.monotonic() - job.started
        parts = [f"{job.activity} ({elapsed:.0f}s)"]
        if len(self.jobs) > 1:
            parts.append(f"{len(self.jobs) - len(running)} of {len(self.jobs)} attempts done")
        if self._files:
            shown = ", ".join(self._files[:4]) + (
                f" +{len(self._files) - 4} more" if len(self._files) > 4 else ""
            )
            parts.append(f"changed so far: {shown}")
        parts.append(f"job {self.task_id}")
        return " · ".join(parts)[:STATUS_CHARS]

    def _refresh_files(self) -> None:
        if self._refreshing or time.monotonic() - self._files_at < FILES_EVERY_S:
            return
        self._refreshing = True

        def refresh() -> None:
            try:
                files: list[str] = []
                for job in self.jobs:
                    if not job.done.is_set():
                        files.extend(p for p in job.progress(files=True).files_changed if p not in files)
                self._files = files
            finally:
                self._files_at, self._refreshing = time.monotonic(), False

        threading.Thread(target=refresh, name=f"kimi-task-{self.task_id}", daemon=True).start()


@dataclass
class GatherTask:
    """A ``kimi_wait`` running as a task (:class:`.submitted.Gathering`): it has no job of its own, so its id
    is its own (``wait-…``) and it lives in this server's memory only; cancelling it stops the wait, never
    the jobs. Whether it is over is looked at on each ``tasks/get``."""

    gathering: Gathering
    task_id: str = field(default_factory=lambda: f"{GATHER_PREFIX}{uuid.uuid4().hex[:12]}")
    created_at: str = field(default_factory=lambda: datetime.now(UTC).isoformat())
    cancelled: bool = False
    poll_interval_ms: int = POLL_MS
    done: bool = False  # the wait is over (set by :meth:`look`)

    def finished(self) -> bool:
        return self.done or self.cancelled

    def look(self) -> tuple[TaskStatus, str]:
        """The status and message now (a worker thread: it may read the job store)."""
        if self.cancelled:
            return "cancelled", "cancelled: the jobs go on (kimi_wait or kimi_job gathers them)"
        if not self.done:
            self.done, standing = self.gathering.look()
            if not self.done:
                return "working", standing[:STATUS_CHARS]
        return "completed", "done"


# -- the extension --------------------------------------------------------------------------------------
class JobTasks(ServerExtension):
    """The tasks extension for the tools declared with a task mode (:data:`TASK`: optional, so a call
    becomes a task only when the client declares the extension on it). ``ttl_ms``: how long a task's
    result stays readable (the job store's retention)."""

    identifier = TASKS_EXTENSION_ID

    def __init__(self, ttl_ms: int) -> None:
        self.ttl_ms = ttl_ms
        self._tasks: dict[str, Task | GatherTask] = {}
        self._lock = threading.Lock()

    def methods(self) -> Sequence[MethodBinding]:
        versions = frozenset(MODERN_PROTOCOL_VERSIONS)
        return [
            MethodBinding("tasks/get", TaskParams, self._get, versions),
            MethodBinding("tasks/update", UpdateParams, self._update, versions),
            MethodBinding("tasks/cancel", TaskParams, self._cancel, versions),
        ]

    def lifespan(self) -> contextlib.AbstractAsyncContextManager[None]:
        return _task_results_allowed()

    async def intercept_tool_call(
        self, params: mcp_types.CallToolRequestParams, context: Context, call_next: ToolCallContinuation
    ) -> ToolCallOutcome:
        tool = (
            await _task_tool(context, params.name) if _is_client_tool_call() and _opted_in(context) else None
        )
        if tool is None:
            return await call_next()
        pending: list[Submitted] = []
        await context.set_state(SUBMITTED, pending, serializable=False)  # the pipeline appends its jobs
        try:
            outcome = await call_next()
        finally:
            await context.set_state(SUBMITTED, None, serializable=False)
        if not pending:  # answered inline: an error, or the request for the client's roots
            return outcome
        submitted = pending[0]
        task: Task | GatherTask = (
            GatherTask(submitted)
            if isinstance(submitted, Gathering)
            else Task(submitted.call, list(submitted.jobs))
        )
        task.poll_interval_ms = int(tool.task_config.poll_interval.total_seconds() * 1000)
        with self._lock:
            finished = [key for key, kept in self._tasks.items() if kept.finished()]
            for key in finished[: max(0, len(finished) - KEEP_FINISHED)]:  # oldest first
                del self._tasks[key]
            self._tasks[task.task_id] = task
        log.info("%s runs as task %s", params.name, task.task_id)
        message = "waiting for the jobs" if isinstance(task, GatherTask) else task.status_message()
        return CreateTaskResult(
            task_id=task.task_id, status="working", created_at=task.created_at,
            last_updated_at=task.created_at, ttl_ms=self.ttl_ms, poll_interval_ms=task.poll_interval_ms,
            status_message=message,
        )  # fmt: skip

    # -- tasks/get, tasks/update, tasks/cancel ---------------------------------------------------------
    def _check(self, ctx: ServerRequestContext[Any, Any]) -> None:
        if read_client_extension_settings(ctx, TASKS_EXTENSION_ID) is None:
            raise MCPError(
                code=mcp_types.MISSING_REQUIRED_CLIENT_CAPABILITY,
                message=f"tasks/* needs the {TASKS_EXTENSION_ID} extension declared on the request",
            )

    def _backend(self) -> Backend:
        """The server's backend (its tools must be loaded: they load at the first request)."""
        return _pipeline().current_backend(self.server)

    async def _task(self, task_id: str) -> Task | GatherTask | None:
        """The task, also one whose job this server adopted after the server that started it stopped (a
        worker runs it): a task outlives its server, like its job."""
        with self._lock:
            task = self._tasks.get(task_id)
        if task is not None:
            return task
        if task_id.startswith(GATHER_PREFIX):  # a wait lives in memory only: see _stored
            return None

        def adopted() -> Job | None:
            jobs = self._backend().jobs
            record = jobs.store.get(task_id)  # opening the store adopts the dead servers' jobs on workers
            if record is not None and jobs.orphaned(record):
                jobs.settle_orphans()  # the broker was away when the store opened: try again
            return jobs.local(task_id)

        try:
            job = await anyio.to_thread.run_sync(adopted)
        except Exception:  # no tools loaded yet, or no store: no job runs here
            return None
        if job is None or job.done.is_set():
            return None
        with self._lock:
            return self._tasks.setdefault(task_id, Task(None, [job]))

    async def _get(self, ctx: ServerRequestContext[Any, Any], params: TaskParams) -> GetTaskResult:
        self._check(ctx)
        task = await self._task(params.task_id)
        if isinstance(task, GatherTask):
            await _relay_events(ctx, task.gathering.job_ids)
            return await self._gathered(task)
        await _relay_events(ctx, [job.job_id for job in task.jobs] if task is not None else [params.task_id])
        if task is None:
            return await self._stored(params.task_id)
        now = datetime.now(UTC).isoformat()
        status, message = task.status()
        result, requests = None, None
        if status == "completed" and task.call is None:  # adopted: its reply is built from the store
            return await self._stored(params.task_id)
        if status == "completed" and task.call is not None:
            reply = await anyio.to_thread.run_sync(task.call.finished_reply, task.jobs)
            result = _call_tool_result(reply)
        elif status == "input_required" and (job := task.asking()) is not None and job.question is not None:
            text, schema = _questions().form(job.question)
            requests = {
                _questions().QUESTION_KEY: {
                    "method": "elicitation/create",
                    "params": {"message": text, "requestedSchema": schema},
                }
            }
        return GetTaskResult(
            task_id=task.task_id, status=status, status_message=message, result=result,
            created_at=task.created_at, last_updated_at=now, ttl_ms=self.ttl_ms,
            poll_interval_ms=task.poll_interval_ms, input_requests=requests,
        )  # fmt: skip

    async def _gathered(self, task: GatherTask) -> GetTaskResult:
        """``tasks/get`` of a wait: working while it waits, then completed with ``kimi_wait``'s reply."""
        status, message = await anyio.to_thread.run_sync(task.look)
        result = None
        if status == "completed":
            result = _call_tool_result(await anyio.to_thread.run_sync(task.gathering.reply))
        return GetTaskResult(
            task_id=task.task_id, status=status, status_message=message, result=result,
            created_at=task.created_at, last_updated_at=datetime.now(UTC).isoformat(), ttl_ms=self.ttl_ms,
            poll_interval_ms=task.poll_interval_ms,
        )  # fmt: skip

    async def _stored(self, task_id: str) -> GetTaskResult:
        """A task this server no longer holds (finished long ago, or started before a restart): its job,
        from the job store."""
        try:
            backend = self._backend()
            record = await anyio.to_thread.run_sync(backend.jobs.store.get, task_id)
        except Exception:  # no tools loaded yet, or no store: nothing to find
            record = None
        if record is None and task_id.startswith(GATHER_PREFIX):
            raise MCPError(
                code=INVALID_PARAMS,
                message=f"Task {task_id} not found: a kimi_wait task lives in its server's memory only (gone "
                "after a restart, or long finished); call kimi_wait again (its jobs are kept)",
            )
        if record is None:
            raise MCPError(
                code=INVALID_PARAMS,
                message=f"Task {task_id} not found (kimi_jobs lists the jobs kept; a task's id is its job_id)",
            )
        created = datetime.fromtimestamp(record.started_at, UTC).isoformat()
        fields = {
            "task_id": task_id,
            "created_at": created,
            "ttl_ms": self.ttl_ms,
            "poll_interval_ms": POLL_MS,
        }
        now = datetime.now(UTC).isoformat()
        if record.status in GOING:
            activity = (record.progress or {}).get("activity") or record.status
            return GetTaskResult(
                status="working", status_message=f"{activity} · job {task_id}", last_updated_at=now, **fields
            )
        reply = await anyio.to_thread.run_sync(_pipeline().stored_reply, backend, record)
        return GetTaskResult(
            status="completed", status_message=record.status, result=_call_tool_result(reply),
            last_updated_at=now, **fields,
        )  # fmt: skip

    async def _update(self, ctx: ServerRequestContext[Any, Any], params: UpdateParams) -> AckResult:
        """The answer to the question a task waits on (``inputResponses``, as tasks/get asked for it):
        typed into Kimi; anything else is acknowledged and ignored."""
        self._check(ctx)
        task = await self._task(params.task_id)
        if task is None:
            await self._stored(params.task_id)  # unknown: the same error as tasks/get
            return AckResult()
        if isinstance(task, GatherTask):
            return AckResult()  # a wait asks nothing (a job's question is in its reply's pending)
        response = params.input_responses.get(_questions().QUESTION_KEY)
        job = task.asking()
        if response is not None and job is not None and (info := job.question) is not None:
            action = (
                response.get("action") if isinstance(response, dict) else getattr(response, "action", None)
            )
            content = (
                response.get("content") if isinstance(response, dict) else getattr(response, "content", None)
            )
            _questions().deliver_response(job, info, str(action), content)
        return AckResult()

    async def _cancel(self, ctx: ServerRequestContext[Any, Any], params: TaskParams) -> AckResult:
        self._check(ctx)
        task = await self._task(params.task_id)
        if task is None:
            await self._stored(params.task_id)  # unknown: an error; a job of the store: nothing to stop here
            return AckResult()
        if task.finished():
            return AckResult()  # a finished task keeps its result
        task.cancelled = True
        if isinstance(task, GatherTask):
            log.info("wait task %s cancelled by the client (its jobs go on)", task.task_id)
            return AckResult()
        for job in task.jobs:
            job.cancel.set()
        log.info("task %s cancelled by the client", task.task_id)
        deadline = time.monotonic() + CANCEL_WAIT_S
        with anyio.CancelScope(shield=True):
            while not task.finished() and time.monotonic() < deadline:
                await anyio.sleep(0.05)
        return AckResult()


def _pipeline() -> ModuleType:
    """The call pipeline, for the task methods: imported at their first use, since it loads the job manager and
    the executors, which load with the tools at the first request, not when the server starts (start-up speed)."""
    from . import pipeline  # start-up speed: see above

    return pipeline


def _questions() -> ModuleType:
    """Kimi's questions asked of the client, imported at first use like :func:`_pipeline` (start-up speed)."""
    from . import questions  # start-up speed: loads the job manager

    return questions


async def _relay_events(ctx: ServerRequestContext[Any, Any], jobs: list[str]) -> None:
    """The events of the task's jobs (``jobs``, their ids), as log notifications of this ``tasks/get``: a
    task's client polls it instead of waiting in the call (``client.relay_events``); never fails the request."""
    for event in CLIENT_EVENTS.take_jobs(jobs):
        try:
            with warnings.catch_warnings():  # the logging capability is deprecated on 2026-07-28: still sent
                warnings.simplefilter("ignore")
                await ctx.session.send_log_message(
                    level=event.level,  # type: ignore[arg-type]
                    data={"msg": event.message, "extra": None},  # as FastMCP's Context.log sends it
                    logger="kimi-mcp",
                    related_request_id=ctx.request_id,
                )
        except Exception as exc:
            log.debug("event not relayed: %s", exc)
            return


def _opted_in(context: Context) -> bool:
    """A 2026-07-28 request that declares the tasks extension (handshake-era clients cannot)."""
    rc = context.request_context
    if rc is None or rc.protocol_version not in MODERN_PROTOCOL_VERSIONS:
        return False
    return context.client_extension_settings(TASKS_EXTENSION_ID) is not None


async def _task_tool(context: Context, name: str) -> Tool | None:
    """The tool, if it may run as a task."""
    try:
        tool = await context.fastmcp.get_tool(name)
    except Exception:  # an unknown tool: the call answers that
        return None
    return tool if tool is not None and tool.task_config.supports_tasks() else None


def _call_tool_result(reply: Any) -> dict[str, Any]:
    """The tool's reply (a FastMCP ``ToolResult``) as the ``CallToolResult`` a task completes with."""
    result = mcp_types.CallToolResult(
        content=reply.content, structured_content=reply.structured_content, is_error=reply.is_error
    )
    return result.model_dump(by_alias=True, mode="json", exclude_none=True)


# -- producing resultType "task" on tools/call ------------------------------------------------------------
_original_serialize: Any = None
_holds = 0


def _serialize(method: str, version: str, data: Mapping[str, Any], **kwargs: Any) -> dict[str, Any]:
    """The SDK validates a modern ``tools/call`` result against ``CallToolResult | InputRequiredResult``,
    which would strip a task to nothing: a result tagged ``resultType: "task"`` goes out as built."""
    if (
        not kwargs
        and method == "tools/call"
        and version in MODERN_PROTOCOL_VERSIONS
        and isinstance(data, Mapping)
        and data.get("resultType") == "task"
    ):
        return dict(data)
    return _original_serialize(method, version, data, **kwargs)


@contextlib.asynccontextmanager
async def _task_results_allowed() -> Any:
    """While a tasks server runs, ``tools/call`` may answer with a task (process-wide, counted: several
    servers of one process share it)."""
    global _original_serialize, _holds
    if _holds == 0:
        _original_serialize = _methods.serialize_server_result
        _methods.serialize_server_result = _serialize
    _holds += 1
    try:
        yield
    finally:
        _holds -= 1
        if _holds == 0:
            _methods.serialize_server_result = _original_serialize
