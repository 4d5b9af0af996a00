"""Run one Kimi turn in a workspace and report what it said and every file it changed.

The "before" snapshot is taken while Kimi starts up (off the critical path), or right away when a ready
standby Kimi serves the call (see ``_warm``). After the turn ends the "after" diff runs while Kimi sits
idle; then a cleanly finished Kimi exits in the background and the result is returned without waiting
for it. On error, timeout or cancellation the session is closed before returning, and the files already
changed are still reported. ``shutdown()`` stops every Kimi the runner still owns.
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from . import tracker
from ._logging import get_logger
from ._policy import ApprovalPolicy
from ._warm import SessionPool, StandbyKey
from .config import Settings, state_dir
from .drivers import KimiInstall, find_binary, make_driver, probe
from .drivers.base import Driver, LoginOptions
from .errors import KimiMCPError, SessionError, TaskCancelled
from .message import check_size, prepare
from .models import ErrorInfo, Evidence, TaskResult, TruncatedItem, Usage
from .secrets import Redactor, WorkspaceSecrets, configured_secrets
from .session import KimiSession, TurnTrace
from .workspace import inside_prefixes, kimi_state_dirs, resolve_workspace

log = get_logger("runner")


@dataclass(frozen=True, slots=True)
class TaskRequest:
    prompt: str
    workspace: Path
    read_only: bool = False
    #: masks secrets in everything the call returns (the caller keeps it for what it adds to the result)
    redactor: Redactor | None = None


class _Slots:
    """Bounds concurrent Kimi processes and serializes write tasks per workspace."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._workspaces: dict[str, threading.Lock] = {}
        self._semaphore: threading.BoundedSemaphore | None = None
        self._size = 0

    def semaphore(self, size: int) -> threading.BoundedSemaphore:
        with self._lock:
            if self._semaphore is None or self._size != size:
                self._semaphore, self._size = threading.BoundedSemaphore(size), size
            return self._semaphore

    def workspace_lock(self, workspace: Path) -> threading.Lock:
        with self._lock:
            return self._workspaces.setdefault(str(workspace), threading.Lock())


_slots = _Slots()
_pool = SessionPool()


def shutdown() -> None:
    """Stop every standby and finish every background exit (server shutdown)."""
    _pool.shutdown()


def _acquire(
    lock: threading.Lock | threading.BoundedSemaphore, cancel: threading.Event, deadline: float
) -> None:
    while not lock.acquire(timeout=0.1):
        if cancel.is_set():
            raise TaskCancelled("cancelled while waiting for another task in the same workspace")
        if time.monotonic() > deadline:
            raise SessionError(
                "timed out waiting for other Kimi tasks to finish",
                suggestion="Raise KIMI_MCP_MAX_CONCURRENT or wait for running tasks.",
                retryable=True,
            )


def tracker_options(settings: Settings) -> tracker.TrackerOptions:
    return tracker.TrackerOptions(
        extra_excluded_dirs=frozenset(settings.exclude_dirs),
        max_file_chars=settings.max_file_chars,
        max_total_chars=settings.max_total_chars,
    )


def login_options(settings: Settings, env: dict[str, str]) -> LoginOptions | None:
    key = env.get("MOONSHOT_API_KEY", "").strip()
    if not key:
        return None
    return LoginOptions(
        api_key=key, platform=settings.platform, model=settings.model, thinking=settings.thinking
    )


def new_session(
    install: KimiInstall,
    workspace: Path,
    read_only: bool,
    settings: Settings,
    env: dict[str, str],
    *,
    deadline: float,
    cancel: threading.Event,
    on_progress: Callable[[str], None] | None = None,
    redact: Redactor | None = None,
) -> KimiSession:
    """An unstarted session for one workspace and mode."""
    return KimiSession(
        make_driver(install),
        workspace,
        env=env,
        policy=ApprovalPolicy(workspace, read_only, settings.allow_shell),
        deadline=deadline,
        startup_timeout=settings.startup_timeout,
        cancel=cancel,
        on_progress=on_progress,
        redact=redact or Redactor(configured_secrets(env)),
        transcript_dir=settings.transcript_dir,
        login=login_options(settings, env),
    )


def standby_key(
    binary: str, install: KimiInstall, workspace: Path, read_only: bool, settings: Settings
) -> StandbyKey:
    lists = make_driver(install).lists_workspace_at_startup
    return StandbyKey(binary, install.version, str(workspace), read_only, settings.allow_shell, lists)


