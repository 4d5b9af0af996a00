"""Groups and ``kimi_wait`` at the tool layer (FastMCP's in-memory client, a fake runner whose turns end when
the test opens their gates): the join (``any``, ``all``, ``skip``, a question, a timeout, a job of another
server), the result budget shared among finished results, a group's cancel, bad input, and ``kimi_wait`` run
as an MCP task."""

from __future__ import annotations

import asyncio
import os
import threading
from pathlib import Path
from typing import Any

import pytest
from fastmcp import Client
from fastmcp_tasks.client import _send_get
from mcp.shared.exceptions import MCPError
from task_client import call_tool_task, tasks_extension

from kimi_mcp.adapter.budget import result_json, split_budget
from kimi_mcp.adapter.pipeline import current_backend
from kimi_mcp.config import Settings, state_dir
from kimi_mcp.jobs import STORE_FILE, Gathered, JobStore, Standing, owner_id
from kimi_mcp.models import ErrorInfo, QuestionInfo, TaskResult
from kimi_mcp.question import Option, Question
from kimi_mcp.server import create_server

COLOUR = Question(text="Which colour?", header="Colour", options=(Option("Red"), Option("Blue")))


class Gates:
    """A fake Kimi: the turn whose prompt holds a gate's name lasts until that gate opens (or the job is
    cancelled); a prompt holding "ASK" asks :data:`COLOUR` first; ``text`` is every answer's output."""

    def __init__(self, *names: str, text: str = "done") -> None:
        self.gates = {name: threading.Event() for name in names}
        self.text = text

    def __call__(self, request, settings, *, scope, watch=None, **_kw) -> TaskResult:
        if watch is not None:
            watch.queued = False
        if "ASK" in request.prompt:
            scope.inbox.ask(COLOUR)
        name, gate = next((name, g) for name, g in self.gates.items() if name in request.prompt)
        while not gate.wait(0.01):
            if scope.cancel.is_set():
                error = ErrorInfo(type="cancelled", message="cancelled", suggestion="-", retryable=False)
                return TaskResult(success=False, workspace=str(request.workspace), error=error)
        return TaskResult(success=True, workspace=str(request.workspace), output=f"{self.text} {name}")


async def tool(client: Client, name: str, args: dict) -> dict:
    return (await client.call_tool(name, args, raise_on_error=False)).structured_content


async def start(client: Client, workspace: Path, marker: str, group: str | None = "g1") -> str:
    args = {"task_description": marker, "work_dir": str(workspace), "wait_s": 0, "group": group}
    started = await tool(client, "kimi_code_task", args)
    assert started["group"] == group and started["job_id"], started
    return started["job_id"]


def test_any_all_skip_and_a_groups_listing(workspace: Path) -> None:
    fake = Gates("JOB-A", "JOB-B", "JOB-C")

    async def body():
        async with Client(create_server(Settings(), run=fake)) as client:
            a, b, c = [await start(client, workspace, m) for m in ("JOB-A", "JOB-B", "JOB-C")]
            other = await start(client, workspace, "JOB-C", group="g2")
            before = await tool(client, "kimi_wait", {"group": "g1", "wait_s": 0})
            fake.gates["JOB-B"].set()
            first = await tool(client, "kimi_wait", {"group": "g1", "wait_s": 30})
            fake.gates["JOB-A"].set()
            skipped = await tool(client, "kimi_wait", {"group": "g1", "skip": [b], "wait_s": 30})
            fake.gates["JOB-C"].set()
            every = await tool(client, "kimi_wait", {"job_ids": [a, c], "group": "g1", "until": "all"})
            listed = await tool(client, "kimi_jobs", {"group": "g1"})
            done = await tool(client, "kimi_wait", {"job_ids": [other], "until": "all", "wait_s": 30})
            return (a, b, c), before, first, skipped, every, listed, done

    (a, b, c), before, first, skipped, every, listed, done = asyncio.run(body())
    assert before["timed_out"] is True and before["finished"] == [] and before["success"] is True
    assert [p["job_id"] for p in before["pending"]] == [c, b, a]  # the group's jobs, newest first
    assert {p["status"] for p in before["pending"]} <= {"running", "starting", "queued"}
    assert all(p["group"] == "g1" and p["question"] is None for p in before["pending"])
    assert first["until"] == "any" and first["timed_out"] is False
    assert [r["job_id"] for r in first["finished"]] == [b] and {p["job_id"] for p in first["pending"]} == {
        a,
        c,
    }
    assert first["finished"][0]["output"] == "done JOB-B" and first["finished"][0]["group"] == "g1"
    assert [r["job_id"] for r in skipped["finished"]] == [a]  # b was collected already
    assert [p["job_id"] for p in skipped["pending"]] == [c]
    assert every["until"] == "all" and every["pending"] == [] and every["timed_out"] is False
    assert sorted(r["job_id"] for r in every["finished"]) == sorted([a, b, c])
    assert all(r["status"] == "done" and r["success"] is True for r in every["finished"])
    assert [j["job_id"] for j in listed["jobs"]] == [c, b, a] and {j["group"] for j in listed["jobs"]} == {
        "g1"
    }
    assert done["finished"][0]["group"] == "g2"


