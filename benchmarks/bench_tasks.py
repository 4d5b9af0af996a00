"""MCP tasks benchmark: prints what it measures in this one run (nothing is asserted).

1. Call → Kimi turn started: from the client sending ``tools/call`` to the runner being called, as a task
   (``call_tool_task``) and as a direct call, alternating, through FastMCP's in-memory client (server-side:
   no process boundary; the Kimi part after that is the same on both paths). Target: task ≤ direct + 50 ms.
2. ``tasks/get`` while the job runs: median round trip through the in-memory client, with a change list that
   takes 50 ms to compute (as a tracker walk on a big tree may), and a no-op tool's round trip on the same
   server and client for scale. Target ≤ 5 ms median.

Usage: uv run python benchmarks/bench_tasks.py [--runs 30]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests" / "helpers"))

from fastmcp import Client  # noqa: E402
from task_client import call_tool_task, tasks_extension  # noqa: E402

from kimi_mcp.config import Settings  # noqa: E402
from kimi_mcp.models import TaskResult  # noqa: E402
from kimi_mcp.server import create_server  # noqa: E402


class Runner:
    """A fake Kimi turn: records when it was called, lasts until ``release`` is set."""

    def __init__(self) -> None:
        self.called: list[float] = []
        self.release = threading.Event()

    def __call__(self, request, settings, *, scope, watch=None, **_kw) -> TaskResult:
        self.called.append(time.perf_counter())
        if watch is not None:
            watch.queued = False
            watch.changed_so_far = lambda: time.sleep(0.05) or ["a.py"]
        scope.progress("Kimi runs Write a.py")
        while not self.release.wait(0.01):
            if scope.cancel.is_set():
                break
        return TaskResult(success=True, workspace=str(request.workspace), output="ok")


async def started_after(client: Client, runner: Runner, args: dict, as_task: bool) -> float:
    runner.release.clear()
    before = len(runner.called)
    sent = time.perf_counter()
    if as_task:
        task = await call_tool_task(client, "kimi_code_task", args)
    else:
        call = asyncio.create_task(client.call_tool("kimi_code_task", args))
    while len(runner.called) == before:
        await asyncio.sleep(0.0005)
    latency = runner.called[before] - sent
    runner.release.set()
    await (task.result() if as_task else call)
    return latency


async def main(runs: int) -> None:
    runner = Runner()
    workspace = Path(tempfile.mkdtemp())
    args = {"task_description": "bench", "work_dir": str(workspace)}
    mcp = create_server(Settings(standby="off"), run=runner)

    @mcp.tool
    def noop() -> str:
        return "ok"

    async with Client(mcp, extensions=[tasks_extension()]) as client:
        await client.list_tools()
        direct, tasked = [], []
        for _ in range(runs):
            direct.append(await started_after(client, runner, args, as_task=False))
            tasked.append(await started_after(client, runner, args, as_task=True))
        d, t = statistics.median(direct) * 1000, statistics.median(tasked) * 1000
        print(
            f"call → turn started: direct median {d:.1f} ms, task median {t:.1f} ms, difference {t - d:+.1f} ms"
        )
        print("  target: task ≤ direct + 50 ms")

        runner.release.clear()
        task = await call_tool_task(client, "kimi_code_task", args)
        gets, noops = [], []
        for _ in range(runs * 5):
            start = time.perf_counter()
            await task.status()
            gets.append(time.perf_counter() - start)
            start = time.perf_counter()
            await client.call_tool("noop", {})
            noops.append(time.perf_counter() - start)
        status = await task.status()
        runner.release.set()
        await task.result()
        g, n = statistics.median(gets) * 1000, statistics.median(noops) * 1000
        print(f"tasks/get while Kimi works: median {g:.2f} ms (no-op tool {n:.2f} ms, ratio {g / n:.2f})")
        print(f"  target ≤ 5 ms; last status: {status.status_message!r}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=30)
    os.environ.setdefault("KIMI_MCP_STATE_DIR", tempfile.mkdtemp())
    asyncio.run(main(parser.parse_args().runs))
