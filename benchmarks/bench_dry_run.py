"""Dry-run benchmark: prints what it measures in this one run (nothing is asserted).

A ``dry_run=true`` call of ``kimi_analyze_code`` with a 50-file ``file_paths`` list (each file about 2 KB,
two of them secret files that are redacted), through an in-memory MCP client: the median of ``--runs`` calls
(target ≤ 0.1 s), against a no-op tool on the same server and client; then ``kimi_review``'s dry run of a
50-file branch against main (git runs: the range's diff, cut to the message limit).

Usage: uv run python benchmarks/bench_dry_run.py [--runs 20]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

from fastmcp import Client

from kimi_mcp.config import Settings
from kimi_mcp.models import TaskResult
from kimi_mcp.server import create_server

FILES = 50


def never_run(request, settings, **_kwargs) -> TaskResult:
    raise AssertionError("a dry run started a Kimi turn")


def workspace(root: Path) -> list[str]:
    names = [f"pkg/mod_{n:02}.py" for n in range(FILES - 2)] + [".env", "keys/server.pem"]
    for name in names:
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text("".join(f"value_{n} = {n} * 2  # a line of code\n" for n in range(50)))
    return names


def git(root: Path, *args: str) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    env |= {
        "GIT_AUTHOR_NAME": "b",
        "GIT_AUTHOR_EMAIL": "b@b",
        "GIT_COMMITTER_NAME": "b",
        "GIT_COMMITTER_EMAIL": "b@b",
    }
    subprocess.run(["git", *args], cwd=root, env=env, check=True, capture_output=True)


async def timed(call: Callable[[], Awaitable[object]], runs: int) -> list[float]:
    out = []
    for _ in range(runs):
        start = time.perf_counter()
        await call()
        out.append(time.perf_counter() - start)
    return out


async def measure(root: Path, names: list[str], runs: int) -> None:
    async with Client(create_server(Settings(), run=never_run)) as client:
        analyze = {"work_dir": str(root), "file_paths": names, "dry_run": True}
        review = {"work_dir": str(root), "range": "main...feature", "dry_run": True}
        first = (await client.call_tool("kimi_analyze_code", analyze)).structured_content["dry_run"]
        print(
            f"files sent {len(first['files_sent'])}, redacted {first['redacted']}, tokens {first['prompt_tokens']}"
        )
        dry = await timed(lambda: client.call_tool("kimi_analyze_code", analyze), runs)
        noop = await timed(lambda: client.call_tool("kimi_status", {}), runs)
        git_dry = await timed(lambda: client.call_tool("kimi_review", review), runs)
    med, base, rev = statistics.median(dry), statistics.median(noop), statistics.median(git_dry)
    print(
        f"kimi_analyze_code dry run, {FILES} files: median {med * 1000:.1f} ms (target <= 100 ms) over {runs} runs"
    )
    print(
        f"  no-op tool (kimi_status) on the same client: median {base * 1000:.1f} ms; ratio {med / base:.2f}"
    )
    print(f"kimi_review dry run, {FILES}-file branch: median {rev * 1000:.1f} ms")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=20)
    runs = parser.parse_args().runs
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "ws"
        root.mkdir()
        os.environ.setdefault("KIMI_MCP_STATE_DIR", str(Path(tmp) / "state"))
        git(root, "init", "-q", "-b", "main")
        (root / "README").write_text("base\n")
        git(root, "add", "-A")
        git(root, "commit", "-q", "-m", "base")
        git(root, "checkout", "-q", "-b", "feature")
        names = workspace(root)
        git(root, "add", "-A")
        git(root, "commit", "-q", "-m", "fifty files")
        asyncio.run(measure(root, names, runs))


if __name__ == "__main__":
    sys.exit(main())