def test_a_job_waiting_on_a_question_returns_at_once_with_its_question(workspace: Path) -> None:
    fake = Gates("JOB-A", "ASK-B")

    async def body():
        async with Client(create_server(Settings(), run=fake)) as client:
            a = await start(client, workspace, "JOB-A")
            b = await start(client, workspace, "ASK-B")
            waited = await tool(client, "kimi_wait", {"group": "g1", "until": "all", "wait_s": 600})
            fake.gates["JOB-A"].set()
            fake.gates["ASK-B"].set()
            return a, b, waited

    a, b, waited = asyncio.run(body())
    assert waited["timed_out"] is False and waited["finished"] == []
    pending = {p["job_id"]: p for p in waited["pending"]}
    assert pending[b]["status"] == "waiting" and pending[b]["question"]["text"] == "Which colour?"
    assert [o["label"] for o in pending[b]["question"]["options"]] == ["Red", "Blue"]
    assert pending[a]["question"] is None and pending[a]["status"] != "waiting"


def test_a_group_is_cancelled_without_a_job_id_and_the_result_says_which(workspace: Path) -> None:
    fake = Gates("JOB-A", "JOB-B", "JOB-C")

    async def body():
        async with Client(create_server(Settings(), run=fake)) as client:
            a, b = await start(client, workspace, "JOB-A"), await start(client, workspace, "JOB-B")
            kept = await start(client, workspace, "JOB-C", group="g2")
            fake.gates["JOB-A"].set()
            await tool(client, "kimi_wait", {"job_ids": [a], "until": "all"})
            cancelled = await tool(client, "kimi_job", {"action": "cancel", "group": "g1"})
            again = await tool(client, "kimi_job", {"action": "cancel", "group": "g1"})
            gathered = await tool(client, "kimi_wait", {"group": "g1", "until": "all", "wait_s": 0})
            other = await tool(client, "kimi_job", {"job_id": kept, "action": "status"})
            fake.gates["JOB-C"].set()
            return (a, b), cancelled, again, gathered, other

    (a, b), cancelled, again, gathered, other = asyncio.run(body())
    assert cancelled["success"] is True and cancelled["cancelled"] == [b] and cancelled["group"] == "g1"
    assert any(b in note for note in cancelled["notes"])
    assert again["success"] is True and again["cancelled"] == []  # nothing left to cancel
    statuses = {r["job_id"]: r["status"] for r in gathered["finished"]}
    assert statuses == {a: "done", b: "cancelled"} and gathered["timed_out"] is False
    assert other["status"] == "running"  # another group's job goes on


