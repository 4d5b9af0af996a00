"""KimiSession: one Kimi TUI process, started, given a turn, and closed, through states it checks.

new → starting (→ setup) → ready → waiting → collected → closed. Like ``pexpect.replwrap``, one clear idea
decides when the other side is ready: the *driver* says what the screen means and where the session log
is; the session only moves through the states. The end of a turn comes from the session log
(``TurnEnd``), never from guessing at the screen; the screen is used for what the log does not record
(readiness, approval panels, error lines) and to confirm that Kimi is idle before anything else is typed.

The parts: ``_terminal`` (screen I/O: the virtual screen, typing, the transcript), ``_process`` (Kimi's
process on its pty, its descendants), ``_waits`` (every wait on the terminal), ``_login`` (the automated
login), ``_wirelog`` (the session log), ``_turn`` (one turn), ``_interrupt`` (stopping a turn),
``_approvals`` (approval panels), ``_questions`` (question panels), ``_policy`` (what is approved),
``_proc`` (process-tree cleanup).
"""

from __future__ import annotations

import enum
import math
import threading
import time
from collections.abc import Callable
from pathlib import Path

from .. import telemetry
from .._logging import get_logger
from ..drivers.base import Driver, LoginOptions, ScreenState
from ..errors import ApiError, SessionError, TaskCancelled, TaskTimeout
from ..scope import Scope
from ._approvals import PANEL_GRACE, UNMATCHED_WAIT, Approvals
from ._interrupt import interrupt_turn
from ._login import automated_login, not_logged_in
from ._policy import ApprovalPolicy
from ._process import IDLE_SAMPLE, PROCESS_SAMPLE
from ._questions import Questions
from ._terminal import Terminal
from ._turn import INTERRUPT_WAIT, SessionParts, Turn
from ._waits import POLL
from ._wirelog import CallRecord, SessionLog, TurnTrace, WireTail, merged

__all__ = [
    "PANEL_GRACE",
    "UNMATCHED_WAIT",
    "ApprovalPolicy",
    "CallRecord",
    "KimiSession",
    "State",
    "TurnTrace",
    "WireTail",
    "merged",
]

log = get_logger("session")

TRUST_PAUSE = 0.3  # seconds after answering the trust prompt


class State(enum.Enum):
    """Where the session is; each public method checks it (see the notes)."""

    NEW = "new"  # built; start() may run (nothing else)
    STARTING = "starting"  # spawned, waiting for the input box (abort phase "startup")
    SETUP = "setup"  # the automated login runs (abort phase "setup")
    READY = "ready"  # the input box is idle: run_turn(), usable() and rebind() act only here
    WAITING = "waiting"  # a prompt is out (abort phase "turn")
    COLLECTED = "collected"  # the turn is over; close() or kill() remain
    CLOSED = "closed"  # close() ran; a second close() does nothing


_PHASES = {State.STARTING: "startup", State.SETUP: "setup", State.WAITING: "turn"}


