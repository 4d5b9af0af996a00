"""One tool call, the same for every tool: check the arguments, find the workspace (the client's roots in
either protocol era), read the context files, build the prompt, then run Kimi and the tool's finishing
step as a *job* (see ``jobs``) and wait for it (``wait_s``): the finished result, or the job's status."""

from __future__ import annotations

import functools
import math
import time
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import anyio
import mcp_types
from fastmcp import Context, FastMCP
from fastmcp.dependencies import CurrentFastMCP
from fastmcp.tools.base import ToolResult

from .._logging import get_logger
from ..config import Settings, state_dir
from ..errors import BadInput, BudgetError, KimiMCPError
from ..executors import Executor, Local, RunTask, Runtime
from ..finish import result_class
from ..jobs import DAY_S, STORE_FILE, Job, JobManager, JobRecord, JobSpec, record_result
from ..jobs.prune import forget_sessions
from ..lazy_runner import LazyRunner
from ..models import GOING, TaskResult, TruncatedItem
from ..remote import Remote
from ..scope import DAILY_WARNING, Scope, TokenMeter, daily_warning
from ..secrets import Redactor, configured_secrets
from ..workspace import ContextFile, read_context_files, resolve_workspace
from . import dry_run, questions
from .client import client_roots, error_result, to_tool_result, wait_for_job
from .isolation import Isolation, check_repository, isolation_for, ranked, summary
from .submitted import SUBMITTED

log = get_logger("tools")

NOT_ISOLATED = Isolation()

Reply = ToolResult | mcp_types.InputRequiredResult
"""What a tool returns: its result, or (modern protocol) a request for the client's roots first."""


@dataclass(frozen=True, slots=True)
class Backend:
    """What the tools of one server use: its settings, the environment read at the server's start, its
    runner, the function that runs a Kimi turn, kimi-mcp's state directory (resolved once), its jobs."""

    settings: Settings
    #: the process environment as the server read it (``config.read_environment``): Kimi runs with it, and
    #: the keys configured there are masked
    env: dict[str, str]
    #: the server's runner (made at the first call): its standbys and live conversations
    runner: LazyRunner
    #: runs a Kimi turn: the runner (a fake in the tool layer's tests)
    run: RunTask
    #: the server's configuration was invalid: every Kimi call answers with this (kimi_status explains)
    problem: KimiMCPError | None = None
    state_dir: Path = field(init=False)
    jobs: JobManager = field(init=False)

    def __post_init__(self) -> None:
        state = state_dir(self.settings, self.env)
        object.__setattr__(self, "state_dir", state)
        jobs = JobManager(
            state / STORE_FILE,
            self.settings.job_ttl_days,
            on_pruned=functools.partial(forget_sessions, self.env),
            executor=executor_for(Runtime(self.settings, self.env, state, self.run)),
            mask=Redactor(configured_secrets(self.env)).mask_tree,
        )
        object.__setattr__(self, "jobs", jobs)

    def check(self) -> None:
        """Raise the configuration problem, if there is one."""
        if self.problem is not None:
            raise self.problem


def executor_for(runtime: Runtime) -> Executor:
    """Where this server's jobs run: on workers through the broker (``KIMI_MCP_BROKER``), else here."""
    if runtime.settings.broker:
        return Remote(runtime, runtime.settings.broker)
    return Local(runtime)


_backends: weakref.WeakKeyDictionary[FastMCP, Backend] = weakref.WeakKeyDictionary()


def bind(mcp: FastMCP, backend: Backend) -> None:
    """Make ``backend`` the one the tools registered on ``mcp`` use."""
    _backends[mcp] = backend


def current_backend(server: FastMCP = CurrentFastMCP()) -> Backend:  # noqa: B008 - FastMCP dependency
    """The dependency each tool declares (``Depends(current_backend)``; hidden from the tool's schema)."""
    return _backends[server]


@dataclass(frozen=True)
class Submitted:
    """A call whose jobs were submitted while it runs as an MCP task (see :data:`.submitted.SUBMITTED`)."""

    call: Call
    jobs: list[Job]


