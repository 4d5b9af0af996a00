"""Standby Kimi end to end: the next call in the same workspace skips Kimi's startup, a standby that
would show the model a stale workspace is not used, and nothing outlives the server."""

from __future__ import annotations

import asyncio
import contextlib
import json
import signal
from pathlib import Path

import psutil
import pytest
from fake_moonshot import FakeMoonshot, Reply
from fastmcp import Client
from kimi_env import KimiUnderTest
from mcp_helpers import processes_with_home, transport, with_client

pytestmark = pytest.mark.e2e


def two_calls(kimi: KimiUnderTest, workspace: Path, tmp_path: Path, between=None) -> tuple[dict, dict]:
    async def body(client):
        first = await client.call_tool(
            "kimi_code_task", {"task_description": "FIRST task", "work_dir": str(workspace)}
        )
        if between is not None:
            between()
        second = await client.call_tool(
            "kimi_code_task", {"task_description": "SECOND task", "work_dir": str(workspace)}
        )
        return first.structured_content, second.structured_content

    return asyncio.run(with_client(kimi.env, workspace, tmp_path / "server.log", body))


@pytest.fixture(autouse=True)
def _the_products_default(kimi: KimiUnderTest) -> None:
    """The tests' base environment turns the standby off (tests/helpers/kimi_env.py): here it is the subject,
    so each test starts from the product's default (a test of another setting sets its own)."""
    kimi.env["KIMI_MCP_STANDBY"] = "after-call"


def test_next_call_uses_the_standby_and_reports_its_own_changes(
    kimi: KimiUnderTest, fake: FakeMoonshot, workspace: Path, tmp_path: Path
):
    fake.script([Reply.tool(*kimi.write("one.txt", "1\n")), Reply.text_reply("first done")], marker="FIRST")
    fake.script([Reply.tool(*kimi.write("two.txt", "2\n")), Reply.text_reply("second done")], marker="SECOND")
    first, second = two_calls(kimi, workspace, tmp_path)
    assert first["success"] and first["warm_start"] is False
    assert first["files_created"] == ["one.txt"] and first["output"] == "first done"
    assert second["success"] is True, second
    assert second["warm_start"] is True
    assert second["output"] == "second done"
    assert second["files_created"] == ["two.txt"] and second["files_modified"] == []
    assert second["file_contents"] == {"two.txt": "2\n"}
    assert [c["name"] for c in second["evidence"]["tools_run"]] == [kimi.write_tool]
    assert second["session_id"] and second["session_id"] != first["session_id"]
    # the standby saw the first call's file in its listing (legacy lists at startup, Kimi Code at the
    # first message), so the model's view of the workspace is current
    second_request = json.dumps(fake.chat_requests()[2]["body"]["messages"])
    assert "SECOND task" in second_request and "one.txt" in second_request
    assert (workspace / "two.txt").read_text() == "2\n"
    assert not processes_with_home(kimi.home), "a standby or exiting Kimi outlived the server"


def test_edited_agents_md_means_a_fresh_kimi(
    kimi: KimiUnderTest, fake: FakeMoonshot, workspace: Path, tmp_path: Path
):
    (workspace / "AGENTS.md").write_text("Rule: OLD-RULE-7.\n")
    fake.script([Reply.text_reply("first done")], marker="FIRST")
    fake.script([Reply.text_reply("second done")], marker="SECOND")

    def edit() -> None:
        (workspace / "AGENTS.md").write_text("Rule: NEW-RULE-9.\n")

    first, second = two_calls(kimi, workspace, tmp_path, between=edit)
    assert first["success"] and second["success"]
    assert second["warm_start"] is False
    requests = [json.dumps(r["body"]["messages"]) for r in fake.chat_requests()]
    assert "OLD-RULE-7" in requests[0]
    assert "NEW-RULE-9" in requests[1] and "OLD-RULE-7" not in requests[1]
    assert not processes_with_home(kimi.home)


