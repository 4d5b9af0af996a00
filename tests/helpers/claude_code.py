"""Driving the real Claude Code (headless, ``claude -p``) against the suite's fake Anthropic API, with the
real kimi-mcp server registered the way the README says (``claude mcp add kimi -e ... -- uv run --project
<repo> kimi-mcp``)."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil
from kimi_env import base_env

REPO = Path(__file__).resolve().parents[2]
#: the stdio command line from the README's Claude Code section
SERVER_COMMAND = ["uv", "run", "--project", str(REPO), "kimi-mcp"]
FAKE_ANTHROPIC_KEY = "sk-ant-fake-key"
KIMI_TOOLS = ("mcp__kimi__kimi_code_task", "mcp__kimi__kimi_job")


def server_vars(kimi_env: dict[str, str]) -> dict[str, str]:
    """What the kimi-mcp server needs from a Kimi-under-test environment; passed with ``claude mcp add -e``
    (Claude Code's own environment holds none of the KIMI_* variables)."""
    wanted = ("PATH", "HOME", "NO_PROXY", "FASTMCP_LOG_LEVEL", "PYTHONWARNINGS")
    return {k: v for k, v in kimi_env.items() if k.startswith(("KIMI_", "XDG_")) or k in wanted}


def claude_env(home: Path, base_url: str) -> dict[str, str]:
    """Claude Code's environment: an isolated HOME and TMPDIR, no nonessential traffic, the fake API."""
    env = {k: v for k, v in base_env(home).items() if not k.startswith(("ANTHROPIC_", "CLAUDE_"))}
    tmp = home / "tmp"
    tmp.mkdir(exist_ok=True)
    env.update(
        TMPDIR=str(tmp),
        CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC="1",
        ANTHROPIC_BASE_URL=base_url,
        ANTHROPIC_API_KEY=FAKE_ANTHROPIC_KEY,
        npm_config_update_notifier="false",
    )
    return env


@dataclass
class ClaudeCode:
    binary: Path
    cwd: Path  # Claude Code's project directory (its MCP servers are stored per directory)
    env: dict[str, str]

    def run(self, *args: str, timeout: float = 240) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(self.binary), *args],
            cwd=self.cwd,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=timeout,
        )

    def add_kimi(self, server_env: dict[str, str]) -> subprocess.CompletedProcess[str]:
        flags = [part for key, value in server_env.items() for part in ("-e", f"{key}={value}")]
        proc = self.run("mcp", "add", "kimi", *flags, "--", *SERVER_COMMAND, timeout=60)
        assert proc.returncode == 0, proc.stderr
        return proc

    def print_json(self, prompt: str) -> dict[str, Any]:
        """``claude -p prompt --output-format json``, allowed to run the kimi tools; the parsed result."""
        proc = self.run("-p", prompt, "--output-format", "json", "--allowedTools", ",".join(KIMI_TOOLS))
        assert proc.returncode == 0, f"claude -p failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}"
        return json.loads(proc.stdout)


def processes_of(home: Path) -> list[psutil.Process]:
    """Every live process with HOME=home: Claude Code, the server, uv, Kimi, Node and their children."""
    found = []
    for proc in psutil.process_iter(["pid"]):
        try:
            if (
                proc.pid != os.getpid()
                and proc.status() != psutil.STATUS_ZOMBIE
                and proc.environ().get("HOME") == str(home)
            ):
                found.append(proc)
        except psutil.Error:
            continue
    return found


def wait_until_gone(home: Path, timeout: float = 30.0) -> list[str]:
    """Wait until no process with HOME=home is left (the server shuts its Kimis down after Claude Code
    exits); returns the command lines still alive at the deadline."""
    deadline = time.monotonic() + timeout
    while True:
        left = processes_of(home)
        if not left or time.monotonic() > deadline:
            break
        psutil.wait_procs(left, timeout=0.5)
    return [_describe(p) for p in left if p.is_running()]


def kill_all(home: Path) -> None:
    """Teardown: kill whatever is still running with HOME=home (only ever this test's processes)."""
    for proc in processes_of(home):
        with contextlib.suppress(psutil.Error):
            proc.kill()


def _describe(proc: psutil.Process) -> str:
    try:
        return f"{proc.pid}: {' '.join(proc.cmdline())}"
    except psutil.Error:
        return str(proc.pid)
