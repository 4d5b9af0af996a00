"""Jobs on a worker (``KIMI_MCP_BROKER``): a real Redis (loopback, with a password), a ``kimi-mcp worker``
process with a HOME and state directory of its own driving a real Kimi, the real server dispatching to it
through Docket, a real MCP client; both dialects, the fake API."""

from __future__ import annotations

import asyncio
import os
import secrets
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fake_moonshot import FakeMoonshot, Reply
from fastmcp import Client
from git_helpers import committed_repo, git
from kimi_env import KimiUnderTest
from mcp_helpers import SERVER, processes_with_home, transport

pytestmark = pytest.mark.e2e


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture(scope="module")
def redis_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A redis-server of the suite's own on a loopback port, with a password."""
    binary = shutil.which("redis-server")
    assert binary, "redis-server is needed (Debian: apt-get install redis-server; .ci/run installs it)"
    folder, port, password = tmp_path_factory.mktemp("redis"), free_port(), secrets.token_hex(8)
    proc = subprocess.Popen(
        [binary, "--port", str(port), "--bind", "127.0.0.1", "--requirepass", password, "--save", "",
         "--appendonly", "no", "--dir", str(folder)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            with socket.socket() as sock:
                if sock.connect_ex(("127.0.0.1", port)) == 0:
                    break
            time.sleep(0.05)
        yield f"redis://:{password}@127.0.0.1:{port}/0"
    finally:
        proc.terminate()
        proc.wait(10)


class Worker:
    """A ``kimi-mcp worker`` process with its own HOME and state directory."""

    def __init__(self, kimi: KimiUnderTest, url: str, root: Path, name: str) -> None:
        self.name, self.home, self.state = name, root / f"{name}-home", root / f"{name}-state"
        self.home.mkdir()
        env = {**kimi.env, "HOME": str(self.home), "XDG_CONFIG_HOME": str(self.home / ".config")}
        env.update(KIMI_MCP_STATE_DIR=str(self.state), KIMI_MCP_BROKER=url)
        self.log = root / f"{name}.log"
        self.proc = subprocess.Popen(
            [SERVER, "worker", "--name", name, "--concurrency", "2"],
            env=env, stdout=subprocess.DEVNULL, stderr=open(self.log, "w"),  # noqa: SIM115
            start_new_session=True,
        )  # fmt: skip
        deadline = time.monotonic() + 60
        while "ready" not in self.log.read_text():
            assert self.proc.poll() is None, self.log.read_text()
            assert time.monotonic() < deadline, self.log.read_text()
            time.sleep(0.1)

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(30)


@pytest.fixture
def worker(kimi: KimiUnderTest, redis_url: str, tmp_path: Path) -> Iterator[Worker]:
    started = Worker(kimi, redis_url, tmp_path, f"w-{kimi.name}")
    try:
        yield started
    finally:
        assert started.stop() == 0, started.log.read_text()
        assert not processes_with_home(started.home)


def served(kimi: KimiUnderTest, url: str, workspace: Path, log: Path, body: Any) -> Any:
    env = {**kimi.env, "KIMI_MCP_BROKER": url}

    async def main():
        async with Client(transport(env, workspace, log), timeout=600) as client:
            return await body(client)

    return asyncio.run(main())


async def call(client: Client, tool: str, args: dict) -> dict:
    return (await client.call_tool(tool, args, raise_on_error=False)).structured_content


def test_a_worktree_job_runs_on_the_worker_and_lands_with_kimi_apply(
    kimi: KimiUnderTest, fake: FakeMoonshot, worker: Worker, redis_url: str, tmp_path: Path
) -> None:
    repo = committed_repo(tmp_path / "repo", {"app.py": "one\ntwo\n", ".gitignore": "*.log\n"})
    (repo / "app.py").write_text("ONE\ntwo\n")  # uncommitted: it travels too
    (repo / "debug.log").write_text("ignored: never leaves\n")
    fake.script(
        [Reply.tool(*kimi.write("new.txt", "made on a worker\n")), Reply.text_reply("done remotely")],
        marker="REMOTE-1",
    )

    async def body(client: Client):
        args = {"task_description": "REMOTE-1 go", "work_dir": str(repo), "isolation": "worktree"}
        result = await call(client, "kimi_code_task", args)
        untouched = sorted(p.name for p in repo.iterdir())
        applied = await call(client, "kimi_apply", {"job_id": result["job_id"]})
        return result, untouched, applied, await call(client, "kimi_status", {})

    result, untouched, applied, status = served(kimi, redis_url, repo, tmp_path / "server.log", body)
    (listed,) = status["workers"]
    assert (listed["name"], listed["dialect"], listed["slots"]) == (worker.name, kimi.name, 2), listed
    assert status["broker"].startswith("127.0.0.1:") and "@" not in str(status)
    assert result["success"] is True and result["output"] == "done remotely", result
    assert result["worker"] == worker.name and result["files_created"] == ["new.txt"]
    assert result["file_contents"]["new.txt"] == "made on a worker\n"
    assert "+made on a worker" in result["diff"] and result["worktree"]["files_changed"] == 1
    assert "new.txt" not in untouched  # the user's tree waits for kimi_apply
    assert applied["success"] is True and (repo / "new.txt").read_text() == "made on a worker\n"
    checkouts = list((worker.state / "checkouts").glob("*/tree"))
    assert checkouts and not any((c / "debug.log").exists() for c in checkouts)  # ignored files stay home
    assert (checkouts[0] / "app.py").read_text() == "ONE\ntwo\n"
    assert git(repo, "status", "--porcelain") == " M app.py\n?? new.txt\n"


def test_a_plain_job_is_applied_when_it_returns_and_a_tree_outside_git_runs_here(
    kimi: KimiUnderTest, fake: FakeMoonshot, worker: Worker, redis_url: str, tmp_path: Path
) -> None:
    repo = committed_repo(tmp_path / "repo", {"app.py": "x = 1\n"})
    plain = tmp_path / "plain"
    plain.mkdir()
    fake.script([Reply.tool(*kimi.write("a.txt", "A\n")), Reply.text_reply("ok a")], marker="REMOTE-A")
    fake.script([Reply.tool(*kimi.write("b.txt", "B\n")), Reply.text_reply("ok b")], marker="REMOTE-B")

    async def body(client: Client):
        on_worker = await call(
            client, "kimi_code_task", {"task_description": "REMOTE-A", "work_dir": str(repo)}
        )
        here = await call(client, "kimi_code_task", {"task_description": "REMOTE-B", "work_dir": str(plain)})
        return on_worker, here

    on_worker, here = served(kimi, redis_url, repo, tmp_path / "server.log", body)
    assert on_worker["success"] is True and on_worker["worker"] == worker.name, on_worker
    assert (repo / "a.txt").read_text() == "A\n" and on_worker["files_created"] == ["a.txt"]
    assert any("Applied to your tree" in note for note in on_worker["notes"])
    assert here["success"] is True and here["worker"] is None and (plain / "b.txt").read_text() == "B\n"
    assert any("not on a worker" in note for note in here["notes"]), here["notes"]


def test_an_unreachable_broker_is_a_clear_error_and_an_open_one_is_refused(
    kimi: KimiUnderTest, tmp_path: Path
) -> None:
    repo = committed_repo(tmp_path / "repo", {"app.py": "x = 1\n"})
    nobody = f"redis://:pw@127.0.0.1:{free_port()}/0"

    async def body(client: Client):
        return await call(client, "kimi_code_task", {"task_description": "never", "work_dir": str(repo)})

    failed = served(kimi, nobody, repo, tmp_path / "server.log", body)
    assert failed["success"] is False and failed["error"]["type"] == "broker", failed
    assert failed["error"]["retryable"] is True and ":pw@" not in str(failed)
    env = {**kimi.env, "KIMI_MCP_BROKER": "redis://10.9.8.7:6379/0"}
    refused = subprocess.run(
        [SERVER], env=env, capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL
    )
    assert refused.returncode == 2 and "must have a password" in refused.stderr
    worker = subprocess.run([SERVER, "worker"], env=env, capture_output=True, text=True, timeout=60)
    assert worker.returncode == 2 and "must have a password" in worker.stderr
    assert os.environ.get("KIMI_MCP_BROKER") is None
