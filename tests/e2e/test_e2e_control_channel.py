"""The control channel's promises end to end (real client → real server → real Kimi, the fake API): a
``kimi_continue`` queued on a running job brings its own ``approvals`` and ``max_tokens`` to the turn it
becomes; an answer names its question, so a late answer never picks an option of the next panel; a client
reaches only the jobs in its roots, also a job of another server sharing the store."""

from __future__ import annotations

import asyncio
import dataclasses
from pathlib import Path
from typing import Any

import pytest
from fake_moonshot import COLOUR, FakeMoonshot, Reply
from fastmcp import Client
from fastmcp.client.transports import StdioTransport
from kimi_env import KimiUnderTest
from mcp_helpers import SERVER, processes_with_home, transport

pytestmark = pytest.mark.e2e


async def call(client: Client, tool: str, args: dict) -> dict:
    return (await client.call_tool(tool, args, raise_on_error=False)).structured_content


async def session_of(client: Client, job_id: str) -> str:
    """The running job's session id, as soon as the job knows it."""
    while (status := await call(client, "kimi_job", {"job_id": job_id, "action": "status"}))[
        "session_id"
    ] is None:
        await asyncio.sleep(0.05)
    return status["session_id"]


def test_a_queued_follow_up_asks_its_approvals_and_a_late_answer_is_refused(
    kimi: KimiUnderTest, fake: FakeMoonshot, workspace: Path, tmp_path: Path
) -> None:
    """The job runs with approvals by policy and waits on Kimi's question; a follow-up queued on it with
    ``approvals="ask"`` makes its shell command wait for the caller (before, it ran unasked). An answer
    for the question already answered (``question_id``) is refused: it would otherwise pick "approve"."""
    fake.script([Reply.tool("AskUserQuestion", COLOUR), Reply.text_reply("first")], marker="QF-1")
    fake.script([Reply.tool(*kimi.shell("touch ran.txt")), Reply.text_reply("did not run it")], marker="QF-2")

    async def body(client: Client) -> list[dict[str, Any]]:
        waiting = await call(client, "kimi_code_task", {"task_description": "QF-1 pick a colour"})
        job = waiting["job_id"]
        follow = {"session_id": await session_of(client, job), "message": "QF-2 run it", "wait_s": 0}
        other = await call(client, "kimi_continue", {**follow, "model": "kimi-other-model"})
        queued = await call(client, "kimi_continue", {**follow, "approvals": "ask"})
        asked = waiting["question"]["id"]
        answer = {"job_id": job, "action": "answer", "wait_s": 120}
        approval = await call(client, "kimi_job", {**answer, "answer": "Red", "question_id": asked})
        late = await call(client, "kimi_job", {**answer, "answer": "approve", "question_id": asked})
        done = await call(client, "kimi_job", {**answer, "answer": "reject"})
        return [waiting, other, queued, approval, late, done]

    async def main() -> list[dict[str, Any]]:
        async with Client(transport(kimi.env, workspace, tmp_path / "server.log"), timeout=600) as client:
            return await body(client)

    waiting, other, queued, approval, late, done = asyncio.run(main())
    assert waiting["status"] == "waiting" and waiting["question"]["id"], waiting
    assert other["error"]["type"] == "bad_input" and "queued turn" in other["error"]["message"], other
    assert queued["error"] is None and queued["job_id"] == waiting["job_id"], queued
    assert approval["status"] == "waiting", approval
    question = approval["question"]
    assert question["kind"] == "approval" and "touch ran.txt" in question["text"], question
    assert question["id"] != waiting["question"]["id"]
    assert late["error"]["type"] == "bad_input", late
    assert "already answered or dismissed" in late["error"]["message"]
    assert done["status"] == "done" and done["output"] == "did not run it", done
    assert not (workspace / "ran.txt").exists()
    (message,) = done["messages"]
    assert message["mode"] == "queue" and message["text"].endswith("QF-2 run it")
    (shell,) = [tool for tool in done["evidence"]["tools_run"] if "touch ran.txt" in str(tool)]
    assert shell["approval"] == "rejected"
    assert not processes_with_home(kimi.home)


