"""A first call announced by the fast connect while the server loads (``first_call``): which calls a standby
would serve, and that their Kimi starts only before the server is up and with standbys on; the relay tells
of the client's first ``tools/call`` once, also to a listener that comes after it."""

from __future__ import annotations

import json
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from kimi_mcp._connect import FastConnect
from kimi_mcp.config import Settings
from kimi_mcp.first_call import SWITCH_INTERVAL, FirstCall, standby_for


def call(name: str, **arguments: Any) -> dict[str, Any]:
    return {"name": name, "arguments": arguments}


@pytest.mark.parametrize(
    ("params", "expected"),
    [
        (call("kimi_code_task", task_description="x"), (None, False)),
        (call("kimi_refactor", task_description="x", work_dir="/w", isolation="none"), ("/w", False)),
        (call("kimi_analyze_code", question="x", work_dir="sub"), ("sub", True)),
        (call("kimi_code_task", task_description="x", model="other"), None),  # its own Kimi
        (call("kimi_code_task", task_description="x", isolation="worktree"), None),
        (call("kimi_code_task", task_description="x", isolation="worktree", attempts=3), None),
        (call("kimi_code_task", task_description="x", dry_run=True), None),
        (call("kimi_continue", session_id="s", message="x"), None),
        (call("kimi_status"), None),
        (call("kimi_review", range="main...x"), None),
        ("not a dict", None),
    ],
)
def test_which_first_calls_a_standby_would_serve(params: Any, expected: tuple | None) -> None:
    assert standby_for(params) == expected


class Runner:
    def __init__(self) -> None:
        self.started: list[tuple[str | None, bool]] = []
        self.done = threading.Event()

    def prewarm_for(self, settings: Settings, env: dict, work_dir: str | None, read_only: bool) -> None:
        self.started.append((work_dir, read_only))
        self.done.set()


def test_a_call_announced_before_the_server_is_up_starts_its_kimi() -> None:
    runner = Runner()
    first = FirstCall(runner, Settings(), {})  # type: ignore[arg-type]
    first.announced(call("kimi_verify", question="x", work_dir="/w"))
    assert runner.done.wait(10) and runner.started == [("/w", True)]


def test_the_first_calls_start_gets_the_interpreter_more_often_until_the_server_is_up() -> None:
    before = sys.getswitchinterval()
    first = FirstCall(Runner(), Settings(), {})  # type: ignore[arg-type]
    first.announced(call("kimi_status"))  # no Kimi to start: nothing changes
    assert sys.getswitchinterval() == before
    first.announced(call("kimi_code_task", task_description="x"))
    assert sys.getswitchinterval() == pytest.approx(SWITCH_INTERVAL)
    first.announced(call("kimi_code_task", task_description="y"))  # a second: the first's value is kept
    first.server_up()
    assert sys.getswitchinterval() == before
    first.server_up()
    assert sys.getswitchinterval() == before


@pytest.mark.parametrize("standby", ["after-call", "off"])
def test_no_kimi_starts_once_the_server_is_up_or_with_standbys_off(standby: str) -> None:
    runner = Runner()
    first = FirstCall(runner, Settings(standby=standby), {})  # type: ignore[arg-type]
    if standby != "off":
        first.server_up()
    first.announced(call("kimi_code_task", task_description="x"))
    time.sleep(0.2)
    assert runner.started == []


def request(request_id: int, method: str, params: dict | None = None) -> bytes:
    return json.dumps({"jsonrpc": "2.0", "id": request_id, "method": method, "params": params or {}}).encode()


def test_the_relay_tells_of_the_first_tool_call_once_also_to_a_later_listener(tmp_path: Path) -> None:
    relay = FastConnect(tmp_path / "record.json")
    relay._take(request(1, "tools/list"))
    assert relay._take(request(2, "tools/call", call("kimi_code_task", task_description="a")))[1] is True
    heard: list[Any] = []
    relay.on_first_call(heard.append)  # the call came before the server listened: told at once
    relay._take(request(3, "tools/call", call("kimi_prompt", task_description="b")))
    assert heard == [call("kimi_code_task", task_description="a")]


def test_a_listener_that_comes_first_is_told_when_the_call_comes(tmp_path: Path) -> None:
    relay = FastConnect(tmp_path / "record.json")
    heard: list[Any] = []
    relay.on_first_call(heard.append)
    assert heard == []
    relay._take(request(1, "tools/call", call("kimi_consult", question="q")))
    assert heard == [call("kimi_consult", question="q")]


def test_no_kimi_starts_here_for_a_call_that_runs_on_a_worker() -> None:
    runner = Runner()
    first = FirstCall(runner, Settings(broker="redis://:secret@127.0.0.1:6379/0"), {})  # type: ignore[arg-type]
    first.announced(call("kimi_code_task", task_description="x"))
    time.sleep(0.2)
    assert runner.started == []
