"""Concurrent calls in one server, end to end (issue 13, item 2): every result reports exactly the changes
its own Kimi made, or says plainly that it cannot."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from fake_moonshot import FakeMoonshot, Reply
from kimi_env import KimiUnderTest
from mcp_helpers import processes_with_home, with_client

pytestmark = pytest.mark.e2e

SLOW = {"token_delay": 0.25, "chunk_chars": 4}  # a 120-char answer streams for ~7 s


def run_together(kimi: KimiUnderTest, cwd: Path, log: Path, calls: list[tuple[str, dict]]) -> list[dict]:
    async def body(client):
        replies = await asyncio.gather(
            *(client.call_tool(name, args, raise_on_error=False) for name, args in calls)
        )
        return [reply.structured_content for reply in replies]

    return asyncio.run(with_client(kimi.env, cwd, log, body))


@pytest.mark.parametrize("kimi", ["legacy"], indirect=True)  # the runner's behaviour, not a dialect's
def test_a_read_only_call_never_reports_a_concurrent_writers_changes(
    kimi: KimiUnderTest, fake: FakeMoonshot, workspace: Path, tmp_path: Path
):
    (workspace / "a.py").write_text("x = 1\n")
    fake.script([Reply.text_reply("R" * 120, **SLOW)], marker="READER")
    fake.script(
        [Reply.tool(*kimi.write(str(workspace / "w.txt"), "w\n")), Reply.text_reply("written")],
        marker="WRITER",
    )
    reader, writer = run_together(
        kimi, workspace, tmp_path / "server.log",
        [
            ("kimi_analyze_code", {"file_paths": ["a.py"], "analysis_focus": "READER", "work_dir": str(workspace)}),
            ("kimi_code_task", {"task_description": "WRITER task", "work_dir": str(workspace)}),
        ],
    )  # fmt: skip
    assert writer["success"] and writer["files_created"] == ["w.txt"], writer
    assert reader["success"], reader
    assert reader["files_created"] == [] and reader["file_contents"] == {}
    assert (
        len(reader["notes"]) == 1
        and "write call ran in this workspace at the same time" in reader["notes"][0]
    )
    assert (workspace / "w.txt").read_text() == "w\n"
    assert not processes_with_home(kimi.home)


@pytest.mark.parametrize("kimi", ["legacy"], indirect=True)
def test_writers_in_nested_workspaces_each_report_only_their_own_changes(
    kimi: KimiUnderTest, fake: FakeMoonshot, workspace: Path, tmp_path: Path
):
    inner = workspace / "pkg"
    inner.mkdir()
    fake.script(
        [Reply.tool(*kimi.write(str(workspace / "outer.txt"), "o\n")), Reply.text_reply("O" * 60, **SLOW)],
        marker="OUTER",
    )
    fake.script(
        [Reply.tool(*kimi.write(str(inner / "inner.txt"), "i\n")), Reply.text_reply("inner done")],
        marker="INNER",
    )
    outer_result, inner_result = run_together(
        kimi, workspace, tmp_path / "server.log",
        [
            ("kimi_code_task", {"task_description": "OUTER task", "work_dir": str(workspace)}),
            ("kimi_code_task", {"task_description": "INNER task", "work_dir": str(inner)}),
        ],
    )  # fmt: skip
    assert outer_result["success"] and inner_result["success"], (outer_result, inner_result)
    assert outer_result["files_created"] == ["outer.txt"], outer_result["files_created"]
    assert inner_result["files_created"] == ["inner.txt"], inner_result["files_created"]
    assert outer_result["notes"] == [] and inner_result["notes"] == []
    assert (inner / "inner.txt").read_text() == "i\n" and (workspace / "outer.txt").read_text() == "o\n"
