"""Control-loop benchmark (issue 21): prints what it measures in this one run (nothing is asserted).

A real client (fastmcp.Client over stdio) drives the real server, which drives a real Kimi TUI (kimi-cli 1.50
and/or Kimi Code 2.1) against the suite's fake Moonshot API; one server per dialect, default settings (a
standby Kimi after each successful call). Each ratio's baseline is measured in the same server:

Baseline (for 1 and 2): a tool call → that job's first model request at the fake API, over every steer and
answer job of the run (each started 4 s after the previous call, so a ready standby Kimi takes it): what
typing a first message costs end to end. The server's very first call (Kimi starts) is printed for scale.

1. steer → typed: ``kimi_steer(job_id, message)`` (mode "steer") while Kimi runs ``sleep`` in a shell tool call
   → the job's ``messages`` lists it (kimi-mcp pasted it into the running turn and pressed Ctrl-S), seen by
   polling ``kimi_job(action="status")`` back to back (an upper bound by one status round trip, printed).
   That is the most direct observable both dialects share: Kimi hands a steered message to the model only at
   the next step boundary (the shell command's end), so the request carrying it times the ``sleep``, not the
   steer. Also printed: steer → the keys typed into Kimi (the server's DEBUG log line "steer typed into the
   running turn", to the millisecond; target ≤ 50 ms), Kimi Code's ``prompt.steered`` record in its session
   log (written at the key press; kimi-cli logs ``SteerInput`` only at the boundary; target ≤ 50 ms),
   steer → the request carrying the message, and the
   command's end → that request (Kimi's step boundary); it must be the turn's second request (in turn).
   Target: RATIO ≤ 1.0 (a message into a running Kimi arrives no later than a first one into a ready Kimi).
2. answer → typed: Kimi asks (AskUserQuestion), the call returns ``status: "waiting"``; ``kimi_job(job_id,
   action="answer", answer="Blue", wait_s=0)`` → the next model request, which carries the answer (Kimi sends
   it as the question's tool result at once: no step boundary to wait for). Target: RATIO ≤ 1.0. Also
   printed: the model's question (its request) → the client holding ``waiting``.
3. A token limit within one step: ``max_tokens`` of 1500, 2500, 3500 in turn, every fake step reporting 1020
   tokens and asking for one more file. Printed: tokens spent ÷ the limit (the step that crosses it ends at
   ⌈(limit + 1) / 1020⌉ × 1020, so 1.36, 1.22, 1.17 are the floor; also the tokens the fake API served,
   1020 per request), the model requests after the step that crossed it (target: 0, at most one in flight),
   the crossing request → the call's result, and the files Kimi wrote vs the files the result reports.

Kimi processes left once each server is gone are counted (target: none).

Usage: uv run python benchmarks/bench_control.py [--runs 3] [--dialect legacy|kimi-code|both] [--keep]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests" / "helpers"))

import kimi_install  # noqa: E402
from fake_moonshot import COLOUR, FakeMoonshot, Reply  # noqa: E402
from fastmcp import Client  # noqa: E402
from kimi_env import FAKE_KEY, KimiUnderTest, base_env, kimi_code_env_for  # noqa: E402
from mcp_helpers import processes_with_home, transport  # noqa: E402

SETTLE_S = 4.0  # before each timed job: the standby the previous call left is ready (starts in ~2-3 s)
SLEEP_S = 4  # the shell command Kimi is busy with while the message is steered in
STEP_TOKENS = 1020  # what the fake API reports for every reply (1000 in + 20 out)
LIMITS = (1500, 2500, 3500)
Row = dict[str, Any]


# -- setup ---------------------------------------------------------------------------------------------------
def kimi_under_test(dialect: str, fake: FakeMoonshot, root: Path) -> KimiUnderTest:
    """As the e2e fixtures set it up: Kimi configured by environment against the fake API, an own HOME, and
    kimi-mcp's state and data directories in ``root`` (never the user's)."""
    home = root / "home"
    home.mkdir()
    if dialect == "legacy":
        env = base_env(home)
        env.update(
            KIMI_MCP_KIMI_BIN=str(kimi_install.install_legacy()), KIMI_BASE_URL=fake.base_url,
            KIMI_API_KEY=FAKE_KEY, KIMI_MODEL_NAME="kimi-k2-fake", KIMI_MCP_TIMEOUT="120",
        )  # fmt: skip
    else:
        env = kimi_code_env_for(kimi_install.install_kimi_code(), fake.base_url, home)
    env.update(XDG_STATE_HOME=str(root / "state"), XDG_DATA_HOME=str(root / "data"))
    env["KIMI_MCP_STANDBY"] = "after-call"  # the product's default (the suite's base_env turns it off)
    return KimiUnderTest(dialect, env, home)


async def quiet(message: Any) -> None:
    """The server's log notifications (e.g. "using the standby Kimi"): not printed."""


