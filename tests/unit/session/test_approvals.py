"""Approval panels are answered for the logged call they display, never on a stale panel, and a panel the
session log never explains is rejected and fails the turn (regression: legacy under CPU load)."""

from __future__ import annotations

import json
import time
from pathlib import Path

from kimi_mcp.drivers.base import KimiInstall
from kimi_mcp.drivers.kimi_code import KimiCodeDriver
from kimi_mcp.drivers.legacy import LegacyDriver
from kimi_mcp.scope import Scope
from kimi_mcp.session import PANEL_GRACE, UNMATCHED_WAIT, ApprovalPolicy, CallRecord, TurnTrace
from kimi_mcp.session._approvals import MAX_PRESSES, PRESS_AGAIN_AFTER, Approvals
from kimi_mcp.session._terminal import Terminal


class FakeTerminal(Terminal):
    """A terminal without a process: it records the keys it would press."""

    def __init__(self, driver: LegacyDriver) -> None:
        scope = Scope.detached()
        super().__init__(driver, scope=lambda: scope)
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
        self.scope = Scope(deadline=time.monotonic() + 60, progress=self.progress.append)
        self.approvals = Approvals(driver, policy, self.term, self.wire, lambda: self.scope)

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


def test_a_lost_key_is_pressed_again_while_the_same_panel_stays_but_not_forever(tmp_path: Path) -> None:
    kimi = Keys(tmp_path)
    shell = kimi.call("a", "Shell", command="make test")
    answered: dict = {}
    kimi.show(panel("Shell", "make test"))
    kimi._answer_approval(time.monotonic(), answered)
    assert kimi.pressed == ["1"] and shell.approval == "approved"
    kimi._answer_approval(time.monotonic(), answered)
    assert kimi.pressed == ["1"]  # answered a moment ago: give Kimi time to take the panel down
    for _ in range(MAX_PRESSES + 1):
        answered["a"].sent_at -= PRESS_AGAIN_AFTER
        kimi._answer_approval(time.monotonic(), answered)
    assert kimi.pressed == ["1"] * MAX_PRESSES and answered["a"].tries == MAX_PRESSES
    assert kimi.wire.reads == MAX_PRESSES + 3  # the log is read up to each look at a panel


def test_a_read_only_task_rejects_with_feedback_so_the_model_goes_on(tmp_path: Path) -> None:
    kimi = Keys(tmp_path, read_only=True)
    write = kimi.call("w", "WriteFile", path="notes.txt", content="x")
    answered: dict = {}
    kimi.show(panel("WriteFile", "+1 notes.txt"))
    kimi._answer_approval(time.monotonic(), answered)
    assert write.approval == "rejected"
    assert kimi.pressed[0] == "4" and kimi.pressed[-1] == "\r"
    assert "read-only task" in kimi.pressed[1] and "\n" not in kimi.pressed[1]
    assert answered["w"].key == "3"  # what is pressed again if the feedback input did not take
    assert kimi.progress == ["rejected WriteFile: read-only task: no file writes or commands"]


def test_a_tall_panel_showing_nothing_known_waits_its_grace_then_goes_to_the_first_call(
    tmp_path: Path,
) -> None:
    kimi = Keys(tmp_path)
    first = kimi.call("g0", "WriteFile", path="a.txt", content="aaa")
    second = kimi.call("g1", "WriteFile", path="b.txt", content="ccc")
    kimi.show(panel("WriteFile", *(("b" * 100),) * 40)[-38:])  # its top, naming the file, scrolled away
    answered: dict = {}
    kimi._answer_approval(time.monotonic(), answered)
    assert kimi.pressed == [] and first.approval == "auto"
    kimi._answer_approval(time.monotonic() - PANEL_GRACE - 0.1, answered)
    assert kimi.pressed == ["1"] and (first.approval, second.approval) == ("approved", "auto")


def code_panel(question: str, *body: str) -> list[str]:
    return [
        f"   ▶ {question}",
        *(f"   {line}" for line in body),
        "   ▶ 1. Approve once",
        "     2. Approve for this session",
        "     3. Reject",
        "     4. Reject with feedback",
        "   ↑/↓ select · 1/2/3/4 choose · ↵ confirm · ctrl+e preview",
    ]


def test_kimi_code_panels_go_to_the_logged_approval_requests(tmp_path: Path) -> None:
    kimi = Keys(tmp_path, driver=KimiCodeDriver(KimiInstall("/bin/kimi", "2.1.0", "kimi-code")))
    ls = kimi.call("c1", "Bash", command="ls")
    rm = kimi.call("c2", "Bash", command="rm -rf build")
    done = kimi.call("c0", "Bash", command="pwd")  # logged, but its approval is not awaited
    ls.awaiting_approval = rm.awaiting_approval = True
    kimi.show(code_panel("Run this command?", "cwd: /w", "$ rm -rf build"))
    kimi._answer_approval(time.monotonic(), {})
    assert (rm.approval, ls.approval, done.approval) == ("approved", "auto", "auto")
    kimi.show(code_panel("Approve Bash?", "something the log does not show"))
    kimi._answer_approval(time.monotonic(), {})  # no waiting: the log names the calls awaiting approval
    assert ls.approval == "approved" and done.approval == "auto" and kimi.pressed == ["1", "1"]
