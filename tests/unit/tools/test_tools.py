"""Each tool on its own, through FastMCP's in-memory client with the runner replaced by a fake: the one
list of tools, validation, the prompt and mode that reach the runner, and the result shaping."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from fastmcp import Client

from kimi_mcp.config import Settings
from kimi_mcp.models import ErrorInfo, TaskResult
from kimi_mcp.server import create_server
from kimi_mcp.tools import ALL_TOOLS, TOOLS

WRITE_TOOLS = {"kimi_code_task", "kimi_prompt", "kimi_refactor", "kimi_debug"}
JOB_TOOLS = {
    "kimi_job",
    "kimi_jobs",
    "kimi_wait",
    "kimi_continue",
    "kimi_steer",
    "kimi_status",
    "kimi_apply",
    "kimi_discard",
}  # own results
#: cancel interrupts a turn; a follow-up or a steer may write; apply writes your tree; discard removes a copy
MAY_CHANGE = WRITE_TOOLS | {"kimi_job", "kimi_continue", "kimi_steer", "kimi_apply", "kimi_discard"}


class FakeRunner:
    """Records each request; ``act(request)`` may change the workspace and returns the TaskResult."""

    def __init__(self, act: Callable[[Any], TaskResult] | None = None) -> None:
        self.requests: list[Any] = []
        self.act = act or (
            lambda request: TaskResult(success=True, workspace=str(request.workspace), output="ok")
        )

    def __call__(self, request, settings, **_kwargs) -> TaskResult:
        self.requests.append(request)
        return self.act(request)


def call(runner: FakeRunner, tool: str, args: dict, settings: Settings | None = None):
    async def body():
        async with Client(create_server(settings or Settings(), run=runner)) as client:
            return await client.call_tool(tool, args, raise_on_error=False)

    return asyncio.run(body())


def listed(settings: Settings) -> list:
    async def body():
        async with Client(create_server(settings, run=FakeRunner())) as client:
            return await client.list_tools()

    return asyncio.run(body())


def test_tools_is_the_one_list_and_every_name_is_the_function_name() -> None:
    assert tuple(TOOLS) == ALL_TOOLS and len(ALL_TOOLS) == 16
    tools = {tool.name: tool for tool in listed(Settings())}
    assert list(tools) == list(ALL_TOOLS)  # every name is its function's, registered in the list's order
    for name, tool in tools.items():
        assert "backend" not in tool.input_schema["properties"]  # the injected dependency is not an argument
        assert tool.annotations.read_only_hint is (name not in MAY_CHANGE)
        if name in JOB_TOOLS:
            continue
        assert {"work_dir", "wait_s"} <= set(tool.input_schema["properties"])
        success = tool.output_schema["properties"]["success"]  # null while the job is still going
        assert [kind["type"] for kind in success["anyOf"]] == ["boolean", "null"]
        assert "success" in tool.output_schema["required"]
        assert {"job_id", "status", "progress"} <= set(tool.output_schema["properties"])


def test_only_the_enabled_tools_are_registered_and_unknown_names_are_refused() -> None:
    tools = listed(Settings(tools=["kimi_verify", "kimi_prompt"]))
    assert sorted(tool.name for tool in tools) == ["kimi_prompt", "kimi_verify"]
    with pytest.raises(ValueError, match="unknown tools \\['kimi_nope'\\]"):
        create_server(Settings(tools=["kimi_nope"]), run=FakeRunner())


@pytest.mark.parametrize(
    ("tool", "args", "message"),
    [
        ("kimi_code_task", {"task_description": "  "}, "task_description is empty"),
        ("kimi_prompt", {"prompt": "\n"}, "prompt is empty"),
        (
            "kimi_refactor",
            {"file_path": "a.py", "refactor_instructions": " "},
            "refactor_instructions is empty",
        ),
        ("kimi_debug", {"error_message": ""}, "error_message is empty"),
        ("kimi_analyze_code", {"file_paths": []}, "file_paths: at least one file path is required"),
        ("kimi_verify", {"requirements": [" ", ""], "file_paths": ["a.py"]}, "requirements are empty"),
        ("kimi_consult", {"role": "judge", "message": " "}, "message is empty"),
    ],
)
def test_blank_input_is_a_bad_input_result_and_kimi_never_runs(
    tool: str, args: dict, message: str, tmp_path: Path
) -> None:
    (tmp_path / "a.py").write_text("x = 1\n")
    runner = FakeRunner()
    result = call(runner, tool, {**args, "work_dir": str(tmp_path)})
    error = result.structured_content["error"]
    assert result.is_error and error["type"] == "bad_input" and error["message"] == message
    assert error["suggestion"] and error["retryable"] is False
    assert runner.requests == []


@pytest.mark.parametrize(
    ("tool", "args", "expected"),
    [
        (
            "kimi_code_task",
            {"task_description": "Add f", "constraints": "no deps"},
            ["Add f", "no deps", "x = 1"],
        ),
        ("kimi_prompt", {"prompt": "Explain", "include_workspace_context": True}, ["Explain", "a.py"]),
        ("kimi_refactor", {"file_path": "a.py", "refactor_instructions": "rename x"}, ["rename x", "x = 1"]),
        ("kimi_debug", {"error_message": "NameError: y"}, ["NameError: y", "x = 1"]),
        ("kimi_analyze_code", {"analysis_focus": "naming", "role": "security"}, ["naming", "x = 1"]),
        ("kimi_verify", {"requirements": ["has x", "has y"]}, ["- has x\n- has y", "x = 1"]),
        (
            "kimi_consult",
            {"role": "skeptic", "message": "Is x ok?", "proposal": "keep x"},
            ["Is x ok?", "keep x"],
        ),
    ],
)
def test_the_prompt_and_the_mode_reach_the_runner(
    tool: str, args: dict, expected: list, tmp_path: Path
) -> None:
    (tmp_path / "a.py").write_text("x = 1\n")
    files = {
        "kimi_code_task": {"context_files": ["a.py"]},
        "kimi_debug": {"relevant_files": ["a.py"]},
        "kimi_analyze_code": {"file_paths": ["a.py"]},
        "kimi_verify": {"file_paths": ["a.py"]},
    }.get(tool, {})
    runner = FakeRunner()
    result = call(runner, tool, {**args, **files, "work_dir": str(tmp_path)})
    assert not result.is_error, result.structured_content
    (request,) = runner.requests
    assert request.workspace == tmp_path.resolve()
    assert request.read_only is (tool not in WRITE_TOOLS)
    for text in expected:
        assert text in request.prompt


def _changes(path: str, after: str) -> Callable[[Any], TaskResult]:
    def act(request) -> TaskResult:
        (request.workspace / path).write_text(after)
        (request.workspace / "other.py").write_text("new\n")
        answer = {"explanation": "renamed", "behavior_preserved": True, "diagnosis": "typo", "root_cause": "a.py:1",
                  "solution": "fixed", "code_changes": [{"path": path, "description": "fix the name"}]}  # fmt: skip
        return TaskResult(
            success=True, workspace=str(request.workspace), output=json.dumps(answer),
            files_modified=[path], files_created=["other.py"],
        )  # fmt: skip

    return act


def test_refactor_reports_before_after_diff_and_the_other_files(tmp_path: Path) -> None:
    (tmp_path / "a.py").write_text("x = 1\n")
    runner = FakeRunner(_changes("a.py", "y = 1\n"))
    data = call(
        runner,
        "kimi_refactor",
        {"file_path": "a.py", "refactor_instructions": "rename", "work_dir": str(tmp_path)},
    ).structured_content
    assert (
        data["parse_ok"] is True and data["explanation"] == "renamed" and data["behavior_preserved"] is True
    )
    assert (data["file_path"], data["original_content"], data["refactored_content"]) == (
        "a.py",
        "x = 1\n",
        "y = 1\n",
    )
    assert "-x = 1\n+y = 1\n" in data["diff"] and data["diff"].startswith("--- a/a.py\n+++ b/a.py\n")
    assert data["other_files_changed"] == ["other.py"]


def test_debug_reports_a_diff_for_each_relevant_file_it_changed(tmp_path: Path) -> None:
    (tmp_path / "a.py").write_text("x = y\n")
    runner = FakeRunner(_changes("a.py", "x = 1\n"))
    args = {"error_message": "NameError", "relevant_files": ["a.py"], "work_dir": str(tmp_path)}
    data = call(runner, "kimi_debug", args).structured_content
    assert (data["diagnosis"], data["root_cause"], data["solution"]) == ("typo", "a.py:1", "fixed")
    changes = {change["path"]: change for change in data["code_changes"]}
    assert changes["a.py"]["description"] == "fix the name" and "-x = y\n+x = 1\n" in changes["a.py"]["diff"]
    assert changes["other.py"]["diff"] == ""  # not a file the caller sent: no "before" to diff against


def test_read_tools_shape_parsed_answers_and_fall_back_to_the_raw_answer(tmp_path: Path) -> None:
    (tmp_path / "a.py").write_text("x = 1\n")
    answers = {
        "kimi_analyze_code": {
            "analysis": "fine",
            "suggestions": [{"file": "a.py", "line": 1, "text": "name it"}],
        },
        "kimi_verify": {"verdict": "partial", "findings": [], "unmet_requirements": ["has y"]},
        "kimi_consult": {"response": "risky", "key_risks": ["x"], "confidence": 0.4},
    }
    args = {
        "kimi_analyze_code": {"file_paths": ["a.py"]},
        "kimi_verify": {"requirements": "has y", "file_paths": ["a.py"]},
        "kimi_consult": {"role": "skeptic", "message": "ok?"},
    }
    for tool, answer in answers.items():
        runner = FakeRunner(
            lambda r, a=answer: TaskResult(success=True, workspace=str(r.workspace), output=json.dumps(a))
        )
        data = call(runner, tool, {**args[tool], "work_dir": str(tmp_path)}).structured_content
        assert data["parse_ok"] is True, tool
        raw = FakeRunner(lambda r: TaskResult(success=True, workspace=str(r.workspace), output="just prose"))
        fallback = call(raw, tool, {**args[tool], "work_dir": str(tmp_path)}).structured_content
        assert fallback["parse_ok"] is False and fallback["raw_response_preview"] == "just prose", tool
    assert data["response"] == "risky" and data["key_risks"] == ["x"] and data["confidence"] == 0.4
    assert "incomplete_trace" not in data  # one place for it: evidence.incomplete_trace
    assert fallback["response"] == "just prose"


def test_a_failed_run_is_an_error_result_with_secrets_masked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MOONSHOT_API_KEY", "sk-configuredsecretvalue12345")
    failed = ErrorInfo(
        type="timeout", message="gave up near sk-configuredsecretvalue12345", suggestion="s", retryable=True
    )
    runner = FakeRunner(lambda r: TaskResult(success=False, workspace=str(r.workspace), error=failed))
    result = call(runner, "kimi_code_task", {"task_description": "x", "work_dir": str(tmp_path)})
    assert result.is_error
    assert result.structured_content["error"]["message"] == "gave up near ***"
    assert "sk-configuredsecretvalue12345" not in result.content[0].text


def _replace_with_link(path: str, outside: Path) -> Callable[[Any], TaskResult]:
    def act(request) -> TaskResult:
        target = request.workspace / path
        target.unlink(missing_ok=True)
        target.symlink_to(outside)
        return TaskResult(
            success=True, workspace=str(request.workspace), output="done", files_modified=[path]
        )

    return act


def test_refactor_never_reads_a_file_kimi_replaced_by_a_link_outside_the_workspace(tmp_path: Path) -> None:
    """Issue 13 item 3: the post-turn read follows the tracker's rules."""
    ws, outside = tmp_path / "ws", tmp_path / "outside.txt"
    ws.mkdir()
    outside.write_text("TEXT FROM OUTSIDE THE WORKSPACE\n")
    (ws / "a.py").write_text("x = 1\n")
    runner = FakeRunner(_replace_with_link("a.py", outside))
    args = {"file_path": "a.py", "refactor_instructions": "r", "work_dir": str(ws)}
    result = call(runner, "kimi_refactor", args)
    data = result.structured_content
    assert data["refactored_content"] is None and data["diff"] == ""
    assert data["notes"] == [
        "a.py after the turn is not shown and not diffed: it is binary, a symlink, or resolves outside the workspace"
    ]
    assert "OUTSIDE THE WORKSPACE" not in result.content[0].text


