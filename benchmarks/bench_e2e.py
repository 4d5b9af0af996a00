"""End-to-end benchmark: prints ratios measured in this one run (nothing is asserted).

1. Tool-call wall time (fastmcp.Client → kimi-mcp → Kimi TUI) ÷ the same scripted task run directly by
   Kimi's own non-interactive mode (`kimi --print -p` legacy, `kimi -p` Kimi Code). Target ≤ 1.10.
2. Turn-end detection latency after the fake model's last chunk (session log), vs the screen-only
   approach "idle screen + 0.5 s without output" measured on the same turns. Target ≤ 100 ms.
3. On a generated workspace of --files files: the server's RSS while the "before" snapshot is held
   (target ≤ 100 MB) and the tracker's critical path (turn end → change list, `timings.changes`) ÷
   `git status --porcelain -uall` on the same tree (target ≤ 1.0).

0. ``--cold``: where a cold first call's time goes, next to Kimi's own non-interactive mode, both run in turn
   (interleaved) in this one process: for each sample a direct ``kimi -p`` run (spawn → first model request →
   last byte of the reply → exit) and a first ``kimi_code_task`` of a fresh server (connected and its tools
   listed first, as MCP clients do; timed from the call: → Kimi ready → first model request → last byte →
   turn end → change list → result), from the fake API's request times and the result's ``timings``.

Usage: uv run python benchmarks/bench_e2e.py [--runs 3] [--files 100000] [--dialect legacy|kimi-code|both]
       uv run python benchmarks/bench_e2e.py --cold [--runs 5] [--dialect legacy|kimi-code|both] [--compare SRC]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from datetime import datetime
from pathlib import Path

import psutil

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests" / "helpers"))

import kimi_install  # noqa: E402
from fake_moonshot import FakeMoonshot, Reply  # noqa: E402
from fastmcp import Client  # noqa: E402
from fastmcp.client.transports import StdioTransport  # noqa: E402

from kimi_mcp.drivers import make_driver, probe  # noqa: E402
from kimi_mcp.drivers.base import ScreenState  # noqa: E402
from kimi_mcp.scope import Scope  # noqa: E402
from kimi_mcp.session import ApprovalPolicy, KimiSession  # noqa: E402

SERVER = str(Path(sys.executable).parent / "kimi-mcp")
WRITE = {"legacy": "WriteFile", "kimi-code": "Write"}
_STAMP = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) ")


def dialect_env(dialect: str, fake: FakeMoonshot, home: Path) -> tuple[str, dict[str, str]]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("KIMI_", "MOONSHOT_"))}
    env.update(HOME=str(home), FASTMCP_LOG_LEVEL="WARNING", PYTHONWARNINGS="ignore", NO_PROXY="127.0.0.1")
    if dialect == "legacy":
        binary = str(kimi_install.install_legacy())
        env.update(KIMI_BASE_URL=fake.base_url, KIMI_API_KEY="sk-bench", KIMI_MODEL_NAME="kimi-k2-fake")
    else:
        kimi, node = kimi_install.install_kimi_code()
        binary = str(kimi)
        env["PATH"] = f"{node}{os.pathsep}{env['PATH']}"
        env.update(
            KIMI_MODEL_NAME="kimi-k2-fake", KIMI_MODEL_API_KEY="sk-bench", KIMI_MODEL_PROVIDER_TYPE="kimi",
            KIMI_MODEL_BASE_URL=fake.base_url, KIMI_MODEL_CAPABILITIES="tool_use",
            KIMI_CODE_BASE_URL=fake.base_url.replace("/v1", "/coding/v1"),
        )  # fmt: skip
    env["KIMI_MCP_KIMI_BIN"] = binary
    env.update(KIMI_DISABLE_TELEMETRY="1", KIMI_CLI_NO_AUTO_UPDATE="1", KIMI_CODE_NO_AUTO_UPDATE="1")
    return binary, env


def script_task(fake: FakeMoonshot, dialect: str, i: int) -> None:
    fake.script(
        [
            Reply.tool(WRITE[dialect], {"path": f"out{i}.txt", "content": f"run {i}\n"}),
            Reply.text_reply("done"),
        ]
    )


def bench_ratio(dialect: str, fake: FakeMoonshot, runs: int) -> None:
    home = Path(tempfile.mkdtemp(prefix="kbench-home-"))
    work = Path(tempfile.mkdtemp(prefix="kbench-work-"))
    binary, env = dialect_env(dialect, fake, home)
    direct_cmd = [binary, "--print", "-p"] if dialect == "legacy" else [binary, "-p"]
    # warm both paths once (first start compiles bytecode / fills caches)
    for attempt in range(1):
        script_task(fake, dialect, 1000 + attempt)
        subprocess.run([*direct_cmd, "write the file"], cwd=work, env=env, capture_output=True, timeout=120)
    direct = []
    for i in range(runs):
        script_task(fake, dialect, i)
        start = time.perf_counter()
        proc = subprocess.run(
            [*direct_cmd, "write the file"], cwd=work, env=env, capture_output=True, timeout=120
        )
        direct.append(time.perf_counter() - start)
        assert proc.returncode == 0, proc.stderr[-500:]

    async def via_mcp(fresh: bool, wait: float, standby: str) -> list[float]:
        """``fresh``: every timed call is the first call of a new server; else ``runs`` calls in one server
        after an untimed first call. ``wait`` seconds pass before each timed call (the client reading the
        previous result, or the user typing a first request); only the calls themselves are timed."""
        times = []
        for _ in range(runs if fresh else 1):
            server_env = {**env, "KIMI_MCP_STANDBY": standby}
            transport = StdioTransport(SERVER, [], env=server_env, cwd=str(work), keep_alive=False)
            async with Client(transport, timeout=300) as client:
                await client.list_tools()  # as MCP clients do when they connect (Claude Code does)
                if not fresh:
                    script_task(fake, dialect, 2000)
                    await client.call_tool(
                        "kimi_code_task", {"task_description": "write", "work_dir": str(work)}
                    )
                for _ in range(1 if fresh else runs):
                    i = 100 + next_id()
                    await asyncio.sleep(wait)
                    script_task(fake, dialect, i)
                    start = time.perf_counter()
                    result = await client.call_tool(
                        "kimi_code_task", {"task_description": "write the file", "work_dir": str(work)}
                    )
                    times.append(time.perf_counter() - start)
                    data = result.structured_content
                    assert data["files_created"] == [f"out{i}.txt"], data
                    warm.append(data["warm_start"])
            await asyncio.sleep(1.0)  # the previous server's Kimi processes are gone; let the CPU settle
        return times

    counter = iter(range(10_000))

    def next_id() -> int:
        return next(counter)

    d = statistics.median(direct)
    print(f"[{dialect}] direct non-interactive run: median {d:.2f}s  runs={[round(x, 2) for x in direct]}")
    rows = (  # label, fresh server per call, wait before each call, KIMI_MCP_STANDBY
        ("first call, standby off", True, 0.0, "off"),
        ("first call", True, 0.0, "after-call"),
        ("first call 3 s after start, standby=startup", True, 3.0, "startup"),
        ("next calls back-to-back", False, 0.0, "after-call"),
        ("next calls 3 s apart", False, 3.0, "after-call"),
    )
    for label, fresh, wait, standby in rows:
        warm: list[bool] = []
        mcp = asyncio.run(via_mcp(fresh, wait, standby))
        m = statistics.median(mcp)
        print(
            f"[{dialect}] kimi_code_task via MCP, {label}: median {m:.2f}s  runs={[round(x, 2) for x in mcp]}"
            f"  standby used {sum(warm)}/{len(warm)}"
        )
        print(f"[{dialect}] RATIO tool call ({label}) / direct = {m / d:.3f}   (target <= 1.10)")


def direct_sample(cmd: list[str], fake: FakeMoonshot, work: Path, env: dict[str, str]) -> dict[str, float]:
    """One ``kimi -p`` run: seconds from spawn to its first model request, the reply's last byte, its exit."""
    fake.requests.clear()
    start = time.perf_counter()
    proc = subprocess.run([*cmd, "write the file"], cwd=work, env=env, capture_output=True, timeout=120)
    done = time.perf_counter() - start
    assert proc.returncode == 0, proc.stderr[-500:]
    first = fake.chat_requests()[0]["perf"] - start
    return {"first request": first, "last byte": (fake.last_chunk_at or 0.0) - start, "done": done}


