"""Every tool call runs as a *job*: its work described as data (a :class:`~kimi_mcp.jobs.JobSpec`), handed
by a thread of this server to the manager's executor (``kimi_mcp.executors``: today this process's runner),
recorded in the job store, spec included, from the moment it is accepted until its result is kept there.

The call that started a job waits for it (``wait_s``, else until it is done); a call that stops waiting
returns the job's status and ``kimi_job`` picks it up later, from this server's memory while it runs and
from the store once it is done (also after a restart, or from another server sharing the store). While a
job runs, a ticker writes its progress to the store every ``TICK`` seconds and reads whether another server
asked to cancel it, and writes Kimi's screen whenever it changed (looked at every ``SCREEN_TICK`` seconds);
only the owner runs or cancels a job.
"""

from __future__ import annotations

import sqlite3
import threading
import time
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .. import telemetry
from .._logging import CLIENT, get_logger
from ..errors import BadInput, KimiMCPError, SessionError
from ..finish import result_class
from ..job_spec import JobSpec
from ..models import ErrorInfo, JobProgress, JobStatus, MessageInfo, QuestionInfo, TaskResult
from ..scope import DAILY_USED, Scope, TokenMeter
from ..task import RunWatch
from ._store import (
    FINISHED,
    INTERRUPTED_MESSAGE,
    INTERRUPTED_SUGGESTION,
    JobRecord,
    JobRef,
    JobStore,
    owner_alive,
    owner_id,
)

if TYPE_CHECKING:
    from ..executors import Executor

log = get_logger("jobs")

RECENT = 4  # progress messages a job keeps for its waiters (each relayed, not only the latest)
TICK = 1.0  # seconds between progress writes to the store (and looks for remote cancellations)
#: seconds between looks at a running job's screen: written to the store (``kimi-mcp watch``, the dashboard)
#: as soon as it changed, not only with the progress; an unchanged screen is not written again
SCREEN_TICK = 0.25
DAY_S = 86_400.0  # the daily token budget's window


class Job:
    """A job that runs in this server, under its :class:`~kimi_mcp.scope.Scope` (its cancellation, progress,
    limits and inbox)."""

    def __init__(self, record: JobRecord, cls: type[TaskResult], scope: Scope) -> None:
        self.job_id, self.cls, self.workspace = record.job_id, cls, record.workspace
        self.group = record.group
        self.started = time.monotonic()
        self.scope = scope
        self.cancel = scope.cancel  # set: the turn is interrupted (kimi_job cancel, MCP cancellation)
        self.done = threading.Event()
        self.asking = threading.Event()  # set while a question waits for its answer (waiters return)
        self.watch = RunWatch()
        self.activity = "waiting for a free Kimi slot"
        self.seq = 0  # bumped by every progress message and question change (waiters relay what is new)
        self._recent: deque[tuple[int, str]] = deque(maxlen=RECENT)  # (seq, message), the newest last
        self._recent_lock = threading.Lock()  # the runner's thread appends while a waiter reads
        self.result: TaskResult | None = None
        self.otel: telemetry.JobTrace = telemetry.NO_TRACE  # its span (OpenTelemetry, when configured)
        self.published_screen = ""  # the screen last written to the store
        #: a question asked or answered, or Kimi's session id found: the manager records it at once
        self.on_change: Callable[[], None] = lambda: None
        scope.sink = self.on_progress
        scope.inbox.on_change = self._question_changed
        scope.job_id = self.job_id
        scope.on_session = self._session_found

    def _session_found(self, session_id: str) -> None:
        self.watch.session_id = session_id
        self.on_change()

    def on_progress(self, message: str) -> None:
        self.activity = message
        with self._recent_lock:
            self.seq += 1
            self._recent.append((self.seq, message))

    def progress_since(self, seq: int) -> list[str]:
        """The progress messages after ``seq`` (the last ``RECENT`` of them), oldest first: a waiter that
        looks every quarter second also relays a step that lasted less, e.g. a fix round's start."""
        with self._recent_lock:
            return [message for n, message in self._recent if n > seq]

    def _question_changed(self) -> None:
        self.seq += 1
        if self.scope.inbox.asked is not None:
            self.asking.set()
        else:
            self.asking.clear()
        self.on_change()

    @property
    def question(self) -> QuestionInfo | None:
        asked = self.scope.inbox.asked
        return None if asked is None or self.result is not None else QuestionInfo(**asked.to_dict())

    @property
    def status(self) -> JobStatus:
        if self.result is not None:
            return self.result.status
        if self.scope.inbox.asked is not None:
            return "waiting"
        if self.watch.queued:
            return "queued"
        return "starting" if self.watch.starting else "running"

    def progress(self, files: bool = True) -> JobProgress:
        """Where the job stands (``files``: also list the files changed so far, which walks the tracker)."""
        changed: list[str] = []
        if files:
            try:
                changed = self.watch.changed_so_far()
            except Exception as exc:  # a status must not fail because the tracker did
                log.debug("no change list so far: %s", exc)
        elapsed = round(time.monotonic() - self.started, 1)
        return JobProgress(elapsed_s=elapsed, activity=self.activity, files_changed=changed)

    def snapshot(self, files: bool = True) -> TaskResult:
        """The finished result, or a result saying the job is still going (``status`` queued, starting or
        running; ``success`` null: neither done nor failed yet)."""
        if self.result is not None:
            return self.result
        question = self.question
        if question is not None:
            note = (
                f"Kimi asks: answer with kimi_job(job_id={self.job_id!r}, action='answer', answer=...) (an "
                "option's label, a list of labels if multi_select, or your own words)."
            )
        else:
            note = f"Still {self.status}: call kimi_job(job_id={self.job_id!r}) to wait for the result."
        return self.cls(
            success=None,
            job_id=self.job_id,
            status=self.status,
            progress=self.progress(files),
            question=question,
            workspace=self.workspace,
            session_id=self.watch.session_id,
            group=self.group,
            messages=[MessageInfo(**m.to_dict()) for m in self.scope.delivered],
            notes=[note],
        )


