"""Jobs on workers (``KIMI_MCP_BROKER``): prints what it measures in this one run (nothing is asserted).

A real client (fastmcp.Client over stdio) drives the real server; with a broker it dispatches each job through
Docket on a real redis-server (loopback, a password, no persistence) to real ``kimi-mcp worker`` processes
(each with a HOME and state directory of its own), which drive a real Kimi (kimi-cli 1.50 and/or Kimi Code 2.1)
against the suite's fake Moonshot API. A worker always runs with standby off: it starts Kimi for each job.
Every ratio's baseline is measured in the same run. The machine's CPU count is printed (2 cores where this was
written: four Kimi processes, two workers, the server, Redis and this script share them).

1. Dispatch: ``kimi_code_task`` (a write + a text reply, default isolation) in a small git repository → that
   job's first model request at the fake API (the turn started), with the broker and one idle worker
   (``--concurrency 2``), vs the same call on a server without a broker and ``KIMI_MCP_STANDBY=off`` (Kimi
   starts per job there too: the fair baseline). Printed: medians, RATIO remote / local and remote − 1.10 ×
   local (target: remote ≤ 1.10 × local + 100 ms, i.e. that difference ≤ 100 ms); for scale, the local
   default (a standby Kimi after each call) and local ``isolation="worktree"`` with standby off (Kimi starts
   in a new directory per job, as on a worker); the call's whole time; each server's first call is a
   warm-up, not counted. Each job is split at its Kimi's spawn (the server's or the worker's log): call →
   spawned, spawned → first request; and ``worktree.create`` + ``bundles.pack_base`` and
   ``bundles.check_out_base`` are timed in this process on the same repository.
2. The first bundle of a ``--repo-mb`` repository (incompressible files committed and packed as in a clone,
   plus 3 uncommitted edits and 2 untracked files, small): ``worktree.create`` + ``bundles.pack_base`` (what
   the server does before a job is queued) vs ``git bundle create --all`` on the same repository: times,
   sizes, RATIO. Also the worker's ``bundles.check_out_base`` into a fresh origin, and the size and time of a
   turn's bundle (``bundles.pack_turn`` after a one-file edit in that checkout). Then two jobs through the
   broker on that repository (the second on a worker that already holds its origin): call → first model
   request, bytes through Redis, Redis's ``used_memory`` before the call and while the turn runs.
3. Throughput: ``--jobs`` short jobs (each a write + a text reply, distinct markers) submitted at once with
   ``wait_s=0``, then waited for with ``kimi_job``, on 2 workers × ``--concurrency 2`` (4 slots), vs
   ``--jobs`` / 4 × one such job's time measured alone (median of ``--runs``) on the same setup (after an
   untimed burst filling the 4 slots). Target: RATIO ≤ 1.15. With fewer cores than slots that target assumes
   hardware this machine lacks, so the machine's busy CPU-seconds are counted too (``psutil.cpu_times``) and
   the wall time is also compared with the CPU-bound floor (jobs × CPU-s of one job alone / cores). Those
   CPU counts, like every time here, include whatever else runs on the machine: the load average is printed.
4. Redis, from ``INFO stats`` / ``INFO commandstats`` / ``INFO cpu`` deltas (what ``redis-cli INFO`` shows; the
   cost of reading them, calibrated at the start, is taken off): per job of the throughput run (bytes in
   and out, commands, Redis CPU, the busiest commands) and the bundle bytes among them (each job's base and
   turn bundles re-packed afterwards from the server's copies; each goes into Redis once and out once);
   commands and CPU per second while idle with no worker, one worker, one worker and the server, two workers
   and the server (Docket's polling and heartbeats), and while one job runs (a 10 s ``sleep`` in Kimi: the
   server's and the worker's polling of a running job); the CPU of the worker and server processes (not
   their Kimi) and Redis's connections in those windows. Last, each worker's disk: the checkouts it kept
   and its origins.

5. Recovery (``--recovery``: only this, with the Redis counts of 4 it needs): a job on 2 workers (the default
   ``--redelivery-timeout``) whose worker is killed (``kill -9`` of its process group, Kimi included) while
   Kimi runs a 60 s ``sleep``: kill → the job's next model request (Kimi runs it again on the other worker)
   and kill → its result (target: the job running again within 60 s); the killed worker is replaced (not
   timed) before the next run. Also printed: Redis commands per second per running job (as in 4).

Workers are stopped with SIGTERM; processes left with a worker's or a server's HOME are counted (target 0)
and killed; Redis and the temporary directory are removed (``--keep`` keeps the directory: the logs).

Usage: uv run python benchmarks/bench_remote.py [--dialect legacy|kimi-code|both] [--runs 3] [--jobs 16]
[--repo-mb 100] [--keep] [--recovery]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import secrets
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import AsyncIterator, Callable
from datetime import datetime
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests" / "helpers"))

import kimi_install  # noqa: E402
import psutil  # noqa: E402
import redis as redis_py  # noqa: E402
from fake_moonshot import FakeMoonshot, Reply, last_user_text  # noqa: E402
from fastmcp import Client  # noqa: E402
from git_helpers import committed_repo, git  # noqa: E402
from kimi_env import FAKE_KEY, KimiUnderTest, base_env, kimi_code_env_for  # noqa: E402
from mcp_helpers import SERVER, processes_with_home, transport  # noqa: E402

from kimi_mcp import worktree  # noqa: E402
from kimi_mcp.errors import KimiMCPError  # noqa: E402
from kimi_mcp.worktree import bundles  # noqa: E402

SLOTS = 2  # each worker's --concurrency
WORKERS = 2  # for the throughput run
LOCAL_SETTLE_S = 4.0  # before each local job: the standby the previous call left is ready (default settings)
REMOTE_SETTLE_S = 1.0  # before each remote job: the worker is idle again
IDLE_S = 10.0  # how long idle Redis traffic is counted
RUNNING_SLEEP_S = 10  # the shell command of the "one running job" measurement
RUNNING_COUNT_S = 6.0  # ... counted over this long, starting 1.5 s into it
KILL_AFTER_S = 1.0  # the recovery run's kill, this long after its Kimi's first model request
RECOVERY_WAIT_S = 600.0  # how long the recovery run waits for the job to be run again (the lease, at most)
TARGET_DISPATCH_S = 0.100
Row = dict[str, Any]
LOCAL_KINDS = (  # KIMI_MCP_STANDBY, isolation, key
    ("off", "none", "local_off"),
    ("off", "worktree", "local_worktree"),
    ("after-call", "none", "local_standby"),
)


# -- setup ------------------------------------------------------------------------------------------------------
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
    return KimiUnderTest(dialect, env, home)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class RedisServer:
    """A redis-server of our own on a loopback port, with a password, no persistence; ``snapshot()`` reads
    ``INFO stats``, ``commandstats``, ``cpu`` and ``clients``."""

    def __init__(self, folder: Path) -> None:
        folder.mkdir(parents=True, exist_ok=True)
        port, password = free_port(), secrets.token_hex(8)
        binary = shutil.which("redis-server") or "/usr/bin/redis-server"
        self.proc = subprocess.Popen(
            [binary, "--port", str(port), "--bind", "127.0.0.1", "--requirepass", password, "--save", "",
             "--appendonly", "no", "--dir", str(folder)],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        self.url = f"redis://:{password}@127.0.0.1:{port}/0"
        self.client = redis_py.Redis(host="127.0.0.1", port=port, password=password)
        deadline = time.monotonic() + 10
        while True:
            try:
                self.client.ping()
                break
            except redis_py.ConnectionError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)
        self.version = str(self.client.info("server").get("redis_version"))
        self.cost = self._calibrate()

    def snapshot(self) -> Row:
        stats, commands, cpu = (
            self.client.info("stats"),
            self.client.info("commandstats"),
            self.client.info("cpu"),
        )
        return {
            "t": time.perf_counter(),
            "rcpu": float(cpu["used_cpu_sys"]) + float(cpu["used_cpu_user"]),
            "clients": int(self.client.info("clients")["connected_clients"]),
            "in": int(stats["total_net_input_bytes"]),
            "out": int(stats["total_net_output_bytes"]),
            "cmds": int(stats["total_commands_processed"]),
            "by": {k.removeprefix("cmdstat_"): int(v["calls"]) for k, v in commands.items()},
        }

    def _calibrate(self) -> Row:
        """What one snapshot itself adds to the counters (nothing else talks to this Redis yet)."""
        first, second, third = self.snapshot(), self.snapshot(), self.snapshot()
        return {k: ((second[k] - first[k]) + (third[k] - second[k])) / 2 for k in ("in", "out", "cmds")}

    def delta(self, before: Row, after: Row) -> Row:
        """``after`` − ``before``, less one snapshot's own cost; ``by``: commands by name (INFO's own too)."""
        out = {k: after[k] - before[k] - self.cost[k] for k in ("in", "out", "cmds")}
        out["s"], out["rcpu"] = after["t"] - before["t"], after["rcpu"] - before["rcpu"]
        out["clients"] = after["clients"]  # connected now (this script's one included)
        out["by"] = {
            k: n - before["by"].get(k, 0) for k, n in after["by"].items() if n > before["by"].get(k, 0)
        }
        return out

    def peak_memory(self) -> int:
        return int(self.client.info("memory")["used_memory_peak"])

    def memory(self) -> int:
        return int(self.client.info("memory")["used_memory"])

    def stop(self) -> None:
        self.client.close()
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)


class Worker:
    """A ``kimi-mcp worker`` process with its own HOME and state directory (as the e2e suite starts one)."""

    def __init__(self, kimi: KimiUnderTest, url: str, root: Path, name: str) -> None:
        self.name, self.home, self.state = name, root / f"{name}-home", root / f"{name}-state"
        self.home.mkdir()
        env = {**kimi.env, "HOME": str(self.home), "XDG_CONFIG_HOME": str(self.home / ".config")}
        env.update(KIMI_MCP_STATE_DIR=str(self.state), KIMI_MCP_BROKER=url)
        self.log = root / f"{name}.log"
        self.proc = subprocess.Popen(
            [SERVER, "worker", "--name", name, "--concurrency", str(SLOTS)],
            env=env, stdout=subprocess.DEVNULL, stderr=open(self.log, "w"),  # noqa: SIM115
            start_new_session=True,
        )  # fmt: skip
        deadline = time.monotonic() + 60
        while "ready" not in self.log.read_text():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"worker {name} did not start: {self.log.read_text()[-2000:]}")
            time.sleep(0.1)

    def kill(self) -> None:
        """``kill -9`` of the worker and everything it started (its Kimi): a machine gone mid-turn."""
        with contextlib.suppress(OSError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(10)
        for proc in processes_with_home(self.home):
            with contextlib.suppress(psutil.Error):
                proc.kill()

    def stop(self) -> tuple[int | None, int]:
        """SIGTERM, then (exit code, Kimi processes still alive with its HOME after 10 s; those are killed)."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            code: int | None = self.proc.wait(30)
        except subprocess.TimeoutExpired:
            code = None
            with contextlib.suppress(OSError):
                os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(10)
        return code, leftovers(self.home)


