"""Connect benchmark: time from spawning the server to its answer to ``initialize`` and to ``tools/list`` (what
an MCP client such as Claude Code waits for before it has the tools), kimi-mcp ÷ a bare one-tool FastMCP
server, measured side by side (alternating) in this one run. Target ≤ 1.1. kimi-mcp three ways: with the
fast connect answering from its record (``_connect``), at a first start (nothing recorded yet), and with
``KIMI_MCP_FAST_CONNECT=false``. Also ``kimi-mcp --help`` and ``--version``. kimi-mcp reads a ``.env`` (the
``.env.example`` with two settings set), as an installed one does. ``--burners 2`` runs two CPU burners
(``yes >/dev/null``) throughout, as on a busy machine (target there: spawn → tools listed ≤ 0.5 s; quiet ≤ 0.2 s).

Usage: uv run python benchmarks/bench_connect.py [--runs 10] [--burners 2]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests" / "helpers"))

from mcp_helpers import INITIALIZE, SERVER  # noqa: E402

BARE = """
from fastmcp import FastMCP

mcp = FastMCP("bare")


@mcp.tool
def ping() -> str:
    return "pong"


mcp.run(transport="stdio", show_banner=False)
"""


INITIALIZED = {"jsonrpc": "2.0", "method": "notifications/initialized"}
LIST_TOOLS = {"jsonrpc": "2.0", "id": 2, "method": "tools/list"}


def time_to_initialize(argv: list[str], env: dict[str, str], cwd: str) -> tuple[float, float]:
    """Seconds from spawn to the ``initialize`` answer, and to the ``tools/list`` answer sent right after."""
    start = time.perf_counter()
    proc = subprocess.Popen(
        argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env, cwd=cwd
    )
    assert proc.stdin is not None and proc.stdout is not None
    proc.stdin.write((json.dumps(INITIALIZE) + "\n").encode())
    proc.stdin.flush()
    line = proc.stdout.readline()
    elapsed = time.perf_counter() - start
    proc.stdin.write((json.dumps(INITIALIZED) + "\n" + json.dumps(LIST_TOOLS) + "\n").encode())
    proc.stdin.flush()
    listed = proc.stdout.readline()
    tools_at = time.perf_counter() - start
    assert b'"tools"' in listed, listed[:300]
    proc.stdin.close()
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
    assert b'"result"' in line, line[:300]
    return elapsed, tools_at


def time_command(argv: list[str], env: dict[str, str]) -> float:
    start = time.perf_counter()
    subprocess.run(argv, capture_output=True, env=env, check=True, timeout=60)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--burners", type=int, default=0, help="CPU burners (yes >/dev/null) during the runs")
    args = parser.parse_args()
    burners = [subprocess.Popen(["yes"], stdout=subprocess.DEVNULL) for _ in range(args.burners)]
    try:
        measure(args.runs)
    finally:
        for burner in burners:
            burner.kill()
            burner.wait()


def measure(runs: int) -> None:
    work = tempfile.mkdtemp(prefix="kbench-connect-")
    home = tempfile.mkdtemp(prefix="kbench-home-")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("KIMI_", "MOONSHOT_"))}
    env.update(HOME=home, KIMI_MCP_STANDBY="off", FASTMCP_LOG_LEVEL="WARNING", PYTHONWARNINGS="ignore")
    dot_env = Path(work) / "server.env"
    dot_env.write_text((REPO / ".env.example").read_text() + "KIMI_MCP_TIMEOUT=600\nKIMI_MCP_WAIT_S=45\n")
    env["KIMI_MCP_ENV_FILE"] = str(dot_env)
    bare = Path(work) / "bare_server.py"
    bare.write_text(BARE)
    ours, first, off, base = [], [], [], []
    time_to_initialize([sys.executable, str(bare)], env, work)  # warm the page cache once for both
    time_to_initialize([SERVER], env, work)  # and record kimi-mcp's handshake (the fast connect)
    for run in range(runs):
        base.append(time_to_initialize([sys.executable, str(bare)], env, work))
        ours.append(time_to_initialize([SERVER], env, work))
        fresh = {**env, "XDG_CACHE_HOME": str(Path(work) / f"cache-{run}")}  # nothing recorded yet
        first.append(time_to_initialize([SERVER], fresh, work))
        off.append(time_to_initialize([SERVER], {**env, "KIMI_MCP_FAST_CONNECT": "false"}, work))
    for index, what in ((0, "initialize"), (1, "tools/list")):
        b = statistics.median(r[index] for r in base)
        print(f"spawn → {what} answer: bare FastMCP server (1 tool) median {b:.3f}s; kimi-mcp:")
        for label, samples in (
            ("fast connect", ours),
            ("first start (records)", first),
            ("fast connect off", off),
        ):
            o = statistics.median(r[index] for r in samples)
            print(
                f"  {label:<22} median {o:.3f}s  ratio {o / b:.2f}"
                + ("  (target <= 1.1)" if index == 0 else "")
            )
    for flag in ("--help", "--version"):
        times = [time_command([SERVER, flag], env) for _ in range(runs)]
        print(f"kimi-mcp {flag}: median {statistics.median(times):.3f}s")


if __name__ == "__main__":
    main()
