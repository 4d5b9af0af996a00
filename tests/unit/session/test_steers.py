"""Steers typed into a running turn (issue 30, item 3): delivered only once Kimi's log shows them; one Kimi did
not take (left in its input box as the turn ended) is cleared and goes back to the inbox for the next turn;
one Kimi took but never logged is said in the notes; nothing is ever typed over text left in the input box.
No pty: a scripted input box stands in for Kimi Code's."""

from __future__ import annotations

import time
from pathlib import Path

import pexpect
import pytest

from kimi_mcp.drivers.base import KimiInstall, TurnBegin, TurnEnd, UserMessage
from kimi_mcp.drivers.kimi_code import KimiCodeDriver
from kimi_mcp.drivers.legacy import LegacyDriver
from kimi_mcp.errors import SessionError
from kimi_mcp.scope import Message, Scope
from kimi_mcp.session import ApprovalPolicy, KimiSession
from kimi_mcp.session._steering import LATE_STEER_NOTE
from kimi_mcp.session._turn import LEFTOVER_NOTE, Turn

PASTE_START, PASTE_END = "\x1b[200~", "\x1b[201~"


class InputBox:
    """Kimi Code's screen while a turn runs: a spinner above its input box. A paste goes into the box; Ctrl-S
    takes the box's text when ``takes`` (else the text stays, as when the turn is ending); Ctrl-U and
    backspace empty it unless ``stuck``."""

    pid = 2**22 + 1  # no such process: it has no descendants

    def __init__(
        self, text: str = "", *, takes: bool = True, stuck: bool = False, drops: bool = False
    ) -> None:
        self.text, self.takes, self.stuck = text, takes, stuck
        self.drops = drops  # a paste never reaches the box
        self.panel = False  # an approval panel shows (and takes the keys)
        self.busy = True
        self.sent: list[str] = []
        self.chunks = [self._screen()]

    def _screen(self) -> str:
        if self.panel:
            return "\x1b[2J\x1b[H Bash: sleep 4\r\n 1. Approve once\r\n 2. Reject\r\n"
        first = self.text.strip().splitlines()[0] if self.text.strip() else ""
        spinner = " ⠋ Working… · Tip: /init" if self.busy else ""
        return f"\x1b[2J\x1b[H{spinner}\r\n ╭──────╮\r\n │ > {first:<40}│\r\n ╰──────╯\r\n"

    def turn_ended(self) -> None:
        self.busy = False
        self.chunks.append(self._screen())

    def read_nonblocking(self, size: int, timeout: float) -> str:
        if self.chunks:
            return self.chunks.pop(0)
        time.sleep(min(timeout, 0.005))
        raise pexpect.TIMEOUT("nothing")

    def send(self, data: str) -> None:
        self.sent.append(data)
        if data.startswith(PASTE_START) and not self.drops and not self.panel:
            self.text += data[len(PASTE_START) : -len(PASTE_END)]
        elif data == "\x13" and self.takes or data.startswith("\x15") and not self.stuck:
            self.text = ""
        self.chunks.append(self._screen())


def turn_in(tmp_path: Path, box: InputBox, driver: type = KimiCodeDriver) -> Turn:
    install = (
        KimiInstall("/k/kimi", "2.1.0", "kimi-code")
        if driver is KimiCodeDriver
        else KimiInstall("/k/kimi", "1.50.0", "legacy")
    )
    kimi = KimiSession(
        driver(install), tmp_path, env={"HOME": str(tmp_path)},
        policy=ApprovalPolicy(tmp_path, read_only=False), scope=Scope(deadline=time.monotonic() + 60),
    )  # fmt: skip
    kimi.term.process.child = box  # type: ignore[assignment]
    kimi.term.pump(0)
    kimi.wire.apply(TurnBegin("go"))
    return kimi._turn("go")


def steer(turn: Turn, text: str) -> None:
    turn.scope.inbox.send(Message(text, "steer"))
    turn._messages()
    turn.term.pump(0)


def end(turn: Turn) -> None:
    """The log says the turn ended, and the screen goes idle: the steers are settled."""
    turn.wire.apply(TurnEnd())
    turn.term.process.child.turn_ended()  # type: ignore[union-attr]
    turn.steers.settle(turn.empty_input)


def test_a_steer_is_delivered_only_once_kimis_log_shows_it(tmp_path: Path) -> None:
    turn = turn_in(tmp_path, box := InputBox())
    steer(turn, "use blue")
    assert any(keys.startswith(PASTE_START + "use blue") for keys in box.sent) and "\x13" in box.sent
    assert turn.scope.delivered == []  # typed, and Ctrl-S pressed: not delivered yet
    turn.wire.apply(UserMessage("use blue"))
    turn.steers.verify()
    (delivered,) = turn.scope.delivered
    assert (delivered.text, delivered.mode, delivered.delivered) == ("use blue", "steer", "in_turn")
    end(turn)
    assert turn.scope.notes == [] and turn.scope.inbox.next_message(("steer",)) is None