def leftovers(home: Path, wait: float = 10.0) -> int:
    """Processes (Kimi, Node, anything Kimi started) still alive with this HOME after up to ``wait`` seconds;
    they are killed."""
    end = time.monotonic() + wait
    while (found := processes_with_home(home)) and time.monotonic() < end:
        time.sleep(0.2)
    for proc in found:
        with contextlib.suppress(Exception):
            proc.kill()
    return len(found)


def small_repo(path: Path) -> Path:
    """A small git repository (a few source files, one uncommitted edit) for the timed jobs."""
    files = {f"src/mod{i}.py": f"# module {i}\nVALUE = {i}\n" * 20 for i in range(12)}
    repo = committed_repo(path, {**files, "README.md": "small\n", ".gitignore": "*.log\n"})
    (repo / "src" / "mod0.py").write_text("# edited, not committed\n")
    return repo


def big_repo(path: Path, mb: int) -> Path:
    """``mb`` files of 1 MB of random bytes (incompressible) and 20 small source files, committed and packed
    (as in a clone); then 3 uncommitted edits and 2 untracked files (small)."""
    repo = committed_repo(path, {f"src/f{i}.py": f"X = {i}\n" * 50 for i in range(20)})
    (repo / "data").mkdir()
    for i in range(mb):
        (repo / "data" / f"blob{i:03d}.bin").write_bytes(os.urandom(1024 * 1024))
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "data")
    git(repo, "repack", "-a", "-d", "-q")
    for i in range(3):
        (repo / "src" / f"f{i}.py").write_text(f"X = {i}  # uncommitted\n")
    for i in range(2):
        (repo / f"untracked{i}.txt").write_text(f"untracked {i}\n")
    return repo


