"""kimi-mcp as a Claude Code plugin: the real Claude Code 2.1.330 validates the checkout's manifests, adds it as
a marketplace and installs ``kimi-mcp@kimi-mcp``; the plugin's server (``uv run --project`` in the plugin's own
copy) then serves kimi's tools as ``mcp__plugin_kimi-mcp_kimi__…``, and its slash commands reach them
(``/kimi-mcp:status`` → ``kimi_status``, ``/kimi-mcp:task`` → ``kimi_code_task`` driving a real Kimi)."""

from __future__ import annotations

import json
import shutil
import subprocess
import tomllib
from collections.abc import Callable
from pathlib import Path

import pytest
from claude_code import REPO, ClaudeCode, claude_env, kill_all, server_vars, wait_until_gone
from fake_anthropic import FakeAnthropic, Step
from fake_moonshot import FakeMoonshot, Reply
from kimi_env import KimiUnderTest

pytestmark = pytest.mark.e2e

PREFIX = "mcp__plugin_kimi-mcp_kimi__"  # Claude Code's names for a plugin server's tools
HELLO = "def hello() -> str:\n    return 'hello from the plugin'\n"


def shipped_copy(dest: Path) -> Path:
    """The checkout as a clone of it has it (tracked files and new ones not ignored; never .venv or caches):
    Claude Code copies a directory marketplace whole, so the test adds a copy like a user's fresh clone."""
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=REPO, capture_output=True, check=True,
    ).stdout.decode()  # fmt: skip
    for name in filter(None, listed.split("\0")):
        source = REPO / name
        if source.is_file():
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, dest / name)
    return dest


def manifests(root: Path) -> tuple[dict, dict]:
    plugin = json.loads((root / ".claude-plugin" / "plugin.json").read_text())
    market = json.loads((root / ".claude-plugin" / "marketplace.json").read_text())
    return plugin, market


def test_the_manifests_validate_and_agree_with_the_package(claude_code: Path, tmp_path: Path) -> None:
    root = shipped_copy(tmp_path / "kimi-mcp")
    plugin, market = manifests(root)
    project = tomllib.loads((root / "pyproject.toml").read_text())["project"]
    version = project["version"]
    assert plugin["license"] == project["license"]
    (entry,) = market["plugins"]
    assert plugin["name"] == entry["name"] == market["name"] == "kimi-mcp"
    assert plugin["version"] == entry["version"] == version
    assert entry["source"] == "./" and entry["description"] == plugin["description"]
    checked = subprocess.run(
        [str(claude_code), "plugin", "validate", "--strict", str(root)],
        capture_output=True, text=True, timeout=120, env={"HOME": str(tmp_path), "PATH": "/usr/bin:/bin"},
    )  # fmt: skip
    assert checked.returncode == 0, checked.stdout + checked.stderr
    report = checked.stdout
    for part in ("skills: kimi-mcp:delegate-to-kimi", *(f"commands: kimi-mcp:{c}" for c in
                 ("task", "review", "jobs", "status")), "mcpServers: kimi stdio uv"):  # fmt: skip
        assert part in report, report


@pytest.mark.parametrize("kimi", ["legacy"], indirect=True)  # the plugin's wiring, not a dialect's
def test_the_installed_plugin_serves_kimis_tools_and_its_commands_reach_them(
    claude_code: Path,
    kimi: KimiUnderTest,
    fake: FakeMoonshot,
    fake_anthropic: FakeAnthropic,
    home: Path,
    workspace: Path,
    tmp_path: Path,
) -> None:
    root = shipped_copy(tmp_path / "kimi-mcp")
    log = tmp_path / "kimi-mcp-server.log"
    env = {
        **claude_env(home, fake_anthropic.base_url),
        **server_vars(kimi.env),
        "KIMI_MCP_LOG_FILE": str(log),
    }
    claude = ClaudeCode(claude_code, workspace, env)
    try:
        for step in (("marketplace", "add", str(root)), ("install", "kimi-mcp@kimi-mcp")):
            done = claude.run("plugin", *step, timeout=120)
            assert done.returncode == 0, done.stdout + done.stderr

        def listed(
            times: int,
        ) -> Callable[[], bool]:  # the plugin's server of the nth `claude -p` is connected
            return lambda: (
                log.exists() and log.read_text(errors="replace").count("tools listed to the client") >= times
            )

        fake_anthropic.think_until(
            listed(1)
        )  # a real model takes seconds too (see FakeAnthropic.think_until)
        fake_anthropic.script([Step.tool(PREFIX + "kimi_status", {}), Step.final("Kimi is ready.")])
        status = claude.run("-p", "/kimi-mcp:status", "--output-format", "json")
        assert status.returncode == 0 and json.loads(status.stdout)["result"] == "Kimi is ready.", (
            status.stdout
        )

        fake.script([Reply.tool(*kimi.write("hello.py", HELLO)), Reply.text_reply("Created hello.py.")])
        fake_anthropic.think_until(listed(2))
        fake_anthropic.script(
            [
                Step.tool(PREFIX + "kimi_code_task", {"task_description": "Create hello.py"}),
                Step.final("Done."),
            ]
        )
        task = claude.run("-p", "/kimi-mcp:task create hello.py", "--output-format", "json")
        assert task.returncode == 0 and json.loads(task.stdout)["result"] == "Done.", task.stdout
    finally:
        kill_all(home) if wait_until_gone(home) else None

    first = fake_anthropic.main_requests()[0]["body"]
    found = " ".join(r.text for r in fake_anthropic.results_of("ToolSearch"))  # MCP tools load through it
    assert all(f'"tool_name": "{PREFIX}{name}"' in found for name in ("kimi_status", "kimi_code_task")), found
    asked = json.dumps(first["messages"][0])
    assert "kimi_status" in asked and "summarise it" in asked, asked[:2000]  # the command's own text
    (shown,) = fake_anthropic.results_of(PREFIX + "kimi_status")
    assert shown.is_error is False and json.loads(shown.text)["dialect"] == "legacy", shown.text[:2000]
    (made,) = fake_anthropic.results_of(PREFIX + "kimi_code_task")
    assert made.is_error is False and json.loads(made.text)["files_created"] == ["hello.py"], made.text[:2000]
    assert (workspace / "hello.py").read_text() == HELLO
    last = json.dumps(fake_anthropic.main_requests()[-1]["body"]["messages"][0])
    assert "create hello.py" in last and "change list" in last  # $ARGUMENTS in /kimi-mcp:task's text