def test_refactor_does_not_diff_a_file_grown_past_the_context_cap(tmp_path: Path) -> None:
    (tmp_path / "a.py").write_text("x = 1\n")

    def grow(request) -> TaskResult:
        (request.workspace / "a.py").write_text("y = 2\n" * 100)
        return TaskResult(
            success=True, workspace=str(request.workspace), output="done", files_modified=["a.py"]
        )

    args = {"file_path": "a.py", "refactor_instructions": "r", "work_dir": str(tmp_path)}
    data = call(FakeRunner(grow), "kimi_refactor", args, Settings(max_context_bytes=100)).structured_content
    assert data["refactored_content"] is None and data["diff"] == ""
    assert "larger than 100 characters" in data["notes"][0]


def test_debug_reads_only_what_it_diffs_and_diffs_off_the_event_loop(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import threading

    from kimi_mcp import finish

    ws, outside = tmp_path / "ws", tmp_path / "outside.txt"
    ws.mkdir()
    outside.write_text("TEXT FROM OUTSIDE THE WORKSPACE\n")
    (ws / "a.py").write_text("x = y\n")
    diffed_in: list[str] = []
    real_diff = finish._diff
    monkeypatch.setattr(
        finish, "_diff", lambda *a: diffed_in.append(threading.current_thread().name) or real_diff(*a)
    )

    def act(request) -> TaskResult:
        (request.workspace / "a.py").write_text("x = 1\n")
        (request.workspace / "link.txt").symlink_to(outside)  # created, never sent: not read, not diffed
        return TaskResult(
            success=True, workspace=str(request.workspace), output="{}",
            files_modified=["a.py"], files_created=["link.txt"],
        )  # fmt: skip

    args = {"error_message": "E", "relevant_files": ["a.py"], "work_dir": str(ws)}
    result = call(FakeRunner(act), "kimi_debug", args)
    changes = {c["path"]: c["diff"] for c in result.structured_content["code_changes"]}
    assert "+x = 1\n" in changes["a.py"] and changes["link.txt"] == ""
    assert "OUTSIDE THE WORKSPACE" not in result.content[0].text
    assert len(diffed_in) == 1 and diffed_in[0] != threading.main_thread().name


def test_an_error_result_text_alone_says_what_happened_and_what_to_do(workspace: Path) -> None:
    screen = "\n".join(
        ["╭" + "─" * 100 + "╮"] + [f"│ working on step {i} │" for i in range(60)] + ["╰" + "─" * 100 + "╯"]
    )
    error = ErrorInfo(
        type="timeout", message="Kimi did not finish the turn in time", suggestion="Raise KIMI_MCP_TIMEOUT.",
        retryable=True, details={"phase": "turn", "screen": "│ step 58 │\n│ step 59 │"},
    )  # fmt: skip

    def act(request):
        return TaskResult(
            success=False, workspace=str(request.workspace), files_created=["a.txt"], files_modified=["b.py"],
            error=error, session_id="sess-7", output=screen,
        )  # fmt: skip

    result = call(FakeRunner(act), "kimi_code_task", {"task_description": "x", "work_dir": str(workspace)})
    text = result.content[0].text
    assert result.is_error and len(text) < 600, text
    assert "Error (timeout): Kimi did not finish the turn in time" in text
    assert "What to do: Raise KIMI_MCP_TIMEOUT." in text and "Retryable: yes" in text
    assert "Files already changed: created a.txt; modified b.py" in text
    assert "Details: phase=turn" in text and "step 59" in text and "session_id: sess-7" in text
    assert (
        "job_id: job_" in text and "─" * 10 not in text
    )  # the answer's box art stays in the structured content
    assert result.structured_content["output"] == screen


def test_with_a_configuration_problem_every_call_says_why_and_kimi_status_explains(workspace: Path) -> None:
    from kimi_mcp.errors import SettingsError

    problem = SettingsError(
        "invalid kimi-mcp configuration: KIMI_MCP_TIMEOUT='5min' (from the environment): bad"
    )
    runner = FakeRunner()

    async def body():
        server = create_server(Settings(kimi_bin="/nonexistent/kimi"), run=runner, problem=problem)
        async with Client(server) as client:
            task = await client.call_tool(
                "kimi_code_task", {"task_description": "x", "work_dir": str(workspace)}, raise_on_error=False
            )
            follow = await client.call_tool(
                "kimi_continue", {"session_id": "s", "message": "x"}, raise_on_error=False
            )
            status = await client.call_tool("kimi_status", {})
            return task, follow, status

    task, follow, status = asyncio.run(body())
    for result in (task, follow):
        assert result.is_error and result.structured_content["error"]["type"] == "config"
        assert "KIMI_MCP_TIMEOUT='5min' (from the environment)" in result.content[0].text
    assert runner.requests == []
    report = status.structured_content
    assert report["success"] is False and [p["type"] for p in report["problems"]] == ["config", "install"]
    assert "KIMI_MCP_KIMI_BIN=/nonexistent/kimi" in report["problems"][1]["message"]