def status_of(result: TaskResult) -> JobStatus:
    if result.success:
        return "done"
    if result.error is not None and result.error.details.get("interrupted"):  # its runner went away
        return "interrupted"
    return "cancelled" if result.error is not None and result.error.type == "cancelled" else "failed"


def summary_of(result: TaskResult) -> str:
    """One line: the error, else what changed and the start of Kimi's answer."""
    if result.error is not None:
        return f"{result.error.type}: {result.error.message}"[:200]
    counts = f"{len(result.files_created)} created, {len(result.files_modified)} modified, " + (
        f"{len(result.files_deleted)} deleted"
    )
    first = next((line.strip() for line in result.output.splitlines() if line.strip()), "")
    return f"{counts}: {first}"[:200] if first else counts


class JobManager:
    """The jobs of one server, and the store they are kept in (opened on first use)."""

    def __init__(
        self,
        path: Path,
        ttl_days: float = 7.0,
        on_pruned: Callable[[list[JobRef], list[JobRef]], object] | None = None,
        *,
        executor: Executor | None = None,
        mask: Callable[[Any], Any] = lambda value: value,
    ) -> None:
        self.path = path
        #: where jobs run (None: this manager only reads the store, e.g. ``kimi-mcp jobs``)
        self.executor = executor
        #: masks the configured secrets in what the store keeps of a call (its arguments, its spec)
        self.mask = mask
        self.ttl_days = ttl_days
        #: called with (the jobs pruned when the store opened, every job left): what only they held goes too
        self.on_pruned = on_pruned
        self.owner = owner_id()
        self._store: JobStore | None = None
        self._lock = threading.Lock()
        self._jobs: dict[str, Job] = {}
        self._stopping = False
        self._ticker: threading.Thread | None = None
        #: one of this server's jobs ended, or started or stopped waiting on a question: what kimi_wait waits on
        self.events = JobEvents()

    @property
    def store(self) -> JobStore:
        opened = False
        with self._lock:
            if self._store is None:
                if self._stopping:
                    raise SessionError("the server is shutting down", retryable=True)
                try:
                    self._store = JobStore(self.path)
                except (sqlite3.Error, OSError) as exc:
                    raise SessionError(
                        f"cannot open the job store {self.path}: {exc}",
                        suggestion="Point KIMI_MCP_STATE_DIR at a writable directory of your own.",
                    ) from exc
                opened = True
            store = self._store
        if opened:  # outside the lock: adopting a job starts its thread, pruning deletes directories
            self._opened(store)
        return store

    def _opened(self, store: JobStore) -> None:
        """Once, when the store opens: the jobs of servers that died are adopted or interrupted, finished
        jobs older than the TTL pruned (with what only they held)."""
        interrupted = self._settle_orphans(store)
        pruned = store.prune_finished(self.ttl_days)
        log.info("job store %s: %d interrupted, %d pruned", self.path, len(interrupted), len(pruned[0]))
        if interrupted:
            log.warning(
                "%d job(s) were interrupted because their server stopped: %s (kimi_jobs lists them)",
                len(interrupted), ", ".join(interrupted[:5]), extra=CLIENT,
            )  # fmt: skip
        if pruned[0] and self.on_pruned is not None:
            try:
                self.on_pruned(*pruned)
            except Exception:
                log.exception("could not remove what the pruned jobs held")

    # -- running -----------------------------------------------------------------------------------------
    def submit(
        self,
        spec: JobSpec,
        *,
        cls: type[TaskResult],
        scope: Scope,
        arguments: dict,
        summary: str,
        group: str | None = None,
    ) -> Job:
        """Record a job and hand ``spec`` to the executor in the job's own thread; ``arguments``: what the
        store shows of the call (secrets are masked here, in them and in the stored spec); ``group``: the
        caller's group it belongs to. A conversation
        (``spec.session_id``) has one turn at a time: two Kimi processes on one conversation would split it."""
        session_id = spec.session_id
        if session_id is not None and any(j.watch.session_id == session_id for j in self.running_here()):
            raise BadInput(
                f"the conversation {session_id} has a turn running already",
                suggestion="Wait for it with kimi_job (kimi_jobs lists it), then send the follow-up.",
                retryable=True,
            )
        if self.executor is None:
            raise SessionError("this job manager has no executor (it only reads the store)")
        record = self.store.create(
            tool=spec.tool, workspace=spec.workspace, read_only=spec.read_only, arguments=self.mask(arguments),
            owner=self.owner, session_id=session_id, summary=summary[:200],
            spec=self.mask({**spec.to_dict(), "executor": self.executor.name}), group=group,
        )  # fmt: skip
        job = Job(record, cls, scope)
        job.otel = telemetry.job(job.job_id, spec, scope.redactor)
        job.watch.session_id = session_id
        job.on_change = lambda: self._record_now(job)
        with self._lock:
            if self._stopping:
                raise SessionError("the server is shutting down", retryable=True)
            self._jobs[job.job_id] = job
            self._start_ticker()
        thread = threading.Thread(
            target=self._run, args=(job, spec, self.executor), name=f"kimi-job-{job.job_id}"
        )
        thread.daemon = True
        thread.start()
        return job

    def _run(self, job: Job, spec: JobSpec, executor: Executor) -> None:
        try:
            result = job.otel.run(executor.run, spec, job_id=job.job_id, scope=job.scope, watch=job.watch)
        except KimiMCPError as exc:
            result = job.cls(success=False, workspace=job.workspace, error=ErrorInfo.from_exception(exc))
        except Exception as exc:  # a bug must still finish the job
            log.exception("job %s failed", job.job_id)
            error = SessionError(f"internal error: {type(exc).__name__}: {exc}")
            result = job.cls(success=False, workspace=job.workspace, error=ErrorInfo.from_exception(error))
        self._finish(job, result)

    def _finish(self, job: Job, result: TaskResult) -> None:
        result.job_id = job.job_id
        result.status = "interrupted" if self._stopping and not result.success else status_of(result)
        result.progress = None
        result.session_id = result.session_id or job.watch.session_id
        result.group = job.group
        warn_daily(result, job.scope.tokens)
        with self._lock:
            if job.result is not None:  # recorded as interrupted at shutdown already
                return
            job.result = result
        try:
            payload = result.model_dump(mode="json")
            self.store.finish(
                job.job_id, status=result.status, result=payload, summary=summary_of(result),
                session_id=result.session_id,
            )  # fmt: skip
        except Exception:
            log.exception("could not record job %s", job.job_id)
        finally:
            job.otel.finish(result, self.mask)
            job.done.set()
            with self._lock:
                self._jobs.pop(job.job_id, None)
            self.events.notify()

    # -- the jobs of servers that died -------------------------------------------------------------------
    def settle_orphans(self) -> list[str]:
        """Jobs whose server died since the store was opened: adopted if a worker still runs them (this
        server follows them to their results), else recorded interrupted; returns the interrupted ids."""
        return self._settle_orphans(self.store)

    def _settle_orphans(self, store: JobStore) -> list[str]:
        executor = self.executor
        if executor is not None and executor.name == "remote" and not self._stopping:
            for record in store.orphans():
                spec = store.spec(record.job_id)
                remote = spec is not None and spec.get("executor") == "remote"
                if (
                    remote
                    and executor.adoptable(record.job_id)
                    and store.adopt(record.job_id, record.owner, self.owner)
                ):
                    self._resume(record, JobSpec.from_dict(spec))
        return store.interrupt_orphans()

    def _resume(self, record: JobRecord, spec: JobSpec) -> None:
        """Follow an adopted job (its server died; a worker runs it) to its result, in a thread of its own."""
        job = Job(record, result_class(record.tool), Scope(deadline=float("inf")))
        job.watch.session_id = record.session_id
        job.on_change = lambda: self._record_now(job)
        with self._lock:
            self._jobs[job.job_id] = job
            self._start_ticker()
        log.info("job %s: adopted from a server that stopped (a worker runs it)", job.job_id, extra=CLIENT)
        assert self.executor is not None
        executor = self.executor

        def follow() -> None:
            try:
                result = executor.resume(spec, job_id=job.job_id, scope=job.scope, watch=job.watch)
            except KimiMCPError as exc:
                result = job.cls(success=False, workspace=job.workspace, error=ErrorInfo.from_exception(exc))
            except Exception as exc:
                log.exception("job %s: following it failed", job.job_id)
                error = SessionError(f"internal error: {type(exc).__name__}: {exc}")
                result = job.cls(
                    success=False, workspace=job.workspace, error=ErrorInfo.from_exception(error)
                )
            self._finish(job, result)

        threading.Thread(target=follow, name=f"kimi-job-{job.job_id}", daemon=True).start()

    # -- looking up ------------------------------------------------------------------------------------
    def orphaned(self, record: JobRecord) -> bool:
        """Whether ``record`` is unfinished although the server that runs it is gone (another server died
        since this one opened the store): ``store.interrupt_orphans()`` records it as interrupted."""
        return record.status not in FINISHED and record.owner != self.owner and not owner_alive(record.owner)

    def local(self, job_id: str) -> Job | None:
        """The job if this server runs it now."""
        with self._lock:
            return self._jobs.get(job_id)

    def running_here(self) -> list[Job]:
        with self._lock:
            return list(self._jobs.values())

    def cancel(self, job_id: str) -> None:
        """Interrupt the job's turn: here if this server runs it, else ask its owner through the store."""
        job = self.local(job_id)
        if job is not None:
            job.cancel.set()
        else:
            self.store.request_cancel(job_id)

    # -- the ticker: progress for other servers, their cancellations for us ------------------------------
    def _start_ticker(self) -> None:
        if self._ticker is None or not self._ticker.is_alive():
            self._ticker = threading.Thread(target=self._tick, name="kimi-jobs-ticker", daemon=True)
            self._ticker.start()

    def _tick(self) -> None:
        """Every ``SCREEN_TICK``: each running job's screen, written if it changed; every ``TICK``: its
        progress too, and what other servers sent it."""
        due = time.monotonic() + TICK
        while True:
            time.sleep(min(SCREEN_TICK, TICK))
            with self._lock:
                jobs = [job for job in self._jobs.values() if job.result is None]
                if not jobs or self._stopping:
                    self._ticker = None
                    return
            if time.monotonic() < due:
                for job in jobs:
                    try:
                        _publish_screen(job, self.store)
                    except Exception as exc:
                        log.debug("job %s: screen not recorded: %s", job.job_id, exc)
                continue
            due = time.monotonic() + TICK
            daily = any(job.scope.tokens.daily is not None for job in jobs)
            try:
                used = self.store.tokens_since(time.time() - DAY_S) if daily else 0
            except Exception as exc:
                log.debug("daily tokens not read: %s", exc)
                used = None
            for job in jobs:
                try:
                    _tick_job(job, self.store, used)
                except Exception as exc:
                    log.debug("job %s: progress not recorded: %s", job.job_id, exc)

    def _record_now(self, job: Job) -> None:
        """What cannot wait for the ticker is in the store at once: a question asked or answered (kimi_jobs and
        other servers see it) and Kimi's session id (a job whose server dies mid-turn keeps its conversation)."""
        question = job.question
        try:
            self.store.update(
                job.job_id, status=job.status, session_id=job.watch.session_id,
                question=None if question is None else question.model_dump(mode="json"),
            )  # fmt: skip
        except Exception as exc:
            log.debug("job %s: question or session not recorded: %s", job.job_id, exc)
        self.events.notify()

    # -- what callers send a running job ---------------------------------------------------------------
    def send(self, job_id: str, kind: str, payload: dict) -> bool:
        """Hand an answer (``kind`` "answer") or a message ("message") to the job: here if this server
        runs it, else through the store (its owner takes it at its next tick, and refuses an answer whose
        question is gone then). False: this server's job took no answer (its question is gone)."""
        job = self.local(job_id)
        if job is not None:
            return deliver(job, kind, payload)
        self.store.send(job_id, kind, payload)
        return True

    # -- shutdown ----------------------------------------------------------------------------------------
    def shutdown(self) -> None:
        """Record every job still running here as ``interrupted`` (the server goes away; the Kimi processes
        are stopped by the runner). Idempotent."""
        with self._lock:
            self._stopping = True
            jobs = [job for job in self._jobs.values() if job.result is None]
        for job in jobs:
            job.cancel.set()
            error = SessionError(INTERRUPTED_MESSAGE, suggestion=INTERRUPTED_SUGGESTION, retryable=True)
            result = job.cls(
                success=False, workspace=job.workspace, session_id=job.watch.session_id,
                error=ErrorInfo.from_exception(error),
            )  # fmt: skip
            self._finish(job, result)
        with self._lock:
            store, self._store = self._store, None
        if store is not None:
            store.close()
        if self.executor is not None:
            self.executor.close()


