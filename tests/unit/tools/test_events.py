"""Events for the client at the tool layer, two clients of one server (a fake runner stands in for Kimi and
logs a job's event through its scope, as the pool and the session do): a job's event reaches only the client
whose call it belongs to, a server-wide event each client once."""

from __future__ import annotations

import asyncio
import logging
import threading
from pathlib import Path
from typing import Any

import pytest
from fastmcp import Client
from task_client import call_tool_task, tasks_extension

from kimi_mcp._logging import CLIENT, for_client, get_logger
from kimi_mcp.config import Settings
from kimi_mcp.models import TaskResult
from kimi_mcp.server import create_server

log = get_logger("test")


class StandbyRunner:
    """Logs the job's "using the standby" event once ``go`` is set (its call has returned), then holds the
    turn until ``release`` is set."""

    def __init__(self) -> None:
        self.go, self.logged, self.release = threading.Event(), threading.Event(), threading.Event()

    def __call__(self, request, settings, *, scope, watch=None, **_kw) -> TaskResult:
        if watch is not None:
            watch.queued = False
        self.go.wait(10)
        log.info("using the standby Kimi for %s", request.workspace, extra=for_client(scope.job_id))
        self.logged.set()
        self.release.wait(10)
        return TaskResult(success=True, workspace=str(request.workspace), output="done")


class Heard:
    def __init__(self) -> None:
        self.messages: list[str] = []

    async def __call__(self, message: Any) -> None:
        data = message.data
        self.messages.append(data.get("msg", str(data)) if isinstance(data, dict) else str(data))


def test_a_jobs_event_reaches_its_client_only_and_a_server_wide_one_each_client_once(
    workspace: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="kimi_mcp")  # as the server's setup_logging does
    runner = StandbyRunner()
    warning = "KIMI_MCP_TIMOUT is not a kimi-mcp setting and is ignored (events test)"
    standby = f"using the standby Kimi for {workspace}"
    heard_a, heard_b = Heard(), Heard()

    async def body() -> dict:
        server = create_server(Settings(), run=runner)
        log.warning(warning, extra=CLIENT)  # as the server does at its start
        async with (
            Client(server, log_handler=heard_a, mode="legacy") as a,
            Client(server, log_handler=heard_b, mode="legacy") as b,
        ):
            args = {"task_description": "do it", "work_dir": str(workspace), "wait_s": 0}
            started = (await a.call_tool("kimi_code_task", args)).structured_content
            runner.go.set()
            await asyncio.to_thread(runner.logged.wait, 10)
            await b.call_tool("kimi_jobs", {})  # another client's call while A's job runs
            runner.release.set()
            done = await a.call_tool("kimi_job", {"job_id": started["job_id"], "wait_s": 10})
            await a.call_tool("kimi_jobs", {})
            await b.call_tool("kimi_jobs", {})
            return done.structured_content

    result = asyncio.run(body())
    assert result["status"] == "done", result
    assert standby in heard_a.messages and standby not in heard_b.messages, (
        heard_a.messages,
        heard_b.messages,
    )
    assert heard_a.messages.count(warning) == 1 and heard_b.messages.count(warning) == 1


def test_a_task_hears_its_jobs_events_when_it_polls(
    workspace: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A call run as an MCP task returns at once: ``tasks/get`` relays its job's events (and only the
    client polling that task hears them)."""
    caplog.set_level(logging.INFO, logger="kimi_mcp")
    runner = StandbyRunner()
    standby = f"using the standby Kimi for {workspace}"
    heard_task, heard_other = Heard(), Heard()

    async def body() -> str:
        server = create_server(Settings(), run=runner)
        async with (
            Client(server, log_handler=heard_task, extensions=[tasks_extension()]) as a,
            Client(server, log_handler=heard_other, mode="legacy") as b,
        ):
            task = await call_tool_task(
                a, "kimi_code_task", {"task_description": "x", "work_dir": str(workspace)}
            )
            runner.go.set()
            await asyncio.to_thread(runner.logged.wait, 10)
            await b.call_tool("kimi_jobs", {})
            await task.status()
            runner.release.set()
            return (await task.result()).structured_content["status"]

    assert asyncio.run(body()) == "done"
    assert heard_task.messages.count(standby) == 1 and standby not in heard_other.messages, (
        heard_task.messages,
        heard_other.messages,
    )