def test_a_job_of_another_server_on_the_same_store_is_waited_for(workspace: Path) -> None:
    """A job this server does not run (only its row in the shared store) ends: the wait sees it."""

    async def body():
        async with Client(create_server(Settings(), run=Gates("X"))) as client:
            await tool(client, "kimi_jobs", {})  # the tools (and the store) are loaded
            store = JobStore(state_dir(Settings(), os.environ) / STORE_FILE)
            record = store.create(
                tool="kimi_prompt", workspace=str(workspace), read_only=False, arguments={}, owner=owner_id(),
                group="far",
            )  # fmt: skip
            result = {"success": True, "status": "done", "job_id": record.job_id, "output": "from afar"}
            ending = threading.Timer(0.3, store.finish, (record.job_id,), {"status": "done", "result": result,
                                                                        "summary": "s"})  # fmt: skip
            ending.start()
            waited = await tool(client, "kimi_wait", {"group": "far", "wait_s": 60})
            ending.join()
            store.close()
            return record.job_id, waited

    job_id, waited = asyncio.run(body())
    assert waited["timed_out"] is False and waited["pending"] == []
    assert waited["finished"][0]["job_id"] == job_id and waited["finished"][0]["output"] == "from afar"
    assert waited["finished"][0]["group"] == "far"


def test_the_result_budget_is_split_among_the_finished_results(workspace: Path) -> None:
    fake = Gates("JOB-A", "JOB-B", "JOB-C", text="x" * 5_000)
    for gate in fake.gates.values():
        gate.set()
    settings = Settings(max_result_chars=6_000)

    async def body():
        async with Client(create_server(settings, run=fake)) as client:
            ids = [await start(client, workspace, m) for m in ("JOB-A", "JOB-B", "JOB-C")]
            waited = await client.call_tool(
                "kimi_wait", {"job_ids": ids, "until": "all"}, raise_on_error=False
            )
            whole = await tool(client, "kimi_job", {"job_id": ids[0], "action": "status"})
            return waited, whole

    waited, whole = asyncio.run(body())
    payload = waited.structured_content
    assert len(payload["finished"]) == 3 and len(result_json(payload)) <= 6_000
    for result in payload["finished"]:
        assert [(t["path"], t["reason"]) for t in result["truncated"]] == [("output", "result_budget")]
        assert 0 < len(result["output"]) < 5_000
    assert any("share the result budget" in note for note in payload["notes"])
    assert whole["truncated"] == [] and len(whole["output"]) > 5_000  # alone, one result fits whole


def test_split_budget_keeps_the_small_results_whole_and_shares_the_rest() -> None:
    assert split_budget([100, 5_000, 9_000], 6_000) == [100, 2_950, 2_950]
    assert split_budget([10, 20], 1_000) == [10, 20]
    assert split_budget([500, 500], 0) == [1, 1]  # a budget is never "no limit"
    assert sum(split_budget([7, 3_000, 3_001, 4_000], 5_000)) <= 5_000


def test_gathered_is_ready_for_any_all_a_question_or_nothing() -> None:
    done, going = Standing("a", "done", None, True), Standing("b", "running", None, False)
    asking = Standing("c", "waiting", None, False, question=QuestionInfo(text="Which colour?"))
    assert Gathered([done, going]).ready("any") and not Gathered([done, going]).ready("all")
    assert Gathered([done, Standing("d", "failed", None, True)]).ready("all")
    assert not Gathered([going]).ready("any")
    assert Gathered([going, asking]).ready("all") and Gathered([]).ready("all")


@pytest.mark.parametrize(
    ("args", "says"),
    [
        ({}, "no job given"),
        ({"job_ids": [" "]}, "no job given"),
        ({"job_ids": ["job_nope1", "job_nope2"]}, "'job_nope1', 'job_nope2'"),
        ({"group": "nobody"}, "unknown group 'nobody'"),
        ({"group": "a b"}, "group"),
        ({"job_ids": ["job_x"], "until": "some"}, "until"),
        ({"job_ids": ["job_x"], "wait_s": -1}, "wait_s"),
    ],
)
def test_bad_input_is_a_clear_error(workspace: Path, args: dict[str, Any], says: str) -> None:
    async def body():
        async with Client(create_server(Settings(), run=Gates("X"))) as client:
            return await tool(client, "kimi_wait", args)

    result = asyncio.run(body())
    assert result["success"] is False and result["error"]["type"] == "bad_input", result
    assert says in result["error"]["message"]