class JobEvents:
    """The events of a server's jobs that a join waits on (an end, a question asked or answered), counted: a
    waiter notes the count (:attr:`generation`) before it looks at its jobs, then waits for a later one."""

    def __init__(self) -> None:
        self._changed = threading.Condition()
        self._generation = 0

    @property
    def generation(self) -> int:
        with self._changed:
            return self._generation

    def wait_change(self, seen: int, timeout: float) -> int:
        """Block until an event after ``seen`` (a :attr:`generation`) or ``timeout`` seconds; returns the
        generation then."""
        with self._changed:
            self._changed.wait_for(lambda: self._generation != seen, timeout=max(0.0, timeout))
            return self._generation

    def notify(self) -> None:
        with self._changed:
            self._generation += 1
            self._changed.notify_all()


def _tick_job(job: Job, store: JobStore, daily_used: int | None) -> None:
    """Record one job's progress, tokens, question and screen; take what other servers sent it."""
    scope = job.scope
    progress = job.progress(files=False).model_dump(mode="json")
    question = job.question
    screen = scope.screen()
    store.update(
        job.job_id, status=job.status, progress=progress, session_id=job.watch.session_id,
        tokens=scope.tokens_spent, question=None if question is None else question.model_dump(mode="json"),
        screen=screen if screen != job.published_screen else None,
    )  # fmt: skip
    job.published_screen = screen
    if daily_used is not None and scope.tokens.daily is not None:  # other jobs' tokens, as recorded
        scope.tokens.daily_used = max(0, daily_used - scope.tokens.spent)
    if store.cancel_requested(job.job_id):
        job.cancel.set()
    for kind, payload in store.take_sent(job.job_id):
        deliver(job, kind, payload)


