"""Installation problems, API failures and workspace resolution, through a real MCP client."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
from pathlib import Path

import pytest
from fake_moonshot import FakeMoonshot, Reply
from fastmcp import Client
from fastmcp.client.transports import StdioTransport
from kimi_env import FAKE_KEY, base_env
from mcp_helpers import REPO, call_tool, processes_with_home

pytestmark = pytest.mark.e2e


def test_kimi_missing_gives_install_error(home: Path, workspace: Path, tmp_path: Path):
    env = base_env(home)
    env["PATH"] = "/usr/bin:/bin"  # no kimi here
    result = call_tool(env, workspace, tmp_path / "s.log", "kimi_code_task", {"task_description": "x"})
    error = result.structured_content["error"]
    assert result.is_error is True
    assert error["type"] == "install"
    assert "not found on PATH" in error["message"]
    assert "KIMI_MCP_KIMI_BIN" in error["suggestion"] and "kimi-code" in error["suggestion"]


def test_configured_binary_that_does_not_exist(home: Path, workspace: Path, tmp_path: Path):
    env = base_env(home)
    env["KIMI_MCP_KIMI_BIN"] = str(tmp_path / "nope" / "kimi")
    result = call_tool(env, workspace, tmp_path / "s.log", "kimi_code_task", {"task_description": "x"})
    assert result.structured_content["error"]["type"] == "install"
    assert "KIMI_MCP_KIMI_BIN" in result.structured_content["error"]["message"]


def test_deprecated_stub_is_recognised_and_never_run_bare(
    stub_kimi: Path, fake: FakeMoonshot, home: Path, workspace: Path, tmp_path: Path
):
    env = base_env(home)
    env.update(KIMI_MCP_KIMI_BIN=str(stub_kimi), KIMI_BASE_URL=fake.base_url, KIMI_API_KEY=FAKE_KEY)
    result = call_tool(env, workspace, tmp_path / "s.log", "kimi_code_task", {"task_description": "x"})
    error = result.structured_content["error"]
    assert error["type"] == "install"
    assert "stub" in error["message"]
    assert "kimi-cli 1.52.0, the deprecated stub" in error["message"]
    assert "kimi-cli==1.51.0" in error["suggestion"] and "@moonshot-ai/kimi-code" in error["suggestion"]
    assert fake.requests == []
    assert not processes_with_home(home)


def test_rate_limit_is_a_retryable_api_error(
    legacy_env: dict, fake: FakeMoonshot, workspace: Path, tmp_path: Path
):
    fake.script([Reply.error(429, "fake 429 error")])
    result = call_tool(
        legacy_env,
        workspace,
        tmp_path / "s.log",
        "kimi_code_task",
        {"task_description": "hi", "work_dir": str(workspace)},
    )
    error = result.structured_content["error"]
    assert error["type"] == "api" and error["retryable"] is True
    assert "429" in error["message"]
    assert len(fake.chat_requests()) > 1  # Kimi retried before giving up


@pytest.mark.parametrize("era", ["auto", "legacy"])  # 2026-07-28 (input_required) and 2025-11-25 (roots/list)
def test_workspace_comes_from_the_clients_root(
    era: str, legacy_env: dict, fake: FakeMoonshot, tmp_path: Path
):
    root = tmp_path / "project root"  # a space, percent-encoded in the URI
    root.mkdir()
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    fake.script(
        [Reply.tool("WriteFile", {"path": "from_root.txt", "content": "r\n"}), Reply.text_reply("ok")]
    )

    async def body():
        transport = StdioTransport(
            str(Path(os.sys.executable).parent / "kimi-mcp"),
            [],
            env=legacy_env,
            cwd=str(elsewhere),
            keep_alive=False,
            log_file=open(tmp_path / "s.log", "a"),  # noqa: SIM115
        )
        async with Client(transport, roots=[root.as_uri()], timeout=300, mode=era) as client:
            return await client.call_tool(
                "kimi_code_task", {"task_description": "write it"}, raise_on_error=False
            )

    result = asyncio.run(body())
    data = result.structured_content
    assert data["workspace"] == str(root)
    assert data["files_created"] == ["from_root.txt"]
    assert (root / "from_root.txt").exists() and not (elsewhere / "from_root.txt").exists()


def test_uv_run_project_keeps_the_clients_directory(legacy_env: dict, fake: FakeMoonshot, tmp_path: Path):
    """The documented registration: `uv run --project /path/to/kimi-mcp kimi-mcp`, started in the project."""
    project = tmp_path / "proj"
    project.mkdir()
    env = dict(legacy_env, KIMI_MCP_WORKSPACE="")
    fake.script(
        [Reply.tool("WriteFile", {"path": "made_here.txt", "content": "cwd\n"}), Reply.text_reply("ok")]
    )

    async def body():
        transport = StdioTransport(
            shutil.which("uv") or "uv",
            ["run", "--project", str(REPO), "kimi-mcp"],
            env=env,
            cwd=str(project),
            keep_alive=False,
            log_file=open(tmp_path / "s.log", "a"),  # noqa: SIM115
        )
        async with Client(transport, timeout=300) as client:
            return await client.call_tool(
                "kimi_code_task", {"task_description": "write here"}, raise_on_error=False
            )

    data = asyncio.run(body()).structured_content
    assert data["success"] is True, json.dumps(data)[:2000]
    assert data["workspace"] == str(project)
    assert (project / "made_here.txt").read_text() == "cwd\n"