class Call:
    """One tool invocation: workspace, context files, the Kimi run, the result."""

    def __init__(self, ctx: Context, backend: Backend, cls: type[TaskResult]) -> None:
        self.ctx, self.backend, self.cls = ctx, backend, cls
        self.settings = backend.settings
        self.workspace: Path | None = None
        self.redactor = Redactor()  # the run adds what it finds; done() masks the whole result with it
        self.warnings: list[str] = []  # said in the notes of every job the call starts
        self.sent: dict[str, str] = {}  # files the caller sent whose "after" the tool diffs (JobSpec.sent)
        self.files_sent: list[
            str
        ] = []  # every file whose contents went into the prompt (a dry run names them)
        self.redacted: list[str] = []  # secret files among the caller's: named, never read
        self.left_out: list[TruncatedItem] = []  # what the prompt left out (kimi_review: files of its diff)
        self.preview: dict[str, Any] = {}  # result fields a dry run shows besides dry_run (kimi_review's)
        log.debug("%s: call received", cls.__name__)

    async def workspace_for(self, work_dir: str | None) -> Path | mcp_types.InputRequiredResult:
        roots = [] if work_dir else await client_roots(self.ctx)
        if isinstance(roots, mcp_types.InputRequiredResult):
            return roots
        self.workspace = resolve_workspace(
            work_dir, roots, self.settings.workspace, allow_home=self.settings.allow_home_workspace
        )
        return self.workspace

    def files(self, paths: list[str], argument: str, *, required: bool = False) -> list[ContextFile]:
        """The contents of ``paths`` (the caller's ``argument``), within the workspace and the size budget."""
        if required and not paths:
            raise BadInput(f"{argument}: at least one file path is required")
        assert self.workspace is not None
        redacted: list[str] = []
        files = read_context_files(
            self.workspace, list(paths), self.settings.max_context_bytes, argument, redacted=redacted
        )
        if redacted:
            self.redacted += redacted
            self.warnings.append(f"{argument}: not sent to Kimi, secret files: {', '.join(redacted)}")
        if required and not files:
            raise BadInput(f"{argument}: every file given looks like a secret and none is sent to Kimi")
        self.files_sent += [f.path for f in files]
        return files

    def submit(
        self,
        tool: str,
        arguments: dict[str, Any],
        prompt: str,
        *,
        read_only: bool,
        session_id: str | None = None,
        model: str | None = None,
        isolation: Isolation = NOT_ISOLATED,
        tokens: TokenMeter | None = None,
        approvals: Literal["policy", "ask"] | None = None,
        group: str | None = None,
    ) -> Job:
        """Start the job: ``tool``'s work as a :class:`JobSpec` (Kimi's turn with ``prompt``; ``session_id``:
        a follow-up in that conversation; ``model``: the call's model; ``isolation``: on an isolated copy of
        the tree; ``tokens``: the meter its attempts share; ``group``: the caller's group of jobs), handed to
        the server's executor."""
        assert self.workspace is not None
        meter = tokens or self.meter()
        spec = JobSpec(
            tool=tool, prompt=prompt, workspace=str(self.workspace), read_only=read_only, arguments=arguments,
            session_id=session_id, model=model, isolation=isolation.mode, verify_command=isolation.verify_command,
            copy=isolation.copy, max_tokens=meter.max_tokens, approvals=approvals or self.settings.approvals,
            sent=dict(self.sent), fix_rounds=isolation.fix_rounds,
        )  # fmt: skip
        scope = Scope(
            deadline=math.inf, redactor=self.redactor, tokens=meter,
            questions=self.settings.questions, question_timeout=self.settings.question_timeout,
            approvals=spec.approvals,
        )  # fmt: skip
        for warning in self.warnings:
            scope.note(warning)
        shown = {**arguments, "model": model} if model else arguments
        shown = {**shown, "approvals": approvals} if approvals else shown
        if isolation.isolated:
            shown = {**shown, "isolation": "worktree", "verify_command": isolation.verify_command}
        elif isolation.verify_command:
            shown = {**shown, "verify_command": isolation.verify_command}
        if isolation.fix_rounds:
            shown = {**shown, "fix_rounds": isolation.fix_rounds}
        summary = next((line.strip() for line in prompt.splitlines() if line.strip()), "")
        return self.backend.jobs.submit(
            spec, cls=self.cls, scope=scope, arguments=_trimmed(shown), summary=summary, group=group
        )

    def meter(self, max_tokens: int | None = None) -> TokenMeter:
        """The token meter of this call's jobs (``max_tokens``: the call's limit, else the setting), with
        the daily budget's use so far; a call past the daily budget is refused before Kimi starts."""
        settings = self.settings
        limit = max_tokens if max_tokens is not None else settings.max_tokens
        used = 0
        if settings.daily_tokens is not None:
            used = self.backend.jobs.store.tokens_since(time.time() - DAY_S)
            if used >= settings.daily_tokens:
                raise BudgetError(
                    f"the daily token budget is used up: {used} tokens in the last 24 hours, "
                    f"KIMI_MCP_DAILY_TOKENS={settings.daily_tokens}",
                    details={"daily_used": used, "daily": settings.daily_tokens},
                    suggestion="Wait until older jobs leave the 24-hour window (kimi_jobs lists them), or raise "
                    "KIMI_MCP_DAILY_TOKENS.",
                    retryable=True,
                )
        if settings.daily_tokens is not None and used >= DAILY_WARNING * settings.daily_tokens:
            self.warnings.append(daily_warning(used, settings.daily_tokens))
        return TokenMeter(limit, settings.daily_tokens, used)

    async def wait(self, job: Job, wait_s: float | None, *, own: bool = True, ask: bool = True) -> Reply:
        """Wait for the job (``wait_s`` seconds, ``None``: the setting, unset: until it is done) and reply
        with its result or status; a question Kimi asks meanwhile is asked of the client (``_questions``),
        and when nobody can answer it (or ``ask`` is false: the client just said so) the reply is the
        waiting job. A cancelled call cancels the job it started (``own``; its turn is interrupted)."""
        limit = self.settings.wait_s if wait_s is None else wait_s
        end = None if limit is None else time.monotonic() + limit
        try:
            while True:
                left = None if end is None else max(0.0, end - time.monotonic())
                await wait_for_job(self.ctx, job, left, self.settings)
                if job.done.is_set() or not job.asking.is_set() or not ask:
                    break
                outcome = await questions.ask_client(self.ctx, job)
                if outcome != "answered":
                    if isinstance(outcome, mcp_types.InputRequiredResult):
                        return outcome
                    break
        except BaseException:
            if own:
                await cancel_and_wait(job)
            raise
        return self.done(await snapshot(job))

    async def reply(self, jobs: list[Job], wait_s: float | None) -> ToolResult:
        """Answer for the submitted ``jobs``: when the call runs as an MCP task, at once (the tasks extension
        replies with the task); else after waiting for them (:meth:`wait`, :meth:`wait_all`)."""
        if (submitted := await self.ctx.get_state(SUBMITTED)) is not None:
            submitted.append(Submitted(self, jobs))
            return ToolResult(content=[])  # never sent: the tasks extension answers with the task
        if len(jobs) == 1:
            return await self.wait(jobs[0], wait_s)
        return await self.wait_all(jobs, wait_s)

    async def wait_all(self, jobs: list[Job], wait_s: float | None) -> ToolResult:
        """Parallel attempts: wait for all of them (as :meth:`wait`), then reply with the best one's result
        listing every attempt, best first (while some still run: the first running one's status)."""
        limit = self.settings.wait_s if wait_s is None else wait_s
        try:
            async with anyio.create_task_group() as group:
                for job in jobs:
                    group.start_soon(wait_for_job, self.ctx, job, limit, self.settings)
        except BaseException:
            for job in jobs:
                await cancel_and_wait(job)
            raise
        return self.done(combined([await snapshot(job) for job in jobs]))

    def finished_reply(self, jobs: list[Job]) -> ToolResult:
        """The reply for ``jobs`` once all of them are done (a task's result; in a worker thread)."""
        results = [job.snapshot() for job in jobs]
        return self.done(results[0] if len(results) == 1 else combined(results))

    def fail(self, exc: KimiMCPError) -> ToolResult:
        self.redactor.add(configured_secrets(self.backend.env))
        result = error_result(exc, str(self.workspace or ""), self.cls)
        return to_tool_result(result, self.settings, self.redactor)

    def done(self, result: TaskResult) -> ToolResult:
        reply = to_tool_result(result, self.settings, self.redactor)
        log.debug("result ready")
        return reply


