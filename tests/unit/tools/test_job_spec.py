"""A job as data: each call's work is a ``JobSpec`` kept in its store row (masked like the arguments), and the
spec alone, read back from the store, runs to the same result through an executor (the tool's finishing
step looked up by its name), with no part of the call that made it."""

from __future__ import annotations

import asyncio
import json
import math
import os
from pathlib import Path
from typing import Any

import pytest
from fastmcp import Client

from kimi_mcp.config import Settings, state_dir
from kimi_mcp.executors import Local, Runtime
from kimi_mcp.finish import FINISHERS
from kimi_mcp.jobs import STORE_FILE, JobSpec, JobStore
from kimi_mcp.models import TaskResult
from kimi_mcp.scope import Scope
from kimi_mcp.server import create_server
from kimi_mcp.task import RunWatch
from kimi_mcp.tools import TOOLS

SECRET = "sk-configuredsecretvalue12345"


class Refactoring:
    """A fake Kimi turn: rewrites a.py, records each prompt it got."""

    def __init__(self) -> None:
        self.prompts: list[str] = []

    def __call__(self, request, settings, **_kw) -> TaskResult:
        self.prompts.append(request.prompt)
        (request.workspace / "a.py").write_text("y = 1\n")
        answer = {"explanation": "renamed", "behavior_preserved": True}
        return TaskResult(
            success=True, workspace=str(request.workspace), output=json.dumps(answer),
            files_modified=["a.py"], session_id=request.session_id or "sess-1",
        )  # fmt: skip


def calls(runner: Any, *steps: tuple[str, dict]) -> list[dict]:
    async def body():
        async with Client(create_server(Settings(), run=runner)) as client:
            return [
                (await client.call_tool(name, args, raise_on_error=False)).structured_content
                for name, args in steps
            ]

    return asyncio.run(body())


def stored_spec(job_id: str) -> dict:
    store = JobStore(state_dir(Settings(), os.environ) / STORE_FILE)
    try:
        spec = store.spec(job_id)
    finally:
        store.close()
    assert spec is not None
    return spec


def test_every_structured_tool_has_a_finisher_named_after_it() -> None:
    assert set(FINISHERS) == {
        "kimi_analyze_code",
        "kimi_verify",
        "kimi_consult",
        "kimi_refactor",
        "kimi_debug",
        "kimi_review",
    }
    assert set(FINISHERS) <= set(TOOLS)


def test_the_store_keeps_the_calls_spec_masked_while_kimi_gets_it_whole(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MOONSHOT_API_KEY", SECRET)
    (tmp_path / "a.py").write_text("x = 1\n")
    runner = Refactoring()
    args = {
        "file_path": "./a.py",
        "refactor_instructions": f"rename, key {SECRET}",
        "work_dir": str(tmp_path),
    }
    (result,) = calls(runner, ("kimi_refactor", args | {"max_tokens": 900}))
    spec = stored_spec(result["job_id"])
    assert SECRET in runner.prompts[0]  # Kimi got the caller's words
    assert SECRET not in json.dumps(spec) and "***" in spec["prompt"]  # the disk did not
    assert spec["tool"] == "kimi_refactor" and spec["workspace"] == str(tmp_path.resolve())
    assert spec["sent"] == {"a.py": "x = 1\n"}  # resolved relative path → the text as it was sent
    assert (spec["read_only"], spec["isolation"], spec["max_tokens"], spec["approvals"]) == (
        False,
        "none",
        900,
        "policy",
    )
    assert spec["arguments"]["file_path"] == "./a.py" and spec["session_id"] is None


def test_a_spec_read_back_from_the_store_runs_to_the_same_result_without_its_call(tmp_path: Path) -> None:
    (tmp_path / "a.py").write_text("x = 1\n")
    args = {"file_path": "a.py", "refactor_instructions": "rename", "work_dir": str(tmp_path)}
    (direct,) = calls(Refactoring(), ("kimi_refactor", args))
    (tmp_path / "a.py").write_text("x = 1\n")  # as before the call
    spec = JobSpec.from_dict(json.loads(json.dumps(stored_spec(direct["job_id"]))) | {"from_a_newer": 1})
    executor = Local(Runtime(Settings(), {}, tmp_path / "state", Refactoring()))
    again = executor.run(spec, job_id="job_x", scope=Scope(deadline=math.inf), watch=RunWatch())
    shaped = again.model_dump(mode="json")
    for field in ("file_path", "original_content", "refactored_content", "diff", "explanation", "parse_ok"):
        assert shaped[field] == direct[field], field
    assert direct["diff"].startswith("--- a/a.py") and direct["refactored_content"] == "y = 1\n"


def test_an_isolated_job_and_its_follow_up_record_where_they_run(repo: Path) -> None:
    runner = Refactoring()
    first, follow_up = calls(
        runner,
        (
            "kimi_prompt",
            {"prompt": "p", "work_dir": str(repo), "isolation": "worktree", "verify_command": "true"},
        ),
        ("kimi_continue", {"session_id": "sess-1", "message": "again"}),
    )
    assert first["success"] is True and follow_up["success"] is True, (first, follow_up)
    spec, next_spec = stored_spec(first["job_id"]), stored_spec(follow_up["job_id"])
    assert (spec["isolation"], spec["verify_command"], spec["copy"]) == ("worktree", "true", None)
    assert (next_spec["tool"], next_spec["session_id"], next_spec["copy"]) == (
        "kimi_continue",
        "sess-1",
        first["worktree"]["id"],
    )
    assert next_spec["isolation"] == "worktree" and next_spec["verify_command"] == "true"
