"""One turn: type the prompt, watch the session log and the screen until the log says the turn ended."""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass

from .._logging import get_logger
from ..drivers.base import Driver, ScreenState
from ..errors import ApiError, AuthError, SessionError, StartupFault
from ..scope import Scope
from ._approvals import Answer, Approvals
from ._questions import Questions
from ._steering import COLLECT_IDLE, INTERRUPT_WAIT, Steers, trimmed
from ._terminal import Terminal
from ._wirelog import SessionLog, TurnTrace

log = get_logger("session")

AUTH_ERROR_AFTER = 0.5  # a ready screen this long after the submit may show why the turn never began
RESUBMIT_AFTER = 5.0  # seconds without the message showing up before it is submitted again
NO_LOG_END_AFTER, NO_LOG_QUIET = 10.0, 1.0  # no session log at all: idle screen ends the turn after these
EMPTY_TRIES = 8  # rounds of keys that empty Kimi's input box before it counts as stuck
LEFTOVER_NOTE = (
    "Kimi's input box held text kimi-mcp did not send (a message Kimi never took); it was cleared before "
    "anything else was typed"
)


@dataclass(frozen=True)
class SessionParts:
    """What a turn uses of its session: the terminal, the session log, the panels' answerers, and how the
    session stops (``checkpoint`` raises when the caller cancelled or the time is up; ``interrupt`` stops
    Kimi's turn, waiting at most the seconds it is given)."""

    term: Terminal
    wire: SessionLog
    approvals: Approvals
    questions: Questions
    checkpoint: Callable[[], None]
    interrupt: Callable[[float], None]


