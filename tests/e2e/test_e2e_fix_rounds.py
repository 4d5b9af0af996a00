"""Fix until the checks pass (issue 31 item 3), through a real MCP client into the real server driving a real
Kimi (one launch per dialect): Kimi's first answer fails ``verify_command`` (run in the workspace itself, no
isolation); the same conversation gets the check's failing output (masked) as its next turn, Kimi fixes it,
the check passes. Bad ``fix_rounds`` are refused before anything starts."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from fake_moonshot import FakeMoonshot, Reply, last_user_text
from fastmcp import Client
from kimi_env import KimiUnderTest
from mcp_helpers import processes_with_home, with_client

pytestmark = pytest.mark.e2e

TOKEN = "tok-fixround-5b1e0c9a77d2"  # in the workspace's .env: masked wherever it shows
CHECK = 'test "$(cat answer.txt)" = 42 || { echo "got: $(cat answer.txt) with $(cat .env)"; exit 1; }'


def test_a_failing_check_goes_back_to_the_same_conversation_until_it_passes(
    kimi: KimiUnderTest, fake: FakeMoonshot, workspace: Path, tmp_path: Path
) -> None:
    (workspace / ".env").write_text(f"DEPLOY_TOKEN={TOKEN}\n")
    fake.script(
        [Reply.tool(*kimi.write("answer.txt", "wrong-7f3a\n")), Reply.text_reply("first try")],
        marker="FIX-TASK",
    )
    # answered only for a request that carries the check's failing output, in the first turn's conversation
    fake.script(
        [Reply.tool(*kimi.write("answer.txt", "42\n")), Reply.text_reply("fixed it", requires="first try")],
        marker="got: wrong-7f3a",
    )
    progress: list[str] = []

    async def on_progress(_done: float, _total: float | None, message: str | None) -> None:
        progress.append(message or "")

    async def body(client: Client):
        task = {"task_description": "FIX-TASK: write the answer", "verify_command": CHECK, "fix_rounds": 2}
        fixed = await client.call_tool(
            "kimi_code_task", task, raise_on_error=False, progress_handler=on_progress
        )
        bad = [
            await client.call_tool("kimi_code_task", {**task, "verify_command": None}, raise_on_error=False),
            await client.call_tool("kimi_debug", {"error_message": "x", "verify_command": CHECK, "fix_rounds": 6},
                                   raise_on_error=False),
        ]  # fmt: skip
        return fixed, bad

    env = {**kimi.env, "KIMI_MCP_STANDBY": "off"}  # the job's Kimi is the only one
    fixed, bad = asyncio.run(with_client(env, workspace, tmp_path / "server.log", body))
    result = fixed.structured_content
    assert result["success"] is True and result["output"] == "fixed it", result
    assert [(r["round"], r["exit_code"]) for r in result["rounds"]] == [(0, 1), (1, 0)]
    assert result["rounds"][0]["output_tail"] == "got: wrong-7f3a with DEPLOY_TOKEN=***\n"
    assert result["verify"]["passed"] is True and result["verify"]["command"] == CHECK
    assert result["files_created"] == ["answer.txt"] and result["file_contents"] == {"answer.txt": "42\n"}
    usage = result["usage"]
    assert all(r["tokens"] > 0 for r in result["rounds"])
    assert sum(r["tokens"] for r in result["rounds"]) == usage["input_tokens"] + usage["output_tokens"]
    requests = fake.chat_requests()
    assert len(requests) == 4  # two steps a round: nothing asked twice, no turn more
    fix = last_user_text(requests[2]["body"])
    assert "exit code 1" in fix and "got: wrong-7f3a with DEPLOY_TOKEN=***" in fix
    assert TOKEN not in json.dumps([r["body"] for r in requests]) and TOKEN not in json.dumps(result)
    assert any("fix round 1 of 2" in message for message in progress), progress
    errors = [b.structured_content["error"] for b in bad]
    assert [b.is_error for b in bad] == [True, True] and {e["type"] for e in errors} == {"bad_input"}
    assert "fix_rounds needs verify_command" in errors[0]["message"] and "fix_rounds" in errors[1]["message"]
    assert not processes_with_home(kimi.home)
