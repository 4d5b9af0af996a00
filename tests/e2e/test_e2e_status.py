"""Configuration and install mistakes show where the user looks (real client → real server → real Kimi):
a bad setting does not kill the server, every call names it; Kimi Code on too old a Node is an install
error before Kimi starts; ``kimi_status`` and ``kimi-mcp --check`` report both without a model call."""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
from pathlib import Path

import pytest
from fake_moonshot import FakeMoonshot
from mcp_helpers import SERVER, processes_with_home, with_client

pytestmark = pytest.mark.e2e


def calls(env: dict, workspace: Path, log: Path) -> tuple:
    async def body(client):
        task = await client.call_tool("kimi_code_task", {"task_description": "x"}, raise_on_error=False)
        status = await client.call_tool("kimi_status", {})
        return task, status.structured_content

    return asyncio.run(with_client(env, workspace, log, body))


def test_a_bad_setting_does_not_kill_the_server_every_call_names_it(
    legacy_env: dict, fake: FakeMoonshot, workspace: Path, tmp_path: Path
):
    env = dict(legacy_env, KIMI_MCP_TIMEOUT="5min")
    task, status = calls(env, workspace, tmp_path / "server.log")
    assert task.is_error and task.structured_content["error"]["type"] == "config"
    assert "KIMI_MCP_TIMEOUT='5min' (from the environment)" in task.content[0].text
    assert "kimi-mcp --check" in task.content[0].text
    assert status["success"] is False and [p["type"] for p in status["problems"]] == ["config"]
    assert status["dialect"] == "legacy" and status["kimi_version"] == "1.50.0"  # the install itself is fine
    assert fake.chat_requests() == []  # no model call
    assert "serving anyway" in (tmp_path / "server.log").read_text()


def test_kimi_code_on_an_old_node_is_an_install_error_naming_the_requirement(
    kimi_code_env: dict, fake: FakeMoonshot, workspace: Path, tmp_path: Path, home: Path
):
    old_node = shutil.which("node", path="/usr/bin:/bin")
    version = subprocess.run([old_node, "--version"], capture_output=True, text=True).stdout.strip()
    if tuple(int(x) for x in version.lstrip("v").split(".")[:2]) >= (22, 19):
        pytest.fail(f"this test needs a Node older than 22.19 at {old_node}; found {version}")
    env = dict(kimi_code_env, PATH=f"{Path(old_node).parent}{os.pathsep}{kimi_code_env['PATH']}")
    task, status = calls(env, workspace, tmp_path / "server.log")
    error = task.structured_content["error"]
    assert task.is_error and error["type"] == "install"
    assert "needs Node >= 22.19" in error["message"] and version in error["message"]
    assert "PATH" in error["suggestion"]
    assert status["node_version"] is None and status["problems"][0]["type"] == "install"
    assert fake.chat_requests() == [] and not processes_with_home(home)


def test_check_from_a_terminal(legacy_env: dict, workspace: Path):
    good = subprocess.run([SERVER, "--check"], env=legacy_env, cwd=workspace, capture_output=True, text=True)
    assert good.returncode == 0, good.stdout + good.stderr
    assert "dialect: legacy 1.50.0" in good.stdout and good.stdout.strip().endswith("ok")
    assert "login: logged in: kimi-k2-fake (from KIMI_MODEL_NAME)" in good.stdout
    env = dict(legacy_env, KIMI_MCP_MAX_CONCURRENT="zero", KIMI_MCP_KIMI_BIN="/nonexistent/kimi")
    bad = subprocess.run([SERVER, "--check"], env=env, cwd=workspace, capture_output=True, text=True)
    assert bad.returncode == 1
    assert "KIMI_MCP_MAX_CONCURRENT='zero' (from the environment)" in bad.stdout
    assert "KIMI_MCP_KIMI_BIN=/nonexistent/kimi is not an executable file" in bad.stdout
    assert bad.stdout.strip().endswith("2 problem(s)")