async def call(client: Client, tool: str, args: dict[str, Any]) -> dict[str, Any]:
    return (await client.call_tool(tool, args, raise_on_error=False)).structured_content


def requests_with(fake: FakeMoonshot, text: str) -> list[dict[str, Any]]:
    """The chat requests whose conversation contains ``text``, oldest first (each request's conversation is
    serialized once: this is polled while Kimi works, on a machine with few CPUs)."""
    found = []
    for request in fake.chat_requests():
        if "_conversation" not in request:
            request["_conversation"] = json.dumps(request["body"].get("messages"))
        if text in request["_conversation"]:
            found.append(request)
    return found


async def until(check: Callable[[], Any], timeout: float = 60.0, every: float = 0.005) -> Any:
    """``check()``'s first truthy value, polled; TimeoutError after ``timeout`` seconds."""
    end = time.monotonic() + timeout
    while not (value := check()):
        if time.monotonic() > end:
            raise TimeoutError(f"gave up after {timeout:.0f}s waiting for {check}")
        await asyncio.sleep(every)
    return value


def carries_answer(request: dict[str, Any]) -> bool:
    """The request hands the model the question's answers (a tool result with ``answers``)."""
    return any(
        m.get("role") == "tool" and "answers" in json.dumps(m.get("content"))
        for m in request["body"].get("messages") or []
    )


def steer_typed_at(server_log: Path, after: float) -> float | None:
    """When the server's log (DEBUG) says it typed a steer into the running turn, first after ``after``
    (epoch seconds; the log's timestamps are local time, to the millisecond)."""
    for line in server_log.read_text(encoding="utf-8", errors="replace").splitlines():
        if "steer typed into the running turn" not in line:
            continue
        at = datetime.strptime(line[:23], "%Y-%m-%d %H:%M:%S,%f").timestamp()
        if at >= after - 0.001:
            return at
    return None


def steer_logged_at(home: Path, text: str) -> float | None:
    """When Kimi Code logged ``prompt.steered`` for ``text`` (epoch seconds); None for kimi-cli."""
    for wire in (home / ".kimi-code" / "sessions").glob("**/wire.jsonl"):
        for line in wire.read_text(encoding="utf-8", errors="replace").splitlines():
            if '"prompt.steered"' in line and text in line:
                return json.loads(line)["time"] / 1000
    return None


# -- the measurements ------------------------------------------------------------------------------------------
async def first_call(client: Client, fake: FakeMoonshot) -> float:
    """The server's first call (Kimi starts cold): call → first model request; leaves a standby behind."""
    fake.script([Reply.text_reply("warm")], marker="WARMUP")
    sent = time.perf_counter()
    await call(client, "kimi_code_task", {"task_description": "WARMUP say hi"})
    return requests_with(fake, "WARMUP")[0]["perf"] - sent