Prompt = Callable[[Call, Path], str]


@dataclass(frozen=True, slots=True)
class RunOptions:
    """What a Kimi tool call takes besides its own arguments (the tools' shared parameters,
    ``tools._params.shared``): ``work_dir`` (None: the client's root or the setting), ``wait_s`` (None: the
    setting), ``model`` (None: the default), ``max_tokens`` (the call's token limit, all its attempts
    together; None: the setting); a write call's ``approvals`` ("ask" forwards Kimi's approvals to the
    caller), ``isolation``, ``attempts`` (> 1 runs that many jobs at once, each on its own copy) and
    ``verify_command``; ``group`` (the caller's name for a set of jobs: kimi_wait, kimi_jobs and cancel
    take it); ``dry_run`` (start nothing: the result says what the call would do); ``fix_rounds``
    (kimi_code_task, kimi_refactor, kimi_debug: more turns while the check fails)."""

    work_dir: str | None = None
    wait_s: float | None = None
    model: str | None = None
    max_tokens: int | None = None
    group: str | None = None
    approvals: Literal["policy", "ask"] | None = None
    isolation: Literal["none", "worktree"] | None = None
    attempts: int = 1
    verify_command: str | None = None
    dry_run: bool = False
    fix_rounds: int = 0


async def run_tool(
    ctx: Context,
    backend: Backend,
    cls: type[TaskResult],
    prompt: Prompt,
    options: RunOptions,
    *,
    tool: str,
    arguments: dict[str, Any],
    read_only: bool,
    check: Callable[[], None] | None = None,
) -> Reply:
    """The pipeline: ``check()`` validates the arguments before anything else; ``prompt(call, workspace)``
    reads the context and builds Kimi's prompt (a ``KimiMCPError`` there is the caller's error; the files
    whose "after" the tool diffs go in ``call.sent``); ``tool`` names the finishing step that turns the
    run's TaskResult into the tool's own result (:mod:`kimi_mcp.finish`), and with ``arguments`` is what
    the job's spec and the store record; ``options``: the call's shared options (a write call's isolation
    is checked with the arguments; a read-only one runs in place)."""
    call = Call(ctx, backend, cls)
    try:
        backend.check()
        if (resumed := questions.resumed_job(ctx, backend.jobs)) is not None:  # a question's answer
            job, answered = resumed
            call.workspace = Path(job.workspace)
            return await call.wait(job, options.wait_s, ask=answered)
        if check is not None:
            check()
        how = NOT_ISOLATED if read_only else isolation_of(backend.settings, options)  # read-only: in place
        if isinstance(ws := await call.workspace_for(options.work_dir), mcp_types.InputRequiredResult):
            return ws
        if how.isolated:
            await anyio.to_thread.run_sync(check_repository, ws, backend.state_dir)
        text = await anyio.to_thread.run_sync(prompt, call, ws)  # it reads files, kimi_review runs git
        meter = call.meter(options.max_tokens)  # one for every attempt
        if options.dry_run:  # nothing starts: no job, no Kimi, no copy
            return call.done(dry_run.preview(call, text, model=options.model, isolation=how, meter=meter))
        jobs = [
            call.submit(
                tool,
                arguments,
                text,
                read_only=read_only,
                model=options.model,
                isolation=how,
                tokens=meter,
                approvals=options.approvals,
                group=options.group,
            )  # fmt: skip
            for _ in range(how.attempts)
        ]
    except KimiMCPError as exc:
        return call.fail(exc)
    return await call.reply(jobs, options.wait_s)


