"""Start-up, two ways. Default: Kimi's startup, measured as kimi-mcp sees it: ``KimiSession.start()`` from spawn
to the ready input box (the suite's fake API, Kimi configured by environment: no login), per dialect, fresh and
resuming a one-turn conversation (``-S``), optionally while ``--burners`` ``yes >/dev/null`` processes keep CPUs
busy (stopped afterwards). This is what a standby or a live conversation saves a call. It also prints how many
CPUs other processes of the machine used meanwhile (a shared machine skews the numbers). Nothing is asserted.

``--server``: kimi-mcp's own start, as an MCP client sees it: spawn → ``initialize`` answered → ``tools/list``
answered → the first tool result (``kimi_status``, which runs no model turn), through a real MCP client
(``fastmcp.Client`` over stdio), each sample a fresh server after one untimed start (which records the fast
connect and writes the bytecode). The server runs with bytecode caching on, as an installed one does (a
``PYTHONDONTWRITEBYTECODE`` of this shell is dropped for it; ``--no-bytecode``: every start compiles).
``--compare SRC`` runs another kimi-mcp source tree (e.g. ``git worktree add /tmp/base main``) interleaved
with this one, sample by sample, and prints the ratio of the medians (target: first tool result ≤ 1.0 s on a
quiet 2-CPU machine).

Usage: uv run python benchmarks/bench_startup.py [--runs 5] [--burners 0] [--dialect legacy|kimi-code|both]
       uv run python benchmarks/bench_startup.py --server [--runs 7] [--compare SRC] [--no-bytecode]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

import psutil
from bench_e2e import SERVER, dialect_env
from fake_moonshot import FakeMoonshot
from fastmcp import Client
from fastmcp.client.transports import StdioTransport

from kimi_mcp.drivers import make_driver, probe
from kimi_mcp.scope import Scope
from kimi_mcp.session import ApprovalPolicy, KimiSession


def session(binary: str, env: dict[str, str], work: Path, resume: str | None = None) -> KimiSession:
    return KimiSession(
        make_driver(probe(binary, env)), work, env=env, policy=ApprovalPolicy(work, read_only=False),
        scope=Scope(deadline=time.monotonic() + 120), resume=resume,
    )  # fmt: skip


def start_once(binary: str, env: dict[str, str], work: Path, resume: str | None = None) -> float:
    """Seconds from spawn to the ready input box (``resume``: Kimi started on that conversation, ``-S``);
    the session is closed afterwards (not measured)."""
    kimi = session(binary, env, work, resume)
    started = time.perf_counter()
    try:
        kimi.start()
        return time.perf_counter() - started
    finally:
        kimi.close()


def bench(dialect: str, fake: FakeMoonshot, runs: int) -> tuple[list[float], list[float]]:
    """(fresh starts, resumes of a one-turn conversation), each after one start that is not counted."""
    home = Path(tempfile.mkdtemp(prefix="kbench-home-"))
    binary, env = dialect_env(dialect, fake, home)
    start_once(binary, env, Path(tempfile.mkdtemp(prefix="kbench-work-")))  # first start: caches, not counted
    fresh = [start_once(binary, env, Path(tempfile.mkdtemp(prefix="kbench-work-"))) for _ in range(runs)]
    work = Path(tempfile.mkdtemp(prefix="kbench-work-"))
    first = session(binary, env, work)
    try:
        first.start()
        first.run_turn("say something")
        conversation = first.session_id
    finally:
        first.close()
    assert conversation is not None
    start_once(binary, env, work, conversation)
    return fresh, [start_once(binary, env, work, conversation) for _ in range(runs)]


def summary(times: list[float]) -> str:
    return (
        f"median {statistics.median(times):.2f} s, min {min(times):.2f} s, max {max(times):.2f} s  "
        f"runs={[round(t, 2) for t in times]}"
    )


def cpu_seconds() -> tuple[float, float]:
    """(CPU seconds the whole machine has been busy, CPU seconds this benchmark's processes used), so far."""
    machine_times = psutil.cpu_times()
    busy = sum(machine_times) - machine_times.idle - getattr(machine_times, "iowait", 0.0)
    me = psutil.Process()
    mine = me.cpu_times()
    ours = mine.user + mine.system + mine.children_user + mine.children_system  # reaped children included
    for child in me.children(recursive=True):
        try:
            times = child.cpu_times()
        except psutil.Error:
            continue
        ours += times.user + times.system + times.children_user + times.children_system
    return busy, ours


def machine() -> str:
    model = next(
        (line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
         if line.startswith("model name")),
        platform.processor() or platform.machine(),
    )  # fmt: skip
    return f"{model}, {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.2f}"


async def first_tool(env: dict[str, str], work: Path) -> tuple[float, float, float]:
    """Seconds from spawn to the answers of ``initialize``, ``tools/list`` and a first ``kimi_status``."""
    log = open(os.devnull, "w")  # noqa: SIM115 - the server's stderr, closed with the client below
    transport = StdioTransport(SERVER, [], env=env, cwd=str(work), keep_alive=False, log_file=log)
    client = Client(transport, timeout=120)
    started = time.perf_counter()
    async with client:
        initialized = time.perf_counter() - started
        await client.list_tools()
        listed = time.perf_counter() - started
        result = await client.call_tool("kimi_status", {})
        answered = time.perf_counter() - started
    log.close()
    assert result.structured_content is not None and "kimi_bin" in result.structured_content, result
    return initialized, listed, answered


def server_env(dialect: str, fake: FakeMoonshot, source: str | None, bytecode: bool) -> dict[str, str]:
    """The server's environment: Kimi configured for the fake API, no standby (only the start is timed)."""
    _, env = dialect_env(dialect, fake, Path(tempfile.mkdtemp(prefix="kbench-home-")))
    env["KIMI_MCP_STANDBY"] = "off"
    if bytecode:
        env.pop("PYTHONDONTWRITEBYTECODE", None)
    else:  # an empty bytecode cache that is never written: every start compiles every module
        env.update(PYTHONDONTWRITEBYTECODE="1", PYTHONPYCACHEPREFIX=tempfile.mkdtemp(prefix="kbench-pyc-"))
    if source is not None:  # that tree's kimi_mcp first on the path (the installed one is this checkout's)
        env["PYTHONPATH"] = str(Path(source, "src").resolve())
    return env


def bench_server(dialect: str, fake: FakeMoonshot, runs: int, compare: str | None, bytecode: bool) -> None:
    """``runs`` fresh servers per side (this checkout, and ``compare`` when given), interleaved."""
    sides = {"this": server_env(dialect, fake, None, bytecode)}
    if compare:
        sides["compare"] = server_env(dialect, fake, compare, bytecode)
    work = Path(tempfile.mkdtemp(prefix="kbench-work-"))
    samples: dict[str, list[tuple[float, float, float]]] = {side: [] for side in sides}
    for env in sides.values():
        asyncio.run(first_tool(env, work))  # records the fast connect, writes the bytecode: not counted
    for _ in range(runs):
        for side, env in sides.items():
            samples[side].append(asyncio.run(first_tool(env, work)))
    for index, what in enumerate(("initialize", "tools/list", "first kimi_status result")):
        line = []
        for side, rows in samples.items():
            times = [row[index] for row in rows]
            line.append(f"{side} {summary(times)}")
        print(f"[{dialect}] spawn → {what}: " + "; ".join(line), flush=True)
    if compare:
        ours, theirs = (statistics.median(row[2] for row in samples[s]) for s in ("this", "compare"))
        print(
            f"[{dialect}] RATIO spawn → first tool result, this / compare = {ours / theirs:.2f}", flush=True
        )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--burners", type=int, default=0, help="`yes >/dev/null` processes running meanwhile")
    parser.add_argument("--dialect", choices=["legacy", "kimi-code", "both"], default="both")
    parser.add_argument("--server", action="store_true", help="time kimi-mcp's start, not Kimi's")
    parser.add_argument("--compare", metavar="SRC", help="with --server: another kimi-mcp tree, interleaved")
    parser.add_argument(
        "--no-bytecode", action="store_true", help="with --server: the server compiles every start"
    )
    args = parser.parse_args()
    dialects = ["legacy", "kimi-code"] if args.dialect == "both" else [args.dialect]
    burners = [subprocess.Popen(["yes"], stdout=subprocess.DEVNULL) for _ in range(args.burners)]
    try:
        print(f"machine: {machine()}; burners: {args.burners}", flush=True)
        with FakeMoonshot() as fake:
            for dialect in dialects:
                if args.server:
                    bench_server(dialect, fake, args.runs, args.compare, not args.no_bytecode)
                    continue
                (busy, ours), began = cpu_seconds(), time.monotonic()
                fresh, resumed = bench(dialect, fake, args.runs)
                (busy_after, ours_after), wall = cpu_seconds(), time.monotonic() - began
                other = max(0.0, (busy_after - busy) - (ours_after - ours)) / wall
                print(f"[{dialect}] spawn → ready: {summary(fresh)}", flush=True)
                print(f"[{dialect}] resume (-S, a one-turn conversation) → ready: {summary(resumed)}")
                print(f"[{dialect}] other processes used {other:.2f} CPUs meanwhile", flush=True)
    finally:
        for burner in burners:
            burner.kill()
            burner.wait()


if __name__ == "__main__":
    main()
