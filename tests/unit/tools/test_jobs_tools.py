"""The job tools through FastMCP's in-memory client with a fake runner: ``wait_s`` and the running status,
``kimi_job`` (wait, status, cancel), ``kimi_jobs``, ``kimi_continue`` and results kept across a restart."""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from fastmcp import Client
from mcp.shared.exceptions import MCPError
from mcp_types import INVALID_PARAMS

from kimi_mcp.config import Settings
from kimi_mcp.models import ErrorInfo, TaskResult, TruncatedItem
from kimi_mcp.server import create_server


class GatedRunner:
    """A fake runner whose turn lasts until ``gate`` is set (or the job is cancelled); it writes a file,
    reports progress and a session id, and records every request and its ``watch``."""

    def __init__(self, workspace: Path, session_id: str = "sess-1") -> None:
        self.workspace = workspace
        self.session_id = session_id
        self.gate = threading.Event()
        self.started = threading.Event()
        self.requests: list[Any] = []

    def __call__(self, request, settings, *, scope, watch=None, **_kw) -> TaskResult:
        self.requests.append(request)
        if watch is not None:
            watch.queued = False
            watch.session_id = request.session_id or self.session_id
            watch.changed_so_far = lambda: ["made.txt"]
        (self.workspace / "made.txt").write_text(f"turn {len(self.requests)}\n")
        scope.progress("Kimi runs WriteFile made.txt")
        self.started.set()
        while not self.gate.wait(0.02):
            if scope.cancel.is_set():
                error = ErrorInfo(type="cancelled", message="cancelled", suggestion="-", retryable=False)
                return TaskResult(
                    success=False, workspace=str(request.workspace), files_created=["made.txt"], error=error,
                    session_id=self.session_id,
                )  # fmt: skip
        return TaskResult(
            success=True, workspace=str(request.workspace), output=f"done {len(self.requests)}",
            files_created=["made.txt"], file_contents={"made.txt": "turn\n"},
            session_id=request.session_id or self.session_id,
        )  # fmt: skip


def run(body) -> Any:
    return asyncio.run(body())


async def tool(client: Client, name: str, args: dict) -> dict:
    result = await client.call_tool(name, args, raise_on_error=False)
    return result.structured_content


def test_wait_s_zero_returns_running_then_kimi_job_returns_the_whole_result(workspace: Path) -> None:
    runner = GatedRunner(workspace)

    async def body():
        async with Client(create_server(Settings(), run=runner)) as client:
            first = await tool(
                client, "kimi_code_task", {"task_description": "x", "work_dir": str(workspace), "wait_s": 0}
            )
            status = await tool(client, "kimi_job", {"job_id": first["job_id"], "action": "status"})
            runner.gate.set()
            done = await tool(client, "kimi_job", {"job_id": first["job_id"], "wait_s": 10})
            again = await tool(client, "kimi_job", {"job_id": first["job_id"], "action": "status"})
            return first, status, done, again

    first, status, done, again = run(body)
    assert first["status"] in ("running", "queued") and first["job_id"].startswith("job_")
    assert first["success"] is None and first["error"] is None  # still going: neither done nor failed
    assert status["status"] == "running" and status["progress"]["files_changed"] == ["made.txt"]
    assert status["progress"]["activity"] == "Kimi runs WriteFile made.txt"
    assert status["session_id"] == "sess-1"
    assert done["status"] == "done" and done["success"] is True and done["job_id"] == first["job_id"]
    assert done["files_created"] == ["made.txt"] and done["output"] == "done 1" and done["progress"] is None
    assert again == done


def test_a_call_without_wait_s_waits_for_the_turn(workspace: Path) -> None:
    runner = GatedRunner(workspace)
    threading.Timer(0.3, runner.gate.set).start()

    async def body():
        async with Client(create_server(Settings(), run=runner)) as client:
            return await tool(client, "kimi_code_task", {"task_description": "x", "work_dir": str(workspace)})

    result = run(body)
    assert result["status"] == "done" and result["success"] is True and result["job_id"]


def test_the_wait_s_setting_is_the_default(workspace: Path) -> None:
    runner = GatedRunner(workspace)

    async def body():
        async with Client(create_server(Settings(wait_s=0.2), run=runner)) as client:
            first = await tool(client, "kimi_prompt", {"prompt": "x", "work_dir": str(workspace)})
            runner.gate.set()
            return first, await tool(client, "kimi_job", {"job_id": first["job_id"]})

    first, done = run(body)
    assert first["status"] == "running" and done["status"] == "done"