@pytest.mark.parametrize("kimi", ["kimi-code"], indirect=True)  # dialect-independent behaviour
def test_standby_off(kimi: KimiUnderTest, fake: FakeMoonshot, workspace: Path, tmp_path: Path):
    kimi.env["KIMI_MCP_STANDBY"] = "off"
    fake.script([Reply.text_reply("first done")], marker="FIRST")
    fake.script([Reply.text_reply("second done")], marker="SECOND")
    first, second = two_calls(kimi, workspace, tmp_path)
    assert first["output"] == "first done" and second["output"] == "second done"
    assert first["warm_start"] is False and second["warm_start"] is False
    assert "startup" in second["timings"] and second["timings"]["startup"] > 0
    assert not processes_with_home(kimi.home)


@pytest.mark.parametrize("kimi", ["kimi-code"], indirect=True)  # dialect-independent behaviour
def test_sigterm_stops_the_standby_and_the_exiting_kimi(
    kimi: KimiUnderTest, fake: FakeMoonshot, workspace: Path, tmp_path: Path
):
    fake.script([Reply.tool(*kimi.write("one.txt", "1\n")), Reply.text_reply("first done")])
    seen: dict = {}

    async def body(client):
        result = await client.call_tool(
            "kimi_code_task", {"task_description": "FIRST task", "work_dir": str(workspace)}
        )
        seen["result"] = result.structured_content
        server = next(
            p for p in psutil.Process().children(recursive=True) if "kimi-mcp" in " ".join(p.cmdline()[:2])
        )
        seen["kimi_before"] = len(processes_with_home(kimi.home))  # the standby (and maybe the exiting one)
        server.send_signal(signal.SIGTERM)
        with contextlib.suppress(psutil.TimeoutExpired):
            server.wait(timeout=15)  # the exit status goes to the client's own process watcher
        try:
            seen["server_gone"] = server.status() == psutil.STATUS_ZOMBIE
        except psutil.NoSuchProcess:
            seen["server_gone"] = True
        seen["left"] = processes_with_home(kimi.home)

    with contextlib.suppress(Exception):  # the client notices its server is gone when it closes
        asyncio.run(with_client(kimi.env, workspace, tmp_path / "server.log", body))
    assert seen["result"]["success"] and seen["result"]["files_created"] == ["one.txt"]
    assert seen["kimi_before"] >= 1, "a standby Kimi should be running after the call"
    assert seen["server_gone"], "the server must exit on SIGTERM even while its client is connected"
    assert seen["left"] == [], f"Kimi processes outlived a SIGTERM'd server: {seen['left']}"


@pytest.mark.parametrize("kimi", ["kimi-code"], indirect=True)  # dialect-independent behaviour
def test_standby_at_startup_serves_the_first_call(
    kimi: KimiUnderTest, fake: FakeMoonshot, workspace: Path, tmp_path: Path
):
    kimi.env["KIMI_MCP_STANDBY"] = "startup"  # the server's directory is the workspace (with_client's cwd)
    fake.script([Reply.tool(*kimi.write("first.txt", "1\n")), Reply.text_reply("first done")])

    async def body(client):
        result = await client.call_tool(
            "kimi_code_task", {"task_description": "FIRST task", "work_dir": str(workspace)}
        )
        return result.structured_content

    data = asyncio.run(with_client(kimi.env, workspace, tmp_path / "server.log", body))
    assert data["success"] is True and data["warm_start"] is True
    assert data["files_created"] == ["first.txt"] and data["file_contents"] == {"first.txt": "1\n"}
    assert not processes_with_home(kimi.home)


@pytest.mark.parametrize("kimi", ["legacy"], indirect=True)  # what is relayed does not depend on the dialect
def test_the_client_hears_of_a_misspelt_variable_and_of_the_standby_used(
    kimi: KimiUnderTest, fake: FakeMoonshot, workspace: Path, tmp_path: Path
):
    """Important events also reach the MCP client as log notifications (stderr keeps everything)."""
    fake.script([Reply.text_reply("first done")], marker="FIRST")
    fake.script([Reply.text_reply("second done")], marker="SECOND")
    heard: list[tuple[str, str]] = []

    async def on_log(message) -> None:
        data = message.data
        heard.append((message.level, data.get("msg", str(data)) if isinstance(data, dict) else str(data)))

    async def body(_client):
        async with Client(
            transport({**kimi.env, "KIMI_MCP_TIMOUT": "5"}, workspace, tmp_path / "server.log"),
            log_handler=on_log, timeout=300,
        ) as client:  # fmt: skip
            await client.call_tool("kimi_status", {})
            for task in ("FIRST task", "SECOND task"):
                await client.call_tool(
                    "kimi_code_task", {"task_description": task, "work_dir": str(workspace)}
                )

    asyncio.run(body(None))
    warning = "KIMI_MCP_TIMOUT is not a kimi-mcp setting and is ignored; did you mean KIMI_MCP_TIMEOUT?"
    assert heard.count(("warning", warning)) == 1, heard  # stdio has one client: it hears it once
    assert heard.count(("info", f"using the standby Kimi for {workspace}")) == 1, heard
    assert not processes_with_home(kimi.home)


