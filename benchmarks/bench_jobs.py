"""Jobs and follow-ups benchmark: prints what it measures in this one run (nothing is asserted).

1. A follow-up on a live session (``kimi_continue``), per dialect: the server-side time from the call
   arriving to the message typed into Kimi (from the server's debug log; target ≤ 50 ms), and the whole
   ``kimi_continue`` (client wall time) ÷ the same turn's model time (first request byte to last streamed
   byte at the fake API; target ≤ 1.10).
2. ``kimi_job(status)`` and ``kimi_jobs`` with 10,000 stored jobs: median time of the call through an
   in-memory MCP client (server-side: no process boundary), and its ratio against a no-op tool on the
   same server and client (target ≤ 5 ms median).
3. Server RSS with 4 live sessions held, and the Kimi processes' own RSS, per dialect.
4. ``--fleet``: with the default settings (``--env NAME=VALUE`` changes one), one call in each of 10
   workspaces, each leaving its conversation open; 10 s later the whole process tree (server, every Kimi and
   Node it keeps) in RSS and PSS and how many Kimis it holds; then a follow-up (``kimi_continue``) on each of
   the 3 newest conversations (live: target ≤ 1 s) and on the oldest (resumed from Kimi's session store).
   Targets: ≤ 1.0 GB with Kimi Code, ≤ 0.5 GB with kimi-cli.

Usage: uv run python benchmarks/bench_jobs.py [--runs 5] [--dialect legacy|kimi-code|both]
       uv run python benchmarks/bench_jobs.py --fleet [--dialect ...] [--env KIMI_MCP_MAX_LIVE_SESSIONS=4]
"""

from __future__ import annotations

import argparse
import asyncio
import re
import statistics
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path

import psutil

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests" / "helpers"))
sys.path.insert(0, str(REPO / "benchmarks"))

from bench_e2e import SERVER, dialect_env  # noqa: E402
from fake_moonshot import FakeMoonshot, Reply  # noqa: E402
from fastmcp import Client, FastMCP  # noqa: E402
from fastmcp.client.transports import StdioTransport  # noqa: E402

from kimi_mcp.config import Settings  # noqa: E402
from kimi_mcp.jobs import JobStore, owner_id  # noqa: E402
from kimi_mcp.server import create_server  # noqa: E402

_STAMP = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) ")


def stamp(line: str) -> float:
    return datetime.strptime(_STAMP.match(line).group(1), "%Y-%m-%d %H:%M:%S,%f").timestamp()


def latencies(log: Path, event: str) -> list[float]:
    """Seconds from each call arriving to ``event`` ("prompt typed", "prompt submitted"), from the debug
    log."""
    out, arrived = [], None
    for line in log.read_text(encoding="utf-8", errors="replace").splitlines():
        if not _STAMP.match(line):
            continue
        if "TaskResult: call received" in line:
            arrived = stamp(line)
        elif event in line and arrived is not None:
            out.append(stamp(line) - arrived)
            arrived = None
    return out


def bench_follow_up(dialect: str, fake: FakeMoonshot, runs: int, token_delay: float) -> None:
    home = Path(tempfile.mkdtemp(prefix="kbench-home-"))
    work = Path(tempfile.mkdtemp(prefix="kbench-work-"))
    log = home / "server.log"
    _binary, env = dialect_env(dialect, fake, home)
    env.update(KIMI_MCP_LOG_LEVEL="DEBUG", KIMI_MCP_LOG_FILE=str(log), KIMI_MCP_STANDBY="off")

    async def body() -> tuple[list[float], list[float]]:
        walls, models = [], []
        async with Client(
            StdioTransport(SERVER, [], env=env, cwd=str(work), keep_alive=False), timeout=300
        ) as c:
            fake.script([Reply.text_reply("first")])
            first = await c.call_tool("kimi_code_task", {"task_description": "start", "work_dir": str(work)})
            session_id = first.structured_content["session_id"]
            for i in range(runs):
                await asyncio.sleep(1.0)
                fake.script(
                    [Reply.text_reply(f"answer {i} " + "word " * 40, token_delay=token_delay, chunk_chars=8)]
                )
                before = len(fake.chat_requests())
                start = time.perf_counter()
                result = await c.call_tool(
                    "kimi_continue", {"session_id": session_id, "message": f"next {i}"}
                )
                walls.append(time.perf_counter() - start)
                data = result.structured_content
                assert data["success"] and data["warm_start"], data
                request = fake.chat_requests()[before]
                models.append(fake.last_chunk_at - request["perf"])
        return walls, models

    walls, models = asyncio.run(body())
    typed = latencies(log, "prompt typed")[-runs:]
    submitted = latencies(log, "prompt submitted")[-runs:]
    ratios = [w / m for w, m in zip(walls, models, strict=True)]
    print(
        f"[{dialect}] follow-up on a live session: call → message typed median "
        f"{statistics.median(typed) * 1000:.0f} ms (max {max(typed) * 1000:.0f} ms; target ≤ 50), submitted "
        f"{statistics.median(submitted) * 1000:.0f} ms; kimi_continue ÷ model time median "
        f"{statistics.median(ratios):.2f} (target ≤ 1.10; wall {statistics.median(walls):.2f}s, model "
        f"{statistics.median(models):.2f}s)"
    )


