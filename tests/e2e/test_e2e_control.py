"""The control loop end to end (real client → real server → real Kimi, both dialects, the fake API): Kimi's
question answered through an elicitation form or by ``kimi_job(action="answer")``, reaching the model; a
message steered into a running turn; a token limit stopping Kimi with the files of the first step."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
from fake_moonshot import COLOUR, FakeMoonshot, Reply, last_user_text
from fastmcp import Client
from fastmcp.client.elicitation import ElicitResult
from kimi_env import KimiUnderTest
from mcp_helpers import processes_with_home, transport

pytestmark = pytest.mark.e2e


def run(kimi: KimiUnderTest, workspace: Path, log: Path, body, **client: Any) -> Any:
    async def main():
        async with Client(transport(kimi.env, workspace, log), timeout=600, **client) as connected:
            return await body(connected)

    return asyncio.run(main())


async def call(client: Client, tool: str, args: dict) -> dict:
    return (await client.call_tool(tool, args, raise_on_error=False)).structured_content


def answered_with(fake: FakeMoonshot) -> dict:
    """The answers the model got for the question: the AskUserQuestion result in the request after it."""
    for request in fake.chat_requests()[1:]:
        for message in request["body"]["messages"]:
            content = message.get("content")
            if message.get("role") != "tool" or "answers" not in json.dumps(content):
                continue
            if isinstance(content, list):  # kimi-cli: [<system>User has answered.</system>, the JSON]
                content = content[-1]["text"]
            return json.loads(content)
    return {}


@pytest.mark.parametrize(  # input_required (2026-07-28), elicitation/create: each era with one dialect
    ("kimi", "mode"), [("legacy", "auto"), ("kimi-code", "legacy")], indirect=["kimi"]
)
def test_a_form_answered_blue_reaches_the_model(
    kimi: KimiUnderTest, fake: FakeMoonshot, workspace: Path, tmp_path: Path, mode: str
) -> None:
    fake.script([Reply.tool("AskUserQuestion", COLOUR), Reply.text_reply("painting it")], marker="ASK-7")
    forms: list[str] = []

    async def handler(message: str, response_type: Any, params: Any, context: Any) -> ElicitResult:
        forms.append(message)
        return ElicitResult(action="accept", content={"answer": "Blue"})

    async def body(client: Client):
        return await call(client, "kimi_code_task", {"task_description": "ASK-7 pick a colour"})

    result = run(kimi, workspace, tmp_path / "server.log", body, elicitation_handler=handler, mode=mode)
    assert result["success"] is True and result["output"] == "painting it", result
    assert forms == ["Kimi asks: Which colour?"]
    assert answered_with(fake)["answers"] == {"Which colour?": "Blue"}
    assert any("answered: Blue" in note for note in result["notes"])
    assert not processes_with_home(kimi.home)


def test_nobody_there_the_agent_answers_with_kimi_job(
    kimi: KimiUnderTest, fake: FakeMoonshot, workspace: Path, tmp_path: Path
) -> None:
    """A client without elicitation: the call returns ``waiting`` with the question at once; the answer
    through kimi_job reaches the model and the job finishes; the waiting time did not count as the turn's."""
    fake.script([Reply.tool("AskUserQuestion", COLOUR), Reply.text_reply("green it is")], marker="ASK-9")

    async def body(client: Client):
        waiting = await call(client, "kimi_code_task", {"task_description": "ASK-9 pick a colour"})
        listed = await call(client, "kimi_jobs", {"status": "waiting"})
        bad = await call(client, "kimi_job", {"job_id": waiting["job_id"], "action": "answer", "answer": []})
        done = await call(
            client,
            "kimi_job",
            {"job_id": waiting["job_id"], "action": "answer", "answer": "green", "wait_s": 120},
        )
        return waiting, listed, bad, done

    waiting, listed, bad, done = run(kimi, workspace, tmp_path / "server.log", body)
    assert waiting["status"] == "waiting" and waiting["success"] is None, waiting
    assert waiting["question"]["text"] == "Which colour?" and waiting["question"]["header"] == "Colour"
    assert [o["label"] for o in waiting["question"]["options"]] == ["Red", "Blue", "Green"]
    assert [job["job_id"] for job in listed["jobs"]] == [waiting["job_id"]]
    assert bad["error"]["type"] == "bad_input"
    assert done["status"] == "done" and done["output"] == "green it is", done
    assert answered_with(fake)["answers"] == {"Which colour?": "Green"}  # the label as Kimi offered it


