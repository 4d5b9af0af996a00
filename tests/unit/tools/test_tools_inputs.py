"""The tool layer through FastMCP's in-memory client with a fake runner: bad input names the argument the
caller used, and an unreadable file is a structured error (issue 13, items 5 and 9)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from fastmcp import Client

from kimi_mcp.config import Settings
from kimi_mcp.models import TaskResult
from kimi_mcp.server import create_server

_ran: list = []  # what fake_run was given (cleared by the ``calls`` fixture)


def fake_run(request, settings, **_kwargs) -> TaskResult:
    _ran.append(request)
    return TaskResult(success=True, workspace=str(request.workspace), output="done")


@pytest.fixture
def calls() -> list:
    _ran.clear()
    return _ran


def call(tool: str, args: dict):
    async def body():
        async with Client(create_server(Settings(), run=fake_run)) as client:
            return await client.call_tool(tool, args, raise_on_error=False)

    return asyncio.run(body())


@pytest.mark.parametrize(
    ("tool", "args", "argument"),
    [
        ("kimi_code_task", {"task_description": "x", "context_files": ["src/nope.py"]}, "context_files"),
        ("kimi_refactor", {"file_path": "src/nope.py", "refactor_instructions": "x"}, "file_path"),
        ("kimi_debug", {"error_message": "x", "relevant_files": ["src/nope.py"]}, "relevant_files"),
        ("kimi_analyze_code", {"file_paths": ["src/nope.py"]}, "file_paths"),
        ("kimi_verify", {"requirements": "x", "file_paths": ["src/nope.py"]}, "file_paths"),
        ("kimi_consult", {"role": "skeptic", "message": "x", "file_paths": ["src/nope.py"]}, "file_paths"),
    ],
)
def test_a_missing_file_names_the_argument_the_caller_used(
    tool: str, args: dict, argument: str, tmp_path: Path, calls: list
) -> None:
    result = call(tool, {**args, "work_dir": str(tmp_path)})
    error = result.structured_content["error"]
    assert result.is_error and error["type"] == "bad_input"
    assert error["message"] == f"invalid {argument}: src/nope.py does not exist"
    assert calls == []


def test_an_unreadable_context_file_is_a_structured_error(
    tmp_path: Path, calls: list, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "locked.txt").write_text("x")
    real = Path.read_bytes

    def denied(self: Path) -> bytes:
        if self.name == "locked.txt":
            raise PermissionError(13, "Permission denied")
        return real(self)

    monkeypatch.setattr(Path, "read_bytes", denied)
    result = call(
        "kimi_code_task",
        {"task_description": "x", "context_files": ["locked.txt"], "work_dir": str(tmp_path)},
    )
    error = result.structured_content["error"]
    assert error["type"] == "bad_input"
    assert error["message"] == "invalid context_files: locked.txt: Permission denied"
    assert calls == []


def test_a_good_call_reaches_the_runner_with_the_inert_prompt_unchanged(tmp_path: Path, calls: list) -> None:
    result = call("kimi_prompt", {"prompt": "/exit now", "work_dir": str(tmp_path)})
    assert result.structured_content["success"] is True
    assert calls[0].prompt == "/exit now"  # made inert by the runner, for the dialect it drives


@pytest.mark.parametrize(
    ("tool", "args", "problem"),
    [
        ("kimi_code_task", {}, "task_description: Missing required argument"),
        (
            "kimi_code_task",
            {"task_description": "x", "wait_s": -1},
            "wait_s: Input should be greater than or equal",
        ),
        ("kimi_prompt", {"prompt": "x", "bogus": 1}, "bogus: Unexpected keyword argument"),
        (
            "kimi_job",
            {"job_id": "job_x", "action": "explode"},
            "action: Input should be 'wait', 'status', 'answer' or",
        ),
        ("kimi_jobs", {"limit": 0}, "limit: Input should be greater than or equal to 1"),
        ("kimi_apply", {}, "job_id: Missing required argument"),
    ],
)
def test_arguments_the_schema_refuses_get_the_structured_bad_input_result(
    tool: str, args: dict, problem: str, tmp_path: Path, calls: list
) -> None:
    needs_workspace = tool in ("kimi_code_task", "kimi_prompt")
    result = call(tool, {**args, **({"work_dir": str(tmp_path)} if needs_workspace else {})})
    assert result.is_error
    error = result.structured_content["error"]
    assert error["type"] == "bad_input" and error["retryable"] is False
    assert error["message"].startswith(f"{tool}: invalid arguments: ") and problem in error["message"]
    assert result.structured_content["success"] is False
    text = result.content[0].text
    assert text.startswith(f"Error (bad_input): {tool}: invalid arguments:") and "What to do: Fix the" in text
    assert "errors.pydantic.dev" not in text and calls == []


def test_a_long_task_is_not_cut_off_by_the_schema_below_the_message_limit(
    tmp_path: Path, calls: list
) -> None:
    """150,000 characters is about 37,500 tokens: within the 45,000-token message limit the README promises."""
    result = call("kimi_code_task", {"task_description": "x" * 150_000, "work_dir": str(tmp_path)})
    assert not result.is_error and result.structured_content["success"] is True
    assert len(calls) == 1 and "x" * 150_000 in calls[0].prompt
