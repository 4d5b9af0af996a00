"""One tool call's Kimi turn, phase by phase: prepare, acquire, session, snapshot, turn (and the next turns:
messages sent meanwhile, fix rounds while ``verify_command`` fails, see ``_fix``), changes, report.

Every resource is registered for release on a ``contextlib.ExitStack`` the moment it is acquired, so the
cleanup order is the order of the code: the change list is taken while Kimi still sits idle, then the
"before" snapshot is closed, the tracker thread joined, the session retired (a clean turn: Kimi exits in
the background) or closed (anything else), and the slots released last.
"""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Callable, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import ExitStack
from typing import TYPE_CHECKING, Literal

from .. import telemetry, tracker
from .._logging import get_logger
from ..config import Settings, kimi_code_prefix
from ..drivers import KimiInstall, check_node, find_binary, probe
from ..errors import KimiMCPError, SessionError
from ..models import ErrorInfo, MessageInfo, TaskResult, Usage
from ..scope import Delivered, Message, Scope
from ..secrets import WorkspaceSecrets, configured_secrets
from ..session import KimiSession, TurnTrace, merged
from ..task import RunWatch, TaskRequest
from ..workspace import inside_prefixes
from . import _factory, _restart
from ._evidence import build_evidence, fill_changes, private_dirs
from ._fix import FixLoop
from ._pool import StandbyKey
from ._slots import Claim, Hold, acquire

if TYPE_CHECKING:
    from . import Runner

log = get_logger("runner")

DEADLINE_GRACE = 30.0  # seconds past the deadline after which a stuck call's slots are released anyway

SHARED_NOTE = (
    "No change list: a write call ran in this workspace at the same time, and its changes cannot be told "
    "apart from this read-only call's (which cannot write)."
)