async def until_typed(client: Client, job_id: str) -> tuple[float, list[float]]:
    """Status calls back to back until the job lists a message: (when that reply came, the round trips)."""
    trips: list[float] = []
    end = time.monotonic() + 30
    while time.monotonic() < end:
        asked = time.perf_counter()
        status = await call(client, "kimi_job", {"job_id": job_id, "action": "status"})
        now = time.perf_counter()
        trips.append(now - asked)
        if status.get("messages"):
            return now, trips
    raise TimeoutError("the steered message never showed up in the job's messages")


async def steer_run(
    client: Client, fake: FakeMoonshot, kimi: KimiUnderTest, workspace: Path, i: int, server_log: Path
) -> Row:
    marker = f"STEER-{i:03d}"
    message = f"{marker} USE-BLUE-PAINT"
    started, ended = workspace / f"started-{i}", workspace / f"ended-{i}"
    command = f"touch {started.name} && sleep {SLEEP_S} && touch {ended.name}"
    fake.script([Reply.tool(*kimi.shell(command)), Reply.text_reply("steered fine")], marker=marker)
    sent = time.perf_counter()
    first = await call(client, "kimi_code_task", {"task_description": f"{marker} work", "wait_s": 0})
    job_id = first["job_id"]
    opened = await until(lambda: requests_with(fake, marker))
    await until(started.exists)  # Kimi runs the command now: busy, no panel
    await asyncio.sleep(0.3)
    steer_wall, steer_at = time.time(), time.perf_counter()
    steered = await call(client, "kimi_steer", {"job_id": job_id, "message": message})
    typed_at, trips = await until_typed(client, job_id)
    done = await call(client, "kimi_job", {"job_id": job_id, "wait_s": 120})
    carrying = requests_with(fake, message)
    logged = steer_logged_at(kimi.home, message)
    keys = steer_typed_at(server_log, steer_wall)
    delivered = [m["delivered"] for m in done.get("messages") or []]
    in_turn = (
        steered.get("error") is None
        and done.get("success") is True
        and delivered == ["in_turn"]
        and len(requests_with(fake, marker)) == 2
        and bool(carrying)
    )
    return {
        "baseline": opened[0]["perf"] - sent,
        "typed": typed_at - steer_at,
        "trip": statistics.median(trips),
        "logged": None if logged is None else logged - steer_wall,
        "keys": None if keys is None else keys - steer_wall,
        "to_request": carrying[0]["perf"] - steer_at if carrying else None,
        "boundary": carrying[0]["at"] - ended.stat().st_mtime if carrying and ended.exists() else None,
        "in_turn": in_turn,
        "warm": bool(done.get("warm_start")),
    }


async def answer_run(client: Client, fake: FakeMoonshot, i: int) -> Row:
    marker = f"ASK-{i:03d}"
    fake.script([Reply.tool("AskUserQuestion", COLOUR), Reply.text_reply("blue it is")], marker=marker)
    sent = time.perf_counter()
    waiting = await call(client, "kimi_code_task", {"task_description": f"{marker} pick a colour"})
    returned = time.perf_counter()
    if waiting.get("status") != "waiting":
        raise RuntimeError(f"expected status 'waiting', got {waiting.get('status')}: {waiting.get('error')}")
    asked = requests_with(fake, marker)[0]
    answer_at = time.perf_counter()
    answer = {"job_id": waiting["job_id"], "action": "answer", "answer": "Blue", "wait_s": 0}
    reply = await call(client, "kimi_job", answer)
    answer_trip = time.perf_counter() - answer_at
    carrying = await until(lambda: [r for r in requests_with(fake, marker) if carries_answer(r)])
    done = await call(client, "kimi_job", {"job_id": waiting["job_id"], "wait_s": 120})
    return {
        "baseline": asked["perf"] - sent,
        "typed": carrying[0]["perf"] - answer_at,
        "trip": answer_trip,
        "waiting": returned - asked["perf"],
        "ok": reply.get("error") is None and done.get("output") == "blue it is",
        "warm": bool(done.get("warm_start")),
    }