def fill_store(path: Path, count: int) -> str:
    store = JobStore(path)
    result = {"success": True, "output": "x" * 4000, "files_created": ["a.py"], "status": "done"}
    last = ""
    for i in range(count):
        record = store.create(
            tool="kimi_code_task", workspace=f"/w/{i % 50}", read_only=False, arguments={"task": f"t{i}"},
            owner=owner_id(), status="running",
        )  # fmt: skip
        store.finish(record.job_id, status="done" if i % 7 else "failed", result=result, summary=f"job {i}")
        last = record.job_id
    store.close()
    return last


def bench_store_calls(jobs: int, reps: int) -> None:
    state = Path(tempfile.mkdtemp(prefix="kbench-state-"))
    job_id = fill_store(state / "jobs.sqlite3", jobs)
    server: FastMCP = create_server(Settings(state_dir=str(state)))

    @server.tool
    def noop() -> str:
        return "ok"

    async def body() -> dict[str, list[float]]:
        times: dict[str, list[float]] = {"no-op tool": [], "kimi_job(status)": [], "kimi_jobs": []}
        calls = {
            "no-op tool": ("noop", {}),
            "kimi_job(status)": ("kimi_job", {"job_id": job_id, "action": "status"}),
            "kimi_jobs": ("kimi_jobs", {}),
        }
        async with Client(server) as client:
            for _ in range(reps):
                for label, (name, args) in calls.items():
                    start = time.perf_counter()
                    result = await client.call_tool(name, args)
                    times[label].append(time.perf_counter() - start)
                    assert not result.is_error
        return times

    times = asyncio.run(body())
    base = statistics.median(times["no-op tool"])
    for label, values in times.items():
        median = statistics.median(values)
        print(
            f"{label:18} with {jobs} stored jobs: median {median * 1000:.2f} ms "
            f"(x{median / base:.2f} of the no-op tool; target ≤ 5 ms)"
        )


def bench_live_rss(dialect: str, fake: FakeMoonshot) -> None:
    home = Path(tempfile.mkdtemp(prefix="kbench-home-"))
    _binary, env = dialect_env(dialect, fake, home)
    env["KIMI_MCP_STANDBY"] = "off"  # only the live sessions
    works = [Path(tempfile.mkdtemp(prefix=f"kbench-live{i}-")) for i in range(4)]

    async def body() -> tuple[float, float, int]:
        transport = StdioTransport(SERVER, [], env=env, cwd=str(works[0]), keep_alive=False)
        async with Client(transport, timeout=300) as client:
            await client.list_tools()
            server = next(
                p for p in psutil.Process().children(recursive=True) if "kimi-mcp" in " ".join(p.cmdline())
            )
            idle_rss = server.memory_info().rss
            for work in works:
                fake.script([Reply.text_reply("ok")])
                await client.call_tool("kimi_code_task", {"task_description": "hi", "work_dir": str(work)})
            await asyncio.sleep(1.0)
            kimis = server.children(recursive=True)
            kimi_rss = sum(p.memory_info().rss for p in kimis if p.is_running())
            return idle_rss / 2**20, server.memory_info().rss / 2**20, kimi_rss / 2**20, len(kimis)

    idle, held, kimi, count = asyncio.run(body())
    print(
        f"[{dialect}] server RSS {held:.0f} MB with 4 live sessions held ({idle:.0f} MB before the first call); "
        f"the Kimi processes ({count}) {kimi:.0f} MB"
    )


