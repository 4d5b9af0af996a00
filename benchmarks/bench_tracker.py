"""Benchmark: tracker.diff() versus ``git status --porcelain -uall`` on a large committed tree.

Run: ``uv run python benchmarks/bench_tracker.py [--files 100000] [--runs 3]``

Each run takes a fresh snapshot (watching its directories, as the server does while Kimi starts up), then a
separate shell process applies a fresh set of changes (creates in new and existing directories, appends, one
same-size edit, deletes, an ignored file), as Kimi's tools do. Then, interleaved for ``--rounds`` rounds, it
times the watched ``diff()`` (only the directories inotify saw change), the full walk (``diff()``'s fallback:
forks a helper on 2+ CPUs), the full walk in-process, and ``git status``; every diff must find exactly the
applied changes, and the watched one must not have fallen back. The changes are then committed so every
run's ``git status`` sees the same amount of change. Prints medians over all samples, the ratios to git, and
the snapshot's memory per tracked file (its per-file records are in an anonymous temporary file; each run
also times a snapshot that keeps them in memory, ``TrackerOptions(spill=False)``, for comparison); exits 1 if
any diff was wrong.
"""

from __future__ import annotations

import argparse
import gc
import os
import random
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path

import psutil

from kimi_mcp import tracker
from kimi_mcp.tracker import Changes, TrackerOptions, _parallel, diff, take_snapshot

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
    """Create/modify/delete ``n`` files from a separate shell process (one modification keeps the size);
    returns the expected Changes."""
    n_mod = n // 3
    n_del = n // 3
    n_new = n - n_mod - n_del
    victims = rng.sample([p for p in tracked if p != ".gitignore"], n_mod + n_del)
    modified, deleted = victims[:n_mod], victims[n_mod:]
    script = ["set -e"]
    for i, rel in enumerate(modified):
        q = shlex.quote(rel)
        if i == 0:  # same size, different content
            script.append(f"printf '%%' | dd of={q} bs=1 count=1 conv=notrunc status=none")
        else:
            script.append(f"printf 'EDITED = {run}\\n' >> {q}")
    script.append("rm -f " + " ".join(shlex.quote(rel) for rel in deleted))
    for rel in deleted:
        tracked.remove(rel)
    created = []
    for i in range(n_new):
        rel = f"new_run{run}/batch{i % 4}/created_{i}.py" if i % 2 else f"pkg{i:03d}/mod0/new_{run}_{i}.py"
        script.append(f"mkdir -p {shlex.quote(rel.rpartition('/')[0])}")
        script.append(f"printf 'CREATED = {i}\\n' > {shlex.quote(rel)}")
        created.append(rel)
        tracked.append(rel)
    script.append(f"echo ignored > pkg000/ignored_{run}.log")  # must not show up
    subprocess.run(["sh", "-c", "\n".join(script)], cwd=root, check=True)
    return Changes(sorted(created), sorted(modified), sorted(deleted))


def timed_diff(snapshot: tracker.Snapshot, how: str) -> tuple[float, Changes]:
    """Time one diff: ``watched`` (the default), ``full`` (the fallback walk, forking a helper if worthwhile)
    or ``serial`` (the fallback walk in-process)."""
    start = time.perf_counter()
    full_walk = _parallel.walk_full
    result = diff(snapshot) if how == "watched" else full_walk(snapshot, TrackerOptions(fork=how == "full"))
    return time.perf_counter() - start, result


def snapshot_memory(root: Path) -> tuple[int, float, float, str]:
    """(tracked files, bytes per file held by a Snapshot, transient peak per file while taking it, where its
    records are), by tracemalloc (Python allocations; the kernel's inotify watches and the page cache holding
    the records' file are not counted)."""
    gc.collect()
    tracemalloc.start()
    try:
        with take_snapshot(root) as snapshot:
            held, peak = tracemalloc.get_traced_memory()
            n = len(snapshot)
            records = snapshot.tree.records
            where = (
                f"temporary file, {len(records) / 1e6:.1f} MB mapped"
                if records.on_disk
                else f"memory ({records.reason})"
            )
    finally:
        tracemalloc.stop()
    return n, held / n, peak / n, where