async def quiet(message: Any) -> None:
    """The server's log notifications: not printed."""


async def call(client: Client, tool: str, args: dict[str, Any]) -> dict[str, Any]:
    return (await client.call_tool(tool, args, raise_on_error=False)).structured_content or {}


@contextlib.asynccontextmanager
async def served(env: dict[str, str], cwd: Path, log: Path) -> AsyncIterator[Client]:
    async with Client(transport(env, cwd, log), timeout=900, log_handler=quiet) as client:
        await client.list_tools()
        yield client


def requests_with(fake: FakeMoonshot, marker: str) -> list[dict[str, Any]]:
    """The chat requests whose user message holds ``marker`` (as the fake routes replies; not the rest of the
    conversation: Kimi Code's context lists the workspace's files, named after earlier markers), oldest first."""
    found = []
    for request in fake.chat_requests():
        if "_user" not in request:
            request["_user"] = last_user_text(request["body"])
        if marker in request["_user"]:
            found.append(request)
    return found


async def until(check: Callable[[], Any], timeout: float = 120.0, every: float = 0.02) -> Any:
    end = time.monotonic() + timeout
    while not (value := check()):
        if time.monotonic() > end:
            raise TimeoutError(f"gave up after {timeout:.0f}s waiting for {check}")
        await asyncio.sleep(every)
    return value


def load() -> str:
    """The machine's load average: anything else running skews every number here (the CPU counts are the
    whole machine's)."""
    one, five, _ = os.getloadavg()
    return f"load average {one:.1f} (1 min), {five:.1f} (5 min)"


def timed(fn: Callable[[], Any]) -> tuple[float, Any]:
    start = time.perf_counter()
    value = fn()
    return time.perf_counter() - start, value


def med(values: list[float]) -> float | None:
    return statistics.median(values) if values else None


# -- 2. bundles (in this process, no server) -------------------------------------------------------------------
def bundle_costs(repo: Path, root: Path, runs: int) -> dict[str, list[float]]:
    """``runs`` rounds of :func:`bundle_round` (the baseline first every other round), by measurement."""
    out: dict[str, list[float]] = {}
    for i in range(runs):
        work = root / f"bundles-{i}"
        work.mkdir(parents=True)
        try:
            for key, value in bundle_round(repo, work, i).items():
                out.setdefault(key, []).append(value)
        finally:
            shutil.rmtree(work, ignore_errors=True)
    return out


def bundle_round(repo: Path, work: Path, i: int) -> dict[str, float]:
    """The server's first bundle of ``repo`` (``create`` + ``pack_base``), the baseline ``git bundle create
    --all``, the worker's checkout into a fresh origin and a one-file turn's bundle."""
    out: dict[str, float] = {}
    base, everything = work / "base.bundle", work / "all.bundle"

    def baseline() -> None:
        out["all"] = timed(lambda: git(repo, "bundle", "create", "-q", str(everything), "--all"))[0]
        out["all_size"] = everything.stat().st_size

    if i % 2:
        baseline()
    out["create"], iso = timed(lambda: worktree.create(repo, work / "state", f"bench-{i}"))
    out["pack_base"] = timed(lambda: bundles.pack_base(iso, base))[0]
    out["base_size"] = base.stat().st_size
    if not i % 2:
        baseline()
    origin, checkout, turn = work / "origin.git", work / "checkout", work / "turn.bundle"
    out["check_out"] = timed(lambda: bundles.check_out_base(origin, base, iso.base, checkout, iso.id))[0]
    edited = sorted((checkout / "src").glob("*.py"))[-1]
    edited.write_text(edited.read_text() + "# one edit on the worker\n")
    out["pack_turn"] = timed(lambda: bundles.pack_turn(checkout, iso.base, turn, iso.id))[0]
    out["turn_size"] = turn.stat().st_size
    return out


def copy_bundles(state: Path, job_ids: list[str], scratch: Path) -> tuple[list[int], list[int]]:
    """The base and turn bundles of each job, re-packed from the server's copies (the same objects the server
    and the worker bundled: ``refs/kimi/base``, and ``refs/kimi/head`` less the base)."""
    bases: list[int] = []
    turns: list[int] = []
    scratch.mkdir(parents=True, exist_ok=True)
    for job_id in job_ids:
        try:
            iso = worktree.load(state, job_id)
        except KimiMCPError:
            continue
        base, turn = scratch / f"{job_id}-base.bundle", scratch / f"{job_id}-turn.bundle"
        bundles.pack_base(iso, base)
        bases.append(base.stat().st_size)
        made = subprocess.run(
            ["git", "bundle", "create", "-q", str(turn), bundles.HEAD_REF, f"^{iso.base}"],
            cwd=iso.checkout, capture_output=True, check=False,
        )  # fmt: skip
        if made.returncode == 0:
            turns.append(turn.stat().st_size)
    shutil.rmtree(scratch, ignore_errors=True)
    return bases, turns


# -- 1, 3, 4: jobs through a server -------------------------------------------------------------------------------
def script_write(fake: FakeMoonshot, kimi: KimiUnderTest, marker: str) -> None:
    fake.script(
        [Reply.tool(*kimi.write(f"{marker}.txt", f"{marker}\n")), Reply.text_reply(f"{marker} done")],
        marker=marker,
    )


async def one_job(
    client: Client, fake: FakeMoonshot, kimi: KimiUnderTest, repo: Path, marker: str, isolation: str = "none"
) -> Row:
    """One ``kimi_code_task`` (waits for the result): call → first model request, and the whole call."""
    script_write(fake, kimi, marker)
    args = {"task_description": f"{marker} write the file", "work_dir": str(repo), "isolation": isolation}
    sent_at, sent = time.time(), time.perf_counter()
    result = await call(client, "kimi_code_task", args)
    total = time.perf_counter() - sent
    asked = requests_with(fake, marker)
    landed = isolation == "worktree" or (repo / f"{marker}.txt").exists()
    return {
        "first": asked[0]["perf"] - sent if asked else None,
        "sent_at": sent_at,
        "asked_at": asked[0]["at"] if asked else None,
        "total": total,
        "ok": result.get("success") is True and landed,
        "warm": bool(result.get("warm_start")),
        "worker": result.get("worker"),
        "error": (result.get("error") or {}).get("message"),
    }


