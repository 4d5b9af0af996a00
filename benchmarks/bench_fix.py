"""Fix-round benchmark (issue 31 item 3): prints what it measures in this one run (nothing is asserted).

A real client (fastmcp.Client over stdio) drives the real server, which drives a real Kimi TUI (kimi-cli 1.50
and/or Kimi Code 2.1) against the suite's fake Moonshot API; one server per dialect, no standby Kimi (each job
starts its own, before what is timed). Per run, two jobs whose second turn is the same (the model writes a file,
then answers), alternating which goes first:

- Baseline, a plain follow-up turn: ``kimi_code_task`` (``wait_s=0``) whose first turn runs ``sleep 1`` in a
  shell, meanwhile ``kimi_steer(mode="queue")`` queues the follow-up; ``kimi_job`` waits for the result.
- A fix round: ``kimi_code_task`` with ``verify_command`` (a ``grep`` that fails after the first turn and
  passes after the second) and ``fix_rounds=1``: the second turn is the fix round.

Both are timed the same way: from the model request that ends the first turn (its final answer) to the job's
result at the client, so each span holds the first turn's end, what comes between the turns (the fix round: the
check, the fix message built and typed; the baseline: the queued message typed), the second turn and the end
of the job (the fix round: the check again). Target: RATIO fix round / follow-up turn ≤ 1.1 (median of
``--runs``). Printed for scale: the fix round as the server measured it (``rounds[1].duration_s``), the
check's own run time, and two parts of each span: between the turns (the first turn's last model request →
the second turn's first) and the job's end (the second turn's last model request → the result).

Usage: uv run python benchmarks/bench_fix.py [--runs 5] [--dialect legacy|kimi-code|both] [--keep]
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from bench_control import kimi_under_test, leftovers, quiet, requests_with  # puts tests/helpers on the path
from fake_moonshot import FakeMoonshot, Reply
from fastmcp import Client
from kimi_env import KimiUnderTest
from mcp_helpers import transport

SETTLE_S = 2.0  # between jobs: the last job's Kimi has gone idle (a clean turn's Kimi stays live)
TARGET = 1.1
Row = dict[str, Any]


async def call(client: Client, tool: str, args: dict[str, Any]) -> dict[str, Any]:
    return (await client.call_tool(tool, args, raise_on_error=False)).structured_content


def first_turn(fake: FakeMoonshot, kimi: KimiUnderTest, marker: str, file: str) -> None:
    """The first turn of both jobs: a shell command that writes a wrong answer (after a second), then an
    answer; the requests of its conversation carry ``marker``."""
    fake.script(
        [Reply.tool(*kimi.shell(f"sleep 1 && echo wrong > {file}")), Reply.text_reply("first")], marker=marker
    )


def second_turn(fake: FakeMoonshot, kimi: KimiUnderTest, marker: str, file: str) -> None:
    fake.script([Reply.tool(*kimi.write(file, "42\n")), Reply.text_reply("second")], marker=marker)


async def fix_run(client: Client, fake: FakeMoonshot, kimi: KimiUnderTest, i: int) -> Row:
    marker, file = f"FIXJOB-{i:03d}", f"fix-{i:03d}.txt"
    first_turn(fake, kimi, marker, file)
    second_turn(fake, kimi, f"{file} says wrong", file)  # the fix message carries the check's output
    check = f'grep -qx 42 {file} || {{ echo "{file} says $(cat {file})"; exit 1; }}'
    args = {"task_description": f"{marker} answer", "verify_command": check, "fix_rounds": 1}
    result = await call(client, "kimi_code_task", args)
    ended = time.perf_counter()
    asked = requests_with(fake, marker)
    rounds = result.get("rounds") or []
    ok = [r["exit_code"] for r in rounds] == [1, 0] and len(asked) == 4
    return {
        **parts(asked, ended),
        "server": rounds[1]["duration_s"] if len(rounds) > 1 else None,
        "check": (result.get("verify") or {}).get("duration_s"),
        "ok": ok and result.get("success") is True,
    }


async def follow_run(client: Client, fake: FakeMoonshot, kimi: KimiUnderTest, i: int) -> Row:
    marker, file = f"FOLLOWJOB-{i:03d}", f"follow-{i:03d}.txt"
    first_turn(fake, kimi, marker, file)
    message = f"NEXTTURN-{i:03d}: write 42 into {file}"
    second_turn(fake, kimi, f"NEXTTURN-{i:03d}", file)
    started = await call(client, "kimi_code_task", {"task_description": f"{marker} answer", "wait_s": 0})
    job_id = started["job_id"]
    queued = await call(client, "kimi_steer", {"job_id": job_id, "message": message, "mode": "queue"})
    result = await call(client, "kimi_job", {"job_id": job_id, "wait_s": 120})
    ended = time.perf_counter()
    asked = requests_with(fake, marker)
    delivered = [m["delivered"] for m in result.get("messages") or []]
    ok = queued.get("error") is None and delivered == ["next_turn"] and len(asked) == 4
    return {**parts(asked, ended), "ok": ok and result.get("success") is True}


def parts(asked: list[dict[str, Any]], ended: float) -> Row:
    """The span (the first turn's last model request → the result at the client) and two parts of it: that
    request → the second turn's first request (between the turns), the second turn's last request → the
    result (the end of the job)."""
    return {
        "span": ended - asked[1]["perf"],
        "between": asked[2]["perf"] - asked[1]["perf"],
        "after": ended - asked[3]["perf"],
    }


async def measure(kimi: KimiUnderTest, fake: FakeMoonshot, root: Path, runs: int) -> dict[str, list[Row]]:
    workspace = root / "work"
    workspace.mkdir()
    out: dict[str, list[Row]] = {"fix": [], "follow": [], "failed": []}
    env = {**kimi.env, "KIMI_MCP_STANDBY": "off"}
    async with Client(
        transport(env, workspace, root / "server.log"), timeout=600, log_handler=quiet
    ) as client:
        await client.list_tools()
        for i in range(runs):
            order = [("fix", fix_run), ("follow", follow_run)]
            for kind, run in order if i % 2 == 0 else order[::-1]:
                await asyncio.sleep(SETTLE_S)
                try:
                    out[kind].append(await run(client, fake, kimi, i))
                except (TimeoutError, RuntimeError, KeyError, TypeError, IndexError) as exc:
                    out["failed"].append({"what": f"{kind} run {i}: {type(exc).__name__}: {exc}"})
    return out


def report(dialect: str, out: dict[str, list[Row]], left: int) -> None:
    tag = f"[{dialect}]"
    fix = [r["span"] for r in out["fix"] if r["ok"]]
    follow = [r["span"] for r in out["follow"] if r["ok"]]
    for failure in out["failed"]:
        print(f"{tag} FAILED {failure['what']}")
    print(
        f"{tag} jobs as scripted: fix {len(fix)}/{len(out['fix'])}, follow-up {len(follow)}/{len(out['follow'])}"
    )
    if fix and follow:
        fixed, followed = statistics.median(fix), statistics.median(follow)
        print(f"{tag} BASELINE follow-up turn: median {followed:.2f} s {seconds(follow)}")
        print(f"{tag} fix round: median {fixed:.2f} s {seconds(fix)}")
        server = [r["server"] for r in out["fix"] if r["ok"] and r["server"] is not None]
        checks = [r["check"] for r in out["fix"] if r["ok"] and r["check"] is not None]
        if server and checks:
            print(
                f"{tag}   the fix round as the server measured it (rounds[1].duration_s): median "
                f"{statistics.median(server):.2f} s; the check itself: median {statistics.median(checks) * 1000:.0f} ms"
            )
        for key, what in (("between", "between the turns"), ("after", "second turn's last request → result")):
            a = statistics.median(r[key] for r in out["fix"] if r["ok"])
            b = statistics.median(r[key] for r in out["follow"] if r["ok"])
            print(
                f"{tag}   {what}: fix round median {a * 1000:.0f} ms, follow-up turn median {b * 1000:.0f} ms"
            )
        print(f"{tag} RATIO fix round / follow-up turn = {fixed / followed:.3f}   (target <= {TARGET})")
    print(f"{tag} Kimi processes left after the server exited: {left}   (target 0)")


def seconds(values: list[float]) -> str:
    return "[" + ", ".join(f"{v:.2f}" for v in values) + "] s"


def bench(dialect: str, fake: FakeMoonshot, runs: int, keep: bool) -> None:
    fake.reset()
    root = Path(tempfile.mkdtemp(prefix=f"kbench-fix-{dialect}-"))
    kimi = kimi_under_test(dialect, fake, root)
    try:
        out = asyncio.run(measure(kimi, fake, root, runs))
        report(dialect, out, leftovers(kimi.home))
    finally:
        if keep:
            print(f"[{dialect}] kept {root} (server.log, Kimi's home)")
        else:
            shutil.rmtree(root, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--dialect", choices=["legacy", "kimi-code", "both"], default="both")
    parser.add_argument("--keep", action="store_true", help="keep the temporary directory (logs)")
    args = parser.parse_args()
    dialects = ["legacy", "kimi-code"] if args.dialect == "both" else [args.dialect]
    with FakeMoonshot() as fake:
        for dialect in dialects:
            bench(dialect, fake, args.runs, args.keep)


if __name__ == "__main__":
    main()