def tree_memory(root: psutil.Process) -> tuple[float, float, int]:
    """(RSS MB, PSS MB, Kimi processes) of ``root`` and everything under it."""
    rss = pss = 0
    kimis = 0
    for proc in [root, *root.children(recursive=True)]:
        try:
            info = proc.memory_full_info()
            kimis += proc.pid != root.pid and proc.ppid() == root.pid
        except psutil.Error:
            continue
        rss, pss = rss + info.rss, pss + getattr(info, "pss", info.rss)
    return rss / 2**20, pss / 2**20, kimis


def bench_fleet(dialect: str, fake: FakeMoonshot, extra: dict[str, str]) -> None:
    """10 workspaces, one conversation each, kept as the defaults (and ``extra``) say (see the docstring)."""
    home = Path(tempfile.mkdtemp(prefix="kbench-home-"))
    _binary, env = dialect_env(dialect, fake, home)
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    env.update(extra)
    works = [Path(tempfile.mkdtemp(prefix=f"kbench-fleet{i}-")) for i in range(10)]

    async def follow_up(client: Client, session_id: str) -> tuple[float, bool]:
        fake.script([Reply.text_reply("again")])
        start = time.perf_counter()
        result = await client.call_tool("kimi_continue", {"session_id": session_id, "message": "and now?"})
        data = result.structured_content
        assert data["success"], data
        return time.perf_counter() - start, data["warm_start"]

    async def body() -> None:
        transport = StdioTransport(SERVER, [], env=env, cwd=str(works[0]), keep_alive=False)
        async with Client(transport, timeout=300) as client:
            await client.list_tools()
            server = next(
                p for p in psutil.Process().children(recursive=True) if "kimi-mcp" in " ".join(p.cmdline())
            )
            sessions = []
            for work in works:
                fake.script([Reply.text_reply("ok")])
                result = await client.call_tool(
                    "kimi_code_task", {"task_description": "hi", "work_dir": str(work)}
                )
                sessions.append(result.structured_content["session_id"])
            await asyncio.sleep(10.0)
            rss, pss, kimis = tree_memory(server)
            print(
                f"[{dialect}] after 10 calls in 10 workspaces, +10 s: process tree RSS {rss / 1024:.2f} GB, "
                f"PSS {pss / 1024:.2f} GB, {kimis} Kimi processes  (target ≤ "
                f"{'1.0' if dialect == 'kimi-code' else '0.5'} GB)",
                flush=True,
            )
            for index in (9, 8, 7, 0):
                seconds, live = await follow_up(client, sessions[index])
                print(
                    f"[{dialect}]   kimi_continue on conversation {index + 1} of 10: {seconds:.2f} s "
                    f"({'live' if live else 'resumed'})",
                    flush=True,
                )

    asyncio.run(body())


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--jobs", type=int, default=10_000)
    parser.add_argument("--dialect", choices=["legacy", "kimi-code", "both"], default="both")
    parser.add_argument("--token-delay", type=float, default=0.02, help="seconds between streamed chunks")
    parser.add_argument("--fleet", action="store_true", help="only the 10-workspace memory measure")
    parser.add_argument("--env", action="append", default=[], help="with --fleet: NAME=VALUE for the server")
    args = parser.parse_args()
    if args.fleet:
        extra = dict(item.split("=", 1) for item in args.env)
        with FakeMoonshot() as fake:
            for dialect in ["legacy", "kimi-code"] if args.dialect == "both" else [args.dialect]:
                fake.reset()
                bench_fleet(dialect, fake, extra)
        return
    bench_store_calls(args.jobs, reps=200)
    dialects = ["legacy", "kimi-code"] if args.dialect == "both" else [args.dialect]
    with FakeMoonshot() as fake:
        for dialect in dialects:
            fake.reset()
            bench_follow_up(dialect, fake, args.runs, args.token_delay)
            fake.reset()
            bench_live_rss(dialect, fake)


if __name__ == "__main__":
    main()
