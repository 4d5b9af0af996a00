"""Benchmark: isolated copies (``kimi_mcp.worktree``) against ``git worktree add`` (prints what one run
measured; nothing is asserted).

Run: ``uv run python benchmarks/bench_worktree.py [--files 20000] [--reps 5] [--changed 100] [--dir /tmp]
[--loose]``

Generates a repository of ``--files`` small tracked files in nested directories (objects packed, as in a
cloned repository; ``--loose`` leaves them loose), plus a few uncommitted edits, untracked files and an
ignored build directory, in a temporary directory under ``--dir``. Then,
interleaved for ``--reps`` rounds in a random order:

- ``create()`` against the baseline ``git worktree add --detach <tmp> HEAD`` (removed with ``git worktree
  remove --force`` outside the timing): medians and their ratio (target <= 1.2), and the time of each
  step of ``create`` (git commands by name; the checkout of HEAD runs alongside ``add``/``write-tree``/
  ``commit-tree`` and shows as the wait for it; the rest as "python");
- ``apply()`` of a ``--changed``-file change into the user's tree (target <= 0.5 s), timed a second after
  the copy was made (as after a real Kimi turn), and ``diff()`` of the same change;
- disk used per copy (``disk_usage``) against the worktree's (its directory plus its admin directory).

Both contenders write every file of the tree, so on a slow disk the ratio tends to 1; ``--dir /dev/shm``
(tmpfs) shows the fixed costs.
"""

from __future__ import annotations

import argparse
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path

from kimi_mcp import worktree
from kimi_mcp.worktree import _create, _diff, _git, _repo
from kimi_mcp.worktree._store import tree_bytes

GIT_ENV_ARGS = ["-c", "user.name=bench", "-c", "user.email=bench@example.invalid", "-c", "gc.auto=0"]


def sh_git(cwd: Path, *args: str) -> str:
    done = subprocess.run(
        ["git", *GIT_ENV_ARGS, *args], cwd=cwd, env=_git.git_env(), capture_output=True, text=True, check=True
    )
    return done.stdout


def make_repo(base: Path, files: int, rng: random.Random, pack: bool) -> Path:
    """``files`` tracked files (~300 bytes, 40 per directory, three levels), 10 uncommitted edits, 10
    untracked files and an ignored ``build/`` of 50 files; ``pack``: objects packed (else loose)."""
    repo = base / "repo"
    repo.mkdir()
    sh_git(repo, "init", "-q", "-b", "main")
    (repo / ".gitignore").write_text("build/\n")
    for i in range(files):
        folder = repo / f"pkg{i // 4000:02d}" / f"mod{(i // 200) % 20:02d}" / f"sub{(i // 40) % 5}"
        folder.mkdir(parents=True, exist_ok=True)
        lines = "".join(f"value_{i}_{k} = {rng.randint(0, 10**6)}\n" for k in range(12))
        (folder / f"f{i}.py").write_text(f"# file {i}\n{lines}")
    sh_git(repo, "add", "-A")
    sh_git(repo, "commit", "-q", "-m", "generated")
    if pack:
        sh_git(repo, "repack", "-a", "-d", "-q")  # objects in a pack, as in a cloned repository
    for path in rng.sample(tracked(repo), 10):
        with open(repo / path, "a") as out:
            out.write("# uncommitted edit\n")
    for i in range(10):
        (repo / f"untracked_{i}.txt").write_text(f"untracked {i}\n")
    (repo / "build").mkdir()
    for i in range(50):
        (repo / "build" / f"artifact_{i}.o").write_bytes(rng.randbytes(4096))
    sh_git(repo, "status", "--porcelain")  # the user's index has fresh stat data, as after any git command
    return repo


def tracked(repo: Path) -> list[str]:
    return sh_git(repo, "ls-files").splitlines()


def timed(fn: Callable[[], object]) -> tuple[float, object]:
    start = time.perf_counter()
    value = fn()
    return time.perf_counter() - start, value


class StepTimer:
    """Times every git command of ``create`` by name; the rest of ``create`` is "python"."""

    def __init__(self) -> None:
        self.samples: dict[str, list[float]] = defaultdict(list)
        self._round: dict[str, float] = defaultdict(float)
        self._real = _git.git
        self._finish = _git.finish_git

    def wrapped(self, args, **kwargs):  # type: ignore[no-untyped-def]
        start = time.perf_counter()
        try:
            return self._real(args, **kwargs)
        finally:
            self._round[f"git {args[0]}"] += time.perf_counter() - start

    def finish(self, proc, args, **kwargs):  # type: ignore[no-untyped-def]
        start = time.perf_counter()
        try:
            return self._finish(proc, args, **kwargs)
        finally:
            self._round[f"wait for the parallel git {args[0]}"] += time.perf_counter() - start

    def install(self) -> None:
        for module in (_create, _repo, _diff):
            module.git = self.wrapped  # type: ignore[attr-defined]
        _create.finish_git = self.finish  # type: ignore[attr-defined]

    def uninstall(self) -> None:
        for module in (_create, _repo, _diff):
            module.git = self._real  # type: ignore[attr-defined]
        _create.finish_git = self._finish  # type: ignore[attr-defined]

    def finish_round(self, total: float) -> None:
        for name, spent in self._round.items():
            self.samples[name].append(spent)
        self.samples["python (files, meta, rename)"].append(total - sum(self._round.values()))
        self._round.clear()


