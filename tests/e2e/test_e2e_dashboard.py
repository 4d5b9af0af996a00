"""The dashboard in a real browser (Debian's Chromium driven by Playwright), over the job store of a real
server running real Kimi jobs (a real MCP client, the fake API): ``kimi-mcp dashboard`` runs as its own
process, as a person starts it. The jobs table shows a job as it starts and its page shows Kimi's screen
changing; a question answered by clicking its option reaches the model; Cancel stops a running job; Apply
puts an isolated job's file in the workspace; off loopback the page and its event stream are refused
without the token; a POST without the page's CSRF token is refused.

One browser serves the module. The question and the screen run in both dialects (each draws its own screen
and question panel); cancel and apply in one: the dashboard reaches them through the job store and the
worktree copy, the same in both, and each dialect's interrupt and copy are covered by test_e2e_control and
test_e2e_worktree."""

from __future__ import annotations

import asyncio
import contextlib
import queue
import shutil
import socket
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from claude_code import wait_until_gone
from fake_moonshot import COLOUR, FakeMoonshot, Reply
from fastmcp import Client
from git_helpers import committed_repo
from kimi_env import KimiUnderTest
from mcp_helpers import SERVER, processes_with_home, transport
from playwright.sync_api import Browser, Page, expect, sync_playwright
from test_e2e_control import answered_with
from test_e2e_remote import Worker, redis_url  # noqa: F401 (redis_url: the module's redis-server fixture)

pytestmark = pytest.mark.e2e

TOKEN = "dashboard-test-token-0123456789"
SEEN_S = 60_000  # ms a page may take to show what a job did (a Kimi start under load included)


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        pytest.fail("no chromium on PATH: apt-get install chromium (.ci/run installs it)")
    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=chromium, args=["--no-sandbox"])
        yield launched
        launched.close()


@pytest.fixture
def page(browser: Browser) -> Iterator[Page]:
    """A fresh page; what it logged as errors (a script failing, a Content-Security-Policy violation) fails
    the test."""
    context = browser.new_context()
    opened = context.new_page()
    errors: list[str] = []
    opened.on("pageerror", lambda exc: errors.append(str(exc)))
    opened.on("console", lambda msg: errors.append(msg.text) if msg.type == "error" else None)
    yield opened
    context.close()
    assert not [e for e in errors if "401" not in e and "403" not in e], errors  # refusals are the tests' own


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def dashboard(
    env: dict[str, str], log: Path, page: Page, *, host: str = "127.0.0.1", token: str | None = None
):
    """``kimi-mcp dashboard`` on a free port, over the store of the servers started with ``env``; yields
    its address as a browser on this machine reaches it. ``page`` leaves it before it stops (its event
    stream cut by the server would be an error of the page)."""
    port = free_port()
    env = {**env, **({"KIMI_MCP_HTTP_TOKEN": token} if token else {})}
    with open(log, "a") as out:
        proc = subprocess.Popen(
            [SERVER, "dashboard", "--host", host, "--port", str(port)], env=env, stderr=out
        )
    reach = host if host != "0.0.0.0" else own_address()
    url = f"http://{reach}:{port}"
    try:
        wait_listening(reach, port, proc)
        yield url
    finally:
        page.goto("about:blank")
        proc.terminate()
        proc.wait(timeout=10)


def wait_listening(host: str, port: int, proc: subprocess.Popen) -> None:
    for _ in range(300):
        if proc.poll() is not None:
            pytest.fail(f"kimi-mcp dashboard exited with {proc.returncode}")
        with contextlib.suppress(OSError), socket.create_connection((host, port), timeout=1):
            return
        time.sleep(0.1)
    pytest.fail("kimi-mcp dashboard did not listen")