def prewarm(key: StandbyKey, install: KimiInstall, settings: Settings, env: dict[str, str]) -> None:
    """Start a standby Kimi for ``key`` in the background (see ``_warm``)."""

    def factory(cancel: threading.Event) -> KimiSession:
        deadline = time.monotonic() + settings.startup_timeout
        workspace = Path(key.workspace)
        return new_session(install, workspace, key.read_only, settings, env, deadline=deadline, cancel=cancel)

    _pool.prewarm(key, factory, settings.standby_idle)


def prewarm_default(settings: Settings, environ: dict[str, str] | None = None) -> None:
    """``standby = "startup"``: a write-mode standby for the default workspace, started at server start."""
    env = dict(os.environ if environ is None else environ)
    try:
        workspace = resolve_workspace(None, [], settings.workspace, allow_home=settings.allow_home_workspace)
        binary = find_binary(settings.kimi_bin, env)
        install = probe(binary, env, settings.dialect)
    except (KimiMCPError, OSError) as exc:
        log.info("no standby at startup: %s", exc)
        return
    prewarm(standby_key(binary, install, workspace, False, settings), install, settings, env)


def _message(request: TaskRequest, install: KimiInstall, env: dict[str, str], settings: Settings) -> str:
    """The prompt as the one inert message typed into this Kimi (see ``message``)."""
    rules = make_driver(install).message_rules(request.workspace, env, settings.max_message_tokens)
    text = prepare(request.prompt, rules)
    check_size(text, rules)
    return text


def private_dirs(settings: Settings, env: dict[str, str]) -> list[Path]:
    """Directories whose files are Kimi's or kimi-mcp's own, never a task's changes."""
    dirs = [*kimi_state_dirs(env), state_dir(settings, env)]
    return dirs + ([Path(settings.transcript_dir)] if settings.transcript_dir else [])