def bench_create(repo: Path, base: Path, reps: int, rng: random.Random) -> None:
    state = base / "state"
    steps = StepTimer()
    times: dict[str, list[float]] = {"create()": [], "git worktree add": []}
    disk: dict[str, list[int]] = {"create()": [], "git worktree add": []}
    for i in range(reps):
        order = list(times)
        rng.shuffle(order)
        for name in order:
            if name == "create()":
                steps.install()
                try:
                    spent, iso = timed(lambda i=i: worktree.create(repo, state, f"bench-{i}"))
                finally:
                    steps.uninstall()
                steps.finish_round(spent)
                disk[name].append(worktree.disk_usage(iso))  # type: ignore[arg-type]
                worktree.discard(state, f"bench-{i}")
            else:
                target = base / f"wt-{i}"
                spent, _ = timed(
                    lambda t=target: sh_git(repo, "worktree", "add", "-q", "--detach", str(t), "HEAD")
                )
                disk[name].append(tree_bytes(target) + tree_bytes(repo / ".git" / "worktrees" / target.name))
                sh_git(repo, "worktree", "remove", "--force", str(target))
            times[name].append(spent)
    ours, theirs = statistics.median(times["create()"]), statistics.median(times["git worktree add"])
    print(f"\n{'operation':<34}{'median s':>10}{'min s':>9}{'max s':>9}{'disk MB':>10}")
    for name, samples in times.items():
        mb = statistics.median(disk[name]) / 1e6
        print(
            f"{name:<34}{statistics.median(samples):>10.3f}{min(samples):>9.3f}{max(samples):>9.3f}{mb:>10.1f}"
        )
    disk_ratio = statistics.median(disk["create()"]) / statistics.median(disk["git worktree add"])
    print(f"ratio create / worktree add: {ours / theirs:.2f} (target <= 1.2)")
    print(f"disk ratio create / worktree add: {disk_ratio:.2f}")
    print("\ncreate() steps (median s):")
    for name, samples in sorted(steps.samples.items(), key=lambda kv: -statistics.median(kv[1])):
        print(f"  {name:<40}{statistics.median(samples):>8.3f}")


def bench_apply(repo: Path, base: Path, reps: int, changed: int, rng: random.Random) -> None:
    state = base / "state"
    paths = [p for p in tracked(repo) if p.startswith("pkg")]
    times: dict[str, list[float]] = {"diff()": [], "apply()": []}
    for i in range(reps):
        iso = worktree.create(repo, state, f"apply-{i}")
        chosen = rng.sample(paths, changed)
        for path in chosen:
            with open(iso.workspace / path, "a") as out:
                out.write(f"# changed by the job, round {i}\n")
        time.sleep(max(0.0, iso.created_at + 1.1 - time.time()))  # a Kimi turn takes longer than this
        spent, change = timed(lambda iso=iso: worktree.diff(iso))
        assert len(change.files) == changed  # type: ignore[attr-defined]
        times["diff()"].append(spent)
        spent, applied = timed(lambda iso=iso: worktree.apply(iso))
        assert applied.ok and len(applied.applied) == changed  # type: ignore[attr-defined]
        times["apply()"].append(spent)
        worktree.discard(state, f"apply-{i}")
        sh_git(repo, "checkout", "-q", "--", *chosen)  # undo, for the next round
    print(f"\n{changed}-file change{'':<19}{'median s':>10}{'min s':>9}{'max s':>9}")
    for name, samples in times.items():
        print(f"{name:<34}{statistics.median(samples):>10.3f}{min(samples):>9.3f}{max(samples):>9.3f}")
    print("target: apply() <= 0.5 s")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", type=int, default=20_000)
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--changed", type=int, default=100)
    parser.add_argument("--dir", default=None, help="where the temporary repository goes (default: $TMPDIR)")
    parser.add_argument("--loose", action="store_true", help="leave the objects loose (default: packed)")
    args = parser.parse_args()

    rng = random.Random(1234)
    base = Path(tempfile.mkdtemp(prefix="bench_worktree_", dir=args.dir))
    try:
        t0 = time.perf_counter()
        repo = make_repo(base, args.files, rng, pack=not args.loose)
        objects = "loose objects" if args.loose else "packed"
        print(
            f"repository: {args.files:,} tracked files ({objects}) in {base} ({sh_git(repo, 'version').strip()}),"
        )
        print(f"generated in {time.perf_counter() - t0:.1f}s; {args.reps} interleaved repetitions")
        worktree.create(repo, base / "state", "warm")  # warm the page cache for both contenders
        worktree.discard(base / "state", "warm")
        bench_create(repo, base, args.reps, rng)
        bench_apply(repo, base, args.reps, args.changed, rng)
    finally:
        shutil.rmtree(base, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