@pytest.mark.parametrize(
    "kimi", ["kimi-code"], indirect=True
)  # the runner's cap (the dialects' token counts: test_e2e_control)
def test_a_queued_follow_ups_max_tokens_stops_the_turn_it_becomes(
    kimi: KimiUnderTest, fake: FakeMoonshot, workspace: Path, tmp_path: Path
) -> None:
    """Each fake step reports 1020 tokens. The job has no limit; the follow-up queued on it says 1500: its
    turn writes one.txt and is stopped once its second step's usage is logged. Stopping rejects the
    approval panel two.txt's write shows, and Kimi asks the model again at once: the later replies stream
    for seconds, as a real model's would, so that request is what the interrupt stops (with the fake's
    instant replies Kimi got through three.txt's panel too before the key landed, under load)."""
    fake.script([Reply.tool(*kimi.shell("sleep 3")), Reply.text_reply("first")], marker="QT-1")
    slow = {"token_delay": 1.5, "text": "writing the next file, slowly"}  # two chunks: 3 s
    fake.script(
        [Reply.tool(*kimi.write(f"{n}.txt", "n\n")) for n in ("one", "two")]
        + [
            dataclasses.replace(Reply.tool(*kimi.write(f"{n}.txt", "n\n")), **slow) for n in ("three", "four")
        ],
        marker="QT-2",
    )

    async def main() -> tuple[dict, dict]:
        async with Client(transport(kimi.env, workspace, tmp_path / "server.log"), timeout=600) as client:
            first = await call(client, "kimi_code_task", {"task_description": "QT-1 wait", "wait_s": 0})
            follow = {"session_id": await session_of(client, first["job_id"]), "message": "QT-2 write"}
            done = await call(client, "kimi_continue", {**follow, "max_tokens": 1500, "wait_s": 120})
            return first, done

    first, done = asyncio.run(main())
    assert done["job_id"] == first["job_id"], done
    assert done["success"] is False and done["error"]["type"] == "budget", done
    assert "queued turn" in done["error"]["message"] and "1500" in done["error"]["message"]
    written = sorted(p.name for p in workspace.glob("*.txt"))
    assert written == ["one.txt"] or (kimi.name == "legacy" and written == ["one.txt", "two.txt"]), written
    assert fake.pending("QT-2") >= 1  # the turn was stopped: the model was never asked for its last step
    assert not processes_with_home(kimi.home)


def test_a_client_reaches_only_the_jobs_in_its_roots_also_of_another_server(
    legacy_env: dict[str, str], fake: FakeMoonshot, tmp_path: Path
) -> None:
    """Two servers share the job store. A job in ``theirs`` waits on Kimi's question; the client of the
    other server, whose roots are [``mine``], cannot steer it, answer it, cancel it or list it."""
    mine, theirs = tmp_path / "mine", tmp_path / "theirs"
    mine.mkdir()
    theirs.mkdir()
    fake.script([Reply.tool("AskUserQuestion", COLOUR), Reply.text_reply("answered")], marker="RT-1")

    def server(cwd: Path, log: str) -> StdioTransport:
        return StdioTransport(
            SERVER,
            [],
            env=legacy_env,
            cwd=str(cwd),
            keep_alive=False,
            log_file=open(tmp_path / log, "a"),  # noqa: SIM115
        )

    async def main() -> tuple[list[dict], dict, dict]:
        async with Client(server(theirs, "theirs.log"), timeout=600) as owner:
            waiting = await call(owner, "kimi_code_task", {"task_description": "RT-1 pick"})
            job = waiting["job_id"]
            async with Client(server(mine, "mine.log"), roots=[mine.as_uri()], timeout=600) as outsider:
                refused = [
                    await call(outsider, "kimi_steer", {"job_id": job, "message": "look elsewhere"}),
                    await call(outsider, "kimi_job", {"job_id": job, "action": "answer", "answer": "Red"}),
                    await call(outsider, "kimi_job", {"job_id": job, "action": "cancel"}),
                ]
                listed = await call(outsider, "kimi_jobs", {})
            done = await call(owner, "kimi_job", {"job_id": job, "action": "answer", "answer": "Blue"})
            return refused, listed, done

    refused, listed, done = asyncio.run(main())
    for result in refused:
        assert result["error"]["type"] == "bad_input", result
        assert "outside this client's roots" in result["error"]["message"]
    assert listed["success"] is True and listed["jobs"] == []
    assert done["status"] == "done" and done["output"] == "answered", done
    assert done["messages"] == []  # the outsider's steer never reached Kimi