async def series(
    client: Client, fake: FakeMoonshot, kimi: KimiUnderTest, repo: Path, tag: str, runs: int, settle: float,
    isolation: str = "none",
) -> list[Row]:  # fmt: skip
    """A warm-up job (not counted), then ``runs`` jobs, each ``settle`` seconds after the previous one."""
    rows = []
    for i in range(runs + 1):
        await asyncio.sleep(settle)
        rows.append(await one_job(client, fake, kimi, repo, f"{kimi.name.upper()}-{tag}-{i:03d}", isolation))
    return rows[1:]


def spawns(logs: list[Path]) -> list[float]:
    """When the logs say a Kimi was spawned (``kimi_mcp.session: spawning``), epoch seconds."""
    found = []
    for log in logs:
        for line in log.read_text(errors="replace").splitlines():
            if " INFO kimi_mcp.session: spawning " in line:
                found.append(datetime.strptime(line[:23], "%Y-%m-%d %H:%M:%S,%f").timestamp())
    return sorted(found)


def split_at_spawn(rows: list[Row], logs: list[Path]) -> None:
    """Each job's Kimi start from the logs (the one spawned between the call and its first request; none when
    a standby took it): ``to_spawn`` (call → spawned) and ``from_spawn`` (spawned → first request)."""
    started = spawns(logs)
    for row in rows:
        if row["asked_at"] is None:
            continue
        inside = [t for t in started if row["sent_at"] - 0.002 <= t <= row["asked_at"]]
        if inside:
            row["to_spawn"], row["from_spawn"] = inside[0] - row["sent_at"], row["asked_at"] - inside[0]


async def local_dispatch(
    kimi: KimiUnderTest, fake: FakeMoonshot, root: Path, repo: Path, runs: int, standby: str, isolation: str
) -> list[Row]:
    """The dispatch baseline: a server without a broker (``KIMI_MCP_STANDBY=standby``)."""
    name = f"local-{standby}-{isolation}"
    env = {**kimi.env, "KIMI_MCP_STANDBY": standby, "KIMI_MCP_STATE_DIR": str(root / f"{name}-state")}
    settle = REMOTE_SETTLE_S if standby == "off" else LOCAL_SETTLE_S
    log = root / f"server-{name}.log"
    async with served(env, repo, log) as client:
        rows = await series(client, fake, kimi, repo, name.upper(), runs, settle, isolation)
    split_at_spawn(rows, [log])
    return rows


async def burst(client: Client, fake: FakeMoonshot, kimi: KimiUnderTest, repo: Path, tag: str, n: int) -> Row:
    """``n`` jobs submitted at once (``wait_s=0``), then waited for with ``kimi_job``: the wall time."""
    markers = [f"{kimi.name.upper()}-{tag}-{i:03d}" for i in range(n)]
    for marker in markers:
        script_write(fake, kimi, marker)
    sent, busy = time.perf_counter(), busy_cpu()
    started = await asyncio.gather(
        *(
            call(
                client,
                "kimi_code_task",
                {"task_description": f"{m} write the file", "work_dir": str(repo), "wait_s": 0},
            )  # fmt: skip
            for m in markers
        )
    )
    submitted = time.perf_counter() - sent
    ids = [s["job_id"] for s in started if s.get("job_id")]
    done = await asyncio.gather(*(call(client, "kimi_job", {"job_id": j, "wait_s": 900}) for j in ids))
    wall, busy = time.perf_counter() - sent, busy_cpu() - busy
    firsts = [requests_with(fake, m) for m in markers]
    failed = [d for d in done if d.get("success") is not True]
    return {
        "n": n, "wall": wall, "submit": submitted, "job_ids": ids, "busy": busy,
        "ok": len(done) - len(failed), "applied": sum((repo / f"{m}.txt").exists() for m in markers),
        "workers": Counter(str(d.get("worker")) for d in done),
        "errors": [str((d.get("error") or {}).get("message"))[:200] for d in failed][:3],
        "first": sorted(f[0]["perf"] - sent for f in firsts if f),
    }  # fmt: skip


def cpu_of(procs: dict[str, psutil.Process]) -> dict[str, float]:
    """CPU seconds (user + system) each process spent so far (not its children: a worker's Kimi)."""
    out = {}
    for label, proc in procs.items():
        with contextlib.suppress(psutil.Error):
            times = proc.cpu_times()
            out[label] = times.user + times.system
    return out


def busy_cpu() -> float:
    """CPU seconds the whole machine spent busy so far (all cores)."""
    times = psutil.cpu_times()
    return sum(getattr(times, name, 0.0) for name in ("user", "nice", "system", "irq", "softirq"))


async def counted(redis: RedisServer, procs: dict[str, psutil.Process], seconds: float) -> Row:
    """Redis's counters and the CPU of ``procs`` (and of Redis: ``rcpu``) over ``seconds``."""
    before, cpu = redis.snapshot(), cpu_of(procs)
    await asyncio.sleep(seconds)
    row = redis.delta(before, redis.snapshot())
    row["cpu"] = {k: v - cpu[k] for k, v in cpu_of(procs).items() if k in cpu}
    return row


async def idle(redis: RedisServer, procs: dict[str, psutil.Process]) -> Row:
    """Redis traffic and CPU over ``IDLE_S`` seconds with nothing submitted."""
    await asyncio.sleep(1.0)
    return await counted(redis, procs, IDLE_S)


def server_process(home: Path) -> psutil.Process | None:
    """The kimi-mcp server running with this HOME (the one ``served`` started)."""
    for proc in psutil.process_iter(["pid"]):
        with contextlib.suppress(psutil.Error):
            line = proc.cmdline()
            if proc.environ().get("HOME") == str(home) and any(p.endswith("kimi-mcp") for p in line[:2]):
                return proc
    return None


