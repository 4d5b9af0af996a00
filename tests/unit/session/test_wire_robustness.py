"""Session logs of an unexpected shape never end a call (issue 13, items 6 and 7)."""

from __future__ import annotations

from pathlib import Path

import pytest

from kimi_mcp.drivers.base import KimiInstall, TurnEnd
from kimi_mcp.drivers.kimi_code import KimiCodeDriver
from kimi_mcp.drivers.legacy import LegacyDriver
from kimi_mcp.session import WireTail

ODD = [
    "null", '"text"', "[1, 2]", "42", "{}", "{not json",
    '{"message": null}', '{"message": "x"}', '{"message": {"type": "TurnBegin", "payload": "x"}}',
    '{"message": {"type": "TurnBegin", "payload": {"user_input": [1, null, "x"]}}}',
    '{"message": {"type": "ToolCall", "payload": {"function": "x"}}}',
    '{"message": {"type": "ToolResult", "payload": {"return_value": []}}}',
    '{"message": {"type": "StatusUpdate", "payload": {"token_usage": {"output": "many"}}}}',
    '{"message": {"type": "ContentPart", "payload": []}}',
    '{"type": "turn.prompt", "input": "x"}', '{"type": "turn.prompt", "input": [null, 3]}',
    '{"type": "usage.record", "usage": []}', '{"type": "usage.record", "usage": {"output": "x"}}',
    '{"type": "interaction.request", "kind": "approval", "request": "x"}',
    '{"type": "context.append_loop_event", "event": "x"}',
    '{"type": "context.append_loop_event", "event": {"type": "content.part", "part": "x"}}',
    '{"type": "context.append_loop_event", "event": {"type": "tool.result", "result": "x"}}',
]  # fmt: skip


@pytest.mark.parametrize("driver_class", [LegacyDriver, KimiCodeDriver])
def test_every_odd_record_is_skipped_not_raised(driver_class) -> None:
    driver = driver_class(KimiInstall(binary="kimi", version="1", dialect=driver_class.name))
    raising = 0
    for line in ODD:
        try:
            driver.parse_wire_line(line)
        except Exception:
            raising += 1  # the raw parser is not total: events() is what the session calls
        assert isinstance(driver.events(line), list), line
    assert raising >= 3
    good = (
        '{"message": {"type": "TurnEnd", "payload": {}}}'
        if driver.name == "legacy"
        else '{"type": "turn.ended"}'
    )
    assert [type(e) for e in driver.events(good)] == [TurnEnd]


def test_a_log_that_vanishes_or_shrinks_is_handled(tmp_path: Path) -> None:
    log = tmp_path / "wire.jsonl"
    log.write_text('{"a": 1}\n{"b": 2}\n')
    tail = WireTail(log)
    assert tail.poll() == ['{"a": 1}', '{"b": 2}']
    log.unlink()
    assert tail.poll() == []
    log.write_text('{"c": 3}\n')  # rewritten, shorter than what was read
    assert tail.poll() == ['{"c": 3}']
