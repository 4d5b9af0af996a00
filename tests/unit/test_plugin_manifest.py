"""The Claude Code plugin's files agree with the package: the manifests' name, version and license, the
server they start, and every tool a command or the skill names is one of the server's (checked against the
one list of tool names; the real Claude Code validates and installs the plugin in tests/e2e/test_e2e_plugin.py)."""

from __future__ import annotations

import json
import re
import tomllib
from pathlib import Path

from kimi_mcp.tool_names import ALL_TOOLS

ROOT = Path(__file__).resolve().parents[2]
PREFIX = "mcp__plugin_kimi-mcp_kimi__"


def _front_matter(path: Path) -> dict[str, str]:
    head = path.read_text().split("---\n")[1]
    return dict(line.split(": ", 1) for line in head.splitlines() if ": " in line)


def test_the_manifests_name_the_package_its_version_and_its_server() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    plugin = json.loads((ROOT / ".claude-plugin" / "plugin.json").read_text())
    market = json.loads((ROOT / ".claude-plugin" / "marketplace.json").read_text())
    (entry,) = market["plugins"]
    assert plugin["name"] == entry["name"] == market["name"] == project["name"] == "kimi-mcp"
    assert plugin["version"] == entry["version"] == project["version"]
    assert plugin["license"] == project["license"]
    assert entry["description"] == plugin["description"]
    server = plugin["mcpServers"]["kimi"]
    assert server["command"] == "uv"
    assert server["args"] == [
        "run",
        "--project",
        "${CLAUDE_PLUGIN_ROOT}",
        "--frozen",
        "--no-dev",
        "--quiet",
        "kimi-mcp",
    ]
    assert "kimi-mcp" in project["scripts"]


def test_every_tool_the_commands_and_the_skill_name_is_one_of_the_servers() -> None:
    commands = sorted((ROOT / "commands").glob("*.md"))
    assert [c.stem for c in commands] == ["jobs", "review", "status", "task"]
    for command in commands:
        meta = _front_matter(command)
        assert meta["description"], command
        allowed = [t.strip() for t in meta["allowed-tools"].split(",")]
        assert allowed and all(
            t.startswith(PREFIX) and t.removeprefix(PREFIX) in ALL_TOOLS for t in allowed
        ), (
            command.name,
            allowed,
        )
        body = command.read_text().split("---\n", 2)[2]
        named = set(re.findall(r"`(kimi_[a-z_]+)`", body))
        assert named and named <= set(ALL_TOOLS), (command.name, named)
        assert named <= {t.removeprefix(PREFIX) for t in allowed}, (command.name, named)
    assert "$ARGUMENTS" in (ROOT / "commands" / "task.md").read_text()
    skill = ROOT / "skills" / "delegate-to-kimi" / "SKILL.md"
    assert _front_matter(skill)["name"] == "delegate-to-kimi"
    named = set(re.findall(r"\b(kimi_[a-z_]+)\(?", skill.read_text()))
    assert named <= set(ALL_TOOLS), named - set(ALL_TOOLS)