class TaskRun:
    """One call: ``run()`` always returns a TaskResult (``success=False`` with ``error`` on failure)."""

    def __init__(
        self,
        runner: Runner,
        request: TaskRequest,
        settings: Settings,
        *,
        scope: Scope,
        environ: Mapping[str, str],
        watch: RunWatch | None = None,
    ) -> None:
        self.runner, self.request, self.settings = runner, request, settings
        self.watch = watch or RunWatch()
        self.watch.session_id = request.session_id
        self.watch.changed_so_far = self._changed_so_far
        self._diff_lock = threading.Lock()
        self.scope = scope
        self.cancel = scope.cancel
        self.env = dict(environ)
        self.started = time.monotonic()
        scope.deadline = self.started + settings.timeout
        self.result = TaskResult(success=False, workspace=str(request.workspace))
        self.redactor = scope.redactor
        self.redactor.add(configured_secrets(self.env))
        self.found = WorkspaceSecrets(self.redactor, request.workspace, settings.exclude_dirs)
        self.options = _factory.tracker_options(settings)
        self.install: KimiInstall | None = None
        self.model_flag: str | None = None  # the -m alias a Kimi started for this call gets
        self.key: StandbyKey | None = None
        self.session: KimiSession | None = None
        self.before: Future[tracker.Snapshot] | None = None
        self.trace: TurnTrace | None = None  # every turn of the run as one (see ``session.merged``)
        self.traces: list[TurnTrace] = []  # the run's finished turns
        self.fixes = FixLoop(request, settings, scope)  # the checks after the turns, and the fix rounds
        self.error: KimiMCPError | None = None
        self.claim: Claim | None = None
        self.holds: list[Hold] = []  # released by the cleanup, or by the watchdog if the call is stuck

    @property
    def deadline(self) -> float:
        return self.scope.deadline

    def run(self) -> TaskResult:
        with ExitStack() as stack:
            self._watchdog(stack)
            try:
                message = self._prepare()
                self._acquire_slots(stack)
                self._open_session(stack)
                self._start(stack)
                self._turn(message)
            except KimiMCPError as exc:
                self.error = exc
            except Exception as exc:  # a bug must still produce a clean result and a clean exit
                log.exception("unexpected failure")
                self.error = SessionError(f"internal error: {type(exc).__name__}: {exc}")
            self._collect_changes()  # while Kimi sits idle: its exit would compete for the CPU
            self.found.finish()  # before Kimi's transcript is saved and anything is returned
        return self._report()

    def _watchdog(self, stack: ExitStack) -> None:
        """Release a call stuck long after its deadline (see :meth:`_abandon`); a deadline moved on (time
        spent waiting for an answer does not count) moves the watchdog with it."""
        stop = threading.Event()
        stack.callback(stop.set)

        def watch() -> None:
            while not stop.wait(max(0.5, self.deadline + DEADLINE_GRACE - time.monotonic())):
                if not self.scope.paused and time.monotonic() >= self.deadline + DEADLINE_GRACE:
                    self._abandon()
                    return

        threading.Thread(target=watch, name="kimi-watchdog", daemon=True).start()

    # -- phases, in order --------------------------------------------------------------------------------
    def _prepare(self) -> str:
        binary = find_binary(self.settings.kimi_bin, self.env, kimi_code_prefix(self.env))
        self.install = install = probe(binary, self.env, self.settings.dialect)
        check_node(install, self.env)
        self.scope.prepare = self._prepared  # from now on a message sent to the job is checked at once
        self.result.dialect, self.result.kimi_version = install.dialect, install.version
        request = self.request
        self.model_flag = _factory.model_alias(install, request.model, self.settings, self.env)
        self.result.model = model = _factory.model_run(install, self.model_flag, self.env)
        self.key = _factory.standby_key(
            binary, install, request.workspace, request.read_only, self.settings, model
        )
        return _factory.message(request.prompt, request.workspace, install, self.env, self.settings)

    def _acquire_slots(self, stack: ExitStack) -> None:
        slots = self.runner.slots
        semaphore = slots.semaphore(self.settings.max_concurrent)
        acquire(semaphore, self.cancel, self.deadline)
        self._hold(stack, semaphore.release)
        claim = self.claim = slots.claim(
            self.request.workspace, self.request.read_only, self.cancel, self.deadline
        )
        self._hold(stack, lambda: slots.release(claim))
        self.watch.starting, self.watch.queued = True, False
        self.progress("starting Kimi")

    def _hold(self, stack: ExitStack, release: Callable[[], None]) -> None:
        hold = Hold(release)
        self.holds.append(hold)
        stack.callback(hold.release)

    def _open_session(self, stack: ExitStack) -> None:
        pool, request, key = self.runner.pool, self.request, self.key
        assert key is not None
        if request.session_id is not None:  # a follow-up: its live Kimi, else Kimi resumes the conversation
            session = pool.take_live(request.session_id, key.model, self.scope.job_id)
        elif self.settings.standby != "off":
            session = pool.take(key, self.cancel, self.deadline, self.scope.job_id)
        else:
            session = None
        self.result.warm_start = session is not None
        if session is not None:
            session.bind(self.scope)
        else:
            assert self.install is not None
            session = _factory.call_session(
                self.install, request, self.settings, self.env, self.scope, self.model_flag
            )
        self.session = session
        pool.adopt(session)  # from here on, server shutdown stops it too
        stack.callback(self._end_session)  # the call's session then (a start-up fault replaces it)

    def _start(self, stack: ExitStack) -> None:
        assert self.session is not None and self.install is not None
        tracker_thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="kimi-tracker")
        stack.callback(tracker_thread.shutdown, wait=True)
        self.before = tracker_thread.submit(tracker.take_snapshot, self.request.workspace, self.options)
        stack.callback(self._close_snapshot)
        if self.result.warm_start:
            what = "the live Kimi session" if self.request.session_id else "a ready Kimi"
            self.progress(f"using {what} ({self.install.dialect} {self.install.version})")
        else:
            telemetry.call("kimi.start", self.session.start)
        self.watch.session_id = self.session.session_id or self.watch.session_id
        self.result.timings["startup"] = round(time.monotonic() - self.started, 3)
        self._next_standby(turn_done=False)

    def _turn(self, message: str) -> None:
        """The turn, then each message sent meanwhile as a next turn of the same conversation (``queue``,
        ``interrupt``, and a ``steer`` that came too late for the running turn), then the check and a fix
        turn while it fails (``_fix``), and so on."""
        assert self.session is not None and self.before is not None
        self.before.result()  # the snapshot must be complete before Kimi can touch anything
        self.found.wait()  # and the secrets to mask known before Kimi can show them
        turn_started = time.monotonic()
        self.watch.starting = False
        traces = self.traces
        self.fixes.begin()
        traces.append(_restart.first_turn(self, message))
        approvals = self.scope.approvals
        while traces[-1].error is None and (follow := _next_turn(self)) is not None:
            text, received = follow
            if not self.session.ready_again(limit=5.0):
                self.scope.note(f"a message could not be sent (Kimi was not ready for it): {text.text[:80]}")
                break
            _hold_to(self.scope, text, approvals)
            traces.append(self.session.run_turn(text.text, on_received=received))
        _unsent(self.scope)
        self.trace = merged(traces)
        self.result.timings["turn"] = round(time.monotonic() - turn_started, 3)
        self.error = self.trace.error

    def _prepared(self, text: str) -> str:
        """A message for this Kimi as one inert input (``BadInput`` if it cannot arrive whole)."""
        assert self.install is not None
        return _factory.message(text, self.request.workspace, self.install, self.env, self.settings)

    def progress(self, message: str) -> None:
        """Relay a progress message; the job also learns the session id as soon as Kimi has one."""
        if self.session is not None and self.session.session_id is not None:
            self.watch.session_id = self.session.session_id
        self.scope.progress(message)

    def _changed_so_far(self) -> list[str]:
        """The files changed since the "before" snapshot, while the turn runs ([] before or after it)."""
        before = self.before
        if before is None or not before.done() or before.exception() is not None or self.trace is not None:
            return []
        if self.claim is not None and self.claim.shared:
            return []
        with self._diff_lock:
            if self.trace is not None:
                return []
            changes = tracker.diff(before.result(), self.options)
        changes = changes.without(
            inside_prefixes(self.request.workspace, private_dirs(self.settings, self.env))
        )
        return sorted({*changes.created, *changes.modified, *changes.deleted})

    def _collect_changes(self) -> None:
        before = self.before
        if before is None or not before.done() or before.exception() is not None:
            return
        self.progress("collecting file changes")
        diff_started = time.monotonic()
        try:
            with self._diff_lock:
                changes = telemetry.call("kimi_mcp.diff", tracker.diff, before.result(), self.options)
            self.result.timings["changes"] = round(time.monotonic() - diff_started, 4)
            log.debug("change list from a %s walk (%s)", changes.method, changes.reason or "watched")
            if self.claim is not None and self.claim.shared:
                self.result.notes.append(SHARED_NOTE)
                return
            private = inside_prefixes(self.request.workspace, private_dirs(self.settings, self.env))
            fill_changes(self.result, self.request.workspace, changes.without(private), self.options)
        except Exception as exc:  # report the turn even if the tracker fails
            log.exception("tracker failed")
            self.error = self.error or SessionError(f"could not list changed files: {exc}")

    def _report(self) -> TaskResult:
        result, trace, session = self.result, self.trace, self.session
        if trace is not None:
            result.output = trace.output
            driver = session.driver if session else None
            result.evidence = build_evidence(trace, driver, self.request.workspace, self.redactor)
            if trace.input_tokens or trace.output_tokens:
                result.usage = Usage(input_tokens=trace.input_tokens, output_tokens=trace.output_tokens)
                result.usage.cost_usd = _factory.cost(result.usage, result.model, self.settings)
        self.fixes.fill(result, failed=self.error is not None)
        result.notes.extend(n for n in self.scope.notes if n not in result.notes)
        result.messages = [MessageInfo(**m.to_dict()) for m in self.scope.delivered]
        result.duration_s = round(time.monotonic() - self.started, 3)
        result.success = self.error is None
        if self.error is not None:
            result.error = ErrorInfo.from_exception(self.error)
        else:
            self._next_standby(turn_done=True)
        log.info(
            "task done: success=%s created=%d modified=%d deleted=%d in %.1fs",
            result.success, len(result.files_created), len(result.files_modified),
            len(result.files_deleted), result.duration_s,
        )  # fmt: skip
        return TaskResult.model_validate(self.redactor.mask_tree(result.model_dump()))  # secrets masked

    # -- releases and standbys -----------------------------------------------------------------------------
    def _abandon(self) -> None:
        """The watchdog: the deadline passed long ago and the call is still stuck somewhere. Kimi's process
        tree is ended (which unblocks anything waiting on its pty) and the slots are released, so later
        calls are not blocked by this one, whatever it is stuck in."""
        log.warning(
            "the call is still running %.0fs after its deadline; ending Kimi and releasing its slots",
            DEADLINE_GRACE,
        )
        if self.session is not None:
            self.session.kill(grace=1.0)
        for hold in self.holds:
            hold.release()

    def _close_snapshot(self) -> None:
        before = self.before
        if before is not None and not before.cancelled() and before.exception() is None:
            before.result().close()  # releases its inotify watches, whether or not the diff ran

    def _end_session(self) -> None:
        session = self.session
        assert session is not None
        if self.trace is None:  # the run stopped in a turn: the finished ones and that one
            current = [] if any(t is session.trace for t in self.traces) else [session.trace]
            self.trace = merged([*self.traces, *current])
        self.result.session_id = session.session_id
        if self.error is None and self.trace.ended:  # a clean turn: kept for a follow-up, or exits
            session.bind(Scope.detached(redactor=self.redactor))
            pool, settings = self.runner.pool, self.settings
            assert self.key is not None
            if not pool.keep(session, self.key, settings.session_idle, settings.max_live_sessions):
                pool.retire(session)
        else:
            exit_started = time.monotonic()
            session.close()
            self.result.timings["exit"] = round(time.monotonic() - exit_started, 3)
        self.runner.pool.release(session)

    def _next_standby(self, *, turn_done: bool) -> None:
        """The one place that decides when the next call's standby starts: right after startup when this
        call's changes cannot make it stale (the dialect does not list the workspace at startup), else
        after a successful turn."""
        key, install = self.key, self.install
        if self.settings.standby == "off" or key is None or install is None or self.request.isolated:
            return  # an isolated copy is one job's: no later call starts there
        if turn_done or not key.lists_workspace:
            try:
                self.runner.prewarm(key, install, self.settings, self.env)
            except Exception:  # the call succeeded: a standby that cannot start must not change that
                log.exception("could not start a standby Kimi")


