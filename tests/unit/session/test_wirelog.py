"""Session-log folding without a pty: every event kind is handled, a turn folds as logged, and SessionLog finds
and tails the right log file."""

from __future__ import annotations

import dataclasses
import json
import time
import typing
from pathlib import Path

import pytest

from kimi_mcp.drivers.base import (
    ApprovalRequest,
    ApprovalResolved,
    KimiInstall,
    StepBegin,
    TextPart,
    ThinkPart,
    TokenUsage,
    ToolCall,
    ToolResult,
    TurnBegin,
    TurnEnd,
    WireEvent,
)
from kimi_mcp.drivers.legacy import LegacyDriver
from kimi_mcp.scope import Scope
from kimi_mcp.session import TurnTrace, WireTail
from kimi_mcp.session._wirelog import SEARCH_EVERY, SessionLog, fold

SID = "3f2a9c1e-7b4d-4e8a-9c2f-1a2b3c4d5e6f"
SAMPLE = {
    str: "x",
    int: 1,
    bool: True,
    "str | None": "x",
    "int | None": 1,
    "str": "x",
    "int": 1,
    "bool": True,
}


def sample(kind: type) -> WireEvent:
    """An instance of one event class, every field filled."""
    return kind(**{f.name: SAMPLE[f.type] for f in dataclasses.fields(kind)})


# ------------------------------------------------------------------------------------------ every kind


def test_every_member_of_the_event_union_is_folded() -> None:
    kinds = typing.get_args(WireEvent)
    assert len(kinds) == 12 and all(dataclasses.is_dataclass(k) for k in kinds)
    for kind in kinds:
        for trace in (TurnTrace(), TurnTrace(begun=True, steps=[[]])):
            fold(trace, sample(kind))  # an unhandled kind would reach assert_never and raise


def test_an_event_kind_the_fold_does_not_know_is_caught() -> None:
    @dataclasses.dataclass(frozen=True)
    class Surprise:
        text: str

    with pytest.raises(AssertionError):
        fold(TurnTrace(), Surprise("new in some Kimi"))  # type: ignore[arg-type]


def test_events_are_immutable() -> None:
    with pytest.raises(dataclasses.FrozenInstanceError):
        TextPart("a").text = "b"  # type: ignore[misc]


# ------------------------------------------------------------------------------------------ one turn


def test_a_turn_folds_as_logged() -> None:
    trace = TurnTrace()
    news = [
        fold(trace, event)
        for event in [
            TextPart("before any step"),
            TurnBegin("fix the bug"),
            TurnBegin("a second message"),
            StepBegin(),
            ThinkPart("let me think"),
            TextPart("Let me "),
            TextPart("look."),
            ToolCall("c1", "Shell", '{"command": "ls -la"}'),
            ToolCall("c1", "Shell", ""),  # a repeat without arguments keeps the first ones
            TokenUsage(100, 7),
            ToolResult("c1", "a.txt", is_error=False),
            ToolResult("unknown", "ignored", is_error=True),
            StepBegin(),
            TextPart("Done: "),
            TextPart("fixed."),
            StepBegin(),  # an empty last step: the answer is the last step with text
            TokenUsage(50, 3, message_id="m2"),
            TurnEnd("completed"),
        ]
    ]
    assert [n for n in news if n] == ["Kimi runs Shell ls -la"]
    assert trace.begun and trace.ended and trace.ended_at is not None
    assert trace.received == "fix the bug"  # the first message of the turn
    assert trace.output == "Done: fixed."
    assert (trace.input_tokens, trace.output_tokens) == (150, 10)
    (call,) = trace.calls.values()
    assert (call.call_id, call.name, call.arguments) == ("c1", "Shell", '{"command": "ls -la"}')
    assert (call.result, call.is_error, call.approval) == ("a.txt", False, "auto")


def test_a_turn_end_before_the_turn_began_is_not_the_end() -> None:
    trace = TurnTrace()
    fold(trace, TurnEnd())
    assert not trace.ended and trace.ended_at is None


def test_an_approval_logged_before_its_call() -> None:
    trace = TurnTrace()
    fold(trace, TurnBegin("write it"))
    news = fold(trace, ApprovalRequest("c1", "Write", json.dumps({"path": "/w/hello.txt"})))
    assert news == "Kimi asks to run Write /w/hello.txt"
    assert trace.calls["c1"].awaiting_approval is True
    assert fold(trace, ApprovalRequest("c1", "Write", "{}")) is None  # the same call again: no news
    fold(trace, ApprovalResolved("c1"))
    assert trace.calls["c1"].awaiting_approval is False
    assert fold(trace, ToolCall("c1", "Write", json.dumps({"path": "hello.txt", "content": "x"}))) is None
    assert json.loads(trace.calls["c1"].arguments) == {"path": "hello.txt", "content": "x"}
    fold(trace, ApprovalResolved("never-requested"))  # ignored
    assert list(trace.calls) == ["c1"]


