"""The control loop at the tool layer (a fake runner stands in for Kimi and asks through the run's scope, as
the session does): a question reaches the caller as an elicitation form (both protocol eras) or as a
``waiting`` job that ``kimi_job(action="answer")`` answers; messages reach a running job (``kimi_steer``,
``kimi_continue`` on a running conversation); token limits refuse a call."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import Any

import pytest
from fastmcp import Client
from fastmcp.client.elicitation import ElicitResult

from kimi_mcp.config import Settings
from kimi_mcp.errors import BadInput
from kimi_mcp.message import MessageRules, check_size, prepare
from kimi_mcp.models import MessageInfo, TaskResult
from kimi_mcp.question import Choice, Option, Question
from kimi_mcp.scope import DECLINED, Delivered, Scope
from kimi_mcp.server import create_server
from kimi_mcp.tools.control import _steered

COLOUR = Question(
    text="Which colour?", header="Colour", options=(Option("Red", "warm"), Option("Blue"), Option("Green"))
)


class AskingRunner:
    """Asks ``question`` through the scope's inbox like Kimi's panel does, waits for the answer (or a
    message, with ``steer``), and answers with what it got."""

    def __init__(self, question: Question | None = COLOUR, steer: bool = False) -> None:
        self.question, self.steer = question, steer
        self.got: list[Any] = []

    def __call__(self, request, settings, *, scope, watch=None, **_kw) -> TaskResult:
        if watch is not None:
            watch.queued = False
        if self.question is not None:
            scope.inbox.ask(self.question)
            end = time.monotonic() + 10
            while (answer := scope.inbox.take_answer()) is None and time.monotonic() < end:
                time.sleep(0.01)
            self.got.append(answer)
        if self.steer:
            end = time.monotonic() + 10
            while (
                message := scope.inbox.next_message(("steer", "queue"))
            ) is None and time.monotonic() < end:
                time.sleep(0.01)
            self.got.append(message)
            if message is not None:  # as Kimi's log shows it arrived
                scope.delivered.append(Delivered(message.text, message.mode, "in_turn", time.time()))
        return TaskResult(
            success=True, workspace=str(request.workspace), output=f"got {self.got!r}", session_id="s-1",
            messages=[MessageInfo(**m.to_dict()) for m in scope.delivered],
        )  # fmt: skip


def run(body) -> Any:
    return asyncio.run(body())


def task_args(workspace: Path, **extra: Any) -> dict[str, Any]:
    return {"task_description": "pick a colour", "work_dir": str(workspace), **extra}


@pytest.mark.parametrize(
    "mode", ["legacy", "auto"]
)  # elicitation/create (2025-11-25), input_required (2026-07-28)
def test_a_client_that_answers_the_form_gets_its_choice_typed_into_the_same_job(
    workspace: Path, mode: str
) -> None:
    runner = AskingRunner()
    forms: list[tuple[str, dict]] = []

    async def handler(message: str, response_type: Any, params: Any, context: Any) -> ElicitResult:
        forms.append((message, params.requested_schema))
        return ElicitResult(action="accept", content={"answer": "Blue"})

    async def body():
        server = create_server(Settings(), run=runner)
        async with Client(server, elicitation_handler=handler, mode=mode) as client:
            result = await client.call_tool("kimi_code_task", task_args(workspace), raise_on_error=False)
            jobs = await client.call_tool("kimi_jobs", {}, raise_on_error=False)
            return result.structured_content, jobs.structured_content

    result, jobs = run(body)
    assert result["status"] == "done" and result["success"] is True
    assert runner.got == [Choice(picks=(1,))]  # "Blue", typed as the second option
    assert len(jobs["jobs"]) == 1  # the retry answered the same job: none was started for it
    message, schema = forms[0]
    assert message == "Kimi asks: Which colour?"
    assert schema["properties"]["answer"]["enum"] == ["Red", "Blue", "Green"]
    assert "Red: warm" in schema["properties"]["answer"]["description"]
    assert "other" in schema["properties"]  # Kimi takes free text


def test_free_text_in_the_form_is_the_answer_and_decline_dismisses(workspace: Path) -> None:
    answers = iter(
        [{"action": "accept", "content": {"answer": "Red", "other": "  teal  "}}, {"action": "decline"}]
    )

    async def handler(message: str, response_type: Any, params: Any, context: Any) -> ElicitResult:
        return ElicitResult(**next(answers))

    runners = [AskingRunner(), AskingRunner()]

    async def body(runner: AskingRunner):
        async with Client(create_server(Settings(), run=runner), elicitation_handler=handler) as client:
            return (await client.call_tool("kimi_code_task", task_args(workspace))).structured_content

    for runner in runners:
        assert run(lambda runner=runner: body(runner))["success"] is True
    assert runners[0].got == [Choice(text="teal")]
    assert runners[1].got == [DECLINED]


@pytest.mark.parametrize("elicits", [False, True])
def test_nobody_there_leaves_the_job_waiting_for_the_agent_to_answer(workspace: Path, elicits: bool) -> None:
    """A client without elicitation, or one that cancels the form (``claude -p``: no person there): the
    call returns at once with status waiting and the question; kimi_job answers it and waits."""
    runner = AskingRunner(
        Question("Which ones?", options=(Option("a"), Option("b"), Option("c")), multi_select=True)
    )

    async def cancel(message: str, response_type: Any, params: Any, context: Any) -> ElicitResult:
        return ElicitResult(action="cancel")

    async def body():
        server = create_server(Settings(), run=runner)
        async with Client(server, elicitation_handler=cancel if elicits else None) as client:
            waiting = (
                await client.call_tool("kimi_code_task", task_args(workspace), raise_on_error=False)
            ).data
            job_id = waiting.job_id
            wrong = await client.call_tool(
                "kimi_job", {"job_id": job_id, "action": "answer", "answer": ["a", "d"]}, raise_on_error=False
            )
            single = await client.call_tool(
                "kimi_job", {"job_id": job_id, "action": "answer", "answer": ["a", "a"]}, raise_on_error=False
            )
            done = await client.call_tool(
                "kimi_job", {"job_id": job_id, "action": "answer", "answer": ["c", "a"]}, raise_on_error=False
            )
            again = await client.call_tool(
                "kimi_job", {"job_id": job_id, "action": "answer", "answer": "a"}, raise_on_error=False
            )
            return waiting, wrong.structured_content, single.structured_content, done, again

    waiting, wrong, single, done, again = run(body)
    # returned when the question came (the runner then waits 10 s for the answer), not after the turn
    assert waiting.status == "waiting" and waiting.success is None
    assert waiting.question.text == "Which ones?" and waiting.question.multi_select is True
    assert [o.label for o in waiting.question.options] == ["a", "b", "c"]
    assert "action='answer'" in waiting.notes[0]
    assert wrong["error"]["type"] == "bad_input"  # a label that is not an option
    assert "'d'" in wrong["error"]["message"]
    assert single["error"]["type"] == "bad_input"  # the same label twice
    assert done.structured_content["status"] == "done"
    assert runner.got == [Choice(picks=(0, 2))]  # picked in the panel in its own order
    assert again.structured_content["error"]["type"] == "bad_input"  # not waiting any more
    assert "not waiting" in again.structured_content["error"]["message"]


def test_kimi_steer_reaches_the_running_job_and_a_finished_job_names_kimi_continue(workspace: Path) -> None:
    runner = AskingRunner(question=None, steer=True)

    async def body():
        async with Client(create_server(Settings(), run=runner)) as client:
            first = (await client.call_tool("kimi_code_task", task_args(workspace, wait_s=0))).data
            steered = await client.call_tool(
                "kimi_steer", {"job_id": first.job_id, "message": "use blue"}, raise_on_error=False
            )
            done = await client.call_tool("kimi_job", {"job_id": first.job_id, "wait_s": 10})
            late = await client.call_tool(
                "kimi_steer", {"job_id": first.job_id, "message": "more"}, raise_on_error=False
            )
            blank = await client.call_tool(
                "kimi_steer", {"job_id": first.job_id, "message": "  "}, raise_on_error=False
            )
            return steered.structured_content, done.structured_content, late.structured_content, blank

    steered, done, late, blank = run(body)
    if steered["status"] == "running":
        assert steered["error"] is None and "Message queued" in steered["notes"][0]
    else:  # the job took the message and finished before kimi_steer replied (seen under load)
        assert steered["error"] is None and "Kimi took the message" in steered["notes"][-1]
    assert (
        steered["delivered"] == "in_turn" and steered["job_id"] and steered["status"] in ("running", "done")
    )
    assert done["status"] == "done"
    (message,) = runner.got
    assert (message.text, message.mode) == ("use blue", "steer")
    assert late["error"]["type"] == "bad_input" and "kimi_continue" in late["error"]["suggestion"]
    assert blank.structured_content["error"]["type"] == "bad_input"


def test_kimi_steer_refuses_a_message_over_the_limit_at_once_by_the_runs_own_rule(workspace: Path) -> None:
    """Issue 30, item 4: a message that cannot reach Kimi whole is refused by kimi_steer itself (before, it
    answered "Message queued" and the refusal came only in the final result's notes): over the server's
    KIMI_MCP_MAX_MESSAGE_TOKENS, and over the running job's own rule (its ``Scope.prepare``)."""
    runner = AskingRunner(question=None, steer=True)

    def strict(text: str) -> str:  # the run's rule for its Kimi: 10 tokens
        rules = MessageRules(keeps_tabs=False, max_tokens=10)
        check_size(prepare(text, rules), rules)
        return text

    def run_strictly(request, settings, *, scope, watch=None, **kw) -> TaskResult:
        scope.prepare = strict
        return runner(request, settings, scope=scope, watch=watch, **kw)

    async def body():
        async with Client(create_server(Settings(max_message_tokens=100), run=run_strictly)) as client:
            first = (await client.call_tool("kimi_code_task", task_args(workspace, wait_s=0))).data
            while runner.got == [] and first.status != "running":  # the run set its rule
                first = (await client.call_tool("kimi_job", {"job_id": first.job_id, "wait_s": 0})).data
            args = {"job_id": first.job_id}
            over = await client.call_tool("kimi_steer", {**args, "message": "x" * 401}, raise_on_error=False)
            strict_over = await client.call_tool(
                "kimi_steer", {**args, "message": "y" * 41}, raise_on_error=False
            )
            ok = await client.call_tool("kimi_steer", {**args, "message": "use blue"}, raise_on_error=False)
            await client.call_tool("kimi_job", {"job_id": first.job_id, "wait_s": 10})
            return over.structured_content, strict_over.structured_content, ok.structured_content

    over, strict_over, ok = run(body)
    for refused in (over, strict_over):
        assert refused["error"]["type"] == "bad_input" and refused.get("delivered") is None, refused
        assert "tokens" in refused["error"]["message"] and "Shorten" in refused["error"]["suggestion"]
    assert "101 tokens" in over["error"]["message"]  # the server's limit (100): 401 ASCII characters
    assert "11 tokens" in strict_over["error"]["message"]  # the run's (10)
    assert ok["error"] is None
    assert [m.text for m in runner.got] == ["use blue"]  # nothing of the refused ones reached the job


@pytest.mark.parametrize(("mode", "delivered"), [("queue", "next_turn"), ("interrupt", "next_turn")])
def test_kimi_steer_says_how_its_message_reaches_kimi(workspace: Path, mode: str, delivered: str) -> None:
    got: list[Any] = []

    def runner(request, settings, *, scope, watch=None, **_kw) -> TaskResult:
        end = time.monotonic() + 10
        while not got and time.monotonic() < end:
            got.extend(filter(None, [scope.inbox.next_message(("steer", "queue", "interrupt"))]))
            time.sleep(0.01)
        return TaskResult(success=True, workspace=str(request.workspace), output=f"got {got!r}")

    async def body():
        async with Client(create_server(Settings(), run=runner)) as client:
            first = (await client.call_tool("kimi_code_task", task_args(workspace, wait_s=0))).data
            steered = await client.call_tool(
                "kimi_steer", {"job_id": first.job_id, "message": "then blue", "mode": mode}
            )
            await client.call_tool("kimi_job", {"job_id": first.job_id, "wait_s": 10})
            tool = next(t for t in await client.list_tools() if t.name == "kimi_steer")
            return steered, tool

    steered, tool = run(body)
    assert [message.mode for message in got] == [mode]
    assert steered.structured_content["delivered"] == delivered
    assert json.loads(steered.content[0].text)["delivered"] == delivered  # the text says the same
    schema = tool.output_schema["properties"]["delivered"]  # the tool's schema describes it
    assert {"enum": ["in_turn", "next_turn"], "type": "string"} in schema["anyOf"]


def test_kimi_steer_on_an_unknown_job_names_kimi_continue(workspace: Path) -> None:
    async def body():
        async with Client(create_server(Settings(), run=AskingRunner(question=None))) as client:
            return await client.call_tool(
                "kimi_steer", {"job_id": "job_0000000000000000", "message": "hi"}, raise_on_error=False
            )

    result = run(body)
    error = result.structured_content["error"]
    assert result.is_error and error["type"] == "bad_input" and "unknown job_id" in error["message"]
    assert "kimi_continue(session_id" in error["suggestion"] and "kimi_jobs" in error["suggestion"]


def test_the_daily_token_budget_refuses_a_call_before_kimi_starts(workspace: Path) -> None:
    spent = AskingRunner(question=None)

    def costly(request, settings, *, scope, watch=None, **_kw) -> TaskResult:
        spent.got.append(request)
        return TaskResult(
            success=True, workspace=str(request.workspace), usage={"input_tokens": 900, "output_tokens": 200}
        )

    async def body():
        async with Client(create_server(Settings(daily_tokens=1000), run=costly)) as client:
            first = await client.call_tool("kimi_code_task", task_args(workspace), raise_on_error=False)
            second = await client.call_tool("kimi_code_task", task_args(workspace), raise_on_error=False)
            negative = await client.call_tool(
                "kimi_code_task", task_args(workspace, max_tokens=-5), raise_on_error=False
            )
            return first.structured_content, second.structured_content, negative.structured_content

    first, second, negative = run(body)
    assert first["success"] is True
    assert second["error"]["type"] == "budget" and "1100 tokens" in second["error"]["message"]
    assert len(spent.got) == 1  # the refused call started nothing
    assert negative["error"]["type"] == "bad_input" and "max_tokens" in negative["error"]["message"]


def test_inside_a_task_the_question_makes_it_input_required_and_tasks_update_answers_it(
    workspace: Path,
) -> None:
    from task_client import call_tool_task, tasks_extension

    runner = AskingRunner()
    forms: list[str] = []

    async def handler(message: str, response_type: Any, params: Any, context: Any) -> ElicitResult:
        forms.append(message)
        return ElicitResult(action="accept", content={"answer": "Green"})

    async def body():
        server = create_server(Settings(), run=runner)
        async with Client(server, extensions=[tasks_extension()], elicitation_handler=handler) as client:
            task = await call_tool_task(client, "kimi_code_task", task_args(workspace))
            parked = None
            for _ in range(200):
                status = await task.status()
                if status.status == "input_required":
                    parked = status
                    break
                await asyncio.sleep(0.05)
            result = await task.result()  # answers the input request through tasks/update, then polls
            return task, parked, result

    task, parked, result = run(body)
    assert parked is not None and parked.status_message.startswith("Kimi asks: Which colour?")
    assert task.task_id in parked.status_message
    assert forms == ["Kimi asks: Which colour?"]
    assert runner.got == [Choice(picks=(2,))]
    assert (
        result.structured_content["status"] == "done" and result.structured_content["job_id"] == task.task_id
    )


@pytest.mark.parametrize("metered", [True, False])  # the run's meter saw the tokens; only the result says so
def test_from_80_percent_of_the_daily_budget_results_and_kimi_status_warn(
    workspace: Path, metered: bool
) -> None:
    def costly(request, settings, *, scope, watch=None, **_kw) -> TaskResult:
        if metered:
            scope.tokens.record(scope, 1, 850)
        return TaskResult(
            success=True, workspace=str(request.workspace), usage={"input_tokens": 800, "output_tokens": 50},
            notes=list(scope.notes),
        )  # fmt: skip

    async def body():
        async with Client(create_server(Settings(daily_tokens=1000), run=costly)) as client:
            first = await client.call_tool("kimi_code_task", task_args(workspace))
            second = await client.call_tool("kimi_code_task", task_args(workspace))
            status = await client.call_tool("kimi_status", {})
            return first.structured_content, second.structured_content, status.structured_content

    first, second, status = run(body)
    # 0 used before it: the job that crossed 80 % says so itself
    assert [n for n in first["notes"] if "KIMI_MCP_DAILY_TOKENS" in n] == [
        "850 of the daily 1000 tokens (KIMI_MCP_DAILY_TOKENS) are used in the last 24 hours: 85%"
    ], first["notes"]
    daily = [n for n in second["notes"] if "KIMI_MCP_DAILY_TOKENS" in n]
    assert len(daily) == 1 and "850 of the daily 1000 tokens" in daily[0], second["notes"]  # said once
    assert status["daily_tokens_used"] == 1700
    assert any("1700 of the daily 1000" in w for w in status["warnings"])


def test_a_job_that_stays_below_80_percent_of_the_daily_budget_does_not_warn(workspace: Path) -> None:
    def cheap(request, settings, *, scope, watch=None, **_kw) -> TaskResult:
        scope.tokens.record(scope, 1, 790)
        return TaskResult(
            success=True, workspace=str(request.workspace), usage={"input_tokens": 700, "output_tokens": 90}
        )

    async def body():
        async with Client(create_server(Settings(daily_tokens=1000), run=cheap)) as client:
            return (await client.call_tool("kimi_code_task", task_args(workspace))).structured_content

    result = run(body)
    assert result["success"] is True and not any("KIMI_MCP_DAILY_TOKENS" in n for n in result["notes"])


class Finished:
    """A job of this server that finished while kimi_steer sent its message."""

    job_id = "job_x"

    def __init__(self, took: bool, typed: str = "use blue") -> None:
        delivered = [MessageInfo(at="2026-11-27T00:00:00Z", mode="steer", delivered="in_turn", text=typed)]
        self.result = TaskResult(
            success=True, workspace="/w", status="done", session_id="s-1", messages=delivered if took else []
        )
        self.scope = Scope.detached()
        self.scope.prepare = lambda text: text.replace("\t", "    ")  # as a run types it for its Kimi

    def snapshot(self, files: bool = True) -> TaskResult:
        return self.result


def test_a_job_that_finishes_as_the_steer_is_sent_tells_whether_kimi_took_the_message() -> None:
    took = Finished(took=True)
    result = _steered(took, " use blue", "steer")  # type: ignore[arg-type]
    assert result.notes[-1] == "Kimi took the message; the job has finished since."
    assert took.result.notes == []  # the job's own result is not changed
    typed = _steered(Finished(took=True, typed="use    blue"), "use\tblue", "steer")  # type: ignore[arg-type]
    assert typed.notes[-1] == "Kimi took the message; the job has finished since."  # listed as it was typed
    with pytest.raises(BadInput, match="finished before the message reached Kimi") as info:
        _steered(Finished(took=False), "use blue", "steer")  # type: ignore[arg-type]
    assert "kimi_continue(session_id='s-1'" in (info.value.suggestion or "")