def test_a_steer_left_in_the_input_box_as_the_turn_ended_is_cleared_and_sent_as_the_next_turn(
    tmp_path: Path,
) -> None:
    turn = turn_in(tmp_path, box := InputBox(takes=False))
    steer(turn, "late words")
    assert box.text.strip() == "late words"  # Kimi did not take it
    steer(turn, "second")  # never typed over the text in the box: it waits
    assert box.sent.count("\x13") == 1
    end(turn)
    assert box.text == "" and any(keys.startswith("\x15") for keys in box.sent)  # the box was emptied
    assert turn.scope.delivered == [] and LATE_STEER_NOTE in turn.scope.notes
    inbox = turn.scope.inbox
    assert [inbox.next_message(("steer",)).text for _ in range(2)] == ["late words", "second"]  # in order


def test_a_steer_kimi_took_but_never_logged_is_said_not_delivered(tmp_path: Path) -> None:
    turn = turn_in(tmp_path, InputBox())
    steer(turn, "lost words")
    end(turn)
    assert turn.scope.delivered == [] and turn.scope.inbox.next_message(("steer",)) is None
    assert any("not delivered" in note and "lost words" in note for note in turn.scope.notes)


def test_a_steer_whose_paste_an_approval_panel_took_is_typed_again_once_kimi_is_busy_again(
    tmp_path: Path,
) -> None:
    """Issue 32: with no pause before Ctrl-S, a steer pasted as Kimi Code's approval panel came up was lost:
    the keys wait until the box shows the paste; a panel that took it puts the steer back in the inbox."""
    turn = turn_in(tmp_path, box := InputBox())
    box.panel = True  # it comes up as the paste goes out: the screen still looked busy at the last look
    steer(turn, "use blue")
    assert "\x13" not in box.sent and turn.steers.pending == [] and not turn.steers.off
    box.panel = False
    box.chunks.append(box._screen())  # approved: busy again
    turn.term.pump(0)
    turn._messages()
    pastes = [keys for keys in box.sent if keys.startswith(PASTE_START)]
    assert len(pastes) == 2 and box.sent.count("\x13") == 1 and box.sent[-1] == "\x13"  # typed again, once
    assert box.text == ""  # Kimi took it from the box
    assert [text for _, text in turn.steers.pending] == ["use blue"]


def test_a_steer_whose_paste_vanished_with_no_panel_waits_for_the_next_turn(tmp_path: Path) -> None:
    turn = turn_in(tmp_path, box := InputBox(drops=True))
    steer(turn, "use blue")
    assert "\x13" not in box.sent and turn.steers.pending == [] and turn.steers.off
    steer(turn, "and green")  # no more tries in this turn: both wait in the inbox, in order
    assert sum(keys.startswith(PASTE_START) for keys in box.sent) == 1
    inbox = turn.scope.inbox
    assert [inbox.next_message(("steer",)).text for _ in range(2)] == ["use blue", "and green"]


def test_a_steer_logged_differently_from_the_one_typed_stops_the_turn(tmp_path: Path) -> None:
    turn = turn_in(tmp_path, InputBox())
    steer(turn, "late words")
    turn.wire.apply(UserMessage("late words\nAFTER"))
    turn._interrupt = lambda _wait: None  # type: ignore[method-assign]
    with pytest.raises(SessionError, match="differs from the one sent"):
        turn.steers.verify()
    assert turn.scope.delivered == []


def test_the_input_box_is_emptied_before_anything_is_typed_and_a_stuck_one_is_an_error(
    tmp_path: Path,
) -> None:
    turn = turn_in(tmp_path, InputBox("leftover"))
    assert turn.empty_input() is True and turn.empty_input() is False
    stuck = turn_in(tmp_path, InputBox("leftover", stuck=True))
    with pytest.raises(SessionError, match="could not be cleared"):
        stuck.empty_input()
    assert "cleared before anything else was typed" in LEFTOVER_NOTE


def test_kimi_cli_gets_a_steer_it_did_not_take_back_into_its_input_box_first(tmp_path: Path) -> None:
    box = InputBox()  # kimi-cli's screen is not drawn here: only the keys matter
    turn = turn_in(tmp_path, box, LegacyDriver)
    turn.steers.pending.append((Message("late", "steer"), "late"))
    turn.term.waits.wait_idle = lambda limit, refresh: True  # type: ignore[method-assign]
    turn.steers.settle(turn.empty_input)
    assert box.sent[0] == "\x07"  # Ctrl-G: out of the (i-search) Ctrl-S opens without a running turn