def test_a_question_nobody_answers_is_dismissed_after_the_question_timeout(
    kimi: KimiUnderTest, fake: FakeMoonshot, workspace: Path, tmp_path: Path
) -> None:
    fake.script([Reply.tool("AskUserQuestion", COLOUR), Reply.text_reply("carrying on")], marker="ASK-2")
    kimi.env["KIMI_MCP_QUESTION_TIMEOUT"] = "3"

    async def body(client: Client):
        waiting = await call(client, "kimi_code_task", {"task_description": "ASK-2 pick"})
        done = waiting
        for _ in range(600):  # a wait returns at once while the question waits: ask again until it is gone
            done = await call(client, "kimi_job", {"job_id": waiting["job_id"], "wait_s": 120})
            if done["status"] != "waiting":
                break
            await asyncio.sleep(0.2)
        return waiting, done

    waiting, done = run(kimi, workspace, tmp_path / "server.log", body)
    assert waiting["status"] == "waiting"
    assert done["status"] == "done", done
    assert any("nobody answered within 3s" in note for note in done["notes"]), done["notes"]
    dismissed = answered_with(fake)
    assert dismissed["answers"] == {} and "dismissed" in dismissed["note"]


LONG_STEER = "STEER-4 USE-BLUE-PAINT\n" + "\n".join(f"line {n}: " + "paint it blue " * 8 for n in range(12))


def test_a_message_steered_into_a_running_turn_reaches_the_model_in_that_turn(
    kimi: KimiUnderTest, fake: FakeMoonshot, workspace: Path, tmp_path: Path
) -> None:
    """A long steer (13 lines, ~1,500 characters: Kimi Code shows such a paste as "[paste #1 …]", which its
    steer key sent as it was before issue 30) reaches the model whole in the running turn; one over the
    message limit is refused by kimi_steer itself, at once."""
    fake.script([Reply.tool(*kimi.shell("sleep 4")), Reply.text_reply("steered fine")], marker="STEER-4")
    kimi.env["KIMI_MCP_MAX_MESSAGE_TOKENS"] = "2000"  # about 8,000 characters

    async def body(client: Client):
        first = await call(client, "kimi_code_task", {"task_description": "STEER-4 work", "wait_s": 0})
        while not fake.chat_requests():  # the turn began: Kimi runs its 4-second shell command next
            await asyncio.sleep(0.05)
        await asyncio.sleep(1.0)
        over = await call(
            client, "kimi_steer", {"job_id": first["job_id"], "message": "STEER-4 " + "x" * 9000}
        )
        steered = await call(client, "kimi_steer", {"job_id": first["job_id"], "message": LONG_STEER})
        done = await call(client, "kimi_job", {"job_id": first["job_id"], "wait_s": 120})
        return over, steered, done

    over, steered, done = run(kimi, workspace, tmp_path / "server.log", body)
    assert over["error"]["type"] == "bad_input" and "2,000 tokens" in over["error"]["message"], over
    assert steered["error"] is None, steered
    assert steered["delivered"] == "in_turn" and steered["job_id"] == done["job_id"]
    assert done["success"] is True and done["output"] == "steered fine", done
    (message,) = done["messages"]  # the refused one never reached Kimi
    assert (message["text"], message["mode"], message["delivered"]) == (LONG_STEER, "steer", "in_turn")
    assert len(fake.chat_requests()) == 2  # one turn: the steered message went into it, not a new turn
    got = last_user_text(fake.chat_requests()[-1]["body"])
    assert got.strip() == LONG_STEER.strip()  # whole, as sent (both TUIs trim a message's ends)