def test_a_first_call_sent_while_the_server_loads_takes_the_kimi_started_for_it_then(
    kimi: KimiUnderTest, fake: FakeMoonshot, workspace: Path, tmp_path: Path
):
    """A client connecting to a server started before answers from the fast connect's record (a first session
    records it), and its first call reaches the relay while the server still imports the MCP SDK: that
    call's Kimi starts then, and the call, once the server reads it, takes it. Its result is the call's own."""
    log = tmp_path / "server.log"

    async def connect(client: Client) -> int:
        return len(await client.list_tools())

    assert asyncio.run(with_client(kimi.env, workspace, log, connect)) == 16  # records the handshake
    fake.script([Reply.tool(*kimi.write("one.txt", "1\n")), Reply.text_reply("first done")], marker="FIRST")

    async def body(client: Client) -> dict:
        arguments = {"task_description": "FIRST task", "work_dir": str(workspace)}
        return (await client.call_tool("kimi_code_task", arguments)).structured_content

    first = asyncio.run(with_client(kimi.env, workspace, log, body))
    assert first["success"] is True and first["warm_start"] is True, first
    assert first["files_created"] == ["one.txt"] and first["output"] == "first done"
    said = log.read_text()
    assert "a first call came while the server loads" in said and "using the standby Kimi" in said
    assert len(fake.chat_requests()) == 2  # the write, then the answer: one turn, nothing else asked
    assert not processes_with_home(kimi.home), "a standby or exiting Kimi outlived the server"


def test_by_default_the_3_newest_conversations_stay_live_with_1_standby_and_the_oldest_resumes(
    kimi: KimiUnderTest, fake: FakeMoonshot, tmp_path: Path
):
    """Calls in 4 workspaces: kimi_status then counts 3 live conversations and 1 standby (the memory policy's
    defaults); a follow-up on the newest is typed into its live Kimi, one on the oldest resumes it."""
    works = []
    for name in ("w1", "w2", "w3", "w4"):
        (tmp_path / name).mkdir()
        works.append(tmp_path / name)

    async def body(client: Client) -> tuple[dict, dict, dict]:
        sessions = []
        for index, work in enumerate(works):
            fake.script([Reply.text_reply(f"done {index}")], marker=f"TASK-{index}")
            arguments = {"task_description": f"TASK-{index}", "work_dir": str(work)}
            sessions.append(
                (await client.call_tool("kimi_code_task", arguments)).structured_content["session_id"]
            )
        status = (await client.call_tool("kimi_status", {})).structured_content
        fake.script([Reply.text_reply("newest again")], marker="AGAIN-NEW")
        newest = await client.call_tool("kimi_continue", {"session_id": sessions[-1], "message": "AGAIN-NEW"})
        fake.script([Reply.text_reply("oldest again")], marker="AGAIN-OLD")
        oldest = await client.call_tool("kimi_continue", {"session_id": sessions[0], "message": "AGAIN-OLD"})
        return status, newest.structured_content, oldest.structured_content

    status, newest, oldest = asyncio.run(with_client(kimi.env, works[0], tmp_path / "server.log", body))
    assert (status["live_sessions"], status["standbys"]) == (3, 1), status
    assert newest["success"] and newest["warm_start"] is True and newest["output"] == "newest again"
    assert oldest["success"] and oldest["warm_start"] is False and oldest["output"] == "oldest again"
    assert not processes_with_home(kimi.home), "a standby or a live Kimi outlived the server"
