"""One run's scope: what controls a Kimi run from its job down to the keystrokes.

A job makes one :class:`Scope` and hands it to the runner, which hands it to the session: its deadline
(paused while a question waits for its answer), its cancellation, where progress goes, which job it runs
(its events for the client name it), the secrets it masks, its token limits and its inbox (the answers and
messages the caller sends while Kimi works). A standby or live session taken by a later call is given that
call's scope (``KimiSession.bind``).

Plain data and threading only: the tools and jobs make scopes without loading the runner.
"""

from __future__ import annotations

import dataclasses
import secrets
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Literal

from . import telemetry
from .errors import BudgetError
from .question import Choice, Question
from .secrets import Redactor

SteerMode = Literal["steer", "interrupt", "queue"]
Delivery = Literal["in_turn", "next_turn"]
DECLINED = "declined"  # an answer that dismisses the question (the client declined the form)
#: said (as an error's message, or in a result's notes) of an answer whose question is gone
QUESTION_GONE = "that question was already answered or dismissed"


@dataclass(frozen=True, slots=True)
class Message:
    """A message for a running job (``kimi_steer``, or a ``kimi_continue`` queued on it), as the caller wrote
    it (the run prepares it for the terminal: ``Scope.prepare``). A queued follow-up's own ``approvals`` and
    ``max_tokens`` hold for the turn it becomes (None: the job's)."""

    text: str
    mode: SteerMode
    at: float = field(default_factory=time.time)
    approvals: Literal["policy", "ask"] | None = None
    max_tokens: int | None = None

    def to_payload(self) -> dict[str, object]:
        """As the job store and the broker carry it (:meth:`Inbox.deliver` takes it back)."""
        payload: dict[str, object] = {"text": self.text, "mode": self.mode, "at": self.at}
        if self.approvals is not None:
            payload["approvals"] = self.approvals
        if self.max_tokens is not None:
            payload["max_tokens"] = self.max_tokens
        return payload

    @classmethod
    def from_payload(cls, payload: dict) -> Message:
        max_tokens = payload.get("max_tokens")
        return cls(
            text=str(payload["text"]), mode=payload.get("mode", "steer"), at=float(payload["at"]),
            approvals=payload.get("approvals"), max_tokens=None if max_tokens is None else int(max_tokens),
        )  # fmt: skip


@dataclass(frozen=True, slots=True)
class Delivered:
    """A message that reached Kimi, as Kimi's own session log shows it: when, how, and whether in the running
    turn (the log shows it added to the turn) or as the next one (the log shows the turn it began)."""

    text: str
    mode: SteerMode
    delivered: Delivery
    at: float

    def to_dict(self) -> dict[str, str]:
        at = datetime.fromtimestamp(self.at, UTC).isoformat(timespec="seconds")
        return {"at": at, "mode": self.mode, "delivered": self.delivered, "text": self.text}


@dataclass(frozen=True, slots=True)
class Asked:
    """The question a job waits on: which question, since when (unix time), and its id (an answer names it:
    an answer for a question that is gone is never typed into the next one)."""

    question: Question
    asked_at: float
    kind: Literal["question", "approval"] = "question"
    id: str = field(default_factory=lambda: "q" + secrets.token_hex(4))

    def to_dict(self) -> dict[str, object]:
        """As the ``question`` field of a result (``models.QuestionInfo``)."""
        at = datetime.fromtimestamp(self.asked_at, UTC).isoformat(timespec="seconds")
        q = self.question
        options = [{"label": o.label, "description": o.description} for o in q.options]
        return {
            "kind": self.kind, "text": q.text, "header": q.header, "options": options,
            "multi_select": q.multi_select, "free_text": q.free_text, "asked_at": at, "id": self.id,
        }  # fmt: skip


