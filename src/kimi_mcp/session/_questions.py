"""Kimi's question panel (its AskUserQuestion tool): each question asked of the caller through the run's
inbox, the answer typed into the panel; unanswered, declined or not wanted, the panel is dismissed.

The question comes from the session log (the tool call's arguments), never from reading the screen; the
screen only says that the panel is up. While a question waits, the run's deadline stands still.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

from .._logging import get_logger
from ..drivers.base import Driver
from ..question import Choice, Question, questions_of
from ..scope import DECLINED, Scope
from ._approvals import Keys, LogReader
from ._wirelog import CallRecord

log = get_logger("session")

DISMISS_PAUSE = 0.5  # seconds after dismissing a panel
STUCK_AFTER = 10.0  # seconds a panel may stay after its last answer was typed before it is dismissed
UNLOGGED_WAIT = 8.0  # seconds a panel waits for its call to appear in the session log (under load: seconds)


@dataclass
class _Pending:
    """The panel being answered: its call, its questions, the one asked now, and when."""

    call_id: str
    questions: list[Question]
    index: int = 0
    asked_at: float = field(default_factory=time.monotonic)
    done_at: float | None = None  # when the last answer (or the dismissal) was typed


class Questions:
    """Answers the question panel on screen (see the module's notes)."""

    def __init__(self, driver: Driver, keys: Keys, wire: LogReader, scope: Callable[[], Scope]) -> None:
        self.driver, self.keys, self.wire = driver, keys, wire
        self._scope = scope  # the session's current scope (a session is bound to each call's)
        self.pending: _Pending | None = None
        self.seen_at: float | None = None  # when a panel whose call is not logged yet was first seen

    def on_panel(self) -> None:
        """One look while the panel is on screen: ask, wait for the answer, type it."""
        scope = self._scope()
        pending = self.pending
        if pending is None:
            self._open(scope)
            return
        if pending.done_at is not None:
            if time.monotonic() - pending.done_at > STUCK_AFTER:
                log.warning("the question panel stayed after its answer; dismissing it")
                self._dismiss(scope, "Kimi's question panel did not take the answer; it was dismissed")
            return
        answer = scope.inbox.take_answer()
        question = pending.questions[pending.index]
        if answer is None:
            if time.monotonic() - pending.asked_at >= scope.question_timeout:
                self._dismiss(
                    scope,
                    f"Kimi asked {question.text!r}; nobody answered within {scope.question_timeout:.0f}s "
                    "(KIMI_MCP_QUESTION_TIMEOUT), so it was dismissed",
                )
            return
        if answer == DECLINED:
            self._dismiss(
                scope, f"Kimi asked {question.text!r}; the caller declined to answer, so it was dismissed"
            )
            return
        assert isinstance(answer, Choice)
        self._type(scope, pending, question, answer)

    def off_panel(self) -> None:
        """One look while no panel is on screen: a panel answered (or gone) is forgotten."""
        pending = self.pending
        if pending is None:
            return
        call = self.wire.trace.calls.get(pending.call_id)
        if pending.done_at is not None or (call is not None and call.result is not None):
            self._close(self._scope())

    def _open(self, scope: Scope) -> None:
        self.wire.read()
        call = self._call()
        now = time.monotonic()
        if call is None and scope.questions != "dismiss":  # the panel can show before its call is logged
            self.seen_at = self.seen_at or now
            if now - self.seen_at < UNLOGGED_WAIT:
                return
        self.seen_at = None
        questions = questions_of(call.arguments) if call is not None else []
        if scope.questions == "dismiss" or not questions:
            why = (
                "KIMI_MCP_QUESTIONS=dismiss"
                if scope.questions == "dismiss"
                else "its question was not logged"
            )
            self.pending = _Pending(call.call_id if call else "?", questions)
            text = questions[0].text if questions else "a question"
            self._dismiss(scope, f"Kimi asked {text!r}; it was dismissed ({why})")
            return
        assert call is not None
        self.pending = _Pending(call.call_id, questions)
        self._ask(scope, questions[0])

    def _ask(self, scope: Scope, question: Question) -> None:
        scope.pause()
        scope.inbox.ask(question)
        scope.progress(f"Kimi asks: {question.text}")
        log.info("Kimi asks a question; waiting for the caller's answer")

    def _type(self, scope: Scope, pending: _Pending, question: Question, choice: Choice) -> None:
        count = len(pending.questions)
        self.keys.play(self.driver.answer_question(question, choice, index=pending.index, count=count))
        log.debug("answer typed into the question panel")
        said = (
            choice.text
            if choice.text is not None
            else ", ".join(question.options[i].label for i in choice.picks)
        )
        scope.note(f"Kimi asked {question.text!r}; answered: {said}")
        scope.progress(f"answered Kimi's question: {said}")
        pending.index += 1
        if pending.index < count:
            pending.asked_at = time.monotonic()
            self._ask(scope, pending.questions[pending.index])
        else:
            pending.done_at = time.monotonic()
            scope.inbox.withdraw()
            scope.resume()

    def _dismiss(self, scope: Scope, note: str) -> None:
        self.keys.play([(self.driver.dismiss_question_key, DISMISS_PAUSE)])
        scope.note(note)
        scope.progress("Kimi's question was dismissed")
        log.info("dismissed Kimi's question: %s", note)
        if self.pending is not None:
            self.pending.done_at = time.monotonic()
        scope.inbox.withdraw()
        scope.resume()

    def _close(self, scope: Scope) -> None:
        self.pending = None
        if scope.inbox.asked is not None:
            scope.inbox.withdraw()
        scope.resume()

    def _call(self) -> CallRecord | None:
        """The newest question call of the turn that has no result yet."""
        asking = [
            c
            for c in self.wire.trace.calls.values()
            if c.name == self.driver.question_tool and c.result is None
        ]
        return asking[-1] if asking else None