async def running_job(
    client: Client, fake: FakeMoonshot, kimi: KimiUnderTest, repo: Path, redis: RedisServer,
    procs: dict[str, psutil.Process],
) -> Row:  # fmt: skip
    """Redis traffic while one job runs (Kimi in a ``sleep``): the server's and the worker's polling."""
    marker = f"{kimi.name.upper()}-RUNNING-000"
    fake.script(
        [Reply.tool(*kimi.shell(f"sleep {RUNNING_SLEEP_S}")), Reply.text_reply("slept")], marker=marker
    )
    args = {"task_description": f"{marker} wait a little", "work_dir": str(repo), "wait_s": 0}
    started = await call(client, "kimi_code_task", args)
    await until(lambda: requests_with(fake, marker))
    await asyncio.sleep(1.5)
    traffic = await counted(redis, procs, RUNNING_COUNT_S)
    done = await call(client, "kimi_job", {"job_id": started.get("job_id"), "wait_s": 300})
    traffic["ok"] = done.get("success") is True
    return traffic


async def big_jobs(
    client: Client, fake: FakeMoonshot, kimi: KimiUnderTest, repo: Path, redis: RedisServer
) -> list[Row]:
    """Two jobs on the big repository, one after the other (the second on a worker holding its origin), with
    Redis's memory before each and once its turn started (the first model request)."""
    rows = []
    for i in range(2):
        await asyncio.sleep(REMOTE_SETTLE_S)
        marker, before, idle_memory = f"{kimi.name.upper()}-BIGREPO-{i:03d}", redis.snapshot(), redis.memory()
        job = asyncio.ensure_future(one_job(client, fake, kimi, repo, marker))
        await until(lambda marker=marker, job=job: requests_with(fake, marker) or job.done(), timeout=600)
        in_turn = redis.memory()
        row = await job
        row.update(traffic=redis.delta(before, redis.snapshot()), peak=redis.peak_memory())
        row.update(memory=(idle_memory, in_turn))
        rows.append(row)
    return rows


async def throughput(
    client: Client,
    fake: FakeMoonshot,
    kimi: KimiUnderTest,
    repo: Path,
    redis: RedisServer,
    args: argparse.Namespace,
) -> Row:
    """On 2 workers: a warm-up burst filling the 4 slots, ``--runs`` single jobs, then the ``--jobs`` burst
    (with Redis's counters around it)."""
    out: Row = {"warmup": await burst(client, fake, kimi, repo, "WARM", WORKERS * SLOTS)}
    out["alone"] = []
    for i in range(args.runs):
        await asyncio.sleep(REMOTE_SETTLE_S)
        out["alone"].append(await burst(client, fake, kimi, repo, f"ALONE{i}", 1))
    await asyncio.sleep(REMOTE_SETTLE_S)
    before = redis.snapshot()
    out["burst"] = await burst(client, fake, kimi, repo, "BURST", args.jobs)
    out["traffic"] = redis.delta(before, redis.snapshot())
    return out


async def remote_phase(
    kimi: KimiUnderTest, fake: FakeMoonshot, root: Path, redis: RedisServer, repos: tuple[Path, Path | None],
    args: argparse.Namespace,
) -> Row:  # fmt: skip
    """Everything with a broker: idle traffic, dispatch, the big repository's jobs, throughput."""
    small, big = repos
    out: Row = {"idle": {"none": await idle(redis, {})}}
    workers = [await asyncio.to_thread(Worker, kimi, redis.url, root, f"w1-{kimi.name}")]
    procs = {"w1": psutil.Process(workers[0].proc.pid)}
    state = root / "server-state"
    try:
        out["idle"]["1 worker"] = await idle(redis, procs)
        env = {**kimi.env, "KIMI_MCP_BROKER": redis.url, "KIMI_MCP_STATE_DIR": str(state)}
        async with served(env, small, root / "server-remote.log") as client:
            if found := server_process(kimi.home):
                procs["server"] = found
            out["remote"] = await series(client, fake, kimi, small, "REMOTE", args.runs, REMOTE_SETTLE_S)
            out["idle"]["1 worker + server"] = await idle(redis, procs)
            if big is not None:
                out["big"] = await big_jobs(client, fake, kimi, big, redis)
            workers.append(await asyncio.to_thread(Worker, kimi, redis.url, root, f"w2-{kimi.name}"))
            procs["w2"] = psutil.Process(workers[1].proc.pid)
            out["idle"]["2 workers + server"] = await idle(redis, procs)
            out["running"] = await running_job(client, fake, kimi, small, redis, procs)
            out.update(await throughput(client, fake, kimi, small, redis, args))
        split_at_spawn(out["remote"] + out.get("big", []), [w.log for w in workers])
        out["bundle_bytes"] = copy_bundles(state, out["burst"]["job_ids"], root / "re-packed")
    finally:
        out["stopped"] = [(w.name, *w.stop()) for w in workers]
        out["disk"] = [(w.name, *disk_of(w.state)) for w in workers]
    return out


def disk_of(state: Path) -> tuple[int, int, int]:
    """A worker's state directory: (checkouts kept, their bytes, the origins' bytes)."""

    def size(folder: Path) -> int:
        total = 0
        for path, _, files in os.walk(folder):
            for name in files:
                with contextlib.suppress(OSError):
                    total += os.lstat(os.path.join(path, name)).st_size
        return total

    checkouts = state / "checkouts"
    kept = len(list(checkouts.iterdir())) if checkouts.is_dir() else 0
    return kept, size(checkouts), size(state / "origins")


# -- reports --------------------------------------------------------------------------------------------------------
def ms(values: list[float]) -> str:
    return "[" + ", ".join(f"{v * 1000:.0f}" for v in values) + "] ms"


def mb(size: float) -> str:
    return f"{size / 1024 / 1024:.1f} MB" if size >= 1024 * 1024 else f"{size / 1024:.1f} KB"


def report_bundles(label: str, costs: dict[str, list[float]]) -> None:
    ours = [c + p for c, p in zip(costs["create"], costs["pack_base"], strict=True)]
    base, size, all_size = med(ours), med(costs["base_size"]), med(costs["all_size"])
    every = med(costs["all"])
    print(
        f"[bundle {label}] worktree.create + bundles.pack_base: median {base:.2f} s {ms(ours)} "
        f"(create {med(costs['create']):.2f} s, pack_base {med(costs['pack_base']):.2f} s); bundle {mb(size)}"
    )
    print(
        f"[bundle {label}] baseline git bundle create --all: median {every:.2f} s {ms(costs['all'])}; {mb(all_size)}"
    )
    print(
        f"[bundle {label}] RATIO (create + pack_base) / git bundle --all = {base / every:.2f} time, "
        f"{size / all_size:.3f} size"
    )
    print(
        f"[bundle {label}] worker: bundles.check_out_base (fresh origin) median {med(costs['check_out']):.2f} s; "
        f"a one-file turn: bundles.pack_turn median {med(costs['pack_turn']) * 1000:.0f} ms, "
        f"{mb(med(costs['turn_size']))}"
    )