def test_cancel_interrupts_the_turn_and_returns_the_partial_result(workspace: Path) -> None:
    runner = GatedRunner(workspace)

    async def body():
        async with Client(create_server(Settings(), run=runner)) as client:
            first = await tool(
                client, "kimi_code_task", {"task_description": "x", "work_dir": str(workspace), "wait_s": 0}
            )
            return await tool(client, "kimi_job", {"job_id": first["job_id"], "action": "cancel"})

    cancelled = run(body)
    assert cancelled["status"] == "cancelled" and cancelled["files_created"] == ["made.txt"]
    assert cancelled["error"]["type"] == "cancelled"


def test_a_cancelled_kimi_job_wait_leaves_the_job_running(workspace: Path) -> None:
    runner = GatedRunner(workspace)

    async def body():
        async with Client(create_server(Settings(), run=runner)) as client:
            first = await tool(
                client, "kimi_code_task", {"task_description": "x", "work_dir": str(workspace), "wait_s": 0}
            )
            waiting = asyncio.create_task(
                client.call_tool("kimi_job", {"job_id": first["job_id"], "wait_s": 30})
            )
            await asyncio.sleep(0.5)
            waiting.cancel()
            with pytest.raises(asyncio.CancelledError):
                await waiting
            await asyncio.sleep(0.3)
            still = await tool(client, "kimi_job", {"job_id": first["job_id"], "action": "status"})
            runner.gate.set()
            return still, await tool(client, "kimi_job", {"job_id": first["job_id"]})

    still, done = run(body)
    assert still["status"] == "running" and done["status"] == "done"


def test_unknown_job_and_bad_arguments_get_clear_errors(workspace: Path) -> None:
    async def body():
        async with Client(create_server(Settings(), run=GatedRunner(workspace))) as client:
            unknown = await client.call_tool("kimi_job", {"job_id": "job_nope"}, raise_on_error=False)
            negative = await client.call_tool(
                "kimi_code_task", {"task_description": "x", "work_dir": str(workspace), "wait_s": -1},
                raise_on_error=False,
            )  # fmt: skip
            return unknown, negative

    unknown, negative = run(body)
    assert unknown.is_error and unknown.structured_content["error"]["type"] == "bad_input"
    assert "kimi_jobs" in unknown.structured_content["error"]["suggestion"]
    assert negative.is_error and "wait_s" in negative.content[0].text


def test_kimi_jobs_lists_newest_first_with_filters(workspace: Path, tmp_path: Path) -> None:
    other = tmp_path / "other"
    other.mkdir()
    runner = GatedRunner(workspace)
    runner.gate.set()

    async def body():
        async with Client(create_server(Settings(), run=runner)) as client:
            a = await tool(
                client, "kimi_code_task", {"task_description": "first task", "work_dir": str(workspace)}
            )
            b = await tool(client, "kimi_prompt", {"prompt": "second", "work_dir": str(other)})
            everything = await tool(client, "kimi_jobs", {})
            only_ws = await tool(client, "kimi_jobs", {"work_dir": str(workspace)})
            failed = await tool(client, "kimi_jobs", {"status": "failed"})
            return a, b, everything, only_ws, failed

    a, b, everything, only_ws, failed = run(body)
    assert [j["job_id"] for j in everything["jobs"]] == [b["job_id"], a["job_id"]]
    first = everything["jobs"][1]
    assert first["tool"] == "kimi_code_task" and first["status"] == "done" and first["session_id"] == "sess-1"
    assert first["summary"].startswith("1 created, 0 modified, 0 deleted: done 1")
    assert first["workspace"] == str(workspace.resolve()) and first["duration_s"] is not None
    assert [j["job_id"] for j in only_ws["jobs"]] == [a["job_id"]]
    assert failed["jobs"] == []


def test_kimi_continue_sends_the_follow_up_to_the_same_session_and_mode(workspace: Path) -> None:
    (workspace / "a.py").write_text("print(1)\n")
    runner = GatedRunner(workspace, session_id="sess-ro")
    runner.gate.set()

    async def body():
        async with Client(create_server(Settings(), run=runner)) as client:
            await tool(client, "kimi_analyze_code", {"file_paths": ["a.py"], "work_dir": str(workspace)})
            follow = await tool(
                client,
                "kimi_continue",
                {"session_id": "sess-ro", "message": "and now?", "context_files": ["a.py"]},
            )
            unknown = await client.call_tool(
                "kimi_continue", {"session_id": "nope", "message": "x"}, raise_on_error=False
            )
            empty = await client.call_tool(
                "kimi_continue", {"session_id": "sess-ro", "message": "  "}, raise_on_error=False
            )
            globbed = await client.call_tool(
                "kimi_continue", {"session_id": "*", "message": "x"}, raise_on_error=False
            )
            return follow, unknown, empty, globbed

    follow, unknown, empty, globbed = run(body)
    request = runner.requests[1]
    assert request.session_id == "sess-ro" and request.read_only is True
    assert request.workspace == workspace.resolve()
    assert request.prompt.startswith("and now?") and "print(1)" in request.prompt
    assert follow["status"] == "done" and follow["session_id"] == "sess-ro"
    for bad in (unknown, empty, globbed):
        assert bad.is_error and bad.structured_content["error"]["type"] == "bad_input"
    assert "kimi_jobs" in unknown.structured_content["error"]["suggestion"]
    assert len(runner.requests) == 2  # nothing ran for the bad calls