def _hold_to(scope: Scope, follow: Message, approvals: Literal["policy", "ask"]) -> None:
    """A queued follow-up's own ``approvals`` and ``max_tokens`` hold for the turn it becomes (else the
    job's ``approvals``, and the job's limits only)."""
    scope.approvals = follow.approvals or approvals
    scope.tokens.cap_turn(scope, follow.max_tokens)


# -- the messages sent to a running job, as next turns ---------------------------------------------------
def _next_turn(run: TaskRun) -> tuple[Message, Callable[[], None] | None] | None:
    """The run's next turn and what to call once Kimi's log shows it: a message sent to the job, else (the
    round's turns are over) a fix turn if the check fails (``_fix``), else a message sent while the check
    ran; None: the run's turns are done."""
    follow = _next_message(run.scope)
    if follow is None:
        if (fix := run.fixes.check(run.traces)) is not None:
            return Message(fix, "queue"), None
        follow = _next_message(run.scope)  # sent while the check ran
    if follow is None:
        return None
    run.progress(f"sending the {follow.mode} message as the next turn")
    return follow, _delivered(run.scope, follow)


def _next_message(scope: Scope) -> Message | None:
    """The next message to send as a turn of its own, prepared for the terminal (one that cannot be is
    said in the notes and skipped)."""
    message = scope.inbox.next_message(("interrupt", "queue", "steer"))
    if message is None:
        return None
    try:
        return dataclasses.replace(message, text=scope.prepare(message.text))
    except KimiMCPError as exc:
        scope.note(f"a message was not sent: {exc.message}")
        return _next_message(scope)


def _delivered(scope: Scope, message: Message) -> Callable[[], None]:
    """Records ``message`` as delivered (the next turn) once Kimi's log shows the turn it began."""
    sent = time.time()
    return lambda: scope.delivered.append(Delivered(message.text, message.mode, "next_turn", sent))


def _unsent(scope: Scope) -> None:
    """Messages still waiting when the run ends (a turn failed before they could be sent): said in the
    notes, never silently dropped."""
    while (message := scope.inbox.next_message(("interrupt", "queue", "steer"))) is not None:
        scope.note(f"a message was not sent (the run ended first): {message.text[:80]}")
