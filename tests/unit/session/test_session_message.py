"""A turn whose message Kimi did not receive as sent is never a success (session-level check)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from kimi_mcp.drivers.base import KimiInstall, ToolCall, ToolResult, TurnBegin
from kimi_mcp.drivers.legacy import LegacyDriver
from kimi_mcp.errors import SessionError
from kimi_mcp.scope import Scope
from kimi_mcp.secrets import Redactor
from kimi_mcp.session import ApprovalPolicy, KimiSession


def session(tmp_path: Path) -> KimiSession:
    driver = LegacyDriver(KimiInstall(binary="/usr/local/bin/kimi", version="1.50.0", dialect="legacy"))
    return KimiSession(
        driver,
        tmp_path,
        env={"HOME": str(tmp_path)},
        policy=ApprovalPolicy(tmp_path, read_only=False),
        scope=Scope(deadline=time.monotonic() + 60, redactor=Redactor(["secret-in-text"])),
    )


def test_the_message_kimi_logged_must_be_the_message_sent(tmp_path: Path) -> None:
    kimi = session(tmp_path)
    kimi.wire.apply(TurnBegin(text="  fix the bug\n"))  # Kimi trims: still the same message
    kimi._turn("fix the bug")._verify_received()
    kimi = session(tmp_path)
    kimi.wire.apply(TurnBegin(text="fix the bug"))
    kimi.wire.apply(TurnBegin(text="and the rest"))  # a second message: only the first counts
    kimi._turn("fix the bug")._verify_received()


@pytest.mark.parametrize(
    "received",
    ["fix the", "fix the bug[201~", "", "fix the bug secret-in-text!"],
)
def test_a_split_cut_or_changed_message_stops_the_turn_with_an_error(tmp_path: Path, received: str) -> None:
    kimi = session(tmp_path)
    kimi.wire.apply(TurnBegin(text=received))
    with pytest.raises(SessionError) as info:
        kimi._turn("fix the bug secret-in-text")._verify_received()
    assert info.value.retryable is True
    assert "did not receive the message as sent" in info.value.message
    details = info.value.details
    assert details["sent_chars"] == len("fix the bug secret-in-text")
    assert "secret-in-text" not in str(details)


def test_large_writes_go_in_pieces_with_output_drained_and_no_query_answer_inside(tmp_path: Path) -> None:
    kimi = session(tmp_path)
    written: list[str] = []
    pumps: list[bool] = []

    class Child:
        def send(self, data: str) -> None:
            written.append(data)

    kimi.term.process.child = Child()  # type: ignore[assignment]
    kimi.term.pump = lambda wait, answer=True: pumps.append(answer)  # type: ignore[method-assign]
    message = "\x1b[200~" + "x" * 10_000 + "\x1b[201~\r"
    kimi.term.write(message)
    assert "".join(written) == message
    assert max(len(piece) for piece in written) <= 4096 and written[0].startswith("\x1b[200~")
    assert pumps == [False] * (len(written) - 1)


def test_a_secret_across_the_cut_of_a_long_tool_result_is_masked_before_the_cut(tmp_path: Path) -> None:
    from kimi_mcp.runner._evidence import tool_traces

    kimi = session(tmp_path)
    secret = "S3cret-value-0123456789"
    kimi.wire.apply(ToolCall(call_id="c", name="Shell", arguments='{"command": "grep -rn x ."}'))
    kimi.wire.apply(ToolResult(call_id="c", output="y" * 1990 + secret + "z" * 100))
    shown = tool_traces(kimi.trace, Redactor([secret]))[0].result or ""
    assert "S3cret" not in shown and "***" in shown