def run_task(
    request: TaskRequest,
    settings: Settings,
    *,
    on_progress: Callable[[str], None] | None = None,
    cancel: threading.Event | None = None,
    environ: dict[str, str] | None = None,
) -> TaskResult:
    """Blocking: run the task and always return a TaskResult (``success=False`` with ``error`` on failure)."""
    progress = on_progress or (lambda _m: None)
    cancel = cancel or threading.Event()
    env = dict(os.environ if environ is None else environ)
    started = time.monotonic()
    deadline = started + settings.timeout
    result = TaskResult(success=False, workspace=str(request.workspace))
    redactor = request.redactor or Redactor()
    redactor.add(configured_secrets(env))
    found = WorkspaceSecrets(redactor, request.workspace, settings.exclude_dirs)
    options = tracker_options(settings)
    held: list[threading.Lock | threading.BoundedSemaphore] = []
    session: KimiSession | None = None
    before: Future[tracker.Snapshot] | None = None
    trace: TurnTrace | None = None
    error: KimiMCPError | None = None
    pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="kimi-tracker")
    try:
        binary = find_binary(settings.kimi_bin, env)
        install = probe(binary, env, settings.dialect)
        result.dialect, result.kimi_version = install.dialect, install.version
        message = _message(request, install, env, settings)  # refused here if it cannot arrive whole
        semaphore = _slots.semaphore(settings.max_concurrent)
        _acquire(semaphore, cancel, deadline)
        held.append(semaphore)
        if not request.read_only:
            lock = _slots.workspace_lock(request.workspace)
            _acquire(lock, cancel, deadline)
            held.append(lock)
        key = standby_key(binary, install, request.workspace, request.read_only, settings)
        session = _pool.take(key, cancel, deadline) if settings.standby != "off" else None
        result.warm_start = session is not None
        if session is not None:
            session.rebind(deadline=deadline, cancel=cancel, on_progress=progress, redact=redactor)
        else:
            session = new_session(
                install, request.workspace, request.read_only, settings, env,
                deadline=deadline, cancel=cancel, on_progress=progress, redact=redactor,
            )  # fmt: skip
        _pool.adopt(session)  # from here on, server shutdown stops it too
        before = pool.submit(tracker.take_snapshot, request.workspace, options)
        if result.warm_start:
            progress(f"using a ready Kimi ({install.dialect} {install.version})")
        else:
            session.start()
        result.timings["startup"] = round(time.monotonic() - started, 3)
        if settings.standby != "off" and not key.lists_workspace:
            prewarm(key, install, settings, env)  # this call's changes cannot make it stale
        before.result()  # the snapshot must be complete before Kimi can touch anything
        found.wait()  # and the secrets to mask known before Kimi can show them
        turn_started = time.monotonic()
        trace = session.run_turn(message)
        result.timings["turn"] = round(time.monotonic() - turn_started, 3)
        error = trace.error
    except KimiMCPError as exc:
        error = exc
    except Exception as exc:  # a bug must still produce a clean result and a clean exit
        log.exception("unexpected failure")
        error = SessionError(f"internal error: {type(exc).__name__}: {exc}")
    finally:
        if before is not None and before.done() and before.exception() is None:
            # the change list first, while Kimi sits idle: its exit would compete for the CPU
            progress("collecting file changes")
            diff_started = time.monotonic()
            try:
                changes = tracker.diff(before.result(), options)
                result.timings["changes"] = round(time.monotonic() - diff_started, 4)
                log.debug("change list from a %s walk (%s)", changes.method, changes.reason or "watched")
                private = inside_prefixes(request.workspace, private_dirs(settings, env))
                _fill_changes(result, request.workspace, changes.without(private), options)
            except Exception as exc:  # report the turn even if the tracker fails
                log.exception("tracker failed")
                error = error or SessionError(f"could not list changed files: {exc}")
        found.finish()  # before Kimi's transcript is saved and anything is returned
        if session is not None:
            if trace is None:
                trace = session.trace
            result.session_id = session.session_id
            if error is None and trace.ended:  # a clean turn: Kimi exits while the result goes out
                session.rebind(deadline=time.monotonic() + 60.0, cancel=threading.Event())
                _pool.retire(session)
            else:
                exit_started = time.monotonic()
                session.close()
                result.timings["exit"] = round(time.monotonic() - exit_started, 3)
            _pool.release(session)
        pool.shutdown(wait=True)
        if before is not None and not before.cancelled() and before.exception() is None:
            before.result().close()  # releases its inotify watches, whether or not the diff ran
        for item in reversed(held):
            item.release()
    if trace is not None:
        result.output = trace.output
        result.evidence = build_evidence(
            trace, session.driver if session else None, request.workspace, redactor
        )
        if trace.input_tokens or trace.output_tokens:
            result.usage = Usage(input_tokens=trace.input_tokens, output_tokens=trace.output_tokens)
    result.duration_s = round(time.monotonic() - started, 3)
    if error is not None:
        result.error = ErrorInfo.from_exception(error)
        result.success = False
    else:
        result.success = True
        if settings.standby != "off":
            try:
                prewarm(key, install, settings, env)
            except Exception:  # the call succeeded: a standby that cannot start must not change that
                log.exception("could not start a standby Kimi")
    log.info(
        "task done: success=%s created=%d modified=%d deleted=%d in %.1fs",
        result.success,
        len(result.files_created),
        len(result.files_modified),
        len(result.files_deleted),
        result.duration_s,
    )
    return TaskResult.model_validate(redactor.mask_tree(result.model_dump()))  # secrets masked everywhere


def build_evidence(
    trace: TurnTrace, driver: Driver | None, workspace: Path, redact: Callable[[str], str]
) -> Evidence:
    files_read: list[str] = []
    for call in trace.calls.values():
        if driver is None or driver.tool_kind(call.name) != "read":
            continue
        try:
            args = json.loads(call.arguments or "{}")
        except ValueError:
            continue
        path = args.get("path") or args.get("file_path") if isinstance(args, dict) else None
        if not isinstance(path, str) or not path:
            continue
        absolute = Path(os.path.expanduser(path))
        absolute = absolute if absolute.is_absolute() else workspace / absolute
        try:
            shown = absolute.resolve().relative_to(workspace.resolve()).as_posix()
        except ValueError:
            shown = str(absolute)
        if shown not in files_read:
            files_read.append(shown)
    return Evidence(
        files_read=files_read,
        tools_run=trace.tool_traces(redact),
        incomplete_trace=any(call.result is None for call in trace.calls.values()),
    )


def _fill_changes(
    result: TaskResult, workspace: Path, changes: tracker.Changes, options: tracker.TrackerOptions
) -> None:
    result.files_created = list(changes.created)
    result.files_modified = list(changes.modified)
    result.files_deleted = list(changes.deleted)
    report = tracker.collect_contents(workspace, [*changes.created, *changes.modified], options)
    result.file_contents = dict(report.file_contents)
    result.binary_files = list(report.binary_files)
    result.secret_files = list(report.secret_files)
    result.truncated = [
        TruncatedItem(
            path=item.path, reason=item.reason, size_bytes=item.size_bytes, returned_chars=item.returned_chars
        )
        for item in report.truncated
    ]