#: the server's log lines (DEBUG) that mark a cold call's phases, in order
PHASES = {
    "call received": ": call received",
    "Kimi spawned": "kimi_mcp.session: spawning ",
    "Kimi ready": "kimi_mcp.session: kimi ready after",
    "message accepted": "kimi_mcp.session: prompt submitted",
    "change list": "kimi_mcp.runner: change list from a",
}


def logged(log: Path, since: float) -> dict[str, float]:
    """Seconds from ``since`` (epoch) to the first log line of each phase after it."""
    found: dict[str, float] = {}
    for line in log.read_text(encoding="utf-8", errors="replace").splitlines():
        match = _STAMP.match(line)
        if match is None:
            continue
        at = datetime.strptime(match.group(1), "%Y-%m-%d %H:%M:%S,%f").timestamp()
        for phase, marker in PHASES.items():
            if phase not in found and marker in line and at >= since - 0.002:
                found[phase] = at - since
    return found


async def cold_sample(env: dict[str, str], work: Path, fake: FakeMoonshot, i: int) -> dict[str, float]:
    """A fresh server's first ``kimi_code_task``: seconds from the call to each phase (see the docstring).
    The server's log is the same file for every sample, so the fast connect answers from its record (a new
    setting would be a new record), as it does for a client starting the same server again."""
    log = Path(env["HOME"]) / "server.log"
    env = {**env, "KIMI_MCP_LOG_LEVEL": "DEBUG", "KIMI_MCP_LOG_FILE": str(log)}
    stderr = open(os.devnull, "w")  # noqa: SIM115 - the log file has it all; closed below
    transport = StdioTransport(SERVER, [], env=env, cwd=str(work), keep_alive=False, log_file=stderr)
    async with Client(transport, timeout=300) as client:
        await client.list_tools()
        fake.requests.clear()
        since, start = time.time(), time.perf_counter()
        arguments = {"task_description": "write the file", "work_dir": str(work)}
        result = await client.call_tool("kimi_code_task", arguments)
        done = time.perf_counter() - start
    stderr.close()
    data = result.structured_content
    assert data["files_created"] == [f"out{i}.txt"], data
    phases = logged(log, since)
    first = fake.chat_requests()[0]["perf"] - start
    return {
        **{phase: phases[phase] for phase in list(PHASES)[:4]},
        "first request": first,
        "last byte": (fake.last_chunk_at or 0.0) - start,
        "turn end": phases["change list"] - data["timings"].get("changes", 0.0),
        "change list": phases["change list"],
        "done": done,
    }