def report_dispatch(tag: str, out: Row, small: dict[str, list[float]]) -> None:
    rows = {
        "local, standby off": out["local_off"],
        "local, standby off, isolation=worktree": out["local_worktree"],
        "local, default (standby after each call)": out["local_standby"],
        "remote (1 idle worker, standby off)": out["remote"],
    }
    firsts = {}
    for label, batch in rows.items():
        values = [r["first"] for r in batch if r["first"] is not None]
        firsts[label] = med(values)
        print(
            f"{tag} dispatch {label}: call → first model request median {firsts[label] * 1000:.0f} ms "
            f"{ms(values)}; whole call median {med([r['total'] for r in batch]):.2f} s; "
            f"ok {sum(r['ok'] for r in batch)}/{len(batch)}, standby used {sum(r['warm'] for r in batch)}"
        )
        to_spawn, from_spawn = (
            med([r["to_spawn"] for r in batch if "to_spawn" in r]),
            med([r["from_spawn"] for r in batch if "from_spawn" in r]),
        )
        if to_spawn is not None and from_spawn is not None:
            print(f"{tag}   from the logs: call → Kimi spawned median {to_spawn * 1000:.0f} ms, spawned → first "
                  f"model request (Kimi's start) median {from_spawn * 1000:.0f} ms")  # fmt: skip
        for r in batch:
            if r["error"]:
                print(f"{tag}   error: {r['error'][:300]}")
    local, remote = firsts["local, standby off"], firsts["remote (1 idle worker, standby off)"]
    over = remote - 1.10 * local
    print(
        f"{tag} RATIO dispatch remote / local (standby off) = {remote / local:.3f}; remote − 1.10 × local = "
        f"{over * 1000:+.0f} ms   (target <= {TARGET_DISPATCH_S * 1000:.0f} ms)"
    )
    server_side = med([c + p for c, p in zip(small["create"], small["pack_base"], strict=True)])
    print(
        f"{tag}   remote − local = {(remote - local) * 1000:.0f} ms; timed in this process on the same "
        f"repository: create + pack_base (server) {server_side * 1000:.0f} ms, check_out_base (worker) "
        f"{med(small['check_out']) * 1000:.0f} ms"
    )


def report_big(tag: str, rows: list[Row]) -> None:
    for i, r in enumerate(rows):
        first = "n/a" if r["first"] is None else f"{r['first']:.2f} s"
        t = r["traffic"]
        print(
            f"{tag} big repository, job {i + 1} ({'fresh worker' if i == 0 else 'worker holds the origin'}): "
            f"call → first model request {first}, whole call {r['total']:.2f} s, ok {r['ok']}; "
            f"Redis in {mb(t['in'])}, out {mb(t['out'])}, {t['cmds']:.0f} commands, Redis CPU {t['rcpu'] * 1000:.0f} ms"
        )
        if "to_spawn" in r:
            print(f"{tag}   from the logs: call → Kimi spawned {r['to_spawn']:.2f} s, spawned → first model "
                  f"request {r['from_spawn']:.2f} s")  # fmt: skip
        print(
            f"{tag}   Redis used_memory before the call {mb(r['memory'][0])}, while the turn runs "
            f"{mb(r['memory'][1])}; peak so far {mb(r['peak'])}"
        )
        if r["error"]:
            print(f"{tag}   error: {r['error'][:300]}")


def top(by: dict[str, int], jobs: float = 1.0, n: int = 6) -> str:
    ranked = sorted(by.items(), key=lambda kv: -kv[1])[:n]
    return ", ".join(f"{name} {calls / jobs:.1f}" for name, calls in ranked)


def per_s(t: Row, key: str) -> float:
    return t[key] / t["s"]


def cpu_ms_per_s(t: Row) -> str:
    """Redis's and each watched process's CPU over a window, in ms per second."""
    parts = [f"redis {t['rcpu'] / t['s'] * 1000:.1f}"]
    parts += [f"{label} {spent / t['s'] * 1000:.1f}" for label, spent in t.get("cpu", {}).items()]
    return "CPU ms/s: " + ", ".join(parts)


def report_idle(tag: str, out: Row) -> None:
    for label, t in out["idle"].items():
        print(
            f"{tag} Redis idle, {label}: {per_s(t, 'cmds'):.1f} commands/s, in {per_s(t, 'in') / 1024:.1f} KB/s, "
            f"out {per_s(t, 'out') / 1024:.1f} KB/s; {cpu_ms_per_s(t)}; {t['clients']} connections; by command /s: "
            f"{top(t['by'], t['s'])}"
        )
    base, two = out["idle"]["none"], out["idle"]["2 workers + server"]
    per = (per_s(two, "cmds") - per_s(base, "cmds")) / WORKERS
    redis_cpu = (per_s(two, "rcpu") - per_s(base, "rcpu")) / WORKERS * 1000
    print(
        f"{tag}   → per idle worker: {per:.1f} commands/s, Redis CPU {redis_cpu:.2f} ms/s (× 100 workers: "
        f"{per * 100:.0f} commands/s, {redis_cpu * 100 / 1000:.0%} of Redis's one core)"
    )
    r = out["running"]
    extra = {k: per_s(r, k) - per_s(two, k) for k in ("cmds", "in", "out", "rcpu")}
    cpu = {
        label: (r["cpu"][label] / r["s"] - two["cpu"].get(label, 0.0) / two["s"]) * 1000 for label in r["cpu"]
    }
    print(
        f"{tag} while one job runs (2 workers, otherwise idle): {per_s(r, 'cmds'):.1f} commands/s → per running "
        f"job {extra['cmds']:.1f} commands/s, in {extra['in'] / 1024:.1f} KB/s, out {extra['out'] / 1024:.1f} "
        f"KB/s, Redis CPU {extra['rcpu'] * 1000:.2f} ms/s; extra CPU ms/s "
        + ", ".join(f"{k} {v:.1f}" for k, v in cpu.items())
        + f"; connections {two['clients']} → {r['clients']}; by command /s: {top(r['by'], r['s'])}; job ok {r['ok']}"
    )


