"""MCP tasks through FastMCP's in-memory client (with the ``fastmcp-tasks`` client extension) and a fake
runner: a Kimi call that the client asks to run as a task answers at once with a task whose id is its job's;
``tasks/get`` relays the job's progress, then the tool's own result; ``tasks/cancel`` interrupts the turn;
errors before the job starts, calls without the extension, and the other tools are answered as before."""

from __future__ import annotations

import asyncio
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from fastmcp import Client
from fastmcp.exceptions import ToolError
from fastmcp_tasks.client import _send_get
from mcp.shared.exceptions import MCPError
from task_client import call_tool_task, tasks_extension
from test_jobs_tools import GatedRunner
from test_worktree_tools import EditingRunner

from kimi_mcp.adapter import tasks as _tasks
from kimi_mcp.config import Settings
from kimi_mcp.models import ErrorInfo, TaskResult
from kimi_mcp.server import create_server


def run(body) -> Any:
    return asyncio.run(body())


def tasks_client(runner, settings: Settings | None = None, **kwargs: Any) -> Client:
    return Client(create_server(settings or Settings(), run=runner), extensions=[tasks_extension()], **kwargs)


async def tool(client: Client, name: str, args: dict) -> dict:
    return (await client.call_tool(name, args, raise_on_error=False)).structured_content


async def status_until(task, predicate, timeout: float = 20.0):
    """Poll ``tasks/get`` until ``predicate(status)`` holds (the files part of a status message is refreshed
    in a thread, so it shows up on a later poll)."""
    deadline = time.monotonic() + timeout
    while True:
        status = await task.status()
        if predicate(status) or time.monotonic() > deadline:
            return status
        await asyncio.sleep(0.05)


def test_a_kimi_call_run_as_a_task_is_its_job_and_completes_with_the_tools_result(workspace: Path) -> None:
    runner = GatedRunner(workspace)

    async def body():
        async with tasks_client(runner) as client:
            args = {"task_description": "x", "work_dir": str(workspace), "wait_s": 0}
            task = await call_tool_task(client, "kimi_code_task", args)
            await asyncio.to_thread(runner.started.wait, 10)
            working = await status_until(task, lambda s: "changed so far" in (s.status_message or ""))
            listed = await tool(client, "kimi_jobs", {})
            job = await tool(client, "kimi_job", {"job_id": task.task_id, "action": "status"})
            runner.gate.set()
            result = await task.result()
            stored = await tool(client, "kimi_job", {"job_id": task.task_id})
            return task, working, listed, job, result, stored

    task, working, listed, job, result, stored = run(body)
    assert task.task_id.startswith("job_") and task.create_result.status == "working"
    assert task.create_result.poll_interval_ms == 1000
    assert working.status == "working"
    assert working.status_message.startswith("Kimi runs WriteFile made.txt (")
    assert "changed so far: made.txt" in working.status_message and task.task_id in working.status_message
    assert listed["jobs"][0]["job_id"] == task.task_id  # kimi_jobs ran inline, the task is in the store
    assert job["status"] == "running" and job["job_id"] == task.task_id
    # wait_s=0 did not apply: the task's result is the finished job, exactly what kimi_job returns
    assert result.is_error is False
    assert (
        result.structured_content["status"] == "done" and result.structured_content["job_id"] == task.task_id
    )
    assert result.structured_content["files_created"] == ["made.txt"]
    assert result.structured_content == stored
    assert len(runner.requests) == 1


def test_tasks_cancel_interrupts_the_turn_and_keeps_the_files_already_changed(workspace: Path) -> None:
    runner = GatedRunner(workspace)

    async def body():
        async with tasks_client(runner) as client:
            task = await call_tool_task(client, "kimi_prompt", {"prompt": "x", "work_dir": str(workspace)})
            await asyncio.to_thread(runner.started.wait, 10)
            await task.cancel()
            status = await task.status()
            job = await tool(client, "kimi_job", {"job_id": task.task_id, "action": "status"})
            return status, job

    status, job = run(body)
    assert status.status == "cancelled"
    assert job["status"] == "cancelled" and job["files_created"] == ["made.txt"]
    assert job["error"]["type"] == "cancelled"
    assert not runner.gate.is_set()  # the turn ended because it was cancelled, not because it finished


def test_a_failed_job_completes_the_task_with_the_error_result_that_says_it_all(workspace: Path) -> None:
    def failing(request, settings, **_kw) -> TaskResult:
        error = ErrorInfo(
            type="api", message="Kimi's model API failed: 429", suggestion="Retry later.", retryable=True
        )
        return TaskResult(
            success=False, workspace=str(request.workspace), files_created=["half.py"], error=error
        )

    async def body():
        async with tasks_client(failing) as client:
            task = await call_tool_task(
                client,
                "kimi_code_task",
                {"task_description": "x", "work_dir": str(workspace)},
                raise_on_error=False,
            )
            return task, await task.result()

    task, result = run(body)
    assert result.is_error is True
    assert result.structured_content["error"]["type"] == "api"
    assert result.structured_content["job_id"] == task.task_id
    text = result.content[0].text
    assert text.startswith(
        "Error (api): Kimi's model API failed: 429\nWhat to do: Retry later.\nRetryable: yes"
    )
    assert "Files already changed: created half.py" in text and task.task_id in text


