"""The control channel keeps its promises at the tool layer (a fake runner stands in for Kimi): a
``kimi_continue`` queued on a running job brings its own ``approvals`` and ``max_tokens`` to the turn it
becomes (a different ``model`` is refused); every call naming a job keeps to the client's roots; an answer
names the question it answers, and an answer to a question that is gone is refused, never typed."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import pytest
from fastmcp import Client
from mcp.shared.exceptions import MCPError
from mcp_types import INVALID_PARAMS

from kimi_mcp.config import Settings
from kimi_mcp.models import TaskResult
from kimi_mcp.question import Choice, Option, Question
from kimi_mcp.scope import Message
from kimi_mcp.server import create_server

FIRST = Question("Which colour?", options=(Option("Red"), Option("Blue")))
SECOND = Question("Proceed?", options=(Option("yes"), Option("no")))


def run(body) -> Any:
    return asyncio.run(body())


def wait_for(take, seconds: float = 10.0) -> Any:
    end = time.monotonic() + seconds
    while (got := take()) is None and time.monotonic() < end:
        time.sleep(0.01)
    return got


class QueueRunner:
    """A running conversation (session "s-1") that takes the message queued on it as its next turn."""

    def __init__(self) -> None:
        self.queued: list[Message] = []

    def __call__(self, request, settings, *, scope, watch=None, **_kw) -> TaskResult:
        if watch is not None:
            watch.queued = False
        scope.on_session("s-1")
        message = wait_for(lambda: scope.inbox.next_message(("queue",)))
        self.queued.append(message)
        return TaskResult(
            success=True, workspace=str(request.workspace), output="both turns", session_id="s-1"
        )


def test_a_queued_follow_up_brings_its_approvals_and_max_tokens_and_refuses_another_model(
    workspace: Path,
) -> None:
    runner = QueueRunner()

    async def body():
        async with Client(create_server(Settings(), run=runner)) as client:
            args = {"task_description": "go", "work_dir": str(workspace), "wait_s": 0}
            first = (await client.call_tool("kimi_code_task", args)).structured_content
            while (
                await client.call_tool("kimi_job", {"job_id": first["job_id"], "action": "status"})
            ).data.session_id is None:
                await asyncio.sleep(0.01)
            follow = {"session_id": "s-1", "message": "run the command"}
            other = await client.call_tool(
                "kimi_continue", {**follow, "model": "kimi-other"}, raise_on_error=False
            )
            queued = await client.call_tool(
                "kimi_continue", {**follow, "approvals": "ask", "max_tokens": 5000, "wait_s": 10}
            )
            return other.structured_content, queued.structured_content

    other, queued = run(body)
    assert other["error"]["type"] == "bad_input" and "model 'kimi-other'" in other["error"]["message"]
    assert "queued turn" in other["error"]["message"]
    assert queued["status"] == "done" and queued["output"] == "both turns"
    (message,) = runner.queued  # the refused call queued nothing
    assert (message.mode, message.approvals, message.max_tokens) == ("queue", "ask", 5000)
    assert message.text.endswith("run the command")


class TwoQuestions:
    """Asks FIRST, then SECOND once FIRST is answered, and reports the answers it got."""

    def __init__(self) -> None:
        self.got: list[Any] = []

    def __call__(self, request, settings, *, scope, watch=None, **_kw) -> TaskResult:
        if watch is not None:
            watch.queued = False
        for question in (FIRST, SECOND):
            scope.inbox.ask(question)
            self.got.append(wait_for(scope.inbox.take_answer))
        return TaskResult(success=True, workspace=str(request.workspace), output="answered")


def test_an_answer_names_its_question_and_one_for_a_question_gone_is_refused(workspace: Path) -> None:
    runner = TwoQuestions()

    async def body():
        async with Client(create_server(Settings(), run=runner)) as client:
            args = {"task_description": "ask", "work_dir": str(workspace)}
            first = (await client.call_tool("kimi_code_task", args)).structured_content
            job = first["job_id"]

            async def answer(answer: str, question_id: str | None, action: str = "answer") -> dict:
                sent = {"job_id": job, "action": action, "answer": answer, "question_id": question_id}
                return (await client.call_tool("kimi_job", sent, raise_on_error=False)).structured_content

            return first, [
                await answer("Red", "q-not-asked"),
                await answer("Red", first["question"]["id"]),
                await answer("yes", first["question"]["id"]),  # late: FIRST is answered, SECOND waits
                await answer("yes", None, action="wait"),
                await answer("yes", None),  # the question asked now
            ]

    first, (unknown, red, late, misplaced, done) = run(body)
    assert first["status"] == "waiting" and first["question"]["id"].startswith("q")
    assert unknown["error"]["type"] == "bad_input"
    assert "already answered or dismissed" in unknown["error"]["message"]
    assert red["status"] == "waiting" and red["question"]["text"] == "Proceed?"
    assert red["question"]["id"] != first["question"]["id"]
    assert late["error"]["type"] == "bad_input"
    assert "already answered or dismissed" in late["error"]["message"]
    assert red["question"]["id"] in late["error"]["message"]  # names the question asked now
    assert (
        misplaced["error"]["type"] == "bad_input"
        and "only taken by action 'answer'" in (misplaced["error"]["message"])
    )
    assert done["status"] == "done"
    assert runner.got == [Choice(picks=(0,)), Choice(picks=(0,))]  # the late "yes" was never typed


def test_steer_answer_jobs_and_resources_keep_to_the_clients_roots(tmp_path: Path) -> None:
    """A job in ``theirs``: a client whose roots are [``mine``] can neither steer it, answer it, list it
    nor read its output; a client whose roots hold it can."""
    mine, theirs = tmp_path / "mine", tmp_path / "theirs"
    mine.mkdir()
    theirs.mkdir()
    runner = TwoQuestions()
    server = create_server(Settings(), run=runner)

    async def body():
        async with Client(server) as anyone:
            args = {"task_description": "ask", "work_dir": str(theirs)}
            job = (await anyone.call_tool("kimi_code_task", args)).structured_content["job_id"]
            async with Client(server, roots=[mine.as_uri()]) as outsider:
                calls = [
                    ("kimi_steer", {"job_id": job, "message": "look elsewhere"}),
                    ("kimi_job", {"job_id": job, "action": "answer", "answer": "Red"}),
                    ("kimi_job", {"job_id": job, "action": "cancel"}),
                ]
                refused = [
                    (await outsider.call_tool(name, sent, raise_on_error=False)).structured_content
                    for name, sent in calls
                ]
                listed = (await outsider.call_tool("kimi_jobs", {})).structured_content
            for answer in ("Red", "yes"):
                await anyone.call_tool("kimi_job", {"job_id": job, "action": "answer", "answer": answer})
            async with Client(server, roots=[mine.as_uri()]) as outsider:
                with pytest.raises(MCPError, match="no finished job") as hidden:
                    await outsider.read_resource(f"kimi-mcp://jobs/{job}/output")
                assert hidden.value.code == INVALID_PARAMS  # resource not found: its existence not told
            async with Client(server, roots=[tmp_path.as_uri()]) as insider:
                seen = (await insider.call_tool("kimi_jobs", {})).structured_content
                output = (await insider.read_resource(f"kimi-mcp://jobs/{job}/output"))[0].text
            return refused, listed, seen, output

    refused, listed, seen, output = run(body)
    for result in refused:
        assert result["error"]["type"] == "bad_input", result
        assert "outside this client's roots" in result["error"]["message"]
    assert listed["jobs"] == []
    assert [j["workspace"] for j in seen["jobs"]] == [str(theirs)]
    assert output == "answered"
    assert runner.got == [Choice(picks=(0,)), Choice(picks=(0,))]  # only the insider's answers
