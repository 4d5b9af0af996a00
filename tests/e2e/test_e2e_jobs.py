"""Jobs and follow-ups end to end (real client → real server → real Kimi, both dialects): ``wait_s`` and
``kimi_job``, ``kimi_continue`` into the live Kimi and through Kimi's resume path, results across a
server restart, a conversation continued after its server was killed mid-turn, cancellation, two servers
on one job store, and a read-only conversation staying so."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import time
from pathlib import Path

import psutil
import pytest
from fake_moonshot import FakeMoonshot, Reply
from fastmcp import Client
from kimi_env import KimiUnderTest
from mcp_helpers import processes_with_home, transport, with_client

pytestmark = pytest.mark.e2e


def run(kimi: KimiUnderTest, workspace: Path, log: Path, body):
    return asyncio.run(with_client(kimi.env, workspace, log, body))


async def call(client: Client, tool: str, args: dict) -> dict:
    result = await client.call_tool(tool, args, raise_on_error=False)
    return result.structured_content


@pytest.mark.parametrize(
    "kimi", ["kimi-code"], indirect=True
)  # one dialect: the job layer's, above the runner
def test_wait_s_zero_returns_running_then_kimi_job_returns_the_exact_changes(
    kimi: KimiUnderTest, fake: FakeMoonshot, workspace: Path, tmp_path: Path
):
    (workspace / "keep.txt").write_text("unchanged\n")
    fake.script(
        [Reply.tool(*kimi.write("made.txt", "made\n")), Reply.text_reply("all done " * 40, token_delay=0.05)],
        marker="SLOW-TASK",
    )

    async def body(client: Client):
        started = time.monotonic()
        first = await call(client, "kimi_code_task", {"task_description": "SLOW-TASK", "wait_s": 0})
        returned_after = time.monotonic() - started
        done = await call(client, "kimi_job", {"job_id": first["job_id"], "wait_s": 120})
        listed = await call(client, "kimi_jobs", {})
        return first, returned_after, done, listed

    first, returned_after, done, listed = run(kimi, workspace, tmp_path / "server.log", body)
    assert first["status"] in ("queued", "starting", "running") and first["job_id"] and first["error"] is None
    assert returned_after < done["duration_s"]  # it came back before the turn ended
    assert done["status"] == "done" and done["success"] is True and done["job_id"] == first["job_id"]
    assert (
        done["files_created"] == ["made.txt"] and done["files_modified"] == [] and done["files_deleted"] == []
    )
    assert done["file_contents"] == {"made.txt": "made\n"} and done["output"].startswith("all done")
    assert listed["jobs"][0]["job_id"] == first["job_id"] and listed["jobs"][0]["status"] == "done"
    assert not processes_with_home(kimi.home)


def test_kimi_continue_follows_up_in_the_live_kimi(
    kimi: KimiUnderTest, fake: FakeMoonshot, workspace: Path, tmp_path: Path
):
    fake.script(
        [Reply.tool(*kimi.write("one.txt", "1\n")), Reply.text_reply("first done")], marker="FIRST-7Q"
    )
    fake.script(
        [Reply.tool(*kimi.write("two.txt", "2\n")), Reply.text_reply("second done", requires="FIRST-7Q")],
        marker="FOLLOW-UP-3Z",
    )

    async def body(client: Client):
        first = await call(client, "kimi_code_task", {"task_description": "FIRST-7Q write one.txt"})
        second = await call(
            client, "kimi_continue", {"session_id": first["session_id"], "message": "FOLLOW-UP-3Z"}
        )
        return first, second

    first, second = run(kimi, workspace, tmp_path / "server.log", body)
    assert first["success"] and first["session_id"], first
    assert second["success"] is True, second
    assert second["output"] == "second done"  # the fake answers so only when the first turn is in the history
    assert second["session_id"] == first["session_id"] and second["warm_start"] is True
    assert second["files_created"] == ["two.txt"] and second["files_modified"] == []  # this turn only
    assert not processes_with_home(kimi.home)


def test_kimi_continue_resumes_a_conversation_whose_kimi_has_exited(
    kimi: KimiUnderTest, fake: FakeMoonshot, workspace: Path, tmp_path: Path
):
    kimi.env["KIMI_MCP_SESSION_IDLE"] = "1"
    fake.script([Reply.text_reply("first done")], marker="FIRST-8R")
    fake.script(
        [Reply.tool(*kimi.write("two.txt", "2\n")), Reply.text_reply("resumed done", requires="FIRST-8R")],
        marker="AGAIN-4K",
    )

    async def body(client: Client):
        first = await call(client, "kimi_code_task", {"task_description": "FIRST-8R"})
        await asyncio.sleep(4)  # the live Kimi expires after 1 s and exits
        second = await call(
            client, "kimi_continue", {"session_id": first["session_id"], "message": "AGAIN-4K"}
        )
        return first, second

    first, second = run(kimi, workspace, tmp_path / "server.log", body)
    assert first["success"], first
    assert second["success"] is True, second
    assert second["output"] == "resumed done" and second["warm_start"] is False
    assert second["session_id"] == first["session_id"]
    assert second["files_created"] == ["two.txt"]
    assert not processes_with_home(kimi.home)


@pytest.mark.parametrize(
    "kimi", ["kimi-code"], indirect=True
)  # one dialect: the job store's, above the runner
def test_results_survive_a_restart_and_a_job_running_at_exit_is_interrupted(
    kimi: KimiUnderTest, fake: FakeMoonshot, workspace: Path, tmp_path: Path
):
    fake.script([Reply.tool(*kimi.write("a.txt", "a\n")), Reply.text_reply("quick done")], marker="QUICK-1")
    fake.script([Reply.tool(*kimi.write("b.txt", "b\n")), Reply.hang()], marker="HANGS-2")

    async def first_server(client: Client):
        done = await call(client, "kimi_code_task", {"task_description": "QUICK-1"})
        running = await call(client, "kimi_code_task", {"task_description": "HANGS-2", "wait_s": 0})
        for _ in range(200):  # until Kimi has written b.txt and waits on the model
            if (workspace / "b.txt").exists():
                break
            await asyncio.sleep(0.1)
        return done, running

    done, running = run(kimi, workspace, tmp_path / "one.log", first_server)
    assert not processes_with_home(kimi.home)

    async def second_server(client: Client):
        again = await call(client, "kimi_job", {"job_id": done["job_id"], "action": "status"})
        lost = await call(client, "kimi_job", {"job_id": running["job_id"]})
        return again, lost

    again, lost = run(kimi, workspace, tmp_path / "two.log", second_server)
    assert done["status"] == "done" and again == done
    assert lost["status"] == "interrupted" and lost["error"]["type"] == "session"
    assert "kimi_continue" in lost["error"]["suggestion"]


def test_a_job_whose_server_was_killed_mid_turn_can_be_continued(
    kimi: KimiUnderTest, fake: FakeMoonshot, workspace: Path, tmp_path: Path
):
    """Issue 29 item 8: a job records Kimi's session id as soon as Kimi has one (Kimi Code makes it at the
    first message), so a turn whose server was SIGKILLed is ``interrupted`` with its conversation, which
    ``kimi_continue`` resumes after a restart."""
    fake.script([Reply.tool(*kimi.write("b.txt", "b\n")), Reply.hang()], marker="HANGS-9K")
    fake.script([Reply.text_reply("continued", requires="HANGS-9K")], marker="AGAIN-5M")
    started: dict[str, str] = {}

    async def first_server(client: Client):
        running = await call(client, "kimi_code_task", {"task_description": "HANGS-9K", "wait_s": 0})
        started["job_id"] = running["job_id"]
        for _ in range(300):  # until Kimi has written b.txt and waits on the model
            if (workspace / "b.txt").exists():
                break
            await asyncio.sleep(0.1)
        server = next(
            p for p in psutil.Process().children(recursive=True) if "kimi-mcp" in " ".join(p.cmdline())
        )
        os.kill(server.pid, signal.SIGKILL)

    with contextlib.suppress(Exception):  # the client sees its server vanish
        run(kimi, workspace, tmp_path / "one.log", first_server)
    assert (workspace / "b.txt").exists() and started
    for proc in processes_with_home(kimi.home):  # Kimi lost its terminal with the server: it exits
        proc.wait(timeout=15)

    async def second_server(client: Client):
        lost = await call(client, "kimi_job", {"job_id": started["job_id"]})
        again = await call(client, "kimi_continue", {"session_id": lost["session_id"], "message": "AGAIN-5M"})
        return lost, again

    lost, again = run(kimi, workspace, tmp_path / "two.log", second_server)
    assert lost["status"] == "interrupted" and lost["session_id"], lost
    assert again["success"] is True and again["output"] == "continued", (
        again
    )  # the killed turn is its history
    assert again["session_id"] == lost["session_id"]
    assert not processes_with_home(kimi.home)


def test_cancel_returns_the_partial_changes_and_leaves_no_process(
    kimi: KimiUnderTest, fake: FakeMoonshot, workspace: Path, tmp_path: Path
):
    fake.script([Reply.tool(*kimi.write("part.txt", "p\n")), Reply.hang()], marker="CANCEL-ME")

    async def body(client: Client):
        first = await call(client, "kimi_code_task", {"task_description": "CANCEL-ME", "wait_s": 0})
        for _ in range(300):
            status = await call(client, "kimi_job", {"job_id": first["job_id"], "action": "status"})
            if status["progress"] and "part.txt" in status["progress"]["files_changed"]:
                break
            await asyncio.sleep(0.1)
        cancelled = await call(client, "kimi_job", {"job_id": first["job_id"], "action": "cancel"})
        return status, cancelled

    status, cancelled = run(kimi, workspace, tmp_path / "server.log", body)
    assert status["status"] == "running" and status["progress"]["files_changed"] == ["part.txt"]
    assert cancelled["status"] == "cancelled" and cancelled["error"]["type"] == "cancelled"
    assert cancelled["files_created"] == ["part.txt"]
    assert not processes_with_home(kimi.home)


@pytest.mark.parametrize("kimi", ["kimi-code"], indirect=True)  # the store does not depend on the dialect
def test_two_servers_share_one_job_store(
    kimi: KimiUnderTest, fake: FakeMoonshot, workspace: Path, tmp_path: Path
):
    fake.script(
        [Reply.tool(*kimi.write("s.txt", "s\n")), Reply.text_reply("shared done " * 30, token_delay=0.05)],
        marker="SHARED-5",
    )

    async def body():
        async with (
            Client(transport(kimi.env, workspace, tmp_path / "a.log"), timeout=600) as a,
            Client(transport(kimi.env, workspace, tmp_path / "b.log"), timeout=600) as b,
        ):
            started = await call(a, "kimi_code_task", {"task_description": "SHARED-5", "wait_s": 0})
            seen = await call(b, "kimi_jobs", {})
            from_b = await call(b, "kimi_job", {"job_id": started["job_id"], "wait_s": 120})
            from_a = await call(a, "kimi_job", {"job_id": started["job_id"], "action": "status"})
            return started, seen, from_b, from_a

    started, seen, from_b, from_a = asyncio.run(body())
    assert seen["jobs"][0]["job_id"] == started["job_id"]
    assert from_b["status"] == "done" and from_b["files_created"] == ["s.txt"]
    assert from_b == from_a
    assert not processes_with_home(kimi.home)


@pytest.mark.parametrize("resumed", [False, True], ids=["live", "resumed"])
def test_a_read_only_conversation_stays_read_only(
    kimi: KimiUnderTest, fake: FakeMoonshot, workspace: Path, tmp_path: Path, resumed: bool
):
    if resumed:
        kimi.env["KIMI_MCP_MAX_LIVE_SESSIONS"] = "0"  # no live Kimi: the follow-up resumes the conversation
    (workspace / "a.py").write_text("print(1)\n")
    fake.script([Reply.text_reply('{"analysis": "fine", "suggestions": []}')], marker="ANALYSE-6")
    attempts = [kimi.write("evil.txt", "x\n"), kimi.shell("touch evil2.txt")]
    fake.script(
        [Reply.tools(attempts), Reply.text_reply("tried", requires="ANALYSE-6")], marker="NOW-WRITE-6"
    )

    async def body(client: Client):
        first = await call(
            client, "kimi_analyze_code", {"file_paths": ["a.py"], "analysis_focus": "ANALYSE-6"}
        )
        second = await call(
            client, "kimi_continue", {"session_id": first["session_id"], "message": "NOW-WRITE-6"}
        )
        return first, second

    first, second = run(kimi, workspace, tmp_path / "server.log", body)
    assert first["success"] and first["session_id"], first
    assert second["session_id"] == first["session_id"]
    assert second["output"] == "tried"  # the same conversation (the fake answers so only then)
    assert second["warm_start"] is not resumed
    assert not (workspace / "evil.txt").exists() and not (workspace / "evil2.txt").exists()
    assert second["files_created"] == [] and second["files_modified"] == []
    runs = {c["name"]: c for c in second["evidence"]["tools_run"]}
    assert set(runs) == {kimi.write_tool, kimi.shell_tool}
    assert all(c["is_error"] for c in runs.values())  # Kimi's plan mode or our rejection refused both
    assert runs[kimi.shell_tool]["approval"] == "rejected"
