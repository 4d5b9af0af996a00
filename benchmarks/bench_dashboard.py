"""Dashboard benchmark: prints what it measures in this one run (nothing is asserted).

``kimi-mcp dashboard`` runs as its own process over a fresh job store holding 1,000 jobs (finished ones
with results, some running and waiting ones of a live owner: this process), and Chromium (Debian's, driven
by Playwright) opens it:

1. First paint of the jobs page: the browser's first-contentful-paint after navigation (median of
   ``--runs``), for the default page (the newest 200 jobs) and with all 1,000 rows (``?limit=1000``);
   target ≤ 300 ms.
2. A job's end visible: a running job's page is open; the job is recorded finished in the store (as its
   server records it) and the time until its page says ``done`` is measured (median; target ≤ 1 s). The
   same for its row in the jobs table.
3. The dashboard's own memory: its RSS after those pages, with their event streams open (target ≤ 60 MB).
4. A job's live screen: a job of this process (a real ``JobManager``, an executor that holds the job) whose
   Kimi screen (a 40 x 120 ``TerminalScreen``, masked by a ``Redactor``, as the session gives it) changes
   ``--changes`` times at random moments; its page is open in another dashboard; the lag from each change
   to the page's screen showing it (median and max; target ≤ 1 s). Measured with today's cadences
   (``SCREEN_TICK`` 0.25 s, the job page's stream 0.5 → 0.25 s) and with the old ones (the screen written
   only with the progress, every ``TICK`` = 1 s; the page's stream every 0.5 s), each with its own dashboard,
   and the dashboard process's CPU time meanwhile (one job page open).
5. What that costs the job's server: store writes and CPU seconds of this process over ``--idle`` seconds
   of a running job whose screen does not change, and over as long with a screen that changes every 0.1 s
   (Kimi streaming), for both cadences.

Usage: uv run python benchmarks/bench_dashboard.py [--runs 5] [--changes 20] [--idle 10]
"""

from __future__ import annotations

import argparse
import math
import os
import random
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path

import psutil
from playwright.sync_api import Browser, Page, sync_playwright

from kimi_mcp.executors import Executor
from kimi_mcp.jobs import STORE_FILE, TICK, JobManager, JobSpec, JobStore, owner_id
from kimi_mcp.jobs import _manager as manager_module
from kimi_mcp.models import TaskResult
from kimi_mcp.scope import Scope
from kimi_mcp.secrets import Redactor
from kimi_mcp.session._screen import TerminalScreen

SERVER = str(Path(sys.executable).parent / "kimi-mcp")
JOBS = 1000
FIRST_PAINT = "() => (performance.getEntriesByName('first-contentful-paint')[0] || {}).startTime"


def fill(store: JobStore, n: int) -> list[str]:
    """``n`` jobs: nine in ten finished with a result, the rest running or waiting (of this process)."""
    running = []
    me = owner_id()
    for i in range(n):
        record = store.create(
            tool="kimi_code_task", workspace=f"/home/user/project-{i % 17}", read_only=False,
            arguments={"task_description": f"task {i}"}, owner=me, summary=f"job {i}: change things",
            group=f"g{i % 5}",
        )  # fmt: skip
        if i % 10:
            result = {
                "success": True,
                "output": "done " * 40,
                "usage": {"input_tokens": 900, "output_tokens": 90},
            }
            store.finish(record.job_id, status="done", result=result, summary=f"job {i} done")
        else:
            store.update(record.job_id, status="running", tokens=1234, screen="Kimi works\n" * 20)
            running.append(record.job_id)
    return running


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


#: ``kimi-mcp dashboard`` with the old cadence of a job page's stream (the jobs table's, 0.5 s)
OLD_DASHBOARD = (
    "import sys\nfrom kimi_mcp.dashboard import _events\n_events.JOB_POLL_S = _events.POLL_S\n"
    "from kimi_mcp.cli import main\nmain(sys.argv[1:])"
)


def start(state: Path, *, old: bool = False) -> tuple[subprocess.Popen, str]:
    port = free_port()
    env = {**os.environ, "XDG_STATE_HOME": str(state), "KIMI_MCP_STANDBY": "off"}
    env.pop("KIMI_MCP_HTTP_TOKEN", None)
    command = [sys.executable, "-c", OLD_DASHBOARD] if old else [SERVER]
    proc = subprocess.Popen([*command, "dashboard", "--port", str(port)], env=env, stderr=subprocess.DEVNULL)
    for _ in range(300):
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return proc, f"http://127.0.0.1:{port}"
        except OSError:
            time.sleep(0.05)
    raise SystemExit("the dashboard did not start")