def test_bad_input_is_answered_at_once_and_starts_no_task_or_job(workspace: Path) -> None:
    runner = GatedRunner(workspace)

    async def body():
        async with tasks_client(runner) as client:
            with pytest.raises(ToolError, match="did not run as a task"):
                await call_tool_task(
                    client, "kimi_code_task", {"task_description": "  ", "work_dir": str(workspace)}
                )
            inline = await client.call_tool(
                "kimi_code_task", {"task_description": "  ", "work_dir": str(workspace)}, raise_on_error=False
            )
            return inline, await tool(client, "kimi_jobs", {})

    inline, listed = run(body)
    assert inline.is_error and inline.structured_content["error"]["type"] == "bad_input"
    assert listed["jobs"] == [] and runner.requests == []


def test_without_the_extension_or_on_the_handshake_era_a_call_waits_as_before(workspace: Path) -> None:
    runner = GatedRunner(workspace)

    async def body():
        args = {"task_description": "x", "work_dir": str(workspace), "wait_s": 0}
        async with Client(create_server(Settings(), run=runner)) as plain:
            without = await tool(plain, "kimi_code_task", args)
        async with tasks_client(runner, mode="legacy") as legacy:
            handshake = await tool(legacy, "kimi_code_task", args)
            with pytest.raises(ToolError, match="did not run as a task"):
                await call_tool_task(legacy, "kimi_code_task", args)
        runner.gate.set()
        return without, handshake

    without, handshake = run(body)
    # wait_s=0 applied: back at once with the running job, not a task
    assert without["status"] in ("running", "queued") and handshake["status"] in ("running", "queued")


def test_kimi_continue_runs_as_a_task_in_the_same_conversation(workspace: Path) -> None:
    runner = GatedRunner(workspace)
    runner.gate.set()

    async def body():
        async with tasks_client(runner) as client:
            first = await call_tool_task(
                client, "kimi_code_task", {"task_description": "x", "work_dir": str(workspace)}
            )
            done = (await first.result()).structured_content
            follow = await call_tool_task(
                client, "kimi_continue", {"session_id": done["session_id"], "message": "more"}
            )
            return done, follow, (await follow.result()).structured_content

    done, follow, again = run(body)
    assert follow.task_id == again["job_id"] != done["job_id"]
    assert again["status"] == "done" and again["session_id"] == done["session_id"] == "sess-1"
    assert runner.requests[1].session_id == "sess-1"


def test_tasks_get_of_an_unknown_task_is_a_clear_error(workspace: Path) -> None:
    async def body():
        async with tasks_client(GatedRunner(workspace)) as client:
            await client.list_tools()
            with pytest.raises(MCPError, match="Task job_nope not found.*kimi_jobs"):
                await _send_get(client.session, "job_nope")

    run(body)


def test_attempts_run_as_one_task_whose_result_ranks_them(repo: Path) -> None:
    runner = EditingRunner(
        [{"a.txt": "x\n" * 5}, {"a.txt": "x\n" * 2, "ok": "1"}, {"a.txt": "x\n", "ok": "1"}],
        barrier=threading.Barrier(3),
    )

    async def body():
        async with tasks_client(runner, Settings(max_concurrent=3)) as client:
            args = {
                "prompt": "x", "work_dir": str(repo), "isolation": "worktree", "attempts": 3,
                "verify_command": "test -f ok",
            }  # fmt: skip
            task = await call_tool_task(client, "kimi_prompt", args)
            working = await task.status()
            return task, working, (await task.result()).structured_content

    task, working, result = run(body)
    attempts = result["attempts"]
    assert len(attempts) == 3 and task.task_id in {a["job_id"] for a in attempts}
    assert working.status in ("working", "completed")
    assert [a["verify"]["passed"] for a in attempts] == [
        True,
        True,
        False,
    ]  # ranked as a direct call ranks them
    assert result["job_id"] == attempts[0]["job_id"] and result["verify"]["passed"] is True


def test_a_task_the_server_no_longer_holds_is_read_from_the_job_store(
    workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_tasks, "KEEP_FINISHED", 1)
    runner = GatedRunner(workspace)
    runner.gate.set()

    async def body():
        args = {"task_description": "x", "work_dir": str(workspace)}
        async with Client(create_server(Settings(), run=runner)) as plain:
            direct = await tool(plain, "kimi_code_task", args)  # a job, never a task
        async with tasks_client(runner) as client:
            tasks = [await call_tool_task(client, "kimi_code_task", args) for _ in range(3)]
            results = [(await task.result()).structured_content for task in tasks]
            await call_tool_task(client, "kimi_code_task", args)  # evicts the oldest finished tasks
            evicted = await _send_get(client.session, tasks[0].task_id)
            from_store = await _send_get(client.session, direct["job_id"])
            return results, evicted, direct, from_store

    results, evicted, direct, from_store = run(body)
    assert evicted.status == "completed" and evicted.result["structuredContent"] == results[0]
    assert from_store.status == "completed" and from_store.result["structuredContent"] == direct
