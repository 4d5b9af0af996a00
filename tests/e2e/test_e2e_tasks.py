"""MCP tasks over stdio with real clients and the real Kimi: ``fastmcp.Client`` (with the tasks extension)
creates a task, polls its progress and cancels it; a client that goes away (stdin closed) while a task runs
does not keep the server: the job is recorded ``interrupted`` and nothing of Kimi is left."""

from __future__ import annotations

import asyncio
import json
import subprocess
import time
from pathlib import Path

import pytest
from claude_code import processes_of, wait_until_gone
from fake_moonshot import FakeMoonshot, Reply
from fastmcp import Client
from kimi_env import KimiUnderTest
from mcp_helpers import SERVER, transport
from task_client import call_tool_task, tasks_extension

from kimi_mcp.jobs import STORE_FILE, JobStore

pytestmark = pytest.mark.e2e

HELLO = "print('hello')\n"
#: what a 2026-07-28 client puts in every request's _meta (as fastmcp.Client 4.1.2 sends it)
MODERN_META = {
    "io.modelcontextprotocol/protocolVersion": "2026-07-28",
    "io.modelcontextprotocol/clientInfo": {"name": "raw", "version": "0"},
    "io.modelcontextprotocol/clientCapabilities": {"extensions": {"io.modelcontextprotocol/tasks": {}}},
}


@pytest.fixture
def env(kimi: KimiUnderTest, fake: FakeMoonshot, tmp_path: Path) -> dict[str, str]:
    """The server's environment; no standby Kimi, so every Kimi process is the job's. Kimi writes hello.py,
    then sleeps in a shell command until it is stopped."""
    fake.script(
        [
            Reply.tool(*kimi.write("hello.py", HELLO)),
            Reply.tool(*kimi.shell("sleep 300")),
            Reply.text_reply("Never reached."),
        ]
    )
    return {**kimi.env, "KIMI_MCP_STANDBY": "off", "KIMI_MCP_STATE_DIR": str(tmp_path / "state")}


def stored(env: dict[str, str], job_id: str):
    store = JobStore(Path(env["KIMI_MCP_STATE_DIR"]) / STORE_FILE)
    try:
        return store.get(job_id)
    finally:
        store.close()


def wait_for(done, timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while not done():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.1)


def test_fastmcp_client_creates_polls_and_cancels_a_task(
    kimi: KimiUnderTest, env: dict[str, str], workspace: Path, tmp_path: Path
):
    async def body():
        async with Client(
            transport(env, workspace, tmp_path / "server.log"), extensions=[tasks_extension()]
        ) as c:
            args = {"task_description": "Create hello.py, then wait", "work_dir": str(workspace)}
            task = await call_tool_task(c, "kimi_code_task", args)
            seen = []
            while not (workspace / "hello.py").exists() or "changed so far: hello.py" not in seen[-1]:
                seen.append((await task.status()).status_message or "")
                await asyncio.sleep(0.2)
            await (
                task.cancel()
            )  # acknowledged once the job stopped, or after 3 s (a loaded machine's Kimi is slower)
            final = await task.status()
            deadline = time.monotonic() + 60
            while final.status == "working" and time.monotonic() < deadline:
                await asyncio.sleep(0.2)
                final = await task.status()
            return task, seen, final

    task, seen, final = asyncio.run(body())
    assert task.task_id.startswith("job_") and seen[-1].endswith(f"job {task.task_id}")
    assert any(kimi.write_tool in message or kimi.shell_tool in message for message in seen), seen
    assert final.status == "cancelled"
    job = stored(env, task.task_id)
    assert job.status == "cancelled" and job.result["files_created"] == ["hello.py"]
    assert (workspace / "hello.py").read_text() == HELLO
    assert wait_until_gone(kimi.home) == []


@pytest.mark.parametrize("kimi", ["kimi-code"], indirect=True)  # the task layer's (cancel: the test above)
def test_a_client_gone_mid_task_stops_the_job_and_the_server(
    kimi: KimiUnderTest, env: dict[str, str], workspace: Path
):
    """Raw JSON-RPC, so that nothing but the closed stdin tells the server to go (an SDK client would also
    terminate it after a grace period)."""
    proc = subprocess.Popen(
        [SERVER], env=env, cwd=workspace, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL, text=True,
    )  # fmt: skip
    try:
        args = {"task_description": "Create hello.py, then wait", "work_dir": str(workspace)}
        for message in (
            {"jsonrpc": "2.0", "id": 1, "method": "server/discover", "params": {"_meta": MODERN_META}},
            {
                "jsonrpc": "2.0", "id": 2, "method": "tools/call",
                "params": {"name": "kimi_code_task", "arguments": args, "_meta": MODERN_META},
            },
        ):  # fmt: skip
            proc.stdin.write(json.dumps(message) + "\n")
            proc.stdin.flush()
        replies = [json.loads(proc.stdout.readline()) for _ in range(2)]
        created = next(r for r in replies if r.get("id") == 2)["result"]
        assert created["resultType"] == "task" and created["status"] == "working", created
        wait_for(lambda: (workspace / "hello.py").exists())
        time.sleep(1.0)  # Kimi went on to its `sleep 300`
        assert any("sleep 300" in " ".join(p.cmdline()) for p in processes_of(kimi.home))
        closed = time.monotonic()
        proc.stdin.close()
        proc.wait(timeout=60)  # it does not wait for the task (its Kimi would sleep for 300 s)
        took = time.monotonic() - closed
    finally:
        proc.kill()
    print(f"server exit after stdin closed: {took:.2f} s")
    job = stored(env, created["taskId"])
    assert job.status == "interrupted" and job.result["error"]["retryable"] is True
    assert wait_until_gone(kimi.home, timeout=10) == []


@pytest.mark.parametrize("kimi", ["legacy"], indirect=True)  # the task layer's: above the runner
def test_kimi_wait_runs_as_a_task_and_completes_with_the_groups_results(
    kimi: KimiUnderTest, fake: FakeMoonshot, workspace: Path, tmp_path: Path
):
    """A Kimi call started as a task (its job in group "pair"), then ``kimi_wait`` on the group as a task
    of its own: working while Kimi works, completed with the job's whole result once it is done."""
    fake.script(
        [Reply.tool(*kimi.write("pair.txt", "one\n")), Reply.text_reply("pair done " * 20, token_delay=0.05)]
    )
    env = {**kimi.env, "KIMI_MCP_STANDBY": "off", "KIMI_MCP_STATE_DIR": str(tmp_path / "state")}

    async def body():
        async with Client(
            transport(env, workspace, tmp_path / "server.log"), extensions=[tasks_extension()]
        ) as c:
            args = {"task_description": "Write pair.txt", "work_dir": str(workspace), "group": "pair"}
            job = await call_tool_task(c, "kimi_code_task", args)
            wait = await call_tool_task(c, "kimi_wait", {"group": "pair", "until": "all", "wait_s": 300})
            working = await wait.status()
            result = await wait.result()
            return job, wait, working, result

    job, wait, working, result = asyncio.run(body())
    assert wait.task_id.startswith("wait-") and working.status == "working", working  # Kimi was starting
    assert working.status_message == "0 of 1 jobs finished"
    reply = result.structured_content
    assert result.is_error is False and reply["timed_out"] is False and reply["pending"] == []
    (finished,) = reply["finished"]
    assert finished["job_id"] == job.task_id and finished["group"] == "pair"
    assert finished["files_created"] == ["pair.txt"] and finished["output"].startswith("pair done")
    assert wait_until_gone(kimi.home) == []
