"""Benchmark: tracker.diff() versus ``git status --porcelain -uall`` on a large committed tree.

Run: ``uv run python benchmarks/bench_tracker.py [--files 100000] [--runs 3]``

Each run takes a fresh snapshot, applies a fresh set of changes (creates, modifies incl. one same-size edit,
deletes), then times, interleaved for ``--rounds`` rounds, ``diff()`` (the default, possibly forked-parallel
path, and the in-process serial path) and ``git status``; every diff must find exactly the applied changes.
The changes are then committed so every run's ``git status`` sees the same amount of change. Prints medians
over all samples; exits 1 if any diff was wrong.
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil

from kimi_mcp import tracker
from kimi_mcp.tracker import Changes, diff, take_snapshot

GIT = ["git", "-c", "user.email=b@b", "-c", "user.name=b", "-c", "commit.gpgsign=false"]


def generate(root: Path, n_files: int, per_dir: int) -> list[str]:
    """~per_dir small text files per directory, 3 levels deep, plus ignored noise; returns tracked paths."""
    paths: list[str] = []
    n_dirs = max(1, -(-n_files // per_dir))
    for d in range(n_dirs):
        rel_dir = f"pkg{d // 100:03d}/mod{(d // 10) % 10}/sub{d % 10}"
        (root / rel_dir).mkdir(parents=True, exist_ok=True)
        for i in range(min(per_dir, n_files - d * per_dir)):
            rel = f"{rel_dir}/file_{i:03d}.py"
            (root / rel).write_text(f"# module {d}.{i}\nVALUE = {d * per_dir + i}\n")
            paths.append(rel)
    (root / ".gitignore").write_text("*.log\nbuild/\n*.tmp\n")
    paths.append(".gitignore")
    (root / "build").mkdir()
    for i in range(200):
        (root / "build" / f"artifact_{i}.o").write_bytes(b"\0" * 64)
        (root / f"pkg000/debug_{i}.log").write_text("log line\n")
    return paths


def git(root: Path, *args: str) -> None:
    subprocess.run([*GIT, *args], cwd=root, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def time_git_status(root: Path) -> float:
    start = time.perf_counter()
    subprocess.run(["git", "status", "--porcelain", "-uall"], cwd=root, check=True, stdout=subprocess.PIPE)
    return time.perf_counter() - start


def apply_changes(root: Path, tracked: list[str], n: int, rng: random.Random, run: int) -> Changes:
    """Create/modify/delete ``n`` files (one modification keeps the size); returns the expected Changes."""
    n_mod = n // 3
    n_del = n // 3
    n_new = n - n_mod - n_del
    victims = rng.sample([p for p in tracked if p != ".gitignore"], n_mod + n_del)
    modified, deleted = victims[:n_mod], victims[n_mod:]
    for i, rel in enumerate(modified):
        path = root / rel
        if i == 0:  # same size, different content
            data = path.read_bytes()
            path.write_bytes(b"%" + data[1:])
        else:
            with open(path, "a") as fh:
                fh.write(f"EDITED = {run}\n")
    for rel in deleted:
        (root / rel).unlink()
        tracked.remove(rel)
    created = []
    for i in range(n_new):
        rel = f"new_run{run}/batch{i % 4}/created_{i}.py" if i % 2 else f"pkg{i:03d}/mod0/new_{run}_{i}.py"
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(f"CREATED = {i}\n")
        created.append(rel)
        tracked.append(rel)
    (root / f"pkg000/ignored_{run}.log").write_text("ignored\n")  # must not show up
    return Changes(sorted(created), sorted(modified), sorted(deleted))


def timed_diff(snapshot: tracker.Snapshot, default: bool) -> tuple[float, Changes, bool]:
    """Time one diff: the default path (forks a helper if worthwhile) or forced serial."""
    if not default:
        os.environ["KIMI_MCP_TRACKER_FORK"] = "0"
    try:
        forked = tracker._parallel_ok(snapshot)
        start = time.perf_counter()
        result = diff(snapshot)
        return time.perf_counter() - start, result, forked
    finally:
        os.environ.pop("KIMI_MCP_TRACKER_FORK", None)


def report_mismatch(run: int, name: str, result: Changes, expected: Changes) -> None:
    print(f"run {run} ({name}): WRONG diff", file=sys.stderr)
    for field in ("created", "modified", "deleted"):
        got, want = set(getattr(result, field)), set(getattr(expected, field))
        if got != want:
            print(
                f"  {field}: extra {sorted(got - want)[:5]} missing {sorted(want - got)[:5]}", file=sys.stderr
            )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", type=int, default=100_000)
    parser.add_argument("--per-dir", type=int, default=100)
    parser.add_argument("--changes", type=int, default=100)
    parser.add_argument("--runs", type=int, default=3, help="fresh snapshot + fresh changes per run")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved timings per run")
    parser.add_argument("--keep", action="store_true", help="keep the generated tree")
    args = parser.parse_args()

    proc = psutil.Process()
    base = Path(tempfile.mkdtemp(prefix="bench_tracker_"))
    root = base / "repo"
    root.mkdir()
    ok = True
    load_start = f"{os.getloadavg()[0]:.2f}"
    try:
        t0 = time.perf_counter()
        tracked = generate(root, args.files, args.per_dir)
        t_gen = time.perf_counter() - t0
        t0 = time.perf_counter()
        git(root, "init", "-q")
        git(root, "add", "-A")
        git(root, "commit", "-qm", "init")
        time_git_status(root)  # warm the index
        t_git_setup = time.perf_counter() - t0
        print(
            f"tree: {len(tracked):,} tracked files in {root} (generated {t_gen:.1f}s, git {t_git_setup:.1f}s)"
        )

        rng = random.Random(1234)
        snaps, par, ser, gits, rss = [], [], [], [], []
        rss_base = proc.memory_info().rss
        n_forked = 0
        for run in range(args.runs):
            t0 = time.perf_counter()
            snapshot = take_snapshot(root)
            snaps.append(time.perf_counter() - t0)
            rss.append(proc.memory_info().rss)
            expected = apply_changes(root, tracked, args.changes, rng, run)
            for rnd in range(args.rounds):
                # Interleave the contenders and rotate who goes first after the writes.
                order = [("default", True), ("serial", False), ("git", None)]
                k = (run + rnd) % 3
                for name, default in order[k:] + order[:k]:
                    if default is None:
                        gits.append(time_git_status(root))
                        continue
                    elapsed, result, forked = timed_diff(snapshot, default)
                    (par if default else ser).append(elapsed)
                    n_forked += forked and default
                    if result != expected:
                        ok = False
                        report_mismatch(run, name, result, expected)
            n_found = sum(len(getattr(expected, f)) for f in ("created", "modified", "deleted"))
            print(f"run {run}: {n_found} changes applied; diff {'OK' if ok else 'MISMATCH'}")
            del snapshot
            git(root, "add", "-A")
            git(root, "commit", "-qm", f"run {run}")
            time_git_status(root)

        def row(label: str, values: list[float], unit: str = "s", scale: float = 1.0) -> None:
            digits = 1 if unit == "MB" else 3
            shown = ", ".join(f"{v * scale:.{digits}f}" for v in values)
            print(f"{label:<34}{statistics.median(values) * scale:>10.{digits}f} {unit:<3} [{shown}]")

        print()
        print(f"{'metric':<34}{'median':>10}     samples")
        row("take_snapshot", snaps)
        row("diff() default path", par)
        row("diff() serial (fork disabled)", ser)
        row("git status --porcelain -uall", gits)
        ratio = statistics.median(par) / statistics.median(gits)
        ratio_serial = statistics.median(ser) / statistics.median(gits)
        print(f"{'ratio tracker_diff / git_status':<34}{ratio:>10.2f}     (target <= 1.0)")
        print(f"{'ratio serial_diff / git_status':<34}{ratio_serial:>10.2f}")
        mb = 1 / (1024 * 1024)
        row("RSS before any snapshot", [rss_base], "MB", mb)
        row("RSS with snapshot held", rss, "MB", mb)
        print(f"{'':<34}{'':>10}     (target <= 100 MB)")
        print(f"default diff forked a helper in {n_forked}/{len(par)} samples (cpus={os.cpu_count()})")
        print(f"load average at start/end: {load_start} / {os.getloadavg()[0]:.2f}")
    finally:
        if args.keep:
            print(f"kept {root}")
        else:
            shutil.rmtree(base, ignore_errors=True)
    if not ok:
        print("FAIL: diff did not find exactly the applied changes", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