class KimiSession:
    """Drive one interactive Kimi process. Blocking: call from a worker thread, not the event loop."""

    def __init__(
        self,
        driver: Driver,
        workspace: Path,
        *,
        env: dict[str, str],
        policy: ApprovalPolicy,
        scope: Scope,
        startup_timeout: float = 60.0,
        transcript_dir: str | None = None,
        login: LoginOptions | None = None,
        resume: str | None = None,
        model: str | None = None,
    ) -> None:
        self.driver = driver
        self.model = model  # the model alias Kimi is started with (-m); None: Kimi's default
        self.resume = resume  # an earlier conversation Kimi continues (from its own session store)
        self.workspace = workspace
        self.env = driver.environment(env)
        self.policy = policy
        self.startup_timeout = startup_timeout
        self.state = State.NEW
        self._login = login
        self.scope = scope
        self.bind(scope)
        self._logged_in_here = False
        self._startup_limit = math.inf
        self.term = Terminal(
            driver,
            scope=self._current,
            checkpoint=self._check_abort,
            deadline=self._time_limit,
            transcript_dir=transcript_dir,
        )
        self.wire = SessionLog(
            driver, self.env, workspace, screen_text=lambda: self.term.screen.text, scope=self._current
        )
        self.approvals = Approvals(driver, policy, self.term, self.wire, self._current)
        self.questions = Questions(driver, self.term, self.wire, self._current)
        self.parts = SessionParts(
            self.term, self.wire, self.approvals, self.questions, self._check_abort, self._interrupt
        )
        self.turns = 0  # turns run in this session for its current scope
        self.prompted = False  # a prompt was ever typed (until then the ready screen start() saw holds)

    def _current(self) -> Scope:
        """The scope of the call the session serves now (a standby or live session is bound to each call's)."""
        return self.scope

    @property
    def deadline(self) -> float:
        return self.scope.deadline

    @property
    def cancel(self) -> threading.Event:
        return self.scope.cancel

    @property
    def session_id(self) -> str | None:
        return self.wire.session_id

    @property
    def trace(self) -> TurnTrace:
        """The current (or last) turn."""
        return self.wire.trace

    # -- lifecycle -----------------------------------------------------------------------------------
    def start(self) -> None:
        """Spawn Kimi and wait until its input box is ready (running setup when it is not logged in)."""
        if self.state is not State.NEW:
            raise SessionError(f"cannot start Kimi in state {self.state.value}")
        self.state = State.STARTING
        read_only = self.policy.read_only
        if self.resume is None:
            argv = self.driver.argv(read_only=read_only, model=self.model)
            self.wire.exclude_existing()
        elif self.wire.resume(self.resume):  # its log is tailed from its current end: only new turns count
            argv = self.driver.resume_argv(self.resume, read_only=read_only, model=self.model)
        else:
            self.state = State.CLOSED
            raise SessionError(
                f"Kimi's session log for {self.resume} is gone; the conversation cannot be resumed",
                details={"session_id": self.resume},
                suggestion="Start a new task instead (kimi_code_task or another tool).",
            )
        log.info("spawning %s in %s", " ".join(argv), self.workspace)
        started = time.monotonic()
        self.term.spawn(argv, self.workspace, self.env)
        self._progress(f"starting Kimi ({self.driver.name} {self.driver.install.version})")
        self._startup_limit = min(self.deadline, started + self.startup_timeout)
        while (screen := self._next_screen()) is not ScreenState.READY:
            if screen is ScreenState.TRUST:
                self.term.write(self.driver.trust_key)
                self.term.sleep(TRUST_PAUSE)
            else:
                self._log_in()
        if self.resume is None:  # a resumed session's id is the one asked for (its replay may hide it)
            self.wire.name(self.driver.session_id(self.term.screen.text))
        ready_after = time.monotonic() - started
        self.state = State.READY
        self._progress(f"Kimi ready after {ready_after:.1f}s")
        log.info("kimi ready after %.2fs, session %s", ready_after, self.session_id)

    def _next_screen(self) -> ScreenState:
        """The next startup screen that needs something: the trust prompt, a login, or the input box (a
        stale "not set" left on screen after our own login counts as ready)."""
        seen = ScreenState.STARTING

        def actionable() -> bool:
            nonlocal seen
            self._check_abort()
            if self.term.eof:
                raise SessionError(
                    "Kimi exited during startup",
                    details={"screen": self.term.screen_for_error()},
                    suggestion="Run `kimi` by hand in the workspace to see why it does not start.",
                )
            seen = self.driver.classify(self.term.screen.lines)
            if seen is ScreenState.NOT_LOGGED_IN and self._logged_in_here:
                seen = ScreenState.READY
            return seen in (ScreenState.TRUST, ScreenState.NOT_LOGGED_IN, ScreenState.READY)

        self.term.waits.until(actionable, math.inf, poll=POLL * 2)
        return seen

    def _log_in(self) -> None:
        if self._login is None:
            raise not_logged_in(self.driver)
        self.state = State.SETUP
        automated_login(self.driver, self.term, self._login, self.scope)
        self._logged_in_here = True
        self.state = State.STARTING

    def close(self) -> None:
        """Exit Kimi cleanly if possible; in every case leave no process behind."""
        if not self.term.process.started or self.state is State.CLOSED:
            self.state = State.CLOSED
            return
        try:
            self.term.process.record()  # what runs now, before the exit re-parents anything
            if self.term.process.alive() and not self.term.eof:
                if self.trace.begun and not self.trace.ended:
                    self._interrupt(INTERRUPT_WAIT)
                clear = self.driver.clear_input_sequence()  # stray text would be sent with the exit keys
                exits = [clear + self.driver.exit_sequence(), clear + self.driver.exit_sequence()]
                self.term.leave([*exits, clear + self.driver.exit_retry_sequence()], self.wire.read)
        except Exception as exc:  # cleanup must go on whatever happened
            log.warning("graceful exit failed: %s", exc)
        finally:
            self.term.process.terminate(grace=5.0)
            self.term.save_transcript(self.session_id)
            self.state = State.CLOSED
            log.info("session closed (exit status %s)", self.term.process.exit_status)

    def kill(self, grace: float = 1.0) -> None:
        """Stop Kimi now without the exit dialogue (a standby that never ran a turn, or server shutdown)."""
        self.term.kill(grace)

    def __enter__(self) -> KimiSession:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- standby (a ready session kept for a later call) ----------------------------------------------
    def bind(self, scope: Scope) -> None:
        """Hand the session to a call: its :class:`~kimi_mcp.scope.Scope` (deadline, cancellation, progress,
        the secrets to mask, limits, inbox), which learns Kimi's session id if there is one already. Session logs
        that appeared while a ready session waited (other calls' sessions) are not this session's."""
        self.scope = scope
        self.turns = 0
        scope.screen = self._screen_text
        scope.inbox.wake = self.wake  # a message or an answer ends the current wait at once, not at its poll
        wire = getattr(self, "wire", None)  # None while the session is being built
        if wire is not None and wire.session_id is not None:
            scope.on_session(wire.session_id)
        if self._login is not None:
            scope.redactor.add([self._login.api_key])
        if getattr(self, "state", None) is State.READY and not self.wire.found:
            self.wire.exclude_existing()

    def idle_until(self, stop: threading.Event) -> None:
        """Keep the screen current while nobody uses the session; returns when ``stop`` is set or Kimi exits."""
        if stop.is_set() or self.term.eof:
            return
        self.term.process.sample_every = IDLE_SAMPLE  # an idle Kimi starts nothing: its tree sampled less
        try:
            self.term.waits.until(lambda: stop.is_set() or self.term.eof, math.inf, poll=0.05)
        finally:
            self.term.process.sample_every = PROCESS_SAMPLE

    def ready_again(self, limit: float) -> bool:
        """After a cleanly ended turn: whether Kimi is alive and idle, so a follow-up can be typed (the
        session is READY again then; waits at most ``limit`` seconds)."""
        if self.state is State.COLLECTED and self.trace.ended and not self.term.eof:
            self.state = State.READY
        return self.usable(limit)

    def wake(self) -> None:
        """End the current wait on the terminal now instead of at its next poll: :meth:`idle_until` looks at
        its stop event, a turn at its inbox (a steer, an answer)."""
        term = getattr(self, "term", None)  # None while the session is being built
        if term is not None:
            term.waits.wake()

    def usable(self, limit: float) -> bool:
        """Ready, alive and quiet: safe to submit a prompt (waits at most ``limit`` s). One never prompted is
        safe once :meth:`start` saw it ready, as a call's own Kimi (that quiet cost a standby taken 0.26 s)."""
        if self.state is not State.READY or self.term.eof or not self.term.process.alive():
            return False
        return not self.prompted or self.term.waits.wait_idle(limit, self.wire.read)

    # -- one turn ------------------------------------------------------------------------------------
    def run_turn(self, prompt: str, on_received: Callable[[], None] | None = None) -> TurnTrace:
        """Submit ``prompt`` and return once the session log reports the end of the turn; ``on_received`` is
        called as soon as the log shows the prompt arrived as sent."""
        if self.state is not State.READY:
            raise SessionError(f"cannot submit a prompt in state {self.state.value}")
        self.state = State.WAITING
        self.prompted = True
        self.wire.begin_turn(prompt)
        return telemetry.turn(self.turns, lambda: self._watch(prompt, on_received))

    def _watch(self, prompt: str, on_received: Callable[[], None] | None) -> TurnTrace:
        turn = self._turn(prompt, on_received)
        turn.watch()
        self.state = State.COLLECTED
        return turn.collect()

    def _turn(self, prompt: str, on_received: Callable[[], None] | None = None) -> Turn:
        self.turns += 1
        return Turn(prompt, self.parts, self.scope, self.turns - 1, on_received)

    # -- stopping --------------------------------------------------------------------------------------
    def _time_limit(self) -> float:
        """When the current state's time is up: start-up and login share the start-up limit (never more
        than the call's deadline), a turn has the call's deadline."""
        if self.state in (State.STARTING, State.SETUP):
            return self._startup_limit
        if self.scope.paused:  # a question waits for its answer: that time is not the turn's
            return math.inf
        return self.deadline if self.state is State.WAITING else math.inf

    def _check_abort(self) -> None:
        """Stop when the caller cancelled, or when the time for the current state (startup, turn) is up."""
        phase = _PHASES.get(self.state, self.state.value)
        if self.cancel.is_set():
            self._interrupt(INTERRUPT_WAIT)
            raise TaskCancelled("the tool call was cancelled", details={"phase": phase})
        if time.monotonic() < self._time_limit():
            return
        if self.state is State.SETUP:
            raise TaskTimeout(
                "the automated Kimi login did not finish within the start-up time limit",
                details={"phase": phase, "screen": self.term.screen_for_error()},
                suggestion="Retry; if it keeps happening, raise KIMI_MCP_STARTUP_TIMEOUT or log in once by hand.",
            )
        if self.state is State.WAITING:
            self._progress("time is up; interrupting Kimi")
            retrying = self.trace.retrying  # what the turn was waiting on, if the provider kept failing
            self._interrupt(INTERRUPT_WAIT)
            if retrying is not None:
                raise ApiError(
                    f"The model provider kept failing ({retrying.error}); Kimi was still retrying "
                    f"(attempt {retrying.attempt} of {retrying.max_attempts}) when the time ran out",
                    details={"phase": phase, "status": retrying.status, "attempt": retrying.attempt},
                    retryable=True,
                )
            raise TaskTimeout(
                "Kimi did not finish the turn in time",
                details={"phase": phase, "screen": self.term.screen_for_error()},
            )
        raise SessionError(
            "Kimi did not become ready in time",
            details={"phase": phase, "screen": self.term.screen_for_error()},
            suggestion="Run `kimi` by hand in the workspace to see what it waits for.",
            retryable=True,
        )

    def _interrupt(self, wait: float) -> None:
        """Stop a running turn and give Kimi ``wait`` seconds to log its end (see ``_interrupt``)."""
        interrupt_turn(self.term, self.wire, wait)

    def _progress(self, message: str) -> None:
        """Tell the caller what is happening (progress notifications), secrets masked."""
        self.scope.progress(message)

    def _redact(self, text: str) -> str:
        return self.scope.redactor(text)

    def _screen_text(self) -> str:
        """Kimi's screen as it is now, secrets masked ("" before Kimi started)."""
        term = getattr(self, "term", None)
        try:
            return self._redact(term.screen.text) if term is not None and term.process.started else ""
        except Exception:  # read from another thread while the screen is drawn: try again next time
            return ""
