"""Messages sent as next turns (issue 30, item 3): one is ``delivered`` (``next_turn``) only once Kimi's log shows
the turn it began; messages still waiting when a turn fails are said in the notes, never silently dropped."""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import Future
from pathlib import Path

from kimi_mcp.config import Settings
from kimi_mcp.drivers import KimiInstall
from kimi_mcp.errors import SessionError
from kimi_mcp.runner import Runner, TaskRequest
from kimi_mcp.runner._run import TaskRun
from kimi_mcp.scope import Message, Scope
from kimi_mcp.session import TurnTrace


class Kimi:
    """A live session whose turns end as scripted: ``received`` says whether the log shows each prompt."""

    def __init__(self, *turns: tuple[bool, str | None]) -> None:
        self.turns = list(turns)
        self.sent: list[str] = []
        self.session_id = "s-1"

    def ready_again(self, limit: float) -> bool:
        return True

    def run_turn(self, prompt: str, on_received: Callable[[], None] | None = None) -> TurnTrace:
        self.sent.append(prompt)
        received, error = self.turns.pop(0)
        if received and on_received is not None:
            on_received()
        trace = TurnTrace(begun=received, ended=True, steps=[[f"answer to {prompt}"]])
        trace.error = SessionError(error) if error else None
        return trace


def call(tmp_path: Path, kimi: Kimi, *messages: Message) -> TaskRun:
    run = TaskRun(
        Runner(), TaskRequest("first", tmp_path), Settings(),
        scope=Scope.detached(), environ={"HOME": str(tmp_path)},
    )  # fmt: skip
    run.session = kimi  # type: ignore[assignment]
    run.install = KimiInstall("/k/kimi", "2.1.0", "kimi-code")
    run.before = Future()
    run.before.set_result(None)  # type: ignore[arg-type]
    run._prepared = lambda text: text  # type: ignore[method-assign]
    for message in messages:
        run.scope.inbox.send(message)
    return run


def test_a_next_turn_message_is_delivered_once_kimis_log_shows_its_turn(tmp_path: Path) -> None:
    kimi = Kimi((True, None), (True, None), (False, "Kimi did not receive the message as sent"))
    run = call(tmp_path, kimi, Message("then blue", "queue"), Message("and green", "steer"))
    run._turn("first")
    assert kimi.sent == ["first", "then blue", "and green"]
    assert [(m.text, m.mode, m.delivered) for m in run.scope.delivered] == [
        ("then blue", "queue", "next_turn")
    ]


def test_messages_left_when_a_turn_fails_are_said_in_the_notes(tmp_path: Path) -> None:
    kimi = Kimi((True, "the model provider failed"))
    run = call(tmp_path, kimi, Message("then blue", "interrupt"), Message("late words", "steer"))
    run._turn("first")
    assert kimi.sent == ["first"] and run.scope.delivered == []
    assert [n for n in run.scope.notes if "was not sent" in n] == [
        "a message was not sent (the run ended first): then blue",
        "a message was not sent (the run ended first): late words",
    ]
    assert run.scope.inbox.next_message(("interrupt", "queue", "steer")) is None
