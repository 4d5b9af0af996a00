"""Groups and ``kimi_wait`` end to end (real client → real server → real Kimi, both dialects, the fake API):
one set of Kimi launches, three jobs of a group that end at different times (one only when cancelled) and a
job that asks a question: ``any`` returns what finished first with the rest pending, ``skip`` leaves the
collected out, the asking job returns at once with its question, ``kimi_jobs(group=...)`` lists the group,
a group's cancel says which job it stopped, and ``all`` then gathers all three."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from fake_moonshot import COLOUR, FakeMoonshot, Reply
from fastmcp import Client
from kimi_env import KimiUnderTest
from mcp_helpers import processes_with_home, with_client

pytestmark = pytest.mark.e2e


async def call(client: Client, tool: str, args: dict) -> dict:
    return (await client.call_tool(tool, args, raise_on_error=False)).structured_content


def test_a_group_of_jobs_is_gathered_any_then_all_and_cancelled_by_its_name(
    kimi: KimiUnderTest, fake: FakeMoonshot, workspace: Path, tmp_path: Path
) -> None:
    kimi.env["KIMI_MCP_MAX_CONCURRENT"] = "4"  # the four jobs run at once
    fake.script([Reply.tool(*kimi.write("a.txt", "a\n")), Reply.text_reply("a done")], marker="WAIT-A1")
    fake.script([Reply.text_reply("b done " * 30, token_delay=0.05)], marker="WAIT-B2")
    fake.script([Reply.hang()], marker="WAIT-C3")  # ends only when cancelled
    fake.script([Reply.tool("AskUserQuestion", COLOUR), Reply.text_reply("never")], marker="WAIT-Q4")

    async def body(client: Client):
        ids = []
        for marker, group in (
            ("WAIT-A1", "team"),
            ("WAIT-B2", "team"),
            ("WAIT-C3", "team"),
            ("WAIT-Q4", "asks"),
        ):
            own = workspace / marker  # write jobs in one workspace would run one after the other
            own.mkdir()
            args = {"task_description": marker, "wait_s": 0, "group": group, "work_dir": str(own)}
            started = await call(client, "kimi_code_task", args)
            assert started["group"] == group and started["job_id"], started
            ids.append(started["job_id"])
        first = await call(client, "kimi_wait", {"group": "team", "wait_s": 300})
        collected = [r["job_id"] for r in first["finished"]]
        rest = await call(
            client, "kimi_wait", {"job_ids": ids[:2], "skip": collected, "until": "all", "wait_s": 300}
        )
        asked = await call(client, "kimi_wait", {"group": "asks", "until": "all", "wait_s": 300})
        listed = await call(client, "kimi_jobs", {"group": "team"})
        cancelled = await call(client, "kimi_job", {"action": "cancel", "group": "team"})
        every = await call(client, "kimi_wait", {"group": "team", "until": "all", "wait_s": 60})
        await call(client, "kimi_job", {"action": "cancel", "group": "asks"})
        return ids, first, rest, asked, listed, cancelled, every

    ids, first, rest, asked, listed, cancelled, every = asyncio.run(
        with_client(kimi.env, workspace, tmp_path / "server.log", body)
    )
    a, b, c, q = ids
    # any: what finished first (a, b or both: whichever Kimi got there), the hanging job pending
    assert first["until"] == "any" and first["timed_out"] is False, first
    got = {r["job_id"]: r for r in first["finished"]}
    assert got and set(got) <= {a, b} and c in {p["job_id"] for p in first["pending"]}
    assert all(r["status"] == "done" and r["group"] == "team" for r in got.values()), got
    if a in got:
        assert got[a]["files_created"] == ["a.txt"] and got[a]["output"] == "a done"
    # skip: the ones collected are left out; all: the other one
    assert {r["job_id"] for r in rest["finished"]} == {a, b} - set(got) and rest["pending"] == []
    assert rest["timed_out"] is False
    # a job waiting on a question is returned at once with it
    assert asked["timed_out"] is False and asked["finished"] == [], asked
    assert asked["pending"][0]["job_id"] == q and asked["pending"][0]["status"] == "waiting"
    assert (
        asked["pending"][0]["question"]["text"] == "Which colour?" and asked["pending"][0]["group"] == "asks"
    )
    assert [j["job_id"] for j in listed["jobs"]] == [c, b, a] and {j["group"] for j in listed["jobs"]} == {
        "team"
    }
    assert cancelled["success"] is True and cancelled["cancelled"] == [c], cancelled
    statuses = {r["job_id"]: r["status"] for r in every["finished"]}
    assert statuses == {a: "done", b: "done", c: "cancelled"} and every["pending"] == []
    assert not processes_with_home(kimi.home)
