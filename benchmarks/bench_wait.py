"""kimi_wait wake-up benchmark: prints what it measures in this one run (nothing is asserted).

1. A job of this server ends (the fake runner returns its result): the seconds until the ``kimi_wait`` call
   that waits for its group (``until="any"``, three jobs) returns at the client, median and worst of
   ``--runs`` (target ≤ 0.2 s median), with the same for ``kimi_job`` waiting on one job as the baseline.
2. A job of another server on the same job store ends (its row finished through a second connection): the
   same wake-up (target: within about a second: the store is read every ``FOREIGN_STEP``).

Both through FastMCP's in-memory client (no process boundary), Kimi replaced by a gated fake.

Usage: uv run python benchmarks/bench_wait.py [--runs 20]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from fastmcp import Client

from kimi_mcp.config import Settings, state_dir
from kimi_mcp.jobs import STORE_FILE, JobStore, owner_id
from kimi_mcp.models import TaskResult
from kimi_mcp.server import create_server

TARGET_S = 0.2


class Gated:
    """A fake Kimi whose turn whose prompt holds a gate's name ends when that gate opens; ``ended``: when
    each one returned its result (perf_counter)."""

    def __init__(self) -> None:
        self.gates: dict[str, threading.Event] = {}
        self.ended: dict[str, float] = {}

    def __call__(self, request, settings, *, scope, watch=None, **_kw: Any) -> TaskResult:
        if watch is not None:
            watch.queued = False
        name = next(n for n in self.gates if n in request.prompt)
        while not self.gates[name].wait(0.01):
            pass
        self.ended[name] = time.perf_counter()
        return TaskResult(success=True, workspace=str(request.workspace), output=name)


async def start(client: Client, work: Path, fake: Gated, name: str, group: str) -> str:
    fake.gates[name] = threading.Event()
    args = {"task_description": name, "work_dir": str(work / name), "wait_s": 0, "group": group}
    (work / name).mkdir()
    return (await client.call_tool("kimi_code_task", args)).structured_content["job_id"]


async def local_wakeups(settings: Settings, runs: int, work: Path) -> tuple[list[float], list[float]]:
    fake = Gated()
    joined, single = [], []
    async with Client(create_server(settings, run=fake)) as client:
        for run in range(runs):
            group = f"g{run}"
            names = [f"JOB.{run}.{i}." for i in range(3)]
            for name in names:
                await start(client, work, fake, name, group)
            waiting = asyncio.create_task(client.call_tool("kimi_wait", {"group": group, "wait_s": 60}))
            await asyncio.sleep(0.3)  # the wait is blocked on the jobs' events by now
            fake.gates[names[1]].set()
            await waiting
            joined.append(time.perf_counter() - fake.ended[names[1]])
            one = await start(client, work, fake, f"ONE.{run}.", group)
            waiting = asyncio.create_task(client.call_tool("kimi_job", {"job_id": one, "wait_s": 60}))
            await asyncio.sleep(0.3)
            fake.gates[f"ONE.{run}."].set()
            await waiting
            single.append(time.perf_counter() - fake.ended[f"ONE.{run}."])
            for name in (names[0], names[2]):
                fake.gates[name].set()
    return joined, single


async def foreign_wakeups(settings: Settings, runs: int, work: Path) -> list[float]:
    out = []
    async with Client(create_server(settings, run=Gated())) as client:
        await client.call_tool("kimi_jobs", {})
        store = JobStore(state_dir(settings, os.environ) / STORE_FILE)
        for run in range(runs):
            record = store.create(
                tool="kimi_prompt", workspace=str(work), read_only=False, arguments={}, owner=owner_id(),
                group=f"far{run}",
            )  # fmt: skip
            waiting = asyncio.create_task(client.call_tool("kimi_wait", {"group": f"far{run}", "wait_s": 60}))
            await asyncio.sleep(0.3)
            ended = time.perf_counter()
            await asyncio.to_thread(
                store.finish, record.job_id, status="done", result={"success": True}, summary="s"
            )
            await waiting
            out.append(time.perf_counter() - ended)
        store.close()
    return out


def report(label: str, seconds: list[float], target: float) -> None:
    median = statistics.median(seconds)
    print(
        f"{label}: median {median * 1000:.1f} ms, worst {max(seconds) * 1000:.1f} ms over {len(seconds)} runs; "
        f"median / target ({target * 1000:.0f} ms) = {median / target:.2f}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=20)
    runs = parser.parse_args().runs
    with tempfile.TemporaryDirectory() as tmp:
        settings = Settings(state_dir=str(Path(tmp) / "state"))  # a job store of its own
        work = Path(tmp) / "work"
        work.mkdir()
        joined, single = asyncio.run(local_wakeups(settings, runs, work))
        report("kimi_wait (any of 3), a job of this server ends", joined, TARGET_S)
        report("kimi_job (one job) as the baseline", single, TARGET_S)
        print(f"kimi_wait / kimi_job median: {statistics.median(joined) / statistics.median(single):.2f}")
        report(
            "kimi_wait, a job of another server ends (store)",
            asyncio.run(foreign_wakeups(settings, runs, work)),
            1.0,
        )


if __name__ == "__main__":
    main()
