"""Approval panels are answered for the logged call they display, never on a stale panel, and a panel the
session log never explains is rejected and fails the turn (regression: legacy under CPU load)."""

from __future__ import annotations

import json
import time
from pathlib import Path

from kimi_mcp.drivers.base import KimiInstall
from kimi_mcp.drivers.legacy import LegacyDriver
from kimi_mcp.session import UNMATCHED_WAIT, ApprovalPolicy, CallRecord, TurnTrace
from kimi_mcp.session._approvals import Approvals
from kimi_mcp.session._terminal import Terminal


class FakeTerminal(Terminal):
    """A terminal without a process: it records the keys it would press."""

    def __init__(self, driver: LegacyDriver) -> None:
        super().__init__(driver, redact=lambda text: text)
        self.pressed: list[str] = []

    def write(self, data: str) -> None:
        self.pressed.append(data)

    def sleep(self, seconds: float) -> None:
        pass


class FakeLog:
    """A session log read up to now: its trace holds what a test put there."""

    def __init__(self) -> None:
        self.trace = TurnTrace()
        self.reads = 0

    def read(self) -> None:
        self.reads += 1


class Keys:
    """Approval answering without a process or a log file."""

    def __init__(self, workspace: Path, *, read_only: bool = False, driver=None) -> None:
        driver = driver or LegacyDriver(
            KimiInstall(binary="/usr/local/bin/kimi", version="1.50.0", dialect="legacy")
        )
        self.term = FakeTerminal(driver)
        self.wire = FakeLog()
        self.progress: list[str] = []
        policy = ApprovalPolicy(workspace, read_only=read_only)
        self.approvals = Approvals(driver, policy, self.term, self.wire, self.progress.append)

    @property
    def pressed(self) -> list[str]:
        return self.term.pressed

    @property
    def trace(self) -> TurnTrace:
        return self.wire.trace

    def _answer_approval(self, seen_at: float, answered: dict) -> None:
        self.approvals.answer(seen_at, answered)

    def show(self, lines: list[str]) -> None:
        self.term.screen.feed("\x1b[2J\x1b[H" + "\r\n".join(lines))

    def call(self, call_id: str, name: str, **args: str) -> CallRecord:
        record = self.trace.calls[call_id] = CallRecord(call_id, name, json.dumps(args))
        return record


def panel(tool: str, *body: str) -> list[str]:
    action = "run command" if tool == "Shell" else "edit file"
    return [
        "⠸ Using " + tool,
        "╭─ approval ─────────────────────────────────────────────╮",
        f"│  {tool} is requesting approval to {action}:",
        *(f"│  {line}" for line in body),
        "│ → [1] Approve once",
        "│   [2] Approve for this session",
        "│   [3] Reject",
        "│   [4] Reject, tell the model what to do instead",
        "╰─────────────────────────────────────────────────────────╯",
        "── input ───────────────────────────────────────────────",
    ]


def test_a_stale_panel_is_not_answered_for_the_next_call_of_the_same_tool(tmp_path: Path) -> None:
    kimi = Keys(tmp_path)
    first = kimi.call("a", "Shell", command="printf one > .env")
    second = kimi.call("c", "Shell", command="printf two > image.bin")
    answered: dict = {}
    kimi.show(panel("Shell", "printf one > .env"))
    kimi._answer_approval(time.monotonic(), answered)
    assert first.approval == "approved" and kimi.pressed == ["1"]
    kimi._answer_approval(time.monotonic(), answered)  # the same panel, still on screen
    assert second.approval == "auto" and kimi.pressed == ["1"]
    kimi.show(panel("Shell", "printf two > image.bin"))
    kimi._answer_approval(time.monotonic(), answered)
    assert second.approval == "approved" and kimi.pressed == ["1", "1"]


def test_panels_out_of_call_order_go_to_the_call_they_display(tmp_path: Path) -> None:
    kimi = Keys(tmp_path)
    write = kimi.call("w", "WriteFile", path="big.txt", content="xxxx")
    shell = kimi.call("s", "Shell", command="printf two > image.bin")
    outside = kimi.call("o", "WriteFile", path="/etc/evil", content="x")
    kimi.show(panel("Shell", "printf two > image.bin"))
    kimi._answer_approval(time.monotonic(), {})
    assert (shell.approval, write.approval, outside.approval) == ("approved", "auto", "auto")
    kimi.show(panel("WriteFile", "+1 /etc/evil", "1 + x"))
    kimi._answer_approval(time.monotonic(), {})
    assert outside.approval == "rejected" and write.approval == "auto"  # the panel's call, by policy


def test_a_panel_the_log_never_explains_waits_then_is_rejected_and_fails_the_turn(tmp_path: Path) -> None:
    kimi = Keys(tmp_path)
    logged = kimi.call("a", "Shell", command="ls")
    kimi.show(panel("Shell", "rm -rf build"))
    answered: dict = {}
    kimi._answer_approval(time.monotonic(), answered)  # within the wait: nothing pressed
    assert kimi.pressed == [] and kimi.trace.unmatched == []
    kimi._answer_approval(time.monotonic() - UNMATCHED_WAIT - 0.1, answered)
    assert kimi.pressed[0] == "4" and kimi.trace.unmatched == ["Shell"]
    assert logged.approval == "auto"
    kimi.show(panel("Shell", "rm -rf dist"))  # another unexplained panel gets its own answer
    kimi._answer_approval(time.monotonic() - UNMATCHED_WAIT - 0.1, answered)
    assert kimi.trace.unmatched == ["Shell", "Shell"]


def test_a_panel_too_tall_to_show_its_top_is_matched_on_the_content_it_shows(tmp_path: Path) -> None:
    kimi = Keys(tmp_path)
    gens = [kimi.call(f"g{i}", "WriteFile", path=f"gen{i}.txt", content=str(i) * 3000) for i in range(3)]
    tall = panel("WriteFile", "+1 /work/gen1.txt", *(("1" * 100),) * 40)[-38:]  # top scrolled away
    kimi.show(tall)
    kimi._answer_approval(time.monotonic(), {})
    assert [g.approval for g in gens] == ["auto", "approved", "auto"]