def first_paint(page: Page, url: str, runs: int) -> float:
    painted = []
    for _ in range(runs):
        page.goto(url)
        page.wait_for_function(FIRST_PAINT)
        painted.append(page.evaluate(FIRST_PAINT))
    return statistics.median(painted)


def end_visible(page: Page, store: JobStore, url: str, job_id: str, selector: str, text: str) -> float:
    """Seconds from the job recorded finished to ``selector`` saying ``text`` on the open page."""
    page.goto(url)
    # the page's event stream is open and has sent its first look; the end falls at a random point of the
    # stream's half-second looks (a fixed wait would always land just before the next one)
    page.wait_for_timeout(1500 + random.uniform(0, 500))
    began = time.monotonic()
    store.finish(job_id, status="done", result={"success": True, "output": "finished"}, summary="finished")
    page.wait_for_function(
        "([s, t]) => { const e = document.querySelector(s); return e && e.textContent.includes(t); }",
        arg=[selector, text],
        polling=10,
    )
    return time.monotonic() - began


class Holds(Executor):
    """Runs no Kimi: holds each job until ``release`` is set."""

    def __init__(self) -> None:
        self.release = threading.Event()

    def run(self, spec: JobSpec, *, job_id: str, scope: Scope, watch) -> TaskResult:
        watch.queued = False
        self.release.wait(600)
        return TaskResult(success=True, output="released")


class ScreenJob:
    """A job of this process (a real ``JobManager``) whose Kimi screen is a 40 x 120 terminal that the
    benchmark writes to, given to the manager masked, as the session gives it."""

    def __init__(self, state: Path) -> None:
        self.term = TerminalScreen(40, 120)
        self.redactor = Redactor(["a-configured-secret-value-123"])
        self.holds = Holds()
        self.jobs = JobManager(state / "kimi-mcp" / STORE_FILE, executor=self.holds)
        self.writes: Counter[str] = Counter()
        spec = JobSpec(tool="kimi_code_task", prompt="p", workspace="/w", read_only=False, arguments={})
        scope = Scope(deadline=math.inf)
        scope.screen = lambda: self.redactor(self.term.text)
        self.job = self.jobs.submit(spec, cls=TaskResult, scope=scope, arguments={}, summary="screen")
        for i in range(30):
            self.term.feed(f"Kimi's earlier output, line {i}: " + "x" * 60 + "\r\n")

    def close(self) -> None:
        self.holds.release.set()
        self.job.done.wait(10)
        self.jobs.shutdown()


def count_writes(counts: Counter[str]) -> None:
    """Count the store's ``update`` calls (every one a write): all of them, and those carrying a screen; and
    the CPU time (ns, of the thread) the ticker's looks at a job take (progress, screen, writes)."""
    update = JobStore.update

    def counted(store: JobStore, job_id: str, **fields) -> None:
        counts["writes"] += 1
        counts["screen"] += fields.get("screen") is not None
        update(store, job_id, **fields)

    JobStore.update = counted  # type: ignore[method-assign]
    for name in ("_tick_job", "_publish_screen"):
        setattr(manager_module, name, _timed(getattr(manager_module, name), counts))


def _timed(look, counts: Counter[str]):
    def timed(*args):
        began = time.thread_time_ns()
        try:
            return look(*args)
        finally:
            counts["cpu_ns"] += time.thread_time_ns() - began

    return timed


def cost(
    screen: ScreenJob, counts: Counter[str], seconds: float, streaming: bool
) -> tuple[float, float, float]:
    """(store writes per second, of them with a screen, ticker CPU ms per second) over ``seconds``, the
    screen unchanged or changing every 0.1 s."""
    counts.clear()
    end = time.monotonic() + seconds
    n = 0
    while time.monotonic() < end:
        time.sleep(0.1)
        if streaming:
            n += 1
            screen.term.feed(f"Kimi streams, token {n}\r\n")
    return counts["writes"] / seconds, counts["screen"] / seconds, counts["cpu_ns"] / 1e6 / seconds


def screen_lag(browser: Browser, url: str, screen: ScreenJob, changes: int) -> list[float]:
    """Seconds from each change of the job's screen (at a random moment) to its page showing it."""
    page = browser.new_page(bypass_csp=True)
    page.goto(f"{url}/job/{screen.job.job_id}")
    page.wait_for_timeout(1500)
    lags = []
    for i in range(changes):
        page.wait_for_timeout(random.uniform(600, 1600))
        marker = f"screen change {i:02d} of {changes}"
        screen.term.feed(marker + "\r\n")
        began = time.monotonic()
        page.wait_for_function(
            "m => (document.querySelector('#screen') || {}).textContent.includes(m)", arg=marker, polling=10
        )
        lags.append(time.monotonic() - began)
    page.close()
    return lags


