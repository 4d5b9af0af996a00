"""The MCP Inspector CLI (a second, independent client) against the real server over stdio: the tool list
passes its schema-portability check (``--strict``) with zero findings, and a call works when the server's
variables are passed with ``-e`` (it does not forward the shell's environment), as the README says."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
from mcp_helpers import SERVER

pytestmark = pytest.mark.e2e


def inspect(inspector: tuple[Path, Path], home: Path, cwd: Path, *args: str) -> subprocess.CompletedProcess:
    binary, node_bin = inspector
    env = {"PATH": f"{node_bin}{os.pathsep}{os.environ['PATH']}", "HOME": str(home)}
    return subprocess.run(
        [str(binary), "--cli", *args], env=env, cwd=cwd, capture_output=True, text=True, timeout=180
    )


def test_tools_list_strict_has_zero_findings(inspector, legacy_env: dict, workspace: Path, home: Path):
    done = inspect(
        inspector, home, workspace, SERVER, "--method", "tools/list", "--format", "json", "-q", "--strict"
    )
    assert done.returncode == 0, done.stderr[-2000:]  # --strict exits 6 on any finding
    names = {tool["name"] for tool in json.loads(done.stdout)["result"]["tools"]}
    assert {"kimi_code_task", "kimi_continue", "kimi_job", "kimi_jobs", "kimi_status", "kimi_apply"} <= names
    assert len(names) == 16


def test_a_call_with_the_servers_variables_passed_by_e(
    inspector, legacy_env: dict, workspace: Path, home: Path
):
    passed = [
        f"-e{key}={legacy_env[key]}"
        for key in (
            "KIMI_MCP_KIMI_BIN",
            "HOME",
            "XDG_STATE_HOME",
            "KIMI_MODEL_NAME",
            "KIMI_API_KEY",
            "KIMI_BASE_URL",
        )
        if key in legacy_env
    ]
    args = [*passed, SERVER, "--method", "tools/call", "--tool-name", "kimi_status", "--format", "json", "-q"]
    done = inspect(inspector, home, workspace, *args)
    assert done.returncode == 0, done.stderr[-2000:]
    report = json.loads(done.stdout)["result"]["structuredContent"]
    assert report["success"] is True, report["problems"]
    assert report["dialect"] == "legacy" and report["kimi_version"] == "1.50.0"
    assert report["login"] == "logged in: kimi-k2-fake (from KIMI_MODEL_NAME)"  # only what -e passed


def test_a_kimi_call_in_the_modern_era_completes_as_a_task(
    inspector, legacy_env: dict, fake, workspace: Path, home: Path, tmp_path: Path
):
    from fake_moonshot import Reply

    fake.script(
        [Reply.tool("WriteFile", {"path": "made.txt", "content": "made\n"}), Reply.text_reply("Made it.")]
    )
    log = tmp_path / "server.log"
    passed = [f"-e{key}={value}" for key, value in legacy_env.items() if key.startswith(("KIMI_", "XDG_"))]
    passed += [f"-eHOME={home}", f"-eKIMI_MCP_LOG_FILE={log}"]
    task = json.dumps({"task_description": "Create made.txt", "work_dir": str(workspace)})
    args = [
        *passed, SERVER, "--protocol-era", "modern", "--method", "tools/call", "--tool-name", "kimi_code_task",
        "--tool-args-json", task, "--format", "json", "-q",
    ]  # fmt: skip
    done = inspect(inspector, home, workspace, *args)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    result = json.loads(done.stdout)["result"]
    assert result["structuredContent"]["status"] == "done", result
    assert result["structuredContent"]["files_created"] == ["made.txt"]
    job_id = result["structuredContent"]["job_id"]
    assert f"kimi_code_task runs as task {job_id}" in log.read_text()
