"""The hostile texts of the first message's corpus (tests/e2e/test_e2e_prompt_integrity.py) through the
channels that type caller text into a *running* Kimi: an answer to Kimi's question, a ``kimi_steer`` into the
running turn, a ``kimi_continue`` queued as its next turn. Nothing executes, nothing reaches another job,
and each text arrives exactly (the documented visible stand-ins aside; an answer on one line) or is refused
at once, saying why."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from fake_moonshot import COLOUR, FakeMoonshot, Reply
from fastmcp import Client
from kimi_env import KimiUnderTest
from mcp_helpers import processes_with_home, transport
from test_e2e_control import answered_with
from test_e2e_prompt_integrity import hostile, seen, user_messages

pytestmark = pytest.mark.e2e

LONG, SHORT = "L" * 3000, "L" * 30  # an answer takes at most 2,000 characters: the corpus's long line, cut


async def call(client: Client, tool: str, args: dict) -> dict:
    return (await client.call_tool(tool, args, raise_on_error=False)).structured_content


def test_hostile_answers_steers_and_queued_follow_ups_arrive_whole_and_run_nothing(
    kimi: KimiUnderTest, fake: FakeMoonshot, workspace: Path, tmp_path: Path
) -> None:
    canary = tmp_path / "outside"
    canary.mkdir()
    tab = "\t" if kimi.name == "legacy" else "\u21e5"
    answer = hostile("ANSWER-T", canary).replace(LONG, SHORT)
    steer, queued = hostile("STEER-T", canary), hostile("QUEUED-T", canary)
    fake.script(
        [
            Reply.tool("AskUserQuestion", COLOUR),
            Reply.tool(*kimi.shell("sleep 4")),
            Reply.text_reply("unused"),
        ],
        marker="HOSTILE-A",
    )
    fake.script([Reply.text_reply("steered")], marker="STEER-T")
    fake.script([Reply.text_reply("queued done")], marker="QUEUED-T")
    fake.script([Reply.text_reply("clean")], marker="HOSTILE-B")

    async def body(client: Client) -> list[dict]:
        waiting = await call(client, "kimi_code_task", {"task_description": "HOSTILE-A pick a colour"})
        job = waiting["job_id"]
        reply = {"job_id": job, "action": "answer", "wait_s": 0}
        too_long = await call(client, "kimi_job", {**reply, "answer": hostile("ANSWER-T", canary)})
        answered = await call(client, "kimi_job", {**reply, "answer": answer})
        while len(fake.chat_requests()) < 2:  # the request after the answer: Kimi runs its 4-second command
            await asyncio.sleep(0.05)
        steered = await call(client, "kimi_steer", {"job_id": job, "message": steer})
        session = answered["session_id"] or steered["session_id"]
        follow = {"session_id": session, "message": queued, "wait_s": 120}
        done = await call(client, "kimi_continue", follow)
        other = await call(client, "kimi_code_task", {"task_description": "HOSTILE-B say clean"})
        return [waiting, too_long, answered, steered, done, other]

    async def main() -> list[dict]:
        async with Client(transport(kimi.env, workspace, tmp_path / "server.log"), timeout=600) as client:
            return await body(client)

    waiting, too_long, answered, steered, done, other = asyncio.run(main())
    assert waiting["status"] == "waiting", waiting
    assert too_long["error"]["type"] == "bad_input" and "2,000" in too_long["error"]["message"], too_long
    assert answered["error"] is None and steered["error"] is None, (answered, steered)
    assert done["success"] is True and done["output"] == "queued done", done
    assert other["success"] is True and other["output"] == "clean", other

    expected = " ".join(seen("ANSWER-T", canary, "\t").replace(LONG, SHORT).split("\n")).replace("\t", " ")
    assert (
        answered_with(fake)["answers"]["Which colour?"] == expected
    )  # on one line, the stand-ins visible, nothing else changed
    texts = [m for r in fake.chat_requests() for m in user_messages(r["body"])]
    for tag in ("STEER-T", "QUEUED-T"):
        arrived = [t for t in texts if f"{tag}-END" in t]
        assert arrived and all(seen(tag, canary, tab) in t for t in arrived), (
            tag,
            arrived[:1],
            done["notes"],
        )
    assert sorted(m["mode"] for m in done["messages"]) == ["queue", "steer"], done["messages"]
    (clean,) = [r["body"] for r in fake.chat_requests() if "HOSTILE-B" in json.dumps(r["body"])]
    assert not any(tag in json.dumps(clean) for tag in ("ANSWER-T", "STEER-T", "QUEUED-T"))  # no leak
    assert sorted(p.name for p in canary.iterdir()) == [], "a command in the text ran"
    assert not processes_with_home(kimi.home)