class Inbox:
    """What the caller sends a running job: the answer to the question on screen and messages to type.
    Filled by the tool layer (or the job ticker, for another server's sends), emptied by the session."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._messages: deque[Message] = deque()
        self._answer: Choice | str | None = None
        self.asked: Asked | None = None  # the question waiting for an answer
        self.answered_id: str | None = None  # the id of the question the last answer is for
        self._waiting = telemetry.NOT_WAITING  # the question's span while it waits (OpenTelemetry)
        #: called when something arrives (the session wakes from its poll)
        self.wake: Callable[[], None] = lambda: None
        #: called when a question is asked or answered (the job tells its waiters)
        self.on_change: Callable[[], None] = lambda: None

    # -- questions -------------------------------------------------------------------------------------
    def ask(
        self, question: Question, kind: Literal["question", "approval"] = "question", question_id: str = ""
    ) -> None:
        """Kimi asks ``question`` (``question_id``: the id it already has, e.g. on a worker)."""
        asked = Asked(question, time.time(), kind)
        asked = dataclasses.replace(asked, id=question_id) if question_id else asked
        with self._lock:
            self.asked, self._answer = asked, None
        self._waiting.end("replaced")
        self._waiting = telemetry.asked(kind)
        self.on_change()

    def answer(self, choice: Choice | str, question_id: str | None = None) -> bool:
        """The answer to the question asked (a :class:`Choice`, or :data:`DECLINED`): from now on the
        question is no longer asked; the session takes the answer at its next look. False (nothing taken):
        no question is asked, or ``question_id`` (if given) names another one (answered or dismissed)."""
        with self._lock:
            if self.asked is None or (question_id and question_id != self.asked.id):
                return False
            self.asked, self._answer, self.answered_id = None, choice, self.asked.id
        self._waiting.end("declined" if choice == DECLINED else "answered")
        self.on_change()
        self.wake()
        return True

    def take_answer(self) -> Choice | str | None:
        """The answer, once it came."""
        with self._lock:
            answer, self._answer = self._answer, None
        return answer

    def withdraw(self) -> None:
        """The question is gone (dismissed, timed out, the turn ended)."""
        with self._lock:
            self.asked, self._answer = None, None
        self._waiting.end("withdrawn")
        self.on_change()

    # -- messages --------------------------------------------------------------------------------------
    def send(self, message: Message) -> None:
        with self._lock:
            self._messages.append(message)
        self.wake()

    def put_back(self, message: Message) -> None:
        """A message taken out that did not reach Kimi (a steer Kimi did not take into its turn): first in line
        again, so the run sends it as the next turn."""
        with self._lock:
            self._messages.appendleft(message)
        self.wake()

    def next_message(self, modes: tuple[SteerMode, ...]) -> Message | None:
        """The oldest waiting message of one of ``modes``, taken out of the inbox."""
        with self._lock:
            for message in self._messages:
                if message.mode in modes:
                    self._messages.remove(message)
                    return message
        return None

    def outgoing(self) -> bool:
        """Whether an answer or a message waits to be taken."""
        with self._lock:
            return self._answer is not None or bool(self._messages)

    def has(self, mode: SteerMode) -> bool:
        with self._lock:
            return any(message.mode == mode for message in self._messages)

    def deliver(self, kind: str, payload: dict) -> bool:
        """An answer or a message, as the job store and the broker carry them. False: an answer whose
        question is gone (its ``question`` id names another one): not taken, and said in ``notes``."""
        if (
            kind == "answer"
        ):  # {"picks": [option indexes], "text": free text, "question": id} or {"declined": true}
            question_id = payload.get("question")
            if payload.get("declined"):
                return self.answer(DECLINED, question_id)
            return self.answer(Choice(tuple(payload.get("picks") or ()), payload.get("text")), question_id)
        if kind == "message":
            self.send(Message.from_payload(payload))
        return True


DAILY_WARNING = 0.8  # share of KIMI_MCP_DAILY_TOKENS from which results and kimi_status warn
DAILY_USED = "tokens (KIMI_MCP_DAILY_TOKENS) are used in the last 24 hours"  # in every daily warning


def daily_warning(used: int, daily: int) -> str:
    return f"{used} of the daily {daily} {DAILY_USED}: {round(100 * used / daily)}%"


class TokenMeter:
    """The tokens a job spent (input + output, summed over its steps, turns and attempts: attempts share
    one meter) and the limits they are held to. ``daily_used`` is what every job in the store spent in the
    last 24 hours when the job started (not counting this one)."""

    def __init__(self, max_tokens: int | None = None, daily: int | None = None, daily_used: int = 0) -> None:
        self.max_tokens = max_tokens
        self.daily = daily
        self.daily_used = daily_used
        self._lock = threading.Lock()
        self._spent: dict[tuple[int, int], int] = {}  # per (scope, turn), kept when the turn ends
        #: per scope: (what it had spent when its current turn began, that turn's own max_tokens)
        self._caps: dict[int, tuple[int, int]] = {}

    def record(self, owner: object, turn: int, tokens: int) -> None:
        """The tokens turn ``turn`` of ``owner`` (a scope) has spent so far (its total, not an increment)."""
        with self._lock:
            key = (id(owner), turn)
            self._spent[key] = max(tokens, self._spent.get(key, 0))

    @property
    def spent(self) -> int:
        with self._lock:
            return sum(self._spent.values())

    def spent_by(self, owner: object) -> int:
        with self._lock:
            return sum(n for (who, _turn), n in self._spent.items() if who == id(owner))

    def cap_turn(self, owner: object, limit: int | None) -> None:
        """The turn ``owner`` (a scope) begins now may spend at most ``limit`` tokens (a queued follow-up's
        own max_tokens), within the job's limits; None: only the job's limits hold."""
        with self._lock:
            if limit is None:
                self._caps.pop(id(owner), None)
                return
            spent = sum(n for (who, _turn), n in self._spent.items() if who == id(owner))
            self._caps[id(owner)] = (spent, limit)

    def daily_warning(self, own: int = 0) -> str | None:
        """The warning a result carries once the day's tokens, this job's included, reach ``DAILY_WARNING`` of
        the daily budget, else None. ``own``: the tokens the job's result says it spent (a job on a worker
        is metered there)."""
        if self.daily is None:
            return None
        used = self.daily_used + max(self.spent, own)
        return daily_warning(used, self.daily) if used >= DAILY_WARNING * self.daily else None

    def over(self) -> BudgetError | None:
        """The limit crossed, if any."""
        spent = self.spent
        with self._lock:
            turns = [
                (sum(n for (owner, _turn), n in self._spent.items() if owner == who) - before, limit)
                for who, (before, limit) in self._caps.items()
            ]
        for used, limit in turns:
            if used > limit:
                return BudgetError(
                    f"the queued turn used {used} tokens, over its own max_tokens of {limit}; Kimi was stopped",
                    details={"tokens": used, "max_tokens": limit},
                    suggestion="Review what it did so far; continue with kimi_continue(session_id, ..., "
                    "max_tokens=<a larger limit>) if more is worth it.",
                )
        if self.max_tokens is not None and spent > self.max_tokens:
            return BudgetError(
                f"the job used {spent} tokens, over its max_tokens of {self.max_tokens}; Kimi was stopped",
                details={"tokens": spent, "max_tokens": self.max_tokens},
                suggestion="Review what it did so far; continue with kimi_continue(session_id, ..., "
                "max_tokens=<a larger limit>) if more is worth it.",
            )
        if self.daily is not None and self.daily_used + spent > self.daily:
            return BudgetError(
                f"the daily token budget (KIMI_MCP_DAILY_TOKENS={self.daily}) is used up "
                f"({self.daily_used + spent} tokens in the last 24 hours); Kimi was stopped",
                details={"tokens": spent, "daily_used": self.daily_used + spent, "daily": self.daily},
                suggestion="Wait until older jobs leave the 24-hour window, or raise KIMI_MCP_DAILY_TOKENS.",
            )
        return None


class Scope:
    """One run's controls (see the module's notes). Shared by the job's thread and the tool layer."""

    def __init__(
        self,
        *,
        deadline: float,
        cancel: threading.Event | None = None,
        progress: Callable[[str], None] | None = None,
        redactor: Redactor | None = None,
        tokens: TokenMeter | None = None,
        inbox: Inbox | None = None,
        questions: Literal["ask", "dismiss"] = "dismiss",
        question_timeout: float = 600.0,
        approvals: Literal["policy", "ask"] = "policy",
    ) -> None:
        self.deadline = deadline
        self.cancel = cancel or threading.Event()
        #: where progress messages go (masked): the job's activity
        self.sink: Callable[[str], None] = progress or (lambda _msg: None)
        #: a message as the one inert input typed into this Kimi (the runner sets it; BadInput if it cannot be)
        self.prepare: Callable[[str], str] = lambda text: text
        #: Kimi's screen as text, masked (the session sets it when it is bound): ``kimi-mcp watch`` shows it
        self.screen: Callable[[], str] = lambda: ""
        #: told Kimi's session id as soon as Kimi has one (the session calls it; the job records it at once, so
        #: a job whose server dies mid-turn can still be continued)
        self.on_session: Callable[[str], None] = lambda _session_id: None
        self.redactor = redactor or Redactor()
        self.tokens = tokens or TokenMeter()
        self.inbox = inbox or Inbox()
        self.questions = questions
        self.question_timeout = question_timeout
        self.approvals = approvals
        self.notes: list[str] = []  # said in the result's notes (masked there)
        self.delivered: list[Delivered] = []  # the messages that reached Kimi
        #: the job this scope runs (its job sets it): its events for the client name it
        #: (``_logging.for_client``); None, a scope of no job's (a standby's): its events are server-wide
        self.job_id: str | None = None
        self._paused_at: float | None = None

    @classmethod
    def detached(cls, seconds: float = 60.0, redactor: Redactor | None = None) -> Scope:
        """A scope nobody controls (a standby's startup, a session kept after its turn: it keeps masking
        what its call masked, ``redactor``, e.g. in the transcript saved when it closes)."""
        return cls(deadline=time.monotonic() + seconds, redactor=redactor)

    def progress(self, message: str) -> None:
        self.sink(self.redactor(message))

    @property
    def tokens_spent(self) -> int:
        """The tokens this run spent (its own turns; the meter may be shared by attempts)."""
        return self.tokens.spent_by(self)

    def note(self, text: str) -> None:
        if text not in self.notes:
            self.notes.append(text)

    def deliver(self, kind: str, payload: dict) -> bool:
        """An answer or a message for this run (:meth:`Inbox.deliver`); an answer whose question is gone is
        not typed, and said in ``notes``."""
        if self.inbox.deliver(kind, payload):
            return True
        self.note(f"an answer was not typed: {QUESTION_GONE}")
        return False

    # -- the deadline stops while a question waits ---------------------------------------------------
    @property
    def paused(self) -> bool:
        return self._paused_at is not None

    def pause(self) -> None:
        if self._paused_at is None:
            self._paused_at = time.monotonic()

    def resume(self) -> None:
        if self._paused_at is not None:
            self.deadline += time.monotonic() - self._paused_at
            self._paused_at = None