def isolation_of(settings: Settings, options: RunOptions) -> Isolation:
    """A write call's isolation, attempts, verify command and fix rounds, checked (``isolation_for``)."""
    return isolation_for(
        settings, options.isolation, options.attempts, options.verify_command, options.fix_rounds
    )


def stored_reply(backend: Backend, record: JobRecord) -> ToolResult:
    """A job as its tool would reply, from the store: the whole result once finished, else its progress."""
    return to_tool_result(record_result(record, result_class(record.tool)), backend.settings)


def combined(results: list[TaskResult]) -> TaskResult:
    """Parallel attempts as one result: the best one's, listing every attempt best first (while some still
    run: the first running one's status)."""
    finished = ranked([r for r in results if r.status not in GOING])
    going = [r for r in results if r.status in GOING]
    order = [*finished, *going]
    lead = (going[0] if going else order[0]).model_copy(deep=True)
    lead.attempts = [summary(r) for r in order]
    return lead


async def snapshot(job: Job) -> TaskResult:
    """The job's result or status (listing the files changed so far walks the tracker: a worker thread)."""
    return await anyio.to_thread.run_sync(job.snapshot, abandon_on_cancel=True)


async def cancel_and_wait(job: Job) -> None:
    """Interrupt the job's turn and wait until Kimi is cleaned up (even while this call is cancelled)."""
    if not job.done.is_set():
        job.cancel.set()
        with anyio.CancelScope(shield=True):
            await anyio.to_thread.run_sync(job.done.wait)


def _trimmed(arguments: dict[str, Any], limit: int = 2_000) -> dict[str, Any]:
    """The arguments as the job store keeps them: long texts cut to ``limit`` characters."""
    return {k: v[:limit] + "…" if isinstance(v, str) and len(v) > limit else v for k, v in arguments.items()}


def not_blank(**arguments: str) -> Callable[[], None]:
    """A ``check`` that the named arguments are not blank."""

    def check() -> None:
        for name, value in arguments.items():
            if not value.strip():
                raise BadInput(f"{name} is empty")

    return check