async def token_run(client: Client, fake: FakeMoonshot, kimi: KimiUnderTest, workspace: Path, i: int) -> Row:
    marker = f"TOKENS-{i:03d}"
    limit = LIMITS[i % len(LIMITS)]
    writes = [Reply.tool(*kimi.write(f"tokens-{i}-{n}.txt", f"{n}\n")) for n in range(1, 8)]
    fake.script([*writes, Reply.text_reply("never")], marker=marker)
    args = {"task_description": f"{marker} go", "max_tokens": limit}
    result = await call(client, "kimi_code_task", args)
    returned = time.perf_counter()
    await asyncio.sleep(1.0)  # a request still in flight when the call returned is counted too
    asked = requests_with(fake, marker)
    crossing = limit // STEP_TOKENS + 1  # the first step whose tokens take the job over the limit
    usage = result.get("usage") or {}
    spent = usage.get("input_tokens", 0) + usage.get("output_tokens", 0)
    error = (result.get("error") or {}).get("type")
    return {
        "limit": limit,
        "spent": spent,
        "crossing": crossing,
        "requests": len(asked),
        "after": len(asked) - crossing,
        "stop": returned - asked[crossing - 1]["perf"] if len(asked) >= crossing else None,
        "error": error,
        "written": len(list(workspace.glob(f"tokens-{i}-*.txt"))),
        "reported": len([f for f in result.get("files_created") or [] if f"tokens-{i}-" in f]),
    }


# -- one dialect -------------------------------------------------------------------------------------------------
async def measure(kimi: KimiUnderTest, fake: FakeMoonshot, root: Path, runs: int) -> dict[str, Any]:
    workspace = root / "work"
    workspace.mkdir()
    out: dict[str, Any] = {"steer": [], "answer": [], "tokens": [], "failed": []}
    connection = transport(kimi.env, workspace, root / "server.log")
    async with Client(connection, timeout=600, log_handler=quiet) as client:
        await client.list_tools()
        out["cold"] = await first_call(client, fake)
        for i in range(runs):
            for kind, run in (
                ("steer", lambda i=i: steer_run(client, fake, kimi, workspace, i, root / "server.log")),
                ("answer", lambda i=i: answer_run(client, fake, i)),
            ):
                await asyncio.sleep(SETTLE_S)
                try:
                    out[kind].append(await run())
                except (TimeoutError, RuntimeError, KeyError, TypeError) as exc:
                    out["failed"].append(f"{kind} run {i}: {type(exc).__name__}: {exc}")
        for i in range(runs):  # last: a job stopped by its limit leaves no standby for the next one
            try:
                out["tokens"].append(await token_run(client, fake, kimi, workspace, i))
            except (TimeoutError, RuntimeError, KeyError, TypeError) as exc:
                out["failed"].append(f"tokens run {i}: {type(exc).__name__}: {exc}")
    return out


def leftovers(home: Path, wait: float = 10.0) -> int:
    """Kimi (and anything it started) still alive with this HOME, after up to ``wait`` seconds."""
    end = time.monotonic() + wait
    while (found := processes_with_home(home)) and time.monotonic() < end:
        time.sleep(0.2)
    return len(found)


def ms(values: list[float]) -> str:
    return "[" + ", ".join(f"{v * 1000:.0f}" for v in values) + "] ms"


def med(rows: list[Row], key: str) -> tuple[float | None, list[float]]:
    values = [r[key] for r in rows if r.get(key) is not None]
    return (statistics.median(values) if values else None), values


def report(dialect: str, out: dict[str, Any], left: int) -> None:
    tag = f"[{dialect}]"
    base, bases = med(out["steer"] + out["answer"], "baseline")
    warm = sum(r["warm"] for r in out["steer"] + out["answer"])
    print(f"{tag} server's first call (Kimi starts cold) → first model request: {out['cold']:.2f} s")
    if base is None:
        print(f"{tag} no baseline measured")
    else:
        print(f"{tag} BASELINE call → first model request: median {base * 1000:.0f} ms {ms(bases)}")
        print(f"{tag}   standby used by {warm}/{len(bases)} of these jobs")
        report_steer(tag, out["steer"], base)
        report_answer(tag, out["answer"], base)
    report_tokens(tag, out["tokens"])
    for failure in out["failed"]:
        print(f"{tag} FAILED {failure}")
    print(f"{tag} Kimi processes left after the server exited: {left}   (target 0)")


