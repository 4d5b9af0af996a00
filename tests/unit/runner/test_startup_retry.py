"""A start-up fault (Kimi looked ready but was not: Kimi Code's "LLM not set") is retried once in a fresh Kimi
(issue 29, item 8): the message never reached the model, so sending it again is safe; a second fault is
reported, not retried again."""

from __future__ import annotations

from pathlib import Path

import pytest

from kimi_mcp.config import Settings
from kimi_mcp.drivers import KimiInstall
from kimi_mcp.errors import StartupFault
from kimi_mcp.runner import Runner, TaskRequest, _factory
from kimi_mcp.runner._restart import first_turn
from kimi_mcp.runner._run import TaskRun
from kimi_mcp.scope import Scope
from kimi_mcp.session import TurnTrace


class Kimi:
    """A session that shows a start-up fault on its first ``faults`` turns."""

    def __init__(self, name: str, faults: int) -> None:
        self.name, self.faults = name, faults
        self.session_id: str | None = None
        self.trace = TurnTrace()
        self.started = self.closed = False
        self.sent: list[str] = []

    def start(self) -> None:
        self.started = True

    def run_turn(self, message: str) -> TurnTrace:
        self.sent.append(message)
        if self.faults:
            self.faults -= 1
            raise StartupFault("Kimi Code said its model is not set although it looked ready with one")
        self.session_id = f"session-{self.name}"
        self.trace = TurnTrace(begun=True, ended=True, steps=[[f"answer from {self.name}"]])
        return self.trace

    def close(self) -> None:
        self.closed = True


def call_with(
    tmp_path: Path, first: Kimi, fresh: list[Kimi], monkeypatch: pytest.MonkeyPatch
) -> tuple[TaskRun, list[str]]:
    """A call whose Kimi is ``first``; the Kimis it starts later are ``fresh``, in order."""
    progress: list[str] = []
    runner = Runner()
    call = TaskRun(
        runner, TaskRequest("x", tmp_path), Settings(),
        scope=Scope.detached(), environ={"HOME": str(tmp_path)},
    )  # fmt: skip
    call.scope.sink = progress.append
    call.install = KimiInstall("/k/kimi", "2.1.0", "kimi-code")
    call.session = first  # type: ignore[assignment]
    call.result.warm_start = True  # it was a standby
    runner.pool.adopt(first)  # type: ignore[arg-type]

    def call_session(install, request, settings, env, scope, model):
        assert request is call.request and scope is call.scope  # for this call, under its scope
        return fresh.pop(0)

    monkeypatch.setattr(_factory, "call_session", call_session)
    return call, progress


def test_a_start_up_fault_is_retried_once_in_a_fresh_kimi(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    first, second = Kimi("first", faults=1), Kimi("second", faults=0)
    call, progress = call_with(tmp_path, first, [second], monkeypatch)
    trace = first_turn(call, "fix the bug")
    assert trace.output == "answer from second"
    assert first.closed and first.sent == ["fix the bug"]  # the faulty Kimi is gone
    assert second.started and second.sent == ["fix the bug"] and call.session is second
    assert call.runner.pool._active == {second}  # shutdown stops the fresh one, not the closed one
    assert call.result.warm_start is False
    assert any("starting a fresh Kimi" in line for line in progress), progress
    call.trace = trace
    call.error = StartupFault("pretend the turn failed")  # so the session is closed, not kept
    call._end_session()  # the call's cleanup ends the fresh session and reports its conversation
    assert second.closed and call.result.session_id == "session-second"


def test_a_second_start_up_fault_is_reported_not_retried_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    first, second, third = Kimi("first", faults=1), Kimi("second", faults=1), Kimi("third", faults=0)
    call, _ = call_with(tmp_path, first, [second, third], monkeypatch)
    with pytest.raises(StartupFault) as caught:
        first_turn(call, "fix the bug")
    assert caught.value.type == "session" and caught.value.retryable is True
    assert first.closed and second.started and not third.started and call.session is second