def bench_cold(dialect: str, fake: FakeMoonshot, runs: int, compare: str | None = None) -> None:
    """Kimi's own non-interactive run and a fresh server's first call, sample by sample (see the docstring);
    ``compare``: another kimi-mcp source tree's first call too, in the same turn."""
    home = Path(tempfile.mkdtemp(prefix="kbench-home-"))
    binary, env = dialect_env(dialect, fake, home)
    env.pop("PYTHONDONTWRITEBYTECODE", None)  # both sides cache their bytecode, as installed ones do
    servers = {"first kimi_code_task": env}
    if compare:  # its own home: its own fast-connect record and log
        other = {**env, "HOME": tempfile.mkdtemp(prefix="kbench-home-")}
        servers[f"first kimi_code_task ({compare})"] = {**other, "PYTHONPATH": str(Path(compare, "src"))}
    cmd = [binary, "--print", "-p"] if dialect == "legacy" else [binary, "-p"]
    rows: dict[str, list[dict[str, float]]] = {f"kimi {' '.join(cmd[1:])}": [], **{k: [] for k in servers}}
    for i in range(runs + 1):  # the first turn warms the caches (bytecode, records): not counted
        script_task(fake, dialect, i)
        sample = {"direct": direct_sample(cmd, fake, Path(tempfile.mkdtemp(prefix="kbench-work-")), env)}
        for label, server_env in servers.items():
            script_task(fake, dialect, i)
            work = Path(tempfile.mkdtemp(prefix="kbench-work-"))
            sample[label] = asyncio.run(cold_sample(server_env, work, fake, i))
            time.sleep(1.0)  # the server's Kimi processes are gone; let the CPU settle
        for label, row in zip(rows, sample.values(), strict=True):
            if i:
                rows[label].append(row)
    direct = next(iter(rows.values()))
    direct_done = statistics.median(row["done"] for row in direct)
    for label, samples in rows.items():
        phases = ", ".join(
            f"{phase} {statistics.median(row[phase] for row in samples):.2f}" for phase in samples[0]
        )
        print(f"[{dialect}] {label}, seconds from its start (medians): {phases}")
        print(f"[{dialect}]   done per sample: {[round(row['done'], 2) for row in samples]}")
        if samples is not direct:
            ratio = statistics.median(row["done"] for row in samples) / direct_done
            print(f"[{dialect}] RATIO {label} / direct = {ratio:.3f}   (target <= 1.0)", flush=True)


