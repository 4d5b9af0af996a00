"""The tool calls reported to the client (``runner._evidence.tool_traces``): in call order, secret-touching calls
withheld, secrets masked before long texts are cut."""

from __future__ import annotations

import json

from kimi_mcp.runner._evidence import TRIM, tool_traces
from kimi_mcp.secrets import Redactor
from kimi_mcp.session import CallRecord, TurnTrace


def turn(*calls: CallRecord) -> TurnTrace:
    trace = TurnTrace(begun=True, ended=True)
    trace.calls = {call.call_id: call for call in calls}
    return trace


def test_calls_are_reported_in_order_with_their_outcome() -> None:
    trace = turn(
        CallRecord("b", "Shell", '{"command": "ls"}', result="a.txt", approval="approved"),
        CallRecord("a", "WriteFile", '{"path": "x.txt", "content": "x"}', result="boom", is_error=True),
        CallRecord("c", "ReadFile", '{"path": "y.txt"}'),
    )
    shown = tool_traces(trace, lambda text: text)
    assert [(t.name, t.result, t.is_error, t.approval) for t in shown] == [
        ("Shell", "a.txt", False, "approved"),
        ("WriteFile", "boom", True, "auto"),
        ("ReadFile", None, False, "auto"),
    ]
    assert shown[0].arguments == '{"command": "ls"}'


def test_a_call_touching_a_secret_file_is_withheld_but_its_path_kept() -> None:
    trace = turn(
        CallRecord("a", "WriteFile", json.dumps({"path": ".env", "content": "KEY=v"}), result="written"),
        CallRecord("b", "Shell", json.dumps({"command": "cat .env"}), result="KEY=v"),
        CallRecord("c", "ReadFile", json.dumps({"path": "id_rsa"})),
    )
    write, shell, read = tool_traces(trace, lambda text: text)
    assert json.loads(write.arguments) == {"path": ".env", "content": "[withheld]"}
    assert write.result == "[withheld: the call touched a secret file]"
    assert json.loads(shell.arguments) == {"command": "[withheld]"} and "KEY=v" not in (shell.result or "")
    assert read.result is None  # no result yet stays no result


def test_secrets_are_masked_before_long_texts_are_cut() -> None:
    secret = "S3cret-value-0123456789"
    arguments = json.dumps({"command": "x" * (TRIM - 20) + secret + "x" * 100})
    trace = turn(CallRecord("a", "Shell", arguments, result="y" * (TRIM - 10) + secret + "z" * 100))
    (shown,) = tool_traces(trace, Redactor([secret]))
    for text in (shown.arguments, shown.result or ""):
        assert "S3cret" not in text and "***" in text and "more chars]" in text
    assert (
        len(tool_traces(turn(CallRecord("b", "Shell", "{}", result="r" * TRIM)), str)[0].result or "") == TRIM
    )
