"""The steers of one turn (``kimi_steer``): typed into Kimi's running turn only where that is safe, each
checked against Kimi's log (delivered once the log shows it exactly as typed), and the ones Kimi never took
settled when the turn ends (the last one left in the input box goes as the next turn)."""

from __future__ import annotations

import time
from collections.abc import Callable

from .._logging import get_logger
from ..drivers.base import Driver, ScreenState
from ..errors import KimiMCPError, SessionError
from ..scope import Delivered, Message, Scope
from ._terminal import Terminal
from ._wirelog import SessionLog, TurnTrace

log = get_logger("session")

INTERRUPT_WAIT = 4.0  # seconds Kimi has to log the end of an interrupted turn (panels answered on the way)
COLLECT_IDLE = 3.0  # seconds to wait for the idle screen once a turn ended (an error or a steer left drawn)
PASTE_SHOWN_WAIT = 1.0  # seconds a steer's paste has to show in Kimi's input box before its keys are typed
LATE_STEER_NOTE = (
    "a steer came as Kimi's turn ended and Kimi did not take it into that turn (it was left in Kimi's input "
    "box, now cleared): it was sent as the next turn"
)


def trimmed(text: str) -> str:
    """What both TUIs trim from a message (JavaScript's ``trim`` also takes U+FEFF)."""
    return text.strip().strip("\ufeff").strip()


class Steers:
    """The steers typed into one turn of ``wire``'s session for the call of ``scope`` (``interrupt`` stops the
    turn, waiting at most the seconds it is given)."""

    def __init__(
        self, term: Terminal, wire: SessionLog, scope: Scope, interrupt: Callable[[float], None]
    ) -> None:
        self.term = term
        self.wire = wire
        self.driver: Driver = wire.driver
        self.scope = scope
        self._interrupt = interrupt
        #: steers typed into the running turn that Kimi's log does not show yet (each as sent and as typed)
        self.pending: list[tuple[Message, str]] = []
        self.checked = 0  # how many of the log's steered messages were compared with them
        self.off = False  # a steer's paste vanished unexplained: the inbox's steers wait for the next turn

    @property
    def trace(self) -> TurnTrace:
        return self.wire.trace

    def type_next(self) -> None:
        """Type the inbox's next steer into the running turn, only into an empty input box (text left there
        means Kimi did not take the last steer, settled when the turn ends) and not while a tool call waits for
        its approval (:meth:`_call_unsettled`)."""
        inbox = self.scope.inbox
        if (
            self.off
            or not inbox.has("steer")
            or self.driver.input_pending(self.term.screen.lines)
            or self._call_unsettled()
        ):
            return
        message = inbox.next_message(("steer",))
        if message is None:
            return
        try:
            text = self.scope.prepare(message.text)
        except KimiMCPError as exc:
            self.scope.note(f"a message was not sent: {exc.message}")
            return
        (paste, _pause), *keys = self.driver.steer_sequence(text)
        if not self._pasted(paste):  # not in the box: it waits in the inbox (see _pasted)
            self.scope.inbox.put_back(message)
            return
        self.term.play(keys)
        log.debug("steer typed into the running turn (%d characters)", len(text))
        self.pending.append((message, text))
        self.scope.progress("message typed into the running turn; waiting for Kimi's log to show it taken")

    def _pasted(self, paste: str) -> bool:
        """Paste a steer and wait until Kimi's input box shows it (one redraw) before its keys: an approval
        panel that came up just before took the paste instead (Kimi Code dropped it, and the keys typed at
        once after it found nothing to send). False: the box does not show it, because a panel shows (the
        steer is typed once Kimi is busy again) or for ``PASTE_SHOWN_WAIT`` seconds with no panel to explain
        it (then no steer is typed in this turn: they go as the next turn)."""
        self.term.write(paste)
        screen = self.term.screen
        self.term.waits.until(
            lambda: (
                self.driver.input_pending(screen.lines)
                or self.driver.classify(screen.lines) is not ScreenState.BUSY
            ),
            PASTE_SHOWN_WAIT,
        )
        if self.driver.input_pending(screen.lines):
            return True
        if self.driver.classify(screen.lines) is ScreenState.BUSY:
            log.warning("a steer's paste did not show in Kimi's input box; steers wait for the next turn")
            self.off = True
        return False

    def _call_unsettled(self) -> bool:
        """Whether a tool call of the turn has neither a result nor an approval from kimi-mcp: its approval
        panel may be about to show (a steer's keys typed then were taken from the input box and lost by Kimi
        Code, 1 of 2 runs of the hostile-steer test once the keys went out without pauses). Waiting costs the
        steer nothing: Kimi hands it to the model only at the step boundary after the call anyway."""
        return any(c.result is None and c.approval == "auto" for c in self.trace.calls.values())

    def settle(self, empty_input: Callable[[], bool]) -> None:
        """The turn ended with steers its log never showed: one still in the input box (Kimi did not take
        it) is cleared and goes back to the inbox (the run sends it as the next turn); any other is said
        in the notes as not delivered. ``empty_input`` empties Kimi's input box and says whether it held
        anything (``Turn.empty_input``)."""
        if not self.pending:
            return
        left, self.pending = self.pending, []
        if self.driver.steer_cancel_key:  # e.g. kimi-cli: out of the search Ctrl-S opened when idle
            self.term.write(self.driver.steer_cancel_key)
        self.term.waits.wait_idle(COLLECT_IDLE, self.wire.read)
        if empty_input():
            message, _text = left.pop()  # nothing is typed over a full box: only the last one can be there
            self.scope.inbox.put_back(message)
            self.scope.note(LATE_STEER_NOTE)
        for message, _text in left:
            self.scope.note(
                "a steer was not delivered (Kimi's log does not show it reaching the model before the "
                f"turn ended): {message.text[:80]}"
            )

    def verify(self) -> None:
        """Each message typed into the turn must reach Kimi exactly as typed, else the turn is stopped; one
        the log shows is delivered (``Scope.delivered``)."""
        logged = self.trace.steered
        while self.checked < len(logged):
            got = trimmed(logged[self.checked])
            sent = trimmed(self.pending[0][1]) if self.pending else None
            self.checked += 1
            if got == sent:
                _message, text = self.pending.pop(0)
                delivery = self.driver.steer_delivery
                self.scope.delivered.append(Delivered(text, "steer", delivery, time.time()))
                continue
            log.warning("Kimi logged a message added to its turn that is not the one sent; stopping the turn")
            self._interrupt(INTERRUPT_WAIT)
            raise SessionError(
                "Kimi received a message in its turn that differs from the one sent (or one nobody sent), so "
                "the turn was stopped",
                details={
                    "received_near": self.scope.redactor(got[:80]),
                    "sent_near": self.scope.redactor((sent or "")[:80]),
                },
                suggestion="Retry; if it happens again, save a transcript (KIMI_MCP_TRANSCRIPT_DIR) and report it.",
                retryable=True,
            )