@pytest.mark.parametrize(
    ("args", "says"),
    [
        ({"action": "cancel"}, "needs a job_id"),
        ({"group": "g1"}, "needs a job_id"),
        ({"action": "cancel", "group": "g1", "job_id": "job_x"}, "not both"),
        ({"action": "cancel", "group": "nobody"}, "unknown group 'nobody'"),
    ],
)
def test_kimi_job_without_a_job_id_takes_only_a_groups_cancel(args: dict[str, Any], says: str) -> None:
    async def body():
        async with Client(create_server(Settings(), run=Gates("X"))) as client:
            return await tool(client, "kimi_job", args)

    result = asyncio.run(body())
    assert result["success"] is False and result["error"]["type"] == "bad_input", result
    assert says in result["error"]["message"]


def test_the_managers_condition_wakes_a_waiter_when_a_job_ends(workspace: Path) -> None:
    """The join's event: a waiter blocked on ``wait_change`` returns when a job ends, not at its timeout."""
    fake = Gates("JOB-A")

    async def body():
        server = create_server(Settings(), run=fake)
        async with Client(server) as client:
            job_id = await start(client, workspace, "JOB-A")
            jobs = current_backend(server).jobs
            seen = jobs.events.generation
            threading.Timer(0.2, fake.gates["JOB-A"].set).start()
            changed = await asyncio.to_thread(jobs.events.wait_change, seen, 60)
            return job_id, jobs, seen, changed

    job_id, jobs, seen, changed = asyncio.run(body())
    assert changed > seen and jobs.local(job_id) is None  # woken by its end (not the timeout)


def test_kimi_wait_run_as_an_mcp_task_completes_with_the_waits_reply_and_a_cancel_leaves_the_jobs(
    workspace: Path,
) -> None:

    fake = Gates("JOB-A", "JOB-B")

    async def body():
        server = create_server(Settings(), run=fake)
        # the jobs are started by a client without the extension (with it, a Kimi call is a task too)
        async with Client(server) as plain, Client(server, extensions=[tasks_extension()]) as client:
            a, b = [await start(plain, workspace, m) for m in ("JOB-A", "JOB-B")]
            task = await call_tool_task(client, "kimi_wait", {"group": "g1", "until": "all", "wait_s": 60})
            working = await task.status()
            fake.gates["JOB-A"].set()
            await asyncio.sleep(0.3)
            half = await task.status()
            fake.gates["JOB-B"].set()
            result = await task.result()
            fake.gates["JOB-C"] = threading.Event()
            d = await start(plain, workspace, "JOB-C", group="g2")
            cancelled = await call_tool_task(client, "kimi_wait", {"job_ids": [d], "wait_s": 60})
            await cancelled.cancel()
            cancelled_status = await cancelled.status()
            job_d = await tool(plain, "kimi_job", {"job_id": d, "action": "status"})
            timing_out = await call_tool_task(client, "kimi_wait", {"job_ids": [d], "wait_s": 0.2})
            timed_out = await timing_out.result()
            fake.gates["JOB-C"].set()
            with pytest.raises(MCPError, match="wait-nope not found.*memory only.*call kimi_wait again"):
                await _send_get(client.session, "wait-nope")
            return (a, b, d), task, working, half, result, cancelled_status, job_d, timed_out

    (a, b, d), task, working, half, result, cancelled_status, job_d, timed_out = asyncio.run(body())
    assert task.task_id.startswith("wait-") and task.create_result.status == "working"
    assert working.status == "working" and working.status_message == "0 of 2 jobs finished"
    assert half.status == "working" and half.status_message == "1 of 2 jobs finished"
    reply = result.structured_content
    assert result.is_error is False and reply["until"] == "all" and reply["timed_out"] is False
    assert sorted(r["job_id"] for r in reply["finished"]) == sorted([a, b]) and reply["pending"] == []
    assert cancelled_status.status == "cancelled"
    assert job_d["status"] == "running"  # cancelling the wait left the job alone
    late = timed_out.structured_content
    assert late["timed_out"] is True and [p["job_id"] for p in late["pending"]] == [d]