def test_progress_names_what_a_call_touches_in_short() -> None:
    trace = TurnTrace()
    assert fold(trace, ToolCall("a", "Grep", json.dumps({"pattern": "x" * 300}))) == (
        "Kimi runs Grep " + "x" * 120 + "… [180 more chars]"
    )
    assert fold(trace, ToolCall("b", "Task", "not json")) == "Kimi runs Task"
    assert fold(trace, ToolCall("c", "Task", "[1]")) == "Kimi runs Task"


# ----------------------------------------------------------------------------------- finding the log


def legacy_log(
    tmp_path: Path, progress: list[str], screen: list[str], told: list[str] | None = None
) -> SessionLog:
    driver = LegacyDriver(KimiInstall(binary="/usr/local/bin/kimi", version="1.50.0", dialect="legacy"))
    env = {"KIMI_SHARE_DIR": str(tmp_path / "share"), "HOME": str(tmp_path)}
    scope = Scope(deadline=time.monotonic() + 60, progress=progress.append)
    scope.on_session = (told if told is not None else []).append
    return SessionLog(driver, env, tmp_path, screen_text=lambda: screen[0], scope=lambda: scope)


def record(kind: str, payload: dict) -> str:
    return json.dumps({"timestamp": 1.0, "message": {"type": kind, "payload": payload}}) + "\n"


def prompt_record(text: str) -> str:
    return record("TurnBegin", {"user_input": [{"type": "text", "text": text}]})


def write_log(tmp_path: Path, sid: str, *lines: str) -> Path:
    """A legacy session log of a conversation started in ``tmp_path`` (the workspace of :func:`legacy_log`)."""
    path = tmp_path / "share" / "sessions" / LegacyDriver.store_key(str(tmp_path)) / sid / "wire.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(lines))
    return path


def test_the_log_the_screen_names_is_tailed_and_folded(tmp_path: Path) -> None:
    progress: list[str] = []
    screen = ["Welcome"]
    wire = legacy_log(tmp_path, progress, screen)
    trace = wire.begin_turn("fix it")
    wire.read()
    assert not wire.found and wire.session_id is None
    path = write_log(tmp_path, SID, prompt_record("fix it"))
    screen[0] = f"Session: {SID}"
    wire.read()
    assert wire.found and wire.session_id == SID and trace.received == "fix it"
    tool = {"function": {"name": "Shell", "arguments": '{"command": "ls"}'}}
    with path.open("a") as handle:
        handle.write(record("ToolCall", {"id": "c1", **tool}))
        handle.write('{"timestamp": 2.0, "message": {"type": "TurnE')  # a line being written
    wire.read()
    assert list(trace.calls) == ["c1"] and progress == ["Kimi runs Shell ls"] and not trace.ended
    with path.open("a") as handle:
        handle.write('nd", "payload": {}}}\n')
    wire.read()
    assert trace.ended


def test_without_an_id_on_screen_the_log_with_our_first_prompt_is_ours(tmp_path: Path) -> None:
    screen = ["no session id shown"]
    wire = legacy_log(tmp_path, [], screen)
    older = write_log(tmp_path, "00000000-0000-0000-0000-000000000001", prompt_record("fix it"))
    wire.exclude_existing()  # at spawn: an older session with the same prompt is not ours
    write_log(tmp_path, "00000000-0000-0000-0000-000000000002", prompt_record("another call's prompt"))
    ours = write_log(tmp_path, SID, record("StepBegin", {}) * 3, prompt_record("  fix it\n"))
    wire.begin_turn("fix it")
    wire.read()
    assert wire.found and wire.session_id == SID
    assert older.exists() and ours.exists() and wire.trace.received == "  fix it\n"


def dialect_log(dialect: str, tmp_path: Path, workspace: Path) -> SessionLog:
    """A SessionLog of either dialect for ``workspace`` (Kimi homes under ``tmp_path``), no id on screen."""
    from kimi_mcp.drivers.kimi_code import KimiCodeDriver

    if dialect == "legacy":
        wire = legacy_log(tmp_path, [], ["no session id shown"])
        wire.workspace = workspace
        return wire
    driver = KimiCodeDriver(KimiInstall(binary="/k/kimi", version="2.1.0", dialect="kimi-code"))
    env = {"KIMI_CODE_HOME": str(tmp_path / "kimi-code"), "HOME": str(tmp_path)}
    scope = Scope.detached()
    return SessionLog(driver, env, workspace, screen_text=lambda: "no session id shown", scope=lambda: scope)