class Turn:
    """One prompt, from typing it to the end the session log reports (into ``wire.trace``, begun by the
    caller), for the call of ``scope`` (its progress, secrets, token meter and inbox); ``number``: the
    session's turns for that call are numbered from 0 (its token meter counts each)."""

    def __init__(
        self,
        prompt: str,
        session: SessionParts,
        scope: Scope,
        number: int,
        on_received: Callable[[], None] | None = None,
    ) -> None:
        self.prompt = prompt
        self._on_received = on_received or (lambda: None)  # told once Kimi's log shows the prompt arrived
        self.term = session.term
        self.wire = session.wire
        self.driver: Driver = session.wire.driver
        self.approvals = session.approvals
        self.questions = session.questions
        self.scope = scope
        self.number = number
        self._checkpoint = session.checkpoint
        self._interrupt = session.interrupt
        self.mark = self.term.screen.total_chars  # echoes and errors are looked for after this position
        self.submitted = 0.0
        self.verified = self.resubmitted = self.busy_seen = False
        self.panel_seen: float | None = None  # when the approval panel on screen appeared
        self.answered: dict[str, Answer] = {}
        self.steers = Steers(session.term, session.wire, scope, session.interrupt)  # typed into this turn

    @property
    def trace(self) -> TurnTrace:
        return self.wire.trace

    def watch(self) -> None:
        """Submit the prompt and return when the session log reports the end of the turn (then the steers
        Kimi never took are settled: :meth:`.Steers.settle`)."""
        if self.empty_input():
            self.scope.note(LEFTOVER_NOTE)
        (paste, pause), *rest = self.driver.submit_sequence(self.prompt)
        self.term.write(paste)
        log.debug("prompt typed (%d characters)", len(self.prompt))
        self.term.sleep(pause)
        self.term.play(rest)
        self.submitted = time.monotonic()
        log.debug("prompt submitted")
        self.scope.progress("prompt sent; Kimi is working")
        self.term.waits.until(self._look, math.inf)
        self.steers.settle(self.empty_input)

    def collect(self) -> TurnTrace:
        """The trace, with the error a turn without an answer shows on screen, or the unmatched panels."""
        trace = self.trace
        if not trace.output:
            # No answer text: Kimi may have printed an error instead. Errors are committed to the screen
            # shortly after the turn ends, so wait for the idle screen before reading them.
            self.term.waits.wait_idle(COLLECT_IDLE, self.wire.read)
            trace.error = self.driver.screen_error(self.term.screen.tail_since(self.mark)) or _gave_up(trace)
        if trace.unmatched and trace.error is None:
            trace.error = SessionError(
                f"kimi-mcp rejected {len(trace.unmatched)} approval request(s) it could not match to a "
                "tool call in Kimi's session log, so the turn may be missing work Kimi meant to do",
                details={"rejected_tools": list(trace.unmatched)},
                suggestion="Retry the call; the files changed so far are listed in this result.",
                retryable=True,
            )
        self.scope.progress("turn finished")
        return trace

    def _look(self) -> bool:
        """One look at the log and the screen, acting on what is there; True once the turn ended."""
        self._checkpoint()
        self.wire.read()
        trace = self.trace
        if trace.begun and not self.verified:
            self._verify_received()
            self.verified = True
            self._on_received()
        self.steers.verify()
        self._count_tokens()
        if trace.ended:
            return True
        if self.term.eof:
            err = self.driver.screen_error(self.term.screen.tail_since(self.mark))
            raise err or SessionError(
                "Kimi exited in the middle of the turn",
                details={"screen": self.term.screen_for_error()},
            )
        state = self.driver.classify(self.term.screen.lines)
        now = time.monotonic()
        self.busy_seen = self.busy_seen or state is ScreenState.BUSY
        if state is ScreenState.APPROVAL:
            self.panel_seen = self.panel_seen or now
            self.approvals.answer(self.panel_seen, self.answered)
            return trace.ended
        self.panel_seen = None
        if state is ScreenState.QUESTION:
            self.questions.on_panel()
            return trace.ended
        self.questions.off_panel()
        if trace.begun and state is ScreenState.BUSY:  # steer keys are safe only here (no panel, a turn runs)
            self._messages()
        self._unstick(state, now)
        return trace.ended

    def _count_tokens(self) -> None:
        """The turn's tokens into the run's meter; past a limit, Kimi is stopped at once."""
        trace = self.trace
        meter = self.scope.tokens
        meter.record(self.scope, self.number, trace.input_tokens + trace.output_tokens)
        if trace.ended or (over := meter.over()) is None:
            return
        self.scope.progress("token limit reached; interrupting Kimi")
        self._interrupt(INTERRUPT_WAIT)
        raise over

    def _messages(self) -> None:
        """Messages sent to the running turn: ``interrupt`` stops it (the run sends the message as its next
        turn); a ``steer`` is typed into it where that is safe (:meth:`.Steers.type_next`)."""
        if self.scope.inbox.has("interrupt"):
            self.scope.progress("interrupting Kimi for a new message")
            self._interrupt(INTERRUPT_WAIT)
            return
        self.steers.type_next()

    def empty_input(self) -> bool:
        """Empty Kimi's input box; whether it held anything (``SessionError`` if it cannot be emptied)."""
        held = False
        for _ in range(EMPTY_TRIES):
            if not self.driver.input_pending(self.term.screen.lines):
                return held
            held = True
            log.warning("Kimi's input box holds text kimi-mcp did not send; clearing it")
            self.term.play(self.driver.empty_input_sequence())
        if self.driver.input_pending(self.term.screen.lines):
            raise SessionError(
                "Kimi's input box holds text that could not be cleared, so nothing was typed",
                details={"screen": self.term.screen_for_error()},
                suggestion="Retry; if it happens again, save a transcript (KIMI_MCP_TRANSCRIPT_DIR) and report it.",
                retryable=True,
            )
        return held

    def _unstick(self, state: ScreenState, now: float) -> None:
        """A turn that does not begin, or has no log: an auth error or a start-up fault on screen ends it, a
        message that did not arrive is submitted again, an idle screen ends a turn no session log was found for."""
        since = self.term.screen.tail_since(self.mark)
        waited = now - self.submitted
        idle = state in (ScreenState.READY, ScreenState.NOT_LOGGED_IN)  # "not set" drawn after the box
        if not self.trace.begun and idle and waited > AUTH_ERROR_AFTER:
            err = self.driver.screen_error(since)
            if isinstance(err, AuthError | StartupFault):
                raise err
        if (
            not self.trace.begun
            and not self.resubmitted
            and waited > RESUBMIT_AFTER
            and not self.driver.echo_seen(since, self.prompt)
        ):
            self._resubmit()
            self.resubmitted = True
        if (
            not self.wire.found
            and self.busy_seen
            and state is ScreenState.READY
            and waited > NO_LOG_END_AFTER
            and now - self.term.last_activity > NO_LOG_QUIET
        ):
            log.warning("no session log found; ending the turn on the screen going idle")
            self.trace.ended = True
            self.trace.ended_at = time.perf_counter()

    def _resubmit(self) -> None:
        """The message shows no sign of having been taken: press Enter again if it still sits in the
        input box, else type it again (the keys were lost). It is inert text either way."""
        if self.driver.input_pending(self.term.screen.lines):
            log.warning("the message was not submitted after 5s; pressing Enter again")
            self.term.write("\r")
        else:
            log.warning("the message did not arrive after 5s; typing it again")
            self.term.play(self.driver.submit_sequence(self.prompt))

    def _verify_received(self) -> None:
        """The turn began: Kimi must have received exactly our message, else the turn is stopped."""
        received = self.trace.received or ""
        got, sent = trimmed(received), trimmed(self.prompt)
        if got == sent:
            return
        at = next(
            (i for i, (a, b) in enumerate(zip(got, sent, strict=False)) if a != b), min(len(got), len(sent))
        )
        log.warning("Kimi received a different message (first difference at %d); stopping the turn", at)
        self._interrupt(INTERRUPT_WAIT)
        raise SessionError(
            "Kimi did not receive the message as sent, so the turn was stopped",
            details={
                "sent_chars": len(self.prompt),
                "received_chars": len(received),
                "first_difference_at": at,
                "sent_near": self.scope.redactor(sent[max(0, at - 40) : at + 40]),
                "received_near": self.scope.redactor(got[max(0, at - 40) : at + 40]),
            },
            suggestion="Retry the call; if it happens again, save a transcript (KIMI_MCP_TRANSCRIPT_DIR) and "
            "report it.",
            retryable=True,
        )


def _gave_up(trace: TurnTrace) -> ApiError | None:
    """The turn ended while Kimi was still retrying a failed model request: it gave up (its session log
    says so even when the error line has not reached the screen yet, e.g. on a loaded machine)."""
    retrying = trace.retrying
    if not trace.ended or retrying is None:
        return None
    return ApiError(
        f"The model provider kept failing ({retrying.error}); Kimi gave up after {retrying.max_attempts} "
        "attempts",
        details={"status": retrying.status, "attempts": retrying.max_attempts},
    )
