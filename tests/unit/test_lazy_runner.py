"""The server's runner, handed down: made at the first use, and what it holds (for ``kimi_status``, a
discarded copy's live conversation, the server's shutdown) read from it, not looked up in ``sys.modules``."""

from __future__ import annotations

import asyncio
from pathlib import Path

from fastmcp import Client

from kimi_mcp.config import Settings
from kimi_mcp.lazy_runner import LazyRunner
from kimi_mcp.models import TaskResult
from kimi_mcp.server import create_server


class FakePool:
    def __init__(self) -> None:
        self.closed: list[str] = []
        self.shut = False

    def counts(self) -> tuple[int, int, int]:
        return 1, 0, 0

    def live_count(self) -> int:
        return 2

    def close_live(self, session_id: str) -> None:
        self.closed.append(session_id)

    def shutdown(self) -> None:
        self.shut = True


def test_before_the_first_call_nothing_is_made_or_held() -> None:
    lazy = LazyRunner()
    lazy.close_live("s")
    lazy.shutdown()
    assert lazy.held() == (0, 0)


def test_the_runner_is_made_once_and_what_it_holds_is_read_from_it() -> None:
    lazy = LazyRunner()
    runner = lazy.get()
    assert lazy.get() is runner
    pool = runner.pool = FakePool()  # type: ignore[assignment]
    assert lazy.held() == (1, 2)
    lazy.close_live("s1")
    lazy.shutdown()
    assert pool.closed == ["s1"] and pool.shut


def test_kimi_status_counts_what_the_servers_runner_holds() -> None:
    lazy = LazyRunner()
    lazy.get().pool = FakePool()  # type: ignore[assignment]

    def run(request, settings, **_kwargs) -> TaskResult:
        raise AssertionError("kimi_status runs no turn")

    async def body():
        server = create_server(Settings(kimi_bin="/nonexistent/kimi"), run=run, runner=lazy)
        async with Client(server) as client:
            return await client.call_tool("kimi_status", {})

    report = asyncio.run(body()).structured_content
    assert report["standbys"] == 1 and report["live_sessions"] == 2


def test_the_server_runs_kimi_in_the_environment_it_was_given_and_masks_its_keys(workspace: Path) -> None:
    key = "zebra-Q7-not-key-shaped"  # masked because the given environment holds it, not by its shape
    env = {"HOME": str(workspace.parent), "MOONSHOT_API_KEY": key, "ONLY_HERE": "1"}
    seen: list[dict] = []

    def run(request, settings, *, environ, **_kwargs) -> TaskResult:
        seen.append(dict(environ))
        return TaskResult(success=True, workspace=str(request.workspace), output="ok")

    async def body():
        async with Client(create_server(Settings(), run=run, env=env)) as client:
            done = await client.call_tool("kimi_prompt", {"prompt": "x", "work_dir": str(workspace)})
            refused = await client.call_tool(
                "kimi_prompt", {"prompt": "x", "work_dir": f"/nonexistent/{key}"}, raise_on_error=False
            )
            return done, refused

    done, refused = asyncio.run(body())
    assert seen == [env] and done.structured_content["success"] is True
    message = refused.structured_content["error"]["message"]
    assert refused.is_error and "/nonexistent/***" in message and key not in str(refused.content)