def test_a_finished_result_survives_a_restart_and_a_running_job_becomes_interrupted(workspace: Path) -> None:
    runner = GatedRunner(workspace)

    async def first_server():
        server = create_server(Settings(), run=runner)
        async with Client(server) as client:
            runner.gate.set()
            done = await tool(client, "kimi_code_task", {"task_description": "x", "work_dir": str(workspace)})
            runner.gate.clear()
            running = await tool(
                client, "kimi_code_task", {"task_description": "y", "work_dir": str(workspace), "wait_s": 0}
            )
        return server, done, running

    server, done, running = run(first_server)
    from kimi_mcp.adapter.pipeline import _backends

    _backends[server].jobs.shutdown()  # the server goes away with the job still running
    runner.gate.set()

    async def second_server():
        async with Client(create_server(Settings(), run=GatedRunner(workspace))) as client:
            again = await tool(client, "kimi_job", {"job_id": done["job_id"]})
            lost = await tool(client, "kimi_job", {"job_id": running["job_id"], "action": "status"})
            return again, lost

    again, lost = run(second_server)
    assert again == done
    assert lost["status"] == "interrupted" and lost["session_id"] == "sess-1"
    assert "kimi_continue" in lost["error"]["suggestion"]


def test_progress_reaches_the_client_while_waiting(workspace: Path) -> None:
    runner = GatedRunner(workspace)
    seen: list[str] = []

    async def progress(_done: float, _total: float | None, message: str | None) -> None:
        seen.append(message or "")

    async def body():
        async with Client(create_server(Settings(), run=runner), progress_handler=progress) as client:
            threading.Timer(0.8, runner.gate.set).start()
            started = time.monotonic()
            result = await tool(
                client, "kimi_code_task", {"task_description": "x", "work_dir": str(workspace)}
            )
            return result, time.monotonic() - started

    result, _elapsed = run(body)
    assert result["status"] == "done"
    assert any("WriteFile made.txt" in message for message in seen)


def test_an_unusable_job_store_is_a_clear_error_for_every_tool(workspace: Path, tmp_path: Path) -> None:
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("a file where the state directory should be\n")
    runner = GatedRunner(workspace)

    async def body():
        async with Client(create_server(Settings(state_dir=str(blocker)), run=runner)) as client:
            task = await client.call_tool(
                "kimi_code_task", {"task_description": "x", "work_dir": str(workspace)}, raise_on_error=False
            )
            listed = await client.call_tool("kimi_jobs", {}, raise_on_error=False)
            return task, listed

    task, listed = run(body)
    for result in (task, listed):
        error = result.structured_content["error"]
        assert result.is_error and error["type"] == "session" and "KIMI_MCP_STATE_DIR" in error["suggestion"]
    assert runner.requests == []  # nothing ran without a place to record it