def bench_latency(dialect: str, fake: FakeMoonshot, runs: int) -> None:
    home = Path(tempfile.mkdtemp(prefix="kbench-home-"))
    work = Path(tempfile.mkdtemp(prefix="kbench-work-"))
    binary, env = dialect_env(dialect, fake, home)
    ours, naive = [], []
    for i in range(runs):
        fake.script([Reply.text_reply(f"plain answer {i}")])
        session = KimiSession(
            make_driver(probe(binary, env)), work, env=env, policy=ApprovalPolicy(work, read_only=False),
            scope=Scope(deadline=time.monotonic() + 120),
        )  # fmt: skip
        try:
            session.start()
            trace = session.run_turn(f"say something {i}")
            ours.append(trace.ended_at - fake.last_chunk_at)
            # the screen-only approach on the same turn: idle screen and 0.5 s without output
            while True:
                session.term.pump(0.01)
                idle = session.driver.classify(session.term.screen.lines) == ScreenState.READY
                if idle and time.monotonic() - session.term.last_activity >= 0.5:
                    naive.append(time.perf_counter() - fake.last_chunk_at)
                    break
        finally:
            session.close()
    o, n = statistics.median(ours), statistics.median(naive)
    print(
        f"[{dialect}] turn end after last chunk: session log median {o * 1000:.0f} ms "
        f"(runs {[round(x * 1000) for x in ours]} ms); screen idle + 0.5 s median {n * 1000:.0f} ms"
    )
    print(f"[{dialect}] RATIO detection / screen-idle-0.5s = {o / n:.3f}; absolute target <= 100 ms")


def make_tree(root: Path, files: int) -> None:
    per_dir = 100
    for i in range(files):
        d = root / f"pkg{i // (per_dir * 50):03d}" / f"mod{(i // per_dir) % 50:03d}"
        if i % per_dir == 0:
            d.mkdir(parents=True, exist_ok=True)
        (d / f"f{i}.py").write_text(f"# file {i}\nVALUE = {i}\n")
    (root / ".gitignore").write_text("*.log\nbuild/\n")


