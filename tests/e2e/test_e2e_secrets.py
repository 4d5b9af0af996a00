"""Secrets are masked by content in everything returned, logged or saved, whatever text carries them:
a shell command that never names the secret file, a provider error echoing the key, a transcript."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from fake_moonshot import FakeMoonshot, Reply
from kimi_env import FAKE_KEY, KimiUnderTest
from mcp_helpers import call_tool

pytestmark = pytest.mark.e2e

VALUE = "wsSecret-0123456789abc"  # the value of a secret file in the workspace
OTHER_KEY = "sk-leaked0123456789abcdefXYZ"  # key-shaped, configured nowhere


def test_secret_values_are_masked_in_results_progress_and_transcripts(
    kimi: KimiUnderTest, fake: FakeMoonshot, workspace: Path, tmp_path: Path
):
    (workspace / ".gitignore").write_text(".env\n")
    (workspace / ".env").write_text(f"API_TOKEN={VALUE}\n")
    (workspace / "notes.txt").write_text("nothing here\n")
    transcripts = tmp_path / "transcripts"
    env = dict(kimi.env, KIMI_MCP_TRANSCRIPT_DIR=str(transcripts), KIMI_MCP_STANDBY="off")
    fake.script(
        [
            Reply.tools([kimi.shell(f"grep -rn {VALUE} . || true"), kimi.shell("cat .env")]),
            Reply.tool(*kimi.write("config.py", f'TOKEN = "{VALUE}"\n')),
            Reply.text_reply(f"The token is {VALUE} and the other key is {OTHER_KEY}."),
        ]
    )
    progress: list = []
    result = call_tool(
        env, workspace, tmp_path / "server.log", "kimi_code_task", {"task_description": "find it"}, progress
    )
    data = result.structured_content
    assert data["success"] is True, data.get("error")
    shell_runs = [run for run in data["evidence"]["tools_run"] if run["name"] == kimi.shell_tool]
    assert len(shell_runs) == 2 and all(run["approval"] == "approved" for run in shell_runs)
    grep = shell_runs[0]
    assert "***" in grep["arguments"]
    if kimi.name == "kimi-code":  # legacy logs "Command executed successfully." instead of the output
        assert "./.env:1:API_TOKEN=***" in (grep["result"] or "")  # it ran; its output is masked
    assert data["file_contents"]["config.py"] == 'TOKEN = "***"\n'
    assert data["output"] == "The token is *** and the other key is ***."
    everything = json.dumps(data) + "".join(getattr(c, "text", "") for c in result.content)
    assert VALUE not in everything and OTHER_KEY not in everything
    assert progress and not any(VALUE in (message or "") for _, _, message in progress)
    saved = list(transcripts.glob("*.log"))
    assert saved, "no transcript saved"
    assert all(VALUE not in path.read_text() for path in saved)
    assert VALUE not in (tmp_path / "server.log").read_text()


def test_a_provider_error_echoing_the_key_is_masked(
    kimi: KimiUnderTest, fake: FakeMoonshot, workspace: Path, tmp_path: Path
):
    fake.script([Reply.error(401, f"Incorrect API key provided: {FAKE_KEY}; also {OTHER_KEY}")])
    result = call_tool(
        kimi.env, workspace, tmp_path / "server.log", "kimi_code_task", {"task_description": "hi"}
    )
    data = result.structured_content
    assert data["error"]["type"] == "auth"
    text = json.dumps(data) + "".join(getattr(c, "text", "") for c in result.content)
    if kimi.name == "kimi-code":  # legacy shows its own message, without the provider's text
        assert "Incorrect API key provided" in text  # the message itself is kept
    assert FAKE_KEY not in text and OTHER_KEY not in text
    log = (tmp_path / "server.log").read_text()
    assert FAKE_KEY not in log and OTHER_KEY not in log