def own_address() -> str:
    """An address of this machine that is not loopback (the route to a public address; nothing is sent),
    else 127.0.0.1: the token is required on every address of a server off loopback."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            s.connect(("192.0.2.1", 9))
        except OSError:  # no route out of this machine
            return "127.0.0.1"
        return s.getsockname()[0]


class Call:
    """A kimi tool call through a real MCP client on a thread of its own: it returns at once with the job
    (``wait_s`` 0), then waits for the job's end with ``kimi_job`` (again while it waits on a question,
    which this client leaves to the dashboard)."""

    def __init__(self, kimi: KimiUnderTest, cwd: Path, log: Path, tool: str, args: dict[str, Any]) -> None:
        self.started: queue.Queue[dict] = queue.Queue()
        self.final: dict = {}
        self._thread = threading.Thread(target=asyncio.run, args=(self._main(kimi, cwd, log, tool, args),))
        self._thread.start()

    async def _main(self, kimi: KimiUnderTest, cwd: Path, log: Path, tool: str, args: dict[str, Any]) -> None:
        try:
            async with Client(transport(kimi.env, cwd, log), timeout=600) as client:
                first = await client.call_tool(tool, {**args, "wait_s": 0}, raise_on_error=False)
                self.started.put(first.structured_content)
                job = {"job_id": first.structured_content["job_id"], "wait_s": 120}
                while (self.final.get("status") or "waiting") in ("waiting", "running", "starting", "queued"):
                    await asyncio.sleep(0.3)
                    self.final = (
                        await client.call_tool("kimi_job", job, raise_on_error=False)
                    ).structured_content
        finally:
            self.started.put({})

    def job_id(self) -> str:
        first = self.started.get(timeout=120)
        assert first.get("job_id"), first
        return first["job_id"]

    def result(self) -> dict:
        self._thread.join(timeout=180)
        return self.final


def screen_changes(page: Page) -> tuple[str, str]:
    """Two readings of the job's screen (selectable text in a ``<pre>``), both drawn while Kimi streams its
    text, that differ: the page follows the screen without a reload."""
    screen = page.locator("pre#screen")
    expect(screen).to_contain_text("thinking", timeout=SEEN_S)
    first = screen.inner_text()
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        now = screen.inner_text()
        if now != first and "thinking" in now:
            return first, now
        time.sleep(0.1)
    pytest.fail(f"the screen did not change: {first!r}")


def test_a_running_job_is_listed_its_screen_changes_and_a_clicked_answer_reaches_kimi(
    kimi: KimiUnderTest, fake: FakeMoonshot, workspace: Path, tmp_path: Path, page: Page
) -> None:
    thinking = Reply(
        "tool", tool_calls=[("AskUserQuestion", COLOUR)], text="thinking " * 20, token_delay=0.12
    )
    thinking.chunk_chars = 6  # about 3.6 s of streamed text before the question: the screen changes
    fake.script([thinking, Reply.text_reply("painting it blue")], marker="DASH-ASK")
    with dashboard(kimi.env, tmp_path / "dashboard.log", page) as url:
        page.goto(url + "/")
        expect(page.locator("tbody#jobs")).to_contain_text("No jobs.")
        call = Call(
            kimi, workspace, tmp_path / "server.log", "kimi_code_task", {"task_description": "DASH-ASK"}
        )
        job_id = call.job_id()
        row = page.locator(f'tr[data-job="{job_id}"]')
        expect(row).to_be_visible(timeout=SEEN_S)  # the table is live: the job appeared without a reload
        row.get_by_role("link", name=job_id).click()
        first, later = screen_changes(page)
        assert later != first
        expect(page.locator("#question")).to_contain_text("Which colour?", timeout=SEEN_S)

        refused = page.request.post(f"{url}/job/{job_id}/answer", form={"answer": "Red", "question_id": ""})
        assert refused.status == 403 and "CSRF" in refused.text()  # no CSRF token: nothing sent to Kimi

        page.locator("#question").get_by_role("button", name="Blue").click()
        expect(page.locator(".notice")).to_contain_text("Answer sent")
        expect(page.locator("#status")).to_have_text("done", timeout=SEEN_S)
        expect(page.locator("#result")).to_contain_text("painting it blue")
    result = call.result()
    assert result["status"] == "done" and result["output"] == "painting it blue", result
    assert answered_with(fake)["answers"] == {"Which colour?": "Blue"}
    assert not processes_with_home(kimi.home)


@pytest.mark.parametrize("kimi", ["legacy"], indirect=True)  # the store's cancel: the same for both dialects
def test_cancel_on_the_page_stops_a_running_job(
    kimi: KimiUnderTest, fake: FakeMoonshot, workspace: Path, tmp_path: Path, page: Page
) -> None:
    fake.script([Reply.hang()], marker="DASH-HANG")
    with dashboard(kimi.env, tmp_path / "dashboard.log", page) as url:
        call = Call(
            kimi, workspace, tmp_path / "server.log", "kimi_code_task", {"task_description": "DASH-HANG"}
        )
        job_id = call.job_id()
        page.goto(f"{url}/job/{job_id}")
        expect(page.locator("#status")).to_have_text("running", timeout=SEEN_S)
        page.locator("#cancel").click()
        expect(page.locator(".notice")).to_contain_text("Cancellation asked")
        expect(page.locator("#status")).to_have_text("cancelled", timeout=SEEN_S)
    result = call.result()
    assert result["status"] == "cancelled", result
    assert not processes_with_home(kimi.home)


@pytest.mark.parametrize("kimi", ["legacy"], indirect=True)  # the copy and its apply are above the runner
def test_apply_on_the_page_puts_an_isolated_jobs_file_in_the_workspace(
    kimi: KimiUnderTest, fake: FakeMoonshot, workspace: Path, tmp_path: Path, page: Page
) -> None:
    committed_repo(workspace, {"app.py": "print('hi')\n"})
    fake.script(
        [Reply.tool(*kimi.write("new.py", "print('new')\n")), Reply.text_reply("added new.py")],
        marker="DASH-ISO",
    )
    args = {"task_description": "DASH-ISO", "isolation": "worktree"}
    call = Call(kimi, workspace, tmp_path / "server.log", "kimi_code_task", args)
    job_id = call.job_id()
    assert call.result()["status"] == "done"
    assert not (workspace / "new.py").exists()  # isolated: the tree is untouched until Apply
    with dashboard(kimi.env, tmp_path / "dashboard.log", page) as url:
        page.goto(f"{url}/job/{job_id}")
        expect(page.locator("ul.changes")).to_contain_text("new.py")
        expect(page.locator(".diff .d2h-file-wrapper")).to_contain_text("print('new')")  # diff2html drew it
        page.locator("#apply").click()
        expect(page.locator(".notice")).to_contain_text("Applied 1 path(s)")
        expect(page.locator("#result")).to_contain_text("Applied: new.py")
        expect(page.locator("#apply")).to_have_count(0)  # a change applies once
    assert (workspace / "new.py").read_text() == "print('new')\n"


@pytest.mark.parametrize("kimi", ["legacy"], indirect=True)  # the worker list is Docket's: no dialect in it
def test_with_a_broker_the_jobs_page_lists_its_workers_and_the_jobs_each_runs(
    kimi: KimiUnderTest,
    fake: FakeMoonshot,
    redis_url: str,  # noqa: F811 (the fixture imported above)
    tmp_path: Path,
    page: Page,
) -> None:
    repo = committed_repo(tmp_path / "caller" / "repo", {"app.py": "x = 1\n"})  # the worker cannot see it
    fake.script([Reply.hang()], marker="DASH-REMOTE")
    worker = Worker(kimi, redis_url, tmp_path, "w-dash")
    env = {**kimi.env, "KIMI_MCP_BROKER": redis_url}
    try:
        with dashboard(env, tmp_path / "dashboard.log", page) as url:
            page.goto(url + "/")
            listed = page.locator('section#workers tr[data-worker="w-dash"]')
            expect(listed).to_contain_text("ago", timeout=SEEN_S)
            expect(listed.locator("td.jobs-running")).to_have_text("0")
            server = SimpleNamespace(env=env)  # the MCP server sends its jobs to the broker
            args = {"task_description": "DASH-REMOTE", "work_dir": str(repo)}
            call = Call(server, repo, tmp_path / "server.log", "kimi_code_task", args)  # type: ignore[arg-type]
            job_id = call.job_id()
            expect(listed.locator("td.jobs-running")).to_have_text("1", timeout=SEEN_S)  # live, no reload
            page.goto(f"{url}/job/{job_id}")
            expect(page.locator("#status")).to_have_text("running", timeout=SEEN_S)
            page.locator("#cancel").click()
            expect(page.locator("#status")).to_have_text("cancelled", timeout=SEEN_S)
            page.goto(url + "/")
            expect(listed.locator("td.jobs-running")).to_have_text("0", timeout=SEEN_S)
            assert redis_url.split("@")[0].split(":")[-1] not in page.content()  # the password is not shown
            assert worker.stop() == 0, worker.log.read_text()
            expect(listed).to_have_count(0, timeout=SEEN_S)  # a worker that left is no longer listed
            expect(page.locator("section#workers")).to_contain_text("No kimi-mcp worker is listening")
        assert call.result()["status"] == "cancelled"
    finally:
        worker.stop()
    assert wait_until_gone(worker.home) == []


def test_off_loopback_the_page_and_its_events_need_the_token(tmp_path: Path, page: Page, home: Path) -> None:
    env = {
        "PATH": str(Path(SERVER).parent) + ":/usr/bin:/bin",
        "HOME": str(home),
        "XDG_STATE_HOME": str(tmp_path),
    }
    refused = subprocess.run([SERVER, "dashboard", "--host", "0.0.0.0", "--port", str(free_port())], env=env,
                             capture_output=True, text=True, timeout=60)  # fmt: skip
    assert refused.returncode == 2 and "KIMI_MCP_HTTP_TOKEN" in refused.stderr
    with dashboard(env, tmp_path / "dashboard.log", page, host="0.0.0.0", token=TOKEN) as url:
        shown = page.goto(url + "/")
        assert shown is not None and shown.status == 401
        assert "needs the token" in page.content()
        assert page.request.get(url + "/events/jobs").status == 401
        assert (
            page.request.get(url + "/", headers={"Authorization": "Bearer not-the-token-0123"}).status == 401
        )
        assert page.request.get(url + "/", headers={"Authorization": f"Bearer {TOKEN}"}).status == 200
        page.goto(f"{url}/?token={TOKEN}")
        assert "token=" not in page.url  # traded for the cookie, out of the address bar and history
        expect(page.locator("h1")).to_have_text("Jobs")
        (cookie,) = page.context.cookies()
        assert cookie["httpOnly"] and cookie["sameSite"] == "Strict" and cookie["value"] == TOKEN


def test_the_http_transport_serves_the_dashboard_behind_its_bearer_token(
    tmp_path: Path, page: Page, home: Path
) -> None:
    port = free_port()
    env = {
        "PATH": str(Path(SERVER).parent) + ":/usr/bin:/bin",
        "HOME": str(home),
        "XDG_STATE_HOME": str(tmp_path),
    }
    env["KIMI_MCP_HTTP_TOKEN"] = TOKEN
    with open(tmp_path / "server.log", "a") as out:
        proc = subprocess.Popen([SERVER, "--http", "--port", str(port)], env=env, stderr=out)
    try:
        wait_listening("127.0.0.1", port, proc)
        url = f"http://127.0.0.1:{port}"
        assert page.request.get(url + "/dashboard/").status == 401
        assert page.request.get(url + "/dashboard/events/jobs").status == 401
        assert (
            page.request.get(url + "/dashboard/", headers={"Authorization": f"Bearer {TOKEN}"}).status == 200
        )
        page.goto(f"{url}/dashboard/usage?token={TOKEN}")
        assert page.url == f"{url}/dashboard/usage"
        expect(page.locator("h1")).to_have_text("Usage")
        expect(page.locator("canvas#usage-chart")).to_be_visible()  # Chart.js drew it (no script error)
        page.get_by_role("link", name="Jobs").first.click()
        expect(page.locator("tbody#jobs")).to_contain_text("No jobs.")
        assert page.request.post(url + "/mcp", data="{}").status == 401  # the cookie opens the dashboard only
    finally:
        page.goto("about:blank")
        proc.terminate()
        proc.wait(timeout=10)
