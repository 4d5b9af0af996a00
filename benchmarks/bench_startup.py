"""Kimi's startup, measured as kimi-mcp sees it: ``KimiSession.start()`` from spawn to the ready input box
(the suite's fake API, Kimi configured by environment: no login), per dialect, fresh and resuming a one-turn
conversation (``-S``), optionally while ``--burners`` ``yes >/dev/null`` processes keep CPUs busy (stopped
afterwards). This is what a standby or a live conversation saves a call. It also prints how many CPUs other
processes of the machine used meanwhile (a shared machine skews the numbers). Nothing is asserted.

Usage: uv run python benchmarks/bench_startup.py [--runs 5] [--burners 0] [--dialect legacy|kimi-code|both]
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

import psutil
from bench_e2e import dialect_env
from fake_moonshot import FakeMoonshot

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


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--burners", type=int, default=0, help="`yes >/dev/null` processes running meanwhile")
    parser.add_argument("--dialect", choices=["legacy", "kimi-code", "both"], default="both")
    args = parser.parse_args()
    dialects = ["legacy", "kimi-code"] if args.dialect == "both" else [args.dialect]
    burners = [subprocess.Popen(["yes"], stdout=subprocess.DEVNULL) for _ in range(args.burners)]
    try:
        print(f"machine: {machine()}; burners: {args.burners}", flush=True)
        with FakeMoonshot() as fake:
            for dialect in dialects:
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
