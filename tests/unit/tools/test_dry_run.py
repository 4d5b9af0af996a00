"""dry_run on the Kimi tools (issue 31 item 5), through FastMCP's in-memory client with the runner replaced by
a fake: nothing starts (no Kimi turn, no job row, no isolated copy), and the result says what the call would
do, its message computed as the real call computes it."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import Any

from fastmcp import Client

from kimi_mcp.adapter.dry_run import typed_message
from kimi_mcp.config import Settings, state_dir
from kimi_mcp.jobs import STORE_FILE, JobStore
from kimi_mcp.models import TaskResult
from kimi_mcp.server import create_server

SECRET = "envSecret-0123456789abcdef"


class Recorder:
    """A fake Kimi turn: records each request, answers at once with a conversation to follow up."""

    def __init__(self) -> None:
        self.requests: list[Any] = []

    def __call__(self, request, settings, **_kwargs) -> TaskResult:
        self.requests.append(request)
        return TaskResult(success=True, workspace=str(request.workspace), output="{}", session_id="s-1")


def calls(runner: Recorder, settings: Settings, *steps: tuple[str, dict]) -> list[dict]:
    async def body() -> list[dict]:
        async with Client(create_server(settings, run=runner)) as client:
            return [(await client.call_tool(t, a, raise_on_error=False)).structured_content for t, a in steps]

    return asyncio.run(body())


def job_rows() -> int:
    path = state_dir(Settings(), os.environ) / STORE_FILE
    if not path.exists():
        return 0
    store = JobStore(path)
    try:
        return len(store.list())
    finally:
        store.close()


def workspace(tmp_path: Path) -> Path:
    (tmp_path / "a.py").write_text("def f():\n\treturn 1\n")
    (tmp_path / "b.py").write_text("x = 2\n")
    (tmp_path / ".env").write_text(f"TOKEN={SECRET}\n")
    return tmp_path


def test_a_dry_run_starts_nothing_and_says_what_the_real_call_would_send(tmp_path: Path) -> None:
    ws = workspace(tmp_path)
    args = {"file_paths": ["a.py", ".env", "b.py"], "analysis_focus": "naming", "work_dir": str(ws)}
    runner = Recorder()
    (dry,) = calls(
        runner, Settings(prices="k2=2/8", model="k2"), ("kimi_analyze_code", args | {"dry_run": True})
    )
    assert runner.requests == [] and job_rows() == 0  # no Kimi turn, no job
    assert dry["success"] is True and dry["status"] == "done" and dry["job_id"] == ""
    info = dry["dry_run"]
    assert info["files_sent"] == ["a.py", "b.py"] and info["redacted"] == [".env"] and info["truncated"] == []
    assert (info["workspace"], info["model"], info["isolation"], info["runs_on"]) == (
        str(ws),
        "k2",
        "none",
        "local",
    )
    assert info["max_tokens"] is None
    assert SECRET not in str(dry)

    (real,) = calls(runner, Settings(), ("kimi_analyze_code", args))  # the same call for real
    assert real["success"] is True and len(runner.requests) == 1 and job_rows() == 1
    sent = runner.requests[0].prompt
    assert SECRET not in sent and "def f()" in sent  # the secret file redacted in the real call too
    message = typed_message(sent, Settings().max_message_tokens)[0]
    assert (
        info["prompt_chars"] == len(message) and "\u21e5return 1" in message
    )  # the tab as Kimi Code gets it
    assert dry["usage"]["input_tokens"] == info["prompt_tokens"] > 0
    assert dry["usage"]["cost_usd"] == round(info["prompt_tokens"] * 2 / 1_000_000, 6)  # input at k2's price


def test_a_write_tools_dry_run_makes_no_copy_and_shows_its_isolation_and_limit(repo: Path) -> None:
    runner = Recorder()
    args = {
        "task_description": "add f", "context_files": ["app.py"], "work_dir": str(repo), "isolation": "worktree",
        "attempts": 2, "max_tokens": 900, "dry_run": True,
    }  # fmt: skip
    (dry,) = calls(runner, Settings(), ("kimi_code_task", args))
    info = dry["dry_run"]
    assert (info["isolation"], info["max_tokens"], info["files_sent"], info["model"]) == (
        "worktree", 900, ["app.py"], None,
    )  # fmt: skip
    assert dry["usage"]["cost_usd"] is None  # no price configured
    assert runner.requests == [] and job_rows() == 0
    assert not (state_dir(Settings(), os.environ) / "worktrees").exists()  # no isolated copy


def test_a_dry_run_is_refused_as_the_real_call_would_be(tmp_path: Path) -> None:
    ws = workspace(tmp_path)
    runner = Recorder()
    too_big, secret_only, over_limit = calls(
        runner,
        Settings(max_message_tokens=50),
        ("kimi_analyze_code", {"file_paths": ["a.py"], "work_dir": str(ws), "dry_run": True}),
        ("kimi_verify", {"requirements": "r", "file_paths": [".env"], "work_dir": str(ws), "dry_run": True}),
        ("kimi_code_task", {"task_description": "x", "attempts": 2, "work_dir": str(ws), "dry_run": True}),
    )
    assert too_big["error"]["type"] == "bad_input" and "over the 50 tokens" in too_big["error"]["message"]
    assert "every file given looks like a secret" in secret_only["error"]["message"]
    assert "isolation='worktree'" in over_limit["error"]["message"]
    assert runner.requests == [] and job_rows() == 0


def test_a_follow_ups_dry_run_queues_nothing(tmp_path: Path) -> None:
    ws = workspace(tmp_path)
    runner = Recorder()
    first, dry = calls(
        runner,
        Settings(),
        ("kimi_prompt", {"prompt": "hello", "work_dir": str(ws)}),
        (
            "kimi_continue",
            {"session_id": "s-1", "message": "and b?", "context_files": ["b.py"], "dry_run": True},
        ),
    )
    assert first["success"] is True and len(runner.requests) == 1 and job_rows() == 1
    assert dry["dry_run"]["files_sent"] == ["b.py"] and dry["dry_run"]["workspace"] == str(ws)
    assert len(runner.requests) == 1 and job_rows() == 1  # no second turn, no second job


def test_a_dry_run_on_a_broker_says_a_worker_would_run_it(tmp_path: Path) -> None:
    ws = workspace(tmp_path)
    runner = Recorder()
    settings = Settings(broker="redis://127.0.0.1:9/0")  # never reached: a dry run sends nothing
    (dry,) = calls(runner, settings, ("kimi_prompt", {"prompt": "hi", "work_dir": str(ws), "dry_run": True}))
    assert dry["dry_run"]["runs_on"] == "worker" and runner.requests == []