def report_throughput(tag: str, out: Row) -> None:
    alone = [b["wall"] for b in out["alone"]]
    one, b = med(alone), out["burst"]
    rounds = b["n"] / (WORKERS * SLOTS)
    cores = os.cpu_count() or 1
    busy_one = med([a["busy"] for a in out["alone"]])
    print(
        f"{tag} one job alone (submit wait_s=0 → kimi_job result): median {one:.2f} s {ms(alone)}; the machine "
        f"busy {busy_one:.2f} CPU-s per job"
    )
    print(
        f"{tag} {b['n']} jobs at once on {WORKERS} workers × {SLOTS} slots: wall {b['wall']:.2f} s (all submitted "
        f"after {b['submit']:.2f} s); ok {b['ok']}/{b['n']}, applied to the tree {b['applied']}/{b['n']}; "
        f"per worker {dict(b['workers'])}; the machine busy {b['busy']:.1f} CPU-s ({b['busy'] / b['n']:.2f} per job, "
        f"{b['busy'] / b['wall'] / cores:.0%} of {cores} cores)"
    )
    if b["first"]:
        print(f"{tag}   first model request of each job after the burst started: {ms(b['first'])}")
    for error in b["errors"]:
        print(f"{tag}   error: {error}")
    floor = b["n"] * busy_one / cores
    print(
        f"{tag} RATIO wall / ({rounds:g} × alone) = {b['wall'] / (rounds * one):.3f}   (target <= 1.15); "
        f"ONLY {cores} CPU cores on this machine for {WORKERS * SLOTS} slots: the CPU-bound floor ({b['n']} × "
        f"{busy_one:.2f} CPU-s / {cores} cores) is {floor:.1f} s, wall / floor = {b['wall'] / floor:.2f}"
    )


def report_traffic(tag: str, out: Row) -> None:
    t, b = out["traffic"], out["burst"]
    n = b["n"]
    two = out["idle"]["2 workers + server"]
    polling = per_s(two, "cmds") * t["s"]
    print(
        f"{tag} Redis over the {n}-job run ({t['s']:.1f} s): per job in {mb(t['in'] / n)}, out {mb(t['out'] / n)}, "
        f"{t['cmds'] / n:.0f} commands ({(t['cmds'] - polling) / n:.0f} without the idle polling of the same "
        f"time), Redis CPU {t['rcpu'] / n * 1000:.1f} ms ({(t['rcpu'] - per_s(two, 'rcpu') * t['s']) / n * 1000:.1f} "
        f"without it); by command per job: {top(t['by'], n, 8)}"
    )
    bases, turns = out["bundle_bytes"]
    if bases:
        per = statistics.mean(bases) + (statistics.mean(turns) if turns else 0)
        print(
            f"{tag}   bundles per job (re-packed from {len(bases)} copies): base {mb(statistics.mean(bases))}, "
            f"turn {mb(statistics.mean(turns)) if turns else 'n/a'}; each in and out once: {mb(per)} of the "
            f"{mb(t['in'] / n)} in ({per / (t['in'] / n):.0%}), of the {mb(t['out'] / n)} out "
            f"({per / (t['out'] / n):.0%})"
        )


def report_remote(tag: str, out: Row) -> None:
    if "big" in out:
        report_big(tag, out["big"])
    report_idle(tag, out)
    report_throughput(tag, out)
    report_traffic(tag, out)
    for name, kept, used, origins in out["disk"]:
        print(
            f"{tag} worker {name}: {kept} checkouts kept after its jobs ({mb(used)}), origins {mb(origins)}"
        )
    for name, code, left in out["stopped"]:
        print(
            f"{tag} worker {name}: SIGTERM → exit {code}; Kimi processes left with its HOME {left}   (target 0)"
        )


# -- 5. recovery ------------------------------------------------------------------------------------------------
def sleeping(home: Path) -> bool:
    """Whether a ``sleep 60`` runs with this HOME (a worker's Kimi runs the job's shell command)."""
    found = []
    for proc in processes_with_home(home):
        with contextlib.suppress(psutil.Error):
            found += [proc] if proc.cmdline()[-2:] == ["sleep", "60"] else []
    return bool(found)


async def killed_run(
    client: Client, fake: FakeMoonshot, kimi: KimiUnderTest, repo: Path, workers: list[Worker], i: int
) -> Row:
    """One job whose worker is killed mid-turn: kill → its next model request (run again), kill → result."""
    marker = f"{kimi.name.upper()}-KILLED-{i:03d}"
    fake.script(
        [Reply.tool(*kimi.shell("sleep 60")), Reply.tool(*kimi.write(f"after-{i}.txt", "ok\n")),
         Reply.text_reply("made it")],
        marker=marker,
    )  # fmt: skip
    args = {"task_description": f"{marker} work", "work_dir": str(repo), "wait_s": 0}
    started = await call(client, "kimi_code_task", args)
    await until(lambda: requests_with(fake, marker))
    await asyncio.sleep(KILL_AFTER_S)
    (victim,) = [w for w in workers if sleeping(w.home)]  # the one whose Kimi runs the job's command
    asked = len(requests_with(fake, marker))
    killed = time.perf_counter()
    victim.kill()
    again = await until(lambda: requests_with(fake, marker)[asked:], timeout=RECOVERY_WAIT_S, every=0.1)
    done = await call(client, "kimi_job", {"job_id": started.get("job_id"), "wait_s": RECOVERY_WAIT_S})
    ended = time.perf_counter()
    return {
        "again": again[0]["perf"] - killed,
        "done": ended - killed,
        "ok": done.get("success") is True and done.get("worker") not in (None, victim.name),
        "victim": victim,
    }


