"""Benchmark: the job store's read paths with many stored jobs (prints ratios measured in this one run;
nothing is asserted).

Run: ``uv run python benchmarks/bench_jobstore.py [--jobs 10000] [--reps 200]``

Fills a temporary store with ``--jobs`` jobs (mixed statuses, 20 workspaces, a ~5 kB result each), then,
interleaved for ``--reps`` rounds in a random order, times ``get(job_id)`` (the ``kimi_job status`` path),
``list(limit=20)`` (``kimi_jobs``), ``list(status="running")``, ``list(status="done")`` (the largest
status), ``list(workspace=...)`` and ``latest_for_session`` (``kimi_continue``'s look-up), and a baseline:
a trivial ``SELECT 1`` on the same connection behind the same lock. Prints the medians and their ratios to
the baseline; the issue's target is <= 5 ms median for ``kimi_job(status)`` and ``kimi_jobs``.
"""

from __future__ import annotations

import argparse
import random
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from kimi_mcp.jobs._store import FINISHED, JobStore

STATUSES = ["done"] * 14 + ["failed"] * 2 + ["cancelled", "interrupted", "running", "queued"]
WORKSPACES = [f"/home/me/projects/repo{i:02d}" for i in range(20)]
WORDS = ["def", "class", "return", "self", "value", "result", "error", "files", "kimi", "turn"]


def fake_result(rng: random.Random, job_id: str, size: int = 5000) -> dict:
    """A result of about ``size`` characters, shaped like a tool's."""
    text = " ".join(rng.choices(WORDS, k=size // 12))
    return {
        "success": True,
        "job_id": job_id,
        "output": text[: size // 2],
        "files_created": ["src/app.py"],
        "file_contents": {"src/app.py": text[size // 2 :]},
        "usage": {"input_tokens": rng.randint(1000, 9000), "output_tokens": rng.randint(100, 900)},
    }


def fill(store: JobStore, n: int, rng: random.Random) -> tuple[list[str], list[str]]:
    """``n`` jobs in start order; returns their ids and session ids."""
    ids, sessions = [], []
    for i in range(n):
        status = rng.choice(STATUSES)
        session = f"session_{i // 3:05d}"  # about three turns per conversation
        job = store.create(
            tool=rng.choice(["kimi_code_task", "kimi_continue", "kimi_analyze_code"]),
            workspace=rng.choice(WORKSPACES),
            read_only=rng.random() < 0.3,
            arguments={"task_description": " ".join(rng.choices(WORDS, k=40)), "wait_s": 0},
            owner="4242:123456",
            status="queued" if status == "queued" else "running",
            session_id=session,
            summary=f"job {i}: " + " ".join(rng.choices(WORDS, k=8)),
        )
        if status in FINISHED:
            store.finish(
                job.job_id, status=status, result=fake_result(rng, job.job_id), summary=f"job {i} done"
            )
        elif status == "running":
            store.update(job.job_id, progress={"elapsed_s": 12.5, "activity": "WriteFile src/app.py"})
        ids.append(job.job_id)
        sessions.append(session)
    return ids, sessions


def timed(fn: Callable[[], object]) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=10_000)
    parser.add_argument("--reps", type=int, default=200)
    args = parser.parse_args()

    rng = random.Random(1234)
    base = Path(tempfile.mkdtemp(prefix="bench_jobstore_"))
    store = JobStore(base / "jobs.sqlite3")
    try:
        t0 = time.perf_counter()
        ids, sessions = fill(store, args.jobs, rng)
        t_fill = time.perf_counter() - t0
        size = sum(p.stat().st_size for p in base.iterdir()) / 1e6
        print(f"store: {args.jobs:,} jobs, {size:.1f} MB on disk (with WAL), filled in {t_fill:.1f}s")

        def baseline() -> None:
            with store._lock:
                store._conn.execute("SELECT 1").fetchone()

        contenders: dict[str, Callable[[], object]] = {
            "SELECT 1 (baseline)": baseline,
            "get(job_id)": lambda: store.get(rng.choice(ids)),
            "list(limit=20)": lambda: store.list(limit=20),
            'list(status="running")': lambda: store.list(status="running"),
            'list(status="done")': lambda: store.list(status="done"),
            "list(workspace=...)": lambda: store.list(workspace=rng.choice(WORKSPACES)),
            "latest_for_session": lambda: store.latest_for_session(rng.choice(sessions)),
        }
        times: dict[str, list[float]] = {name: [] for name in contenders}
        for fn in contenders.values():  # warm the page cache and the statement cache
            fn()
        for _ in range(args.reps):
            order = list(contenders)
            rng.shuffle(order)
            for name in order:
                times[name].append(timed(contenders[name]))

        base_median = statistics.median(times["SELECT 1 (baseline)"])
        print()
        print(f"{'operation':<28}{'median ms':>11}{'p90 ms':>10}{'x SELECT 1':>12}")
        for name, samples in times.items():
            median = statistics.median(samples)
            p90 = statistics.quantiles(samples, n=10)[-1]
            print(f"{name:<28}{median * 1e3:>11.3f}{p90 * 1e3:>10.3f}{median / base_median:>12.1f}")
        print()
        print(f"{args.reps} interleaved repetitions each; target: get and list(limit=20) <= 5 ms median")
    finally:
        store.close()
        shutil.rmtree(base, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