def _publish_screen(job: Job, store: JobStore) -> None:
    """Write the job's screen to the store if it changed since it was last written."""
    screen = job.scope.screen()
    if screen != job.published_screen:
        store.update(job.job_id, screen=screen)
        job.published_screen = screen


def warn_daily(result: TaskResult, meter: TokenMeter) -> None:
    """The job whose tokens take the day past ``DAILY_WARNING`` of its budget says so on its own result
    (a job that started past it already carries the warning from its call)."""
    usage = result.usage
    own = usage.input_tokens + usage.output_tokens if usage is not None else 0
    warning = meter.daily_warning(own)
    if warning is not None and not any(DAILY_USED in note for note in result.notes):
        result.notes.append(warning)


def deliver(job: Job, kind: str, payload: dict) -> bool:
    """An answer or a message sent to ``job`` (checked by the sender), into its inbox; False: an answer
    whose question is gone (never typed)."""
    return job.scope.deliver(kind, payload)


def record_result(record: JobRecord, cls: type[TaskResult]) -> TaskResult:
    """A stored job as a result: the whole result once it is finished, else its last recorded progress."""
    if record.status in FINISHED and record.result is not None:
        result = cls.model_validate(record.result)
        result.group = result.group or record.group
        return result
    progress = JobProgress.model_validate(record.progress) if record.progress else None
    if progress is not None:
        progress.elapsed_s = round(time.time() - record.started_at, 1)
    return cls(
        success=None,
        job_id=record.job_id,
        status=record.status,  # type: ignore[arg-type]
        progress=progress,
        workspace=record.workspace,
        session_id=record.session_id,
        group=record.group,
        notes=[f"Still {record.status} in another kimi-mcp server; kimi_job waits for it."],
    )