def test_max_tokens_stops_kimi_after_the_step_that_crosses_it(
    kimi: KimiUnderTest, fake: FakeMoonshot, workspace: Path, tmp_path: Path
) -> None:
    """Each fake step reports 1020 tokens: a limit of 1500 lets step one (one.txt) run and stops Kimi as
    soon as step two's usage is logged, which Kimi Code does before the step's write runs, with its
    approval panel up (kimi-cli either so or after the write ran: then it is in, and reported): the stop
    rejects that panel (never Enter, which approves; before this was fixed the
    exit keys approved it and the writes after the limit went on) and then interrupts, so two.txt and every
    later write are refused; the step the model starts after the rejection is interrupted while it streams
    (its usage never logged)."""
    slow = {"text": "thinking it over", "token_delay": 0.3, "chunk_chars": 4}  # ~1.2 s, as a model takes
    fake.script(
        [
            Reply.tool(*kimi.write("one.txt", "1\n")),
            Reply.tool(*kimi.write("two.txt", "2\n")),
            *(
                Reply("tool", tool_calls=[kimi.write(f"{n}.txt", "n\n")], **slow)
                for n in ("three", "four", "five")
            ),
        ],
        marker="TOKENS-3",
    )

    async def body(client: Client):
        return await call(client, "kimi_code_task", {"task_description": "TOKENS-3 go", "max_tokens": 1500})

    result = run(kimi, workspace, tmp_path / "server.log", body)
    assert result["success"] is False and result["error"]["type"] == "budget", result
    assert result["error"]["retryable"] is False and "kimi_continue" in result["error"]["suggestion"]
    written = sorted(p.name for p in workspace.glob("*.txt"))
    assert sorted(result["files_created"]) == written  # all reported
    # Kimi Code logs step two's usage with its panel up; kimi-cli sometimes only after the step's write ran
    assert written == ["one.txt"] or (kimi.name == "legacy" and written == ["one.txt", "two.txt"]), written
    spent = result["usage"]["input_tokens"] + result["usage"]["output_tokens"]
    assert 2040 <= spent <= 3060  # stopped within one step of crossing the limit (a request may be in flight)
    last = [r["body"]["messages"][-1] for r in fake.chat_requests()]
    assert len(last) <= 3, last  # the crossing step's, and the one after the rejected panel
    assert not any("/exit" in json.dumps(m) for m in last)  # no key meant for a panel reached the input line
    assert "no exit keys typed" not in (tmp_path / "server.log").read_text()  # no panel left up at the exit
    assert not processes_with_home(kimi.home)


def test_approvals_ask_forwards_a_shell_command_and_a_rejected_one_never_runs(
    kimi: KimiUnderTest, fake: FakeMoonshot, workspace: Path, tmp_path: Path
) -> None:
    fake.script(
        [Reply.tool(*kimi.shell("touch ran.txt")), Reply.text_reply("did not run it")], marker="ASK-SH"
    )

    async def body(client: Client):
        args = {"task_description": "ASK-SH run it", "approvals": "ask"}
        waiting = await call(client, "kimi_code_task", args)
        done = await call(
            client,
            "kimi_job",
            {"job_id": waiting["job_id"], "action": "answer", "answer": "reject", "wait_s": 120},
        )
        return waiting, done

    waiting, done = run(kimi, workspace, tmp_path / "server.log", body)
    assert waiting["status"] == "waiting", waiting
    question = waiting["question"]
    assert question["kind"] == "approval" and "touch ran.txt" in question["text"]
    assert [o["label"] for o in question["options"]] == ["approve", "reject"]
    assert done["status"] == "done" and done["output"] == "did not run it", done["error"]
    assert not (workspace / "ran.txt").exists()
    (shell,) = done["evidence"]["tools_run"]
    assert shell["approval"] == "rejected"