def live_screen(browser: Browser, args: argparse.Namespace, old: bool, counts: Counter[str]) -> None:
    """Items 4 and 5 for one cadence (``old``: the screen written every ``TICK``, the page's stream every
    0.5 s), in a fresh store with its own dashboard."""
    manager_module.SCREEN_TICK = TICK if old else NEW_SCREEN_TICK
    with tempfile.TemporaryDirectory() as tmp:
        state = Path(tmp)
        screen = ScreenJob(state)
        proc, url = start(state, old=old)
        try:
            time.sleep(1.5)
            idle = cost(screen, counts, args.idle, streaming=False)
            busy = cost(screen, counts, args.idle, streaming=True)
            dashboard = psutil.Process(proc.pid)
            cpu, began = sum(dashboard.cpu_times()[:2]), time.monotonic()
            lags = screen_lag(browser, url, screen, args.changes)
            served = (sum(dashboard.cpu_times()[:2]) - cpu) * 1000 / (time.monotonic() - began)
        finally:
            screen.close()
            proc.terminate()
            proc.wait(timeout=10)
    name = "old (screen every 1 s, page every 0.5 s)" if old else "new (screen 0.25 s, page 0.25 s)"
    print(f"live screen, {name}: lag median {statistics.median(lags) * 1000:.0f} ms, max {max(lags) * 1000:.0f} ms "
          f"({args.changes} changes; target ≤ 1 s)")  # fmt: skip
    print(f"  the dashboard's CPU meanwhile: {served:.0f} ms/s (the job's page open)")
    for what, (writes, screens, cpu) in (("unchanged screen", idle), ("screen changing every 0.1 s", busy)):
        print(f"  a running job, {what}: {writes:.2f} store writes/s ({screens:.2f} with a screen), "
              f"the ticker's CPU {cpu:.2f} ms/s ({args.idle:.0f} s)")  # fmt: skip


NEW_SCREEN_TICK = manager_module.SCREEN_TICK


def pages(browser: Browser, args: argparse.Namespace) -> None:
    """Items 1 to 3, over a store of ``JOBS`` jobs."""
    with tempfile.TemporaryDirectory() as tmp:
        state = Path(tmp)
        store = JobStore(state / "kimi-mcp" / STORE_FILE)
        running = fill(store, JOBS)
        proc, url = start(state)
        try:
            page = browser.new_page(bypass_csp=True)  # Playwright's polling predicate is an eval
            default = first_paint(page, url + "/", args.runs)
            every = first_paint(page, url + "/?limit=1000", args.runs)
            print(f"first paint, jobs page ({JOBS} jobs in the store): newest 200 {default:.0f} ms, "
                  f"all 1000 rows {every:.0f} ms (median of {args.runs}; target ≤ 300 ms)")  # fmt: skip
            on_page = [
                end_visible(page, store, f"{url}/job/{j}", j, "#status", "done") for j in running[: args.runs]
            ]
            rows = [
                end_visible(page, store, url + "/", j, f'tr[data-job="{j}"]', "done")
                for j in running[-args.runs :]  # the newest: in the table's 200 rows
            ]
            print(f"a job's end visible: on its page {statistics.median(on_page) * 1000:.0f} ms, in the jobs "
                  f"table {statistics.median(rows) * 1000:.0f} ms (median of {args.runs}; target ≤ 1 s)")  # fmt: skip
            streams = [browser.new_page() for _ in range(3)]
            for other, job_id in zip(streams, running[2 * args.runs :], strict=False):
                other.goto(f"{url}/job/{job_id}")
            page.goto(url + "/?limit=1000")
            page.wait_for_timeout(2000)
            rss = psutil.Process(proc.pid).memory_info().rss / 2**20
            print(f"dashboard RSS: {rss:.1f} MB (4 pages with their event streams open; target ≤ 60 MB)")
            for opened in (page, *streams):
                opened.close()
        finally:
            proc.terminate()
            proc.wait(timeout=10)
            store.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--changes", type=int, default=20, help="screen changes whose lag is measured")
    parser.add_argument("--idle", type=float, default=10.0, help="seconds of each cost measurement")
    parser.add_argument("--only-screen", action="store_true", help="items 4 and 5 only")
    args = parser.parse_args()
    chromium = shutil.which("chromium")
    if chromium is None:
        raise SystemExit("needs chromium (apt-get install chromium)")
    counts: Counter[str] = Counter()
    count_writes(counts)
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=chromium, args=["--no-sandbox"])
        if not args.only_screen:
            pages(browser, args)
        for old in (True, False):
            live_screen(browser, args, old, counts)
        browser.close()


if __name__ == "__main__":
    main()