async def recovery_phase(
    kimi: KimiUnderTest, fake: FakeMoonshot, root: Path, redis: RedisServer, repo: Path, runs: int
) -> Row:
    """2 workers and a server with the broker: the Redis counts of a running job, then ``runs`` killed runs
    (each killed worker replaced by a new one before the next run)."""
    out: Row = {"idle": {"none": await idle(redis, {})}, "kills": []}
    workers = [await asyncio.to_thread(Worker, kimi, redis.url, root, f"r{i}-{kimi.name}") for i in range(2)]
    procs = {f"w{i + 1}": psutil.Process(w.proc.pid) for i, w in enumerate(workers)}
    env = {**kimi.env, "KIMI_MCP_BROKER": redis.url, "KIMI_MCP_STATE_DIR": str(root / "recovery-state")}
    try:
        async with served(env, repo, root / "server-recovery.log") as client:
            if found := server_process(kimi.home):
                procs["server"] = found
            await one_job(client, fake, kimi, repo, f"{kimi.name.upper()}-RECOVERY-WARM")
            out["idle"]["2 workers + server"] = await idle(redis, procs)
            out["running"] = await running_job(client, fake, kimi, repo, redis, procs)
            for i in range(runs):
                await asyncio.sleep(REMOTE_SETTLE_S)
                row = await killed_run(client, fake, kimi, repo, workers, i)
                victim = row.pop("victim")
                workers.remove(victim)
                workers.append(
                    await asyncio.to_thread(Worker, kimi, redis.url, root, f"r{i + 2}-{kimi.name}")
                )
                out["kills"].append(row)
    finally:
        out["stopped"] = [(w.name, *w.stop()) for w in workers]
    return out


def report_recovery(tag: str, out: Row) -> None:
    base, two, r = out["idle"]["none"], out["idle"]["2 workers + server"], out["running"]
    per_worker = (per_s(two, "cmds") - per_s(base, "cmds")) / WORKERS
    print(
        f"{tag} Redis idle, 2 workers + server: {per_s(two, 'cmds'):.1f} commands/s ({per_worker:.1f} per idle "
        f"worker); while one job runs: {per_s(r, 'cmds'):.1f} → per running job "
        f"{per_s(r, 'cmds') - per_s(two, 'cmds'):.1f} commands/s; by command /s: {top(r['by'], r['s'])}; "
        f"job ok {r['ok']}"
    )
    kills = out["kills"]
    if kills:
        again, done = [k["again"] for k in kills], [k["done"] for k in kills]
        print(
            f"{tag} RECOVERY worker killed mid-turn → job's next model request on another worker: median "
            f"{med(again):.1f} s {[round(v, 1) for v in again]} s (target <= 60 s); → its result: median "
            f"{med(done):.1f} s; done on another worker {sum(k['ok'] for k in kills)}/{len(kills)}"
        )
    for name, code, left in out["stopped"]:
        print(f"{tag} worker {name}: SIGTERM → exit {code}; Kimi processes left with its HOME {left}")


def recovery(dialect: str, fake: FakeMoonshot, root: Path, runs: int) -> None:
    """``--recovery``: only the killed-worker runs (and the Redis counts around a running job)."""
    fake.reset()
    folder = root / dialect
    folder.mkdir()
    kimi = kimi_under_test(dialect, fake, folder)
    redis = RedisServer(folder / "redis")
    try:
        out = asyncio.run(recovery_phase(kimi, fake, folder, redis, small_repo(folder / "small"), runs))
    finally:
        redis.stop()
    print(f"[{dialect}] {load()}")
    report_recovery(f"[{dialect}]", out)


# -- main -----------------------------------------------------------------------------------------------------------
def bench(
    dialect: str, fake: FakeMoonshot, root: Path, big: Path | None, small_costs: Row, args: argparse.Namespace
) -> None:
    """One dialect (a small repository of its own): the local servers, then Redis, the workers and the server
    with the broker."""
    fake.reset()
    tag = f"[{dialect}]"
    folder = root / dialect
    folder.mkdir()
    kimi = kimi_under_test(dialect, fake, folder)
    repos = (small_repo(folder / "small"), big)
    out: Row = {}
    for standby, isolation, key in LOCAL_KINDS:
        out[key] = asyncio.run(local_dispatch(kimi, fake, folder, repos[0], args.runs, standby, isolation))
        print(f"{tag} local server ({standby}, {isolation}) gone; Kimi processes left with its HOME: "
              f"{leftovers(kimi.home)}")  # fmt: skip
    redis = RedisServer(folder / "redis")
    try:
        print(
            f"{tag} Redis {redis.version}; one snapshot of INFO costs {redis.cost['cmds']:.0f} commands, "
            f"{redis.cost['in']:.0f} B in, {redis.cost['out']:.0f} B out (taken off)"
        )
        out.update(asyncio.run(remote_phase(kimi, fake, folder, redis, repos, args)))
    finally:
        redis.stop()
    print(f"{tag} remote server gone; processes left with its HOME: {leftovers(kimi.home)}")
    print(f"{tag} {load()}")
    report_dispatch(tag, out, small_costs)
    report_remote(tag, out)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dialect", choices=["legacy", "kimi-code", "both"], default="kimi-code")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--jobs", type=int, default=16)
    parser.add_argument("--repo-mb", type=int, default=100, help="the big repository's size (0: skip it)")
    parser.add_argument("--keep", action="store_true", help="keep the temporary directory (logs)")
    parser.add_argument("--recovery", action="store_true", help="only the killed-worker runs (5.)")
    args = parser.parse_args()
    dialects = ["legacy", "kimi-code"] if args.dialect == "both" else [args.dialect]
    root = Path(tempfile.mkdtemp(prefix="kbench-remote-"))
    if args.recovery:
        try:
            with FakeMoonshot() as fake:
                for dialect in dialects:
                    recovery(dialect, fake, root, args.runs)
        finally:
            if not args.keep:
                shutil.rmtree(root, ignore_errors=True)
        return
    print(
        f"{os.cpu_count()} CPU cores; git {git(root, 'version').split()[-1]}; {time.strftime('%Y-%m-%d')}; {load()}"
    )
    try:
        small = small_repo(root / "small")
        small_costs = bundle_costs(small, root, args.runs)
        report_bundles("small repository", small_costs)
        big = None
        if args.repo_mb > 0:
            made, big = timed(lambda: big_repo(root / "big", args.repo_mb))
            print(f"[bundle {args.repo_mb} MB repository] generated in {made:.1f} s")
            report_bundles(f"{args.repo_mb} MB repository", bundle_costs(big, root, args.runs))
        with FakeMoonshot() as fake:
            for dialect in dialects:
                bench(dialect, fake, root, big, small_costs, args)
    finally:
        if args.keep:
            print(f"kept {root} (server and worker logs)")
        else:
            shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