def bench_big_tree(dialect: str, fake: FakeMoonshot, files: int) -> None:
    home = Path(tempfile.mkdtemp(prefix="kbench-home-"))
    work = Path(tempfile.mkdtemp(prefix="kbench-tree-"))
    print(f"[{dialect}] generating {files} files ...", flush=True)
    make_tree(work, files)
    git = ["git", "-c", "user.email=b@b", "-c", "user.name=b"]
    subprocess.run([*git, "init", "-q"], cwd=work, check=True)
    subprocess.run([*git, "add", "-A"], cwd=work, check=True)
    subprocess.run([*git, "commit", "-qm", "tree"], cwd=work, check=True)
    subprocess.run(["git", "status", "--porcelain"], cwd=work, capture_output=True, check=True)
    _, env = dialect_env(dialect, fake, home)
    # 100 changes made by Kimi's shell: 40 created, 40 modified, 20 deleted
    command = (
        "mkdir -p newpkg && for i in $(seq 1 40); do echo new $i > newpkg/n$i.py; done; "
        "for f in $(ls pkg000/mod000/*.py | head -40); do echo '# edited' >> $f; done; "
        "rm $(ls pkg000/mod001/*.py | head -20)"
    )
    shell = "Shell" if dialect == "legacy" else "Bash"
    fake.script(
        [Reply.tool(shell, {"command": command}), Reply.text_reply("changed 100 files", token_delay=0.5)]
    )
    peak = {"rss": 0}
    stop = threading.Event()

    def sample(pid: int) -> None:
        proc = psutil.Process(pid)
        while not stop.is_set():
            try:
                peak["rss"] = max(peak["rss"], proc.memory_info().rss)
            except psutil.Error:
                return
            time.sleep(0.05)

    async def run() -> dict:
        transport = StdioTransport(SERVER, [], env=env, cwd=str(work), keep_alive=False)
        async with Client(transport, timeout=600) as client:
            server_pid = next(
                p.pid
                for p in psutil.Process().children(recursive=True)
                if "kimi-mcp" in " ".join(p.cmdline()[:2])
            )
            idle_rss = psutil.Process(server_pid).memory_info().rss
            thread = threading.Thread(target=sample, args=(server_pid,), daemon=True)
            thread.start()
            result = await client.call_tool(
                "kimi_code_task", {"task_description": "change", "work_dir": str(work)}
            )
            stop.set()
            data = result.structured_content
            data["_idle_rss"] = idle_rss
            return data

    data = asyncio.run(run())
    changed = len(data["files_created"]) + len(data["files_modified"]) + len(data["files_deleted"])
    git_times = []
    for _ in range(3):
        start = time.perf_counter()
        subprocess.run(["git", "status", "--porcelain", "-uall"], cwd=work, capture_output=True, check=True)
        git_times.append(time.perf_counter() - start)
    g = statistics.median(git_times)
    c = data["timings"]["changes"]
    print(f"[{dialect}] changes found: {changed} (expected 100); timings {data['timings']}")
    print(
        f"[{dialect}] server RSS idle {data['_idle_rss'] / 2**20:.0f} MB, peak during task "
        f"{peak['rss'] / 2**20:.0f} MB   (target <= 100 MB)"
    )
    print(
        f"[{dialect}] tracker critical path {c * 1000:.0f} ms vs git status -uall {g * 1000:.0f} ms: "
        f"RATIO = {c / g:.2f}   (target <= 1.0)"
    )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--files", type=int, default=100_000)
    parser.add_argument("--dialect", choices=["legacy", "kimi-code", "both"], default="both")
    parser.add_argument("--skip-tree", action="store_true")
    parser.add_argument("--only-tree", action="store_true")
    parser.add_argument("--cold", action="store_true", help="only the cold first call's breakdown")
    parser.add_argument(
        "--compare", metavar="SRC", help="with --cold: another kimi-mcp tree's first call too"
    )
    args = parser.parse_args()
    dialects = ["legacy", "kimi-code"] if args.dialect == "both" else [args.dialect]
    with FakeMoonshot() as fake:
        if args.cold:
            for dialect in dialects:
                bench_cold(dialect, fake, args.runs, args.compare)
            return
        for dialect in [] if args.only_tree else dialects:
            bench_ratio(dialect, fake, args.runs)
            bench_latency(dialect, fake, args.runs)
        if not args.skip_tree:
            bench_big_tree(dialects[0], fake, args.files)


if __name__ == "__main__":
    main()