def report_steer(tag: str, rows: list[Row], base: float) -> None:
    typed, values = med(rows, "typed")
    if typed is None:
        return
    trip, _ = med(rows, "trip")
    print(f"{tag} steer → typed (job's messages): median {typed * 1000:.0f} ms {ms(values)}")
    print(f"{tag}   (upper bound: status round trip median {trip * 1000:.0f} ms)")
    print(f"{tag} RATIO steer→typed / baseline = {typed / base:.3f}   (target <= 1.0)")
    keys, values = med(rows, "keys")
    if keys is not None:
        print(f"{tag} STEER → keys typed into Kimi (server log): median {keys * 1000:.0f} ms {ms(values)}")
    logged, values = med(rows, "logged")
    if logged is not None:
        print(f"{tag}   steer → Kimi logged prompt.steered: median {logged * 1000:.0f} ms {ms(values)}")
    to_request, values = med(rows, "to_request")
    boundary, bounds = med(rows, "boundary")
    if to_request is not None and boundary is not None:
        print(
            f"{tag}   steer → model request carrying it: median {to_request:.2f} s (the {SLEEP_S} s command "
            f"ran on); command end → that request: median {boundary * 1000:.0f} ms {ms(bounds)}"
        )
    print(f"{tag}   delivered in the running turn: {sum(r['in_turn'] for r in rows)}/{len(rows)}")


def report_answer(tag: str, rows: list[Row], base: float) -> None:
    typed, values = med(rows, "typed")
    if typed is None:
        return
    trip, _ = med(rows, "trip")
    waiting, waits = med(rows, "waiting")
    print(f"{tag} answer → next model request carrying it: median {typed * 1000:.0f} ms {ms(values)}")
    print(f"{tag} RATIO answer→typed / baseline = {typed / base:.3f}   (target <= 1.0)")
    print(f"{tag}   kimi_job(action=answer, wait_s=0) round trip: median {trip * 1000:.0f} ms")
    print(f"{tag}   model's question → client holds 'waiting': median {waiting * 1000:.0f} ms {ms(waits)}")
    print(f"{tag}   finished with the answer: {sum(r['ok'] for r in rows)}/{len(rows)}")


def report_tokens(tag: str, rows: list[Row]) -> None:
    for r in rows:
        stop = "n/a" if r["stop"] is None else f"{r['stop'] * 1000:.0f} ms"
        print(
            f"{tag} max_tokens {r['limit']}: spent {r['spent']} → RATIO spent/limit = {r['spent'] / r['limit']:.2f} "
            f"(floor {r['crossing'] * STEP_TOKENS / r['limit']:.2f}); model requests {r['requests']}, "
            f"after the crossing step (#{r['crossing']}) {r['after']}   (target 0, <= 1 in flight); "
            f"at the API {r['requests'] * STEP_TOKENS}; crossing request → result {stop}; error {r['error']}; "
            f"files written {r['written']}, reported {r['reported']}"
        )


def bench(dialect: str, fake: FakeMoonshot, runs: int, keep: bool) -> None:
    fake.reset()
    root = Path(tempfile.mkdtemp(prefix=f"kbench-control-{dialect}-"))
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
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--dialect", choices=["legacy", "kimi-code", "both"], default="both")
    parser.add_argument("--keep", action="store_true", help="keep the temporary directory (logs)")
    args = parser.parse_args()
    dialects = ["legacy", "kimi-code"] if args.dialect == "both" else [args.dialect]
    with FakeMoonshot() as fake:
        for dialect in dialects:
            bench(dialect, fake, args.runs, args.keep)


if __name__ == "__main__":
    main()