def time_snapshot(root: Path, spill: bool) -> float:
    """Seconds to take (and close) a snapshot with its records spilled to a file or kept in memory."""
    start = time.perf_counter()
    take_snapshot(root, TrackerOptions(spill=spill)).close()
    return time.perf_counter() - start


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

        n_files, held_per_file, peak_per_file, where = snapshot_memory(root)
        rng = random.Random(1234)
        snaps: list[float] = []
        rss: list[float] = []
        rss_after: list[float] = []
        times: dict[str, list[float]] = {"watched": [], "full": [], "serial": [], "git": []}
        rss_base = proc.memory_info().rss
        n_forked = n_watches = 0
        for run in range(args.runs):
            t0 = time.perf_counter()
            snapshot = take_snapshot(root)
            snaps.append(time.perf_counter() - t0)
            rss.append(proc.memory_info().rss)
            if not snapshot.watching:
                print(
                    f"run {run}: WARNING: the snapshot is not watching ({snapshot.unwatched_reason})",
                    file=sys.stderr,
                )
            n_watches = len(snapshot.watcher or ())
            expected = apply_changes(root, tracked, args.changes, rng, run)
            run_ok = True
            for rnd in range(args.rounds):
                # Interleave the contenders and rotate who goes first after the writes.
                order = ["watched", "full", "serial", "git"]
                k = (run + rnd) % len(order)
                for how in order[k:] + order[:k]:
                    if how == "git":
                        times["git"].append(time_git_status(root))
                        continue
                    if how == "full":
                        n_forked += _parallel.parallel_ok(snapshot, TrackerOptions())
                    elapsed, result = timed_diff(snapshot, how)
                    times[how].append(elapsed)
                    if result != expected:
                        run_ok = False
                        report_mismatch(run, how, result, expected)
                    if how == "watched" and result.method != "watched":
                        run_ok = False
                        print(
                            f"run {run}: watched diff FELL BACK to a full walk: {result.reason}",
                            file=sys.stderr,
                        )
            rss_after.append(proc.memory_info().rss)
            ok = ok and run_ok
            n_found = sum(len(getattr(expected, f)) for f in ("created", "modified", "deleted"))
            print(f"run {run}: {n_found} changes applied by a shell; diffs {'OK' if run_ok else 'MISMATCH'}")
            snapshot.close()
            del snapshot
            git(root, "add", "-A")
            git(root, "commit", "-qm", f"run {run}")
            time_git_status(root)

        # Last: a snapshot with its records in memory leaves its freed pages in the heap, inflating RSS.
        snaps_in_memory = [time_snapshot(root, spill=False) for _ in range(args.runs)]

        def row(label: str, values: list[float], unit: str = "s", scale: float = 1.0) -> None:
            digits = 1 if unit in ("MB", "B") else 3
            shown = ", ".join(f"{v * scale:.{digits}f}" for v in values)
            print(f"{label:<36}{statistics.median(values) * scale:>10.{digits}f} {unit:<3} [{shown}]")

        git_median = statistics.median(times["git"])

        def ratio(label: str, how: str, note: str = "") -> None:
            print(f"{label:<36}{statistics.median(times[how]) / git_median:>10.2f}     {note}")

        print()
        print(f"{'metric':<36}{'median':>10}     samples")
        row("take_snapshot (watching)", snaps)
        row("  same, records kept in memory", snaps_in_memory)
        row("diff() watched", times["watched"])
        row("full walk (default: forked helper)", times["full"])
        row("full walk serial (fork disabled)", times["serial"])
        row("git status --porcelain -uall", times["git"])
        ratio("ratio watched_diff / git_status", "watched", "(target <= 1.0)")
        ratio("ratio full_walk / git_status", "full", "(the fallback)")
        ratio("ratio serial_walk / git_status", "serial")
        mb = 1 / (1024 * 1024)
        row("RSS before any snapshot", [rss_base], "MB", mb)
        row("RSS with snapshot held", rss, "MB", mb)
        row("  same, after all its diffs", rss_after, "MB", mb)
        print(f"{'':<36}{'':>10}     (target <= 100 MB)")
        print(
            f"{'Snapshot memory per tracked file':<36}{held_per_file:>10.1f} B       "
            f"(tracemalloc, {n_files:,} files: {held_per_file * n_files * mb:.1f} MB held)"
        )
        print(
            f"{'peak while taking it, per file':<36}{peak_per_file:>10.1f} B       "
            f"({peak_per_file * n_files * mb:.1f} MB; 4 MB of it: _ignore's read buffer for .gitignore)"
        )
        print(f"per-file records: {where}")
        print(f"inotify watches held by a snapshot: {n_watches:,} (one per walked directory)")
        print(f"full walk forked a helper in {n_forked}/{len(times['full'])} samples (cpus={os.cpu_count()})")
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