def first_prompt(dialect: str, text: str) -> str:
    if dialect == "legacy":
        return prompt_record(text)
    return json.dumps({"type": "turn.prompt", "input": [{"type": "text", "text": text}]}) + "\n"


def write_keyed(wire: SessionLog, workdir: Path, sid: str, *lines: str) -> Path:
    """A session log where this wire's Kimi keeps the conversations started in ``workdir``."""
    root = wire.driver.sessions_root(wire.env) / wire.driver.store_key(str(workdir))
    path = root / wire.driver.wire_glob.split("/", 1)[1].format(sid=sid)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(lines))
    return path


@pytest.mark.parametrize("dialect", ["legacy", "kimi-code"])
def test_identical_prompts_in_two_workspaces_each_find_their_own_log(tmp_path: Path, dialect: str) -> None:
    """Issue 29 item 8: parallel attempts of one prompt (each on its own copy) must not follow one log."""
    copies = [tmp_path / "copy-a" / "tree", tmp_path / "copy-b" / "tree"]  # one folder name, two paths
    wires = [dialect_log(dialect, tmp_path, copy) for copy in copies]
    for wire in wires:
        wire.workspace.mkdir(parents=True)
        wire.exclude_existing()
        wire.begin_turn("answer")
    theirs = write_keyed(wires[1], copies[1], "sid-b", first_prompt(dialect, "answer"))  # B's log first
    wires[0].read()
    assert not wires[0].found and wires[0].session_id is None  # not ours, although its prompt is
    ours = write_keyed(wires[0], copies[0], "sid-a", first_prompt(dialect, "answer"))
    time.sleep(SEARCH_EVERY + 0.05)
    for wire in wires:
        wire.read()
    assert [(w.session_id, w._tail and w._tail.path) for w in wires] == [("sid-a", ours), ("sid-b", theirs)]


def test_a_log_in_a_workspace_spelt_through_a_symlink_is_found(tmp_path: Path) -> None:
    """Kimi runs in the resolved path: its folder is keyed by it, whatever spelling the caller gave."""
    real = tmp_path / "real"
    real.mkdir()
    (tmp_path / "link").symlink_to(real)
    wire = legacy_log(tmp_path, [], ["no session id shown"])
    wire.workspace = tmp_path / "link"
    wire.begin_turn("fix it")
    path = write_keyed(wire, real, SID, prompt_record("fix it"))
    wire.read()
    assert wire.found and wire.session_id == SID and wire._tail is not None and wire._tail.path == path


def test_the_session_id_is_told_once_as_soon_as_it_is_known(tmp_path: Path) -> None:
    """Found by the prompt, named on screen, or resumed: whoever needs it (the job) is told at once."""
    told: list[str] = []
    screen = ["no session id shown"]
    wire = legacy_log(tmp_path, [], screen, told)
    wire.begin_turn("fix it")
    write_log(tmp_path, SID, prompt_record("fix it"))
    wire.read()
    screen[0] = f"Session: {SID}"
    wire.read()
    assert told == [SID]
    legacy_log(tmp_path, [], [f"Session: {SID}"], told).read()  # no log needed: the screen names it
    assert legacy_log(tmp_path, [], [""], told).resume(SID)
    assert told == [SID, SID, SID]


def test_the_search_by_prompt_is_not_repeated_at_every_look(tmp_path: Path) -> None:
    wire = legacy_log(tmp_path, [], ["no session id shown"])
    wire.begin_turn("fix it")
    wire.read()  # nothing there yet
    write_log(tmp_path, SID, prompt_record("fix it"))
    wire.read()
    assert not wire.found  # searched a moment ago
    time.sleep(SEARCH_EVERY + 0.05)
    wire.read()
    assert wire.found and wire.session_id == SID


def test_a_resumed_session_counts_only_turns_logged_after_the_resume(tmp_path: Path) -> None:
    wire = legacy_log(tmp_path, [], ["a replayed history that hides the session id"])
    assert not wire.resume(SID)  # no such log: nothing to resume
    path = write_log(tmp_path, SID, prompt_record("earlier turn"), record("TurnEnd", {}))
    assert wire.resume(SID) and wire.session_id == SID and wire.found
    trace = wire.begin_turn("follow-up")
    wire.read()
    assert not trace.begun and not trace.ended  # the earlier turn's end is not this turn's
    with path.open("a") as handle:
        handle.write(prompt_record("follow-up") + record("TurnEnd", {}))
    wire.read()
    assert trace.received == "follow-up" and trace.ended and wire.session_id == SID


