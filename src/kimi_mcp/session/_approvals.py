"""Answering Kimi's approval panels: which logged call a panel is for, what the policy says, which keys say it."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from .._logging import get_logger
from ..drivers.base import Driver, squash
from ..message import one_line
from ..question import Choice, Option, Question
from ..scope import DECLINED, Scope
from ._policy import ApprovalPolicy
from ._screen import TerminalScreen
from ._wirelog import CallRecord, TurnTrace

log = get_logger("session")

UNMATCHED_WAIT = 8.0  # seconds an approval panel waits for its call to appear in the session log
PANEL_GRACE = 1.5  # a panel too tall to show what it is for waits this long, then goes to the first call
PRESS_AGAIN_AFTER = 2.0  # seconds a panel may stay after its answer before the key is pressed again
MAX_PRESSES = 3  # times one answer is pressed at most
SHOWN_CHARS = 40  # characters of a command or path looked for in a panel (its start or its end)
ASKED_CHARS = 2_000  # characters of a call's arguments an approval question shows
_SHOWN_KEYS = ("command", "cmd", "path", "file_path", "url", "pattern", "content")


class Keys(Protocol):
    """The part of the terminal answering a panel needs."""

    screen: TerminalScreen

    def write(self, data: str) -> None: ...

    def play(self, sequence: list[tuple[str, float]]) -> None: ...


class LogReader(Protocol):
    """The part of the session log answering a panel needs."""

    trace: TurnTrace

    def read(self) -> None: ...


@dataclass
class Answer:
    """The key pressed for a panel, when, how often, and the panel it was pressed on."""

    key: str
    sent_at: float
    tries: int
    panel: str


class Approvals:
    """Answers the approval panel on screen by policy, for the logged call the panel shows."""

    def __init__(
        self,
        driver: Driver,
        policy: ApprovalPolicy,
        keys: Keys,
        wire: LogReader,
        scope: Callable[[], Scope],
    ) -> None:
        self.driver = driver
        self.policy = policy
        self.keys = keys
        self.wire = wire
        self._scope = scope  # the session's current scope (its progress, whether to ask the caller)
        self._asked: dict[str, float] = {}  # approvals asked of the caller (approvals="ask"), since when

    def answer(self, seen_at: float, answered: dict[str, Answer]) -> None:
        """Answer the panel on screen (first seen at ``seen_at``); ``answered`` holds this turn's answers.

        A panel is matched to a call of the session log by its tool name and by what it displays (the
        command, the path); a panel still showing a call already answered is waited out (its key pressed
        again only if it stays); a panel whose call the log does not show yet is waited for, up to
        ``UNMATCHED_WAIT`` seconds, then rejected — and the turn is then reported as failed, never as a
        success with a refused write.
        """
        self.wire.read()  # the log up to the moment the panel is looked at
        now = time.monotonic()
        panel, whole = self.driver.approval_text(self.keys.screen.lines)
        call, key_id = self._panel_call(panel, answered, waited=now - seen_at, whole=whole)
        if key_id in answered:
            done = answered[key_id]
            if now - done.sent_at >= PRESS_AGAIN_AFTER and done.tries < MAX_PRESSES and done.panel == panel:
                self.keys.write(done.key)  # the same panel is still there: the key was lost, press it again
                answered[key_id] = Answer(done.key, now, done.tries + 1, panel)
            return
        if call is None and now - seen_at < UNMATCHED_WAIT:
            return  # the session log shows the call before its panel; give it time (under load, seconds)
        feedback = None
        if call is None:
            approve, reason = False, "approval panel without a matching tool call in the session log"
            self.wire.trace.unmatched.append(
                self.driver.approval_tool(self.keys.screen.lines) or "unknown tool"
            )
        else:
            approve, reason = self._decide(call)
            if approve and self._scope().approvals == "ask" and self.driver.tool_kind(call.name) != "read":
                asked = self._ask(call, key_id)
                if asked is None:
                    call.approval = "auto"  # still pending: the panel is matched to it again next look
                    return  # the caller has not answered yet: the panel waits
                approve, reason, feedback = asked
                call.approval = "approved" if approve else "rejected"
        key = self._press_answer(approve, reason, feedback)
        answered[key_id] = Answer(key, time.monotonic(), 1, panel)
        verb = "approved" if approve else "rejected"
        name = call.name if call else "unknown tool"
        self._scope().progress(f"{verb} {name}: {reason}")
        log.info("%s %s (%s)", verb, name, reason)

    def _panel_call(
        self, panel: str, answered: dict[str, Answer], *, waited: float, whole: bool
    ) -> tuple[CallRecord | None, str]:
        """The call an approval panel is for, and the key its answer is filed under (``whole``: the panel's
        first line, naming the tool and path, is on screen)."""
        calls = list(self.wire.trace.calls.values())
        shown = self.driver.approval_tool(self.keys.screen.lines)
        if self.driver.logs_approvals:
            pending = [c for c in calls if c.awaiting_approval and c.approval == "auto"]
        else:
            pending = [c for c in calls if c.result is None and c.approval == "auto"]
        pending = [c for c in pending if not shown or c.name == shown]
        for call in pending:  # panels come in call order
            if panel_shows(call, panel):
                return call, call.call_id
        if pending and self.driver.logs_approvals:
            return pending[0], pending[0].call_id  # the log names the calls awaiting approval, in order
        stale = [c for c in calls if c.call_id in answered and answered[c.call_id].panel == panel]
        if stale:
            return stale[-1], stale[-1].call_id
        if pending and not whole and waited >= PANEL_GRACE:
            return pending[0], pending[0].call_id  # a panel too tall to show what it is for: call order
        return None, "?" + panel

    def _decide(self, call: CallRecord) -> tuple[bool, str]:
        kind = self.driver.tool_kind(call.name)
        try:
            args = json.loads(call.arguments or "{}")
        except ValueError:
            args = {}
        targets = self.driver.edit_targets(call.name, args if isinstance(args, dict) else {})
        approve, reason = self.policy.decide(kind, targets)
        call.approval = "approved" if approve else "rejected"
        return approve, reason

    def _ask(self, call: CallRecord, key_id: str) -> tuple[bool, str, str | None] | None:
        """``approvals="ask"``: the approval asked of the caller like a question; (approve, reason, the
        caller's feedback) once answered, None while it waits."""
        scope = self._scope()
        if key_id not in self._asked:
            self._asked[key_id] = time.monotonic()
            question = Question(
                text=f"Kimi wants to run {call.name}: {one_line(call.arguments or '')[:ASKED_CHARS]}",
                header="Approval",
                options=(
                    Option("approve", "let Kimi do it"),
                    Option("reject", "refuse; Kimi goes on without it"),
                ),
            )
            scope.pause()
            scope.inbox.ask(question, kind="approval")
            self._scope().progress(f"asking the caller to approve {call.name}")
            return None
        answer = scope.inbox.take_answer()
        if answer is None:
            if time.monotonic() - self._asked[key_id] < scope.question_timeout:
                return None
            scope.inbox.withdraw()
            scope.note(f"nobody answered the approval of {call.name} in time: it was rejected")
            answer = DECLINED
        scope.resume()
        if isinstance(answer, Choice) and answer.picks == (0,):
            return True, "approved by the caller", None
        if isinstance(answer, Choice) and answer.text:
            return False, "rejected by the caller", f"Rejected by the user: {answer.text}"
        return False, "rejected by the caller", None

    def _press_answer(self, approve: bool, reason: str, feedback: str | None = None) -> str:
        if approve:
            self.keys.write(self.driver.approve_key)
            return self.driver.approve_key
        self.keys.play(self.driver.reject_with_feedback(feedback or self.policy.feedback(reason)))
        return self.driver.reject_key  # pressed again if the panel stays: the feedback input did not take


def panel_shows(call: CallRecord, panel: str) -> bool:
    """Whether an approval panel displays this call (its command or path); True when the call has
    nothing such a panel displays."""
    try:
        args = json.loads(call.arguments or "{}")
    except ValueError:
        return True
    values = [args[k] for k in _SHOWN_KEYS if isinstance(args, dict) and isinstance(args.get(k), str)]
    values = [squash(v.removeprefix("./")) for v in values if v.strip()]
    if not values:
        return True
    n = SHOWN_CHARS
    return any((v[:n] if len(v) > n else v) in panel or v[-n:] in panel for v in values)