@pytest.mark.parametrize(  # Kimi's interrupt is the dialect's; a queued turn is the runner's: one dialect
    ("kimi", "mode"),
    [("legacy", "interrupt"), ("kimi-code", "interrupt"), ("legacy", "queue")],
    indirect=["kimi"],
)
def test_interrupt_and_queue_send_the_message_as_the_next_turn_of_the_same_job(
    kimi: KimiUnderTest, fake: FakeMoonshot, workspace: Path, tmp_path: Path, mode: str
) -> None:
    """``interrupt`` stops the running turn (a 6-second command) and sends the message as the next turn;
    ``queue`` waits for the turn to end. Either way one job covers both turns and lists the message."""
    fake.script(
        [
            Reply.tool(*kimi.write("one.txt", "1\n")),
            Reply.tool(*kimi.shell("sleep 6")),
            Reply.text_reply("first"),
        ],
        marker="TURN-1",
    )
    fake.script([Reply.tool(*kimi.write("two.txt", "2\n")), Reply.text_reply("second")], marker="NEXT-2")

    async def body(client: Client):
        first = await call(client, "kimi_code_task", {"task_description": "TURN-1 go", "wait_s": 0})
        while len(fake.chat_requests()) < 2:  # step two: Kimi runs its 6-second command next
            await asyncio.sleep(0.05)
        await asyncio.sleep(1.0)
        sent = await call(
            client, "kimi_steer", {"job_id": first["job_id"], "message": "NEXT-2 more", "mode": mode}
        )
        done = await call(client, "kimi_job", {"job_id": first["job_id"], "wait_s": 120})
        return sent, done

    sent, done = run(kimi, workspace, tmp_path / "server.log", body)
    assert sent["error"] is None, sent
    assert sent["delivered"] == "next_turn"
    assert done["success"] is True and done["output"] == "second", done
    assert sorted(done["files_created"]) == ["one.txt", "two.txt"]  # both turns' changes
    (message,) = done["messages"]
    assert (message["text"], message["mode"], message["delivered"]) == ("NEXT-2 more", mode, "next_turn")
    if mode == "interrupt":
        assert (
            fake.pending("TURN-1") == 1
        )  # the 6-second command was interrupted: its last step was never asked
    else:
        assert fake.pending("TURN-1") == 0  # the first turn ran to its end first


def test_a_steer_sent_while_a_question_waits_reaches_kimi_or_the_next_turn_and_never_leaks(
    kimi: KimiUnderTest, fake: FakeMoonshot, workspace: Path, tmp_path: Path
) -> None:
    """A steer sent while Kimi's question waits is typed once the answer resumes the turn, which ends at
    once: it is ``delivered`` only as Kimi's log shows it (into that turn, or sent as the next turn), the model
    gets it exactly once, and nothing of it is left in Kimi's input box: the follow-up arrives exactly."""
    # the answer resumes a turn that ends a moment later (its last reply streams for ~0.3 s): the steer is
    # typed then, and Kimi Code does not take it (before the fix it stayed in the input box, reported
    # delivered in_turn, and was sent with the follow-up)
    ending = Reply.text_reply("red it is", token_delay=0.06, chunk_chars=2)
    fake.script([Reply.tool("AskUserQuestion", COLOUR), ending], marker="LATE-1")
    fake.script([Reply.text_reply("late words taken")], marker="LATE-WORDS")
    fake.script([Reply.text_reply("follow-up fine")], marker="AFTER-2")

    async def body(client: Client):
        waiting = await call(client, "kimi_code_task", {"task_description": "LATE-1 pick a colour"})
        steered = await call(client, "kimi_steer", {"job_id": waiting["job_id"], "message": "LATE-WORDS now"})
        done = await call(
            client,
            "kimi_job",
            {"job_id": waiting["job_id"], "action": "answer", "answer": "Red", "wait_s": 120},
        )
        follow = await call(
            client, "kimi_continue", {"session_id": done["session_id"], "message": "AFTER-2 go on"}
        )
        return waiting, steered, done, follow

    waiting, steered, done, follow = run(kimi, workspace, tmp_path / "server.log", body)
    assert waiting["status"] == "waiting" and steered["error"] is None, steered
    assert done["status"] == "done", done
    texts = [last_user_text(r["body"]) for r in fake.chat_requests()]
    assert texts.count("LATE-WORDS now") == 1, texts  # the model got the steer, once
    (message,) = done["messages"]
    assert (message["text"], message["mode"]) == ("LATE-WORDS now", "steer")
    assert message["delivered"] in ("in_turn", "next_turn"), message
    assert done["output"] == "late words taken", done  # its reply is the job's last
    assert follow["success"] is True and follow["output"] == "follow-up fine", follow
    assert texts[-1] == "AFTER-2 go on"  # exactly the follow-up: nothing left over in the input box