def test_a_new_turn_starts_a_new_trace(tmp_path: Path) -> None:
    wire = legacy_log(tmp_path, [], [""])
    first = wire.begin_turn("one")
    wire.apply(TurnBegin("one"))
    second = wire.begin_turn("two")
    assert first.begun and not second.begun and wire.trace is second


def test_the_tail_returns_complete_lines_only(tmp_path: Path) -> None:
    path = tmp_path / "wire.jsonl"
    tail = WireTail(path)
    assert tail.poll() == []  # not there yet
    path.write_text('{"a": 1}\n\n{"b"')
    assert tail.poll() == ['{"a": 1}']
    with path.open("a") as handle:
        handle.write(": 2}\n")
    assert tail.poll() == ['{"b": 2}']
    assert tail.poll() == []


# ------------------------------------------------- issue 13, item 18: what the turn waits on when the API fails


RETRYING = (  # as Kimi Code 2.1.0 logs it
    '{"type":"turn.step.retrying","agentId":"main","turnId":0,"step":8,"failedAttempt":8,"nextAttempt":9,'
    '"maxAttempts":10,"delayMs":34000,"errorName":"APIStatusError","errorMessage":"500 fake error 500",'
    '"statusCode":500,"time":1795397083914}'
)
RETRYING_SNAKE = (  # as documented for an earlier build
    '{"role":"meta","type":"turn.step.retrying","failed_attempt":8,"next_attempt":9,"max_attempts":10,'
    '"delay_ms":34000,"error_name":"APIStatusError","error_message":"500 fake error 500","status_code":500}'
)


def test_kimi_code_logs_a_retry_and_the_fold_remembers_it_until_the_provider_answers() -> None:
    from kimi_mcp.drivers.base import KimiInstall, StepRetrying
    from kimi_mcp.drivers.kimi_code import KimiCodeDriver

    driver = KimiCodeDriver(KimiInstall("/k", "2.1.0", "kimi-code"))
    (event,) = driver.events(RETRYING)
    assert event == StepRetrying(8, 10, "APIStatusError: 500 fake error 500", 500)
    assert driver.events(RETRYING_SNAKE) == [event]
    assert driver.events('{"type":"turn.step.retrying","failedAttempt":"x"}') == [StepRetrying(0, 0, "error")]
    trace = TurnTrace(begun=True, steps=[[]])
    assert (
        fold(trace, event)
        == "the model provider failed (APIStatusError: 500 fake error 500); Kimi retries (8/10)"
    )
    assert trace.retrying == event
    fold(trace, StepBegin())  # the retried step begins: still waiting on the provider
    assert trace.retrying == event
    fold(trace, TextPart("at last"))
    assert trace.retrying is None


LEGACY_GIVE_UP = [  # kimi-cli 1.50, three 429s in a row (a loaded run caught a success reported here)
    '{"timestamp": 1.0, "message": {"type": "StepRetry", "payload": {"n": 1, "next_attempt": 2, '
    '"max_attempts": 3, "wait_s": 0.3, "error_type": "APIStatusError", "status_code": 429}}}',
    '{"timestamp": 2.0, "message": {"type": "StepRetry", "payload": {"n": 1, "next_attempt": 3, '
    '"max_attempts": 3, "wait_s": 0.7, "error_type": "APIStatusError", "status_code": 429}}}',
    '{"timestamp": 3.0, "message": {"type": "StepInterrupted", "payload": {}}}',
    '{"timestamp": 3.1, "message": {"type": "TurnEnd", "payload": {}}}',
]


def test_legacy_logs_its_retries_and_a_turn_that_ends_while_retrying_is_an_api_error() -> None:
    from kimi_mcp.drivers.base import KimiInstall, StepRetrying
    from kimi_mcp.session._turn import _gave_up

    driver = LegacyDriver(KimiInstall("/k", "1.50.0", "legacy"))
    events = [event for line in LEGACY_GIVE_UP for event in driver.events(line)]
    assert events[:2] == [
        StepRetrying(1, 3, "APIStatusError 429", 429),
        StepRetrying(2, 3, "APIStatusError 429", 429),
    ]
    trace = TurnTrace(begun=True, steps=[[]])
    for event in events:
        fold(trace, event)
    assert trace.ended and trace.retrying == events[1]  # the turn ended on a failure, not an answer
    error = _gave_up(trace)
    assert error is not None and error.type == "api" and error.retryable
    assert "APIStatusError 429" in error.message and "gave up after 3 attempts" in error.message
    answered = TurnTrace(begun=True, steps=[[]])
    for event in [events[0], TextPart("fine"), TurnEnd()]:
        fold(answered, event)
    assert _gave_up(answered) is None
