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

Usage: uv run python benchmarks/bench_dashboard.py [--runs 5]
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil
from playwright.sync_api import Page, sync_playwright

from kimi_mcp.jobs import STORE_FILE, JobStore, owner_id

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


def start(state: Path) -> tuple[subprocess.Popen, str]:
    port = free_port()
    env = {**os.environ, "XDG_STATE_HOME": str(state), "KIMI_MCP_STANDBY": "off"}
    env.pop("KIMI_MCP_HTTP_TOKEN", None)
    proc = subprocess.Popen([SERVER, "dashboard", "--port", str(port)], env=env, stderr=subprocess.DEVNULL)
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    chromium = shutil.which("chromium")
    if chromium is None:
        raise SystemExit("needs chromium (apt-get install chromium)")
    with tempfile.TemporaryDirectory() as tmp:
        state = Path(tmp)
        store = JobStore(state / "kimi-mcp" / STORE_FILE)
        running = fill(store, JOBS)
        proc, url = start(state)
        try:
            with sync_playwright() as playwright:
                browser = playwright.chromium.launch(executable_path=chromium, args=["--no-sandbox"])
                page = browser.new_page(bypass_csp=True)  # Playwright's polling predicate is an eval
                default = first_paint(page, url + "/", args.runs)
                every = first_paint(page, url + "/?limit=1000", args.runs)
                print(f"first paint, jobs page ({JOBS} jobs in the store): newest 200 {default:.0f} ms, "
                      f"all 1000 rows {every:.0f} ms (median of {args.runs}; target ≤ 300 ms)")  # fmt: skip
                pages = [
                    end_visible(page, store, f"{url}/job/{j}", j, "#status", "done")
                    for j in running[: args.runs]
                ]
                rows = [
                    end_visible(page, store, url + "/", j, f'tr[data-job="{j}"]', "done")
                    for j in running[-args.runs :]  # the newest: in the table's 200 rows
                ]
                on_page, in_table = statistics.median(pages) * 1000, statistics.median(rows) * 1000
                print(f"a job's end visible: on its page {on_page:.0f} ms, in the jobs table {in_table:.0f} ms "
                      f"(median of {args.runs}; target ≤ 1 s)")  # fmt: skip
                streams = [browser.new_page() for _ in range(3)]
                for other, job_id in zip(streams, running[2 * args.runs :], strict=False):
                    other.goto(f"{url}/job/{job_id}")
                page.goto(url + "/?limit=1000")
                page.wait_for_timeout(2000)
                rss = psutil.Process(proc.pid).memory_info().rss / 2**20
                print(f"dashboard RSS: {rss:.1f} MB (4 pages with their event streams open; target ≤ 60 MB)")
                browser.close()
        finally:
            proc.terminate()
            proc.wait(timeout=10)
            store.close()


if __name__ == "__main__":
    main()