def test_what_the_budget_cut_stays_reachable_as_resources(workspace: Path) -> None:
    big = "".join(f"line {i}\n" for i in range(8_000))
    (workspace / "huge.log").write_text(big * 3)  # on disk: bigger than what the tracker returned

    def act(request):
        return TaskResult(
            success=True, workspace=str(request.workspace), output="answer " * 3_000,
            files_created=["big.py", "huge.log"], file_contents={"big.py": big, "huge.log": big[:1000]},
            truncated=[TruncatedItem(
                path="huge.log", reason="file_too_large", size_bytes=len(big) * 3, returned_chars=1000
            )],
        )  # fmt: skip

    class Runner(GatedRunner):
        def __call__(self, request, settings, **kwargs):
            return act(request)

    async def body():
        server = create_server(Settings(max_result_chars=20_000), run=Runner(workspace))
        async with Client(server) as client:
            result = await client.call_tool(
                "kimi_code_task", {"task_description": "x", "work_dir": str(workspace)}
            )
            links = [c for c in result.content if c.type == "resource_link"]
            texts = {str(link.uri): (await client.read_resource(link.uri))[0].text for link in links}
            job = result.structured_content["job_id"]
            with pytest.raises(MCPError, match="did not create or modify") as other:
                await client.read_resource(f"kimi-mcp://jobs/{job}/files/src/other.py")
            assert other.value.code == INVALID_PARAMS  # resource not found
            with pytest.raises(MCPError, match="not found|did not create or modify"):
                await client.read_resource(f"kimi-mcp://jobs/{job}/files/..%2F..%2Fetc%2Fpasswd")
            return result.structured_content, links, texts

    data, links, texts = run(body)
    cuts = {item["path"]: item for item in data["truncated"]}
    assert set(cuts) == {"big.py", "huge.log", "output"}
    assert {str(link.uri) for link in links} == {item["uri"] for item in cuts.values()}
    assert texts[cuts["big.py"]["uri"]] == big  # whole, from the job store
    assert texts[cuts["output"]["uri"]] == "answer " * 3_000
    assert texts[cuts["huge.log"]["uri"]] == big * 3  # cut by the tracker: read from the workspace
    assert cuts["huge.log"]["size_bytes"] == len(big) * 3


@pytest.mark.parametrize("mode", ["legacy", "auto"])
def test_an_unknown_jobs_resource_is_resource_not_found_without_a_traceback(
    workspace: Path, mode: str, caplog: pytest.LogCaptureFixture
) -> None:
    """The MCP spec's "resource not found": INVALID_PARAMS with the URI in ``data`` (not an internal error),
    also as the first request after connecting; a client's wrong URI logs no warning and no traceback (above
    debug; FastMCP's own logger is heard too, whether or not it propagates)."""
    uris = [f"kimi-mcp://jobs/job_0000000000000000/{name}" for name in ("output", "diff", "files/a%20b.py")]
    caplog.set_level(logging.DEBUG)
    fastmcp_log = logging.getLogger("fastmcp")
    fastmcp_log.addHandler(caplog.handler)

    async def body() -> list[MCPError]:
        errors = []
        async with Client(create_server(Settings(), run=GatedRunner(workspace)), mode=mode) as client:
            for uri in uris:
                with pytest.raises(MCPError) as raised:
                    await client.read_resource(uri)
                errors.append(raised.value)
        return errors

    try:
        errors = run(body)
    finally:
        fastmcp_log.removeHandler(caplog.handler)
    for uri, error in zip(uris, errors, strict=True):
        assert error.code == INVALID_PARAMS, (error.code, error.message)
        assert error.data == {"uri": uri}
        assert "no finished job 'job_0000000000000000'" in error.message and "kimi_jobs" in error.message
    loud = [
        r
        for r in caplog.records
        if r.levelno >= logging.WARNING or (r.exc_info and r.levelno > logging.DEBUG)
    ]
    assert not loud, [(r.name, r.levelname, r.getMessage()) for r in loud]


def test_the_model_reaches_kimi_and_a_follow_up_keeps_its_conversations_model(workspace: Path) -> None:
    class ModelRunner(GatedRunner):
        def __call__(self, request, settings, **kw) -> TaskResult:
            result = super().__call__(request, settings, **kw)
            return result.model_copy(update={"model": request.model and f"alias-of-{request.model}"})

    runner = ModelRunner(workspace, session_id="sess-m")
    runner.gate.set()

    async def body():
        async with Client(create_server(Settings(), run=runner)) as client:
            first = await tool(
                client, "kimi_prompt", {"prompt": "hi", "work_dir": str(workspace), "model": "k2"}
            )
            kept = await tool(client, "kimi_continue", {"session_id": "sess-m", "message": "more"})
            changed = await tool(
                client, "kimi_continue", {"session_id": "sess-m", "message": "x", "model": "k3"}
            )
            bad = await client.call_tool(
                "kimi_prompt",
                {"prompt": "hi", "work_dir": str(workspace), "model": "k2\x1b[A"},
                raise_on_error=False,
            )
            listed = await tool(client, "kimi_jobs", {})
            return first, kept, changed, bad, listed

    first, kept, changed, bad, listed = run(body)
    assert [r.model for r in runner.requests] == ["k2", "alias-of-k2", "k3"]  # the alias Kimi last ran with
    assert first["model"] == "alias-of-k2" and changed["model"] == "alias-of-k3"
    assert bad.is_error and len(runner.requests) == 3  # control bytes never reach Kimi
    assert kept["status"] == "done" and listed["jobs"][0]["tool"] == "kimi_continue"
