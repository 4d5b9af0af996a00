"""OpenTelemetry's cost, measured in this one run (nothing is asserted).

1. A warm ``kimi_code_task`` (a standby Kimi, after an untimed first call) with tracing on (spans and metrics
   exported over OTLP/HTTP to a receiver on 127.0.0.1) ÷ the same with tracing off: two servers side by
   side, their calls alternated so both see the same machine load. Target ≤ 1.02.
2. Spawn → tools listed (a fresh server per run, ``KIMI_MCP_FAST_CONNECT=0``: the whole server loads), with
   the variables unset and set: unset must be what it was before OpenTelemetry came in (no SDK is imported).

Usage: uv run python benchmarks/bench_otel.py [--runs 10] [--dialect legacy|kimi-code|both]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
from contextlib import AsyncExitStack
from pathlib import Path

from bench_e2e import SERVER, dialect_env, script_task
from fake_moonshot import FakeMoonshot
from fastmcp import Client
from fastmcp.client.transports import StdioTransport
from otlp_receiver import OtlpReceiver

SETTLE_S = 3.0  # seconds before each timed call: no standby is still starting (on either server)


def traced(env: dict[str, str], otlp: OtlpReceiver) -> dict[str, str]:
    return {**env, "OTEL_EXPORTER_OTLP_ENDPOINT": otlp.endpoint}


async def warm_calls(
    dialect: str, fake: FakeMoonshot, runs: int, otlp: OtlpReceiver
) -> dict[str, list[float]]:
    """``runs`` warm calls on each server (off, on), alternated."""
    home = Path(tempfile.mkdtemp(prefix="kbench-home-"))
    _binary, env = dialect_env(dialect, fake, home)
    envs = {"off": env, "on": traced(env, otlp)}
    times: dict[str, list[float]] = {"off": [], "on": []}
    counter = iter(range(100_000))
    async with AsyncExitStack() as stack:
        clients: dict[str, tuple[Client, Path]] = {}
        for label, server_env in envs.items():
            work = Path(tempfile.mkdtemp(prefix=f"kbench-otel-{label}-"))
            transport = StdioTransport(SERVER, [], env=server_env, cwd=str(work), keep_alive=False)
            client = await stack.enter_async_context(Client(transport, timeout=300))
            clients[label] = (client, work)
        for client, work in clients.values():  # untimed: the next call finds a standby Kimi
            script_task(fake, dialect, next(counter))
            await client.call_tool("kimi_code_task", {"task_description": "write", "work_dir": str(work)})
        for _ in range(runs):
            for label, (client, work) in clients.items():
                await asyncio.sleep(SETTLE_S)  # both servers' standby Kimis are ready and idle
                i = next(counter)
                script_task(fake, dialect, i)
                start = time.perf_counter()
                result = await client.call_tool(
                    "kimi_code_task", {"task_description": "write the file", "work_dir": str(work)}
                )
                times[label].append(time.perf_counter() - start)
                data = result.structured_content
                assert data["files_created"] == [f"out{i}.txt"] and data["warm_start"], data
    return times


async def tools_listed(env: dict[str, str], runs: int) -> list[float]:
    """Spawn → the tools listed, a fresh server each run."""
    times = []
    for _ in range(runs):
        work = Path(tempfile.mkdtemp(prefix="kbench-list-"))
        start = time.perf_counter()
        transport = StdioTransport(SERVER, [], env={**env, "KIMI_MCP_FAST_CONNECT": "0"}, cwd=str(work))
        async with Client(transport, timeout=60) as client:
            await client.list_tools()
            times.append(time.perf_counter() - start)
    return times


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--dialect", choices=["legacy", "kimi-code", "both"], default="kimi-code")
    args = parser.parse_args()
    dialects = ["legacy", "kimi-code"] if args.dialect == "both" else [args.dialect]
    with FakeMoonshot() as fake, OtlpReceiver() as otlp:
        for dialect in dialects:
            times = asyncio.run(warm_calls(dialect, fake, args.runs, otlp))
            off, on = statistics.median(times["off"]), statistics.median(times["on"])
            print(
                f"[{dialect}] warm kimi_code_task: off median {off:.3f}s {[round(t, 3) for t in times['off']]}"
            )
            print(
                f"[{dialect}] warm kimi_code_task: on  median {on:.3f}s {[round(t, 3) for t in times['on']]}"
            )
            print(f"[{dialect}] RATIO tracing on / off = {on / off:.3f}   (target <= 1.02)")
        print(f"spans received: {len(otlp.spans)}; metric names: {sorted(otlp.metrics)}")
        _binary, env = dialect_env(dialects[0], fake, Path(tempfile.mkdtemp(prefix="kbench-home-")))
        for label, server_env in (("unset", env), ("set", traced(env, otlp))):
            listed = asyncio.run(tools_listed(server_env, args.runs))
            print(f"spawn -> tools listed, OTEL_* {label}: median {statistics.median(listed):.3f}s "
                  f"{[round(t, 3) for t in listed]}")  # fmt: skip


if __name__ == "__main__":
    main()
