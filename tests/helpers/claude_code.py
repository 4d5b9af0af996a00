"""Driving the real Claude Code (headless, ``claude -p``, or its interactive TUI in a pty) against the
suite's fake Anthropic API, with the real kimi-mcp server registered the way the README says (``claude mcp
add kimi -e ... -- uv run --project <repo> kimi-mcp``)."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pexpect
import psutil
from kimi_env import base_env

from kimi_mcp.session._screen import TerminalScreen

#: keys as the pty sends them (xterm)
KEYS = {"up": "\x1b[A", "down": "\x1b[B", "right": "\x1b[C", "left": "\x1b[D", "enter": "\r", "tab": "\t"}
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

    @property
    def server_log(self) -> Path:
        """Where the kimi server that ``add_kimi`` registers logs (unless its environment names a file)."""
        return self.cwd.parent / "kimi-mcp-server.log"

    def tools_listed(self) -> bool:
        """Whether the kimi server has listed its tools to Claude Code (the first time)."""
        log = self.server_log
        return log.exists() and "tools listed to the client" in log.read_text(errors="replace")

    def add_kimi(self, server_env: dict[str, str]) -> subprocess.CompletedProcess[str]:
        server_env = {"KIMI_MCP_LOG_FILE": str(self.server_log), **server_env}
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


class ClaudeTUI:
    """Interactive Claude Code (its TUI in a pty, as a person runs it) in ``claude.cwd``: onboarding, the
    trust dialog and the API key pre-accepted in its config, ``allowed`` tools pre-approved. The kimi
    server must log to ``server_log`` (``KIMI_MCP_LOG_FILE``): a prompt is typed only once the server has
    listed its tools to Claude Code, so the model never calls before the tools are there."""

    def __init__(self, claude: ClaudeCode, allowed: tuple[str, ...], server_log: Path, **env: str) -> None:
        self.claude, self.allowed, self.server_log = claude, allowed, server_log
        self.env = {**claude.env, "TERM": "xterm-256color", **env}
        self.child: Any = None
        self.screen_log = claude.cwd.parent / "claude-tui.log"
        self.screen = TerminalScreen(rows=50, cols=160)  # what the TUI shows now (fed by every read)

    def seed_config(self) -> None:
        """Mark onboarding done, the workspace trusted and the fake key approved (keeps what is there)."""
        path = Path(self.env["HOME"]) / ".claude.json"
        config = json.loads(path.read_text()) if path.exists() else {}
        config.update(hasCompletedOnboarding=True, theme="dark", numStartups=5)
        config["customApiKeyResponses"] = {"approved": [FAKE_ANTHROPIC_KEY[-20:]], "rejected": []}
        project = config.setdefault("projects", {}).setdefault(str(self.claude.cwd), {})
        project.update(hasTrustDialogAccepted=True, hasCompletedProjectOnboarding=True)
        path.write_text(json.dumps(config))

    def start(self, timeout: float = 120) -> None:
        self.seed_config()
        self.child = pexpect.spawn(
            str(self.claude.binary), ["--allowedTools", ",".join(self.allowed)], cwd=str(self.claude.cwd),
            env=self.env, encoding="utf-8", dimensions=(50, 160), timeout=timeout,
        )  # fmt: skip
        self.child.logfile_read = _Tee(open(self.screen_log, "a"), self.screen)  # noqa: SIM115 - closed in close()
        self.child.expect("❯")  # the input box
        self.wait_until(lambda: "tools listed to the client" in self._server_log(), timeout, "kimi's tools")

    def ask(self, prompt: str) -> None:
        self.child.send(prompt)
        time.sleep(0.3)  # the TUI takes pasted text first, then Enter as its own key
        self.child.send("\r")

    def wait_until(self, done: Any, timeout: float, what: str) -> None:
        """Keep reading the screen (a full pty would block Claude Code) until ``done()``."""
        deadline = time.monotonic() + timeout
        while not done():
            if time.monotonic() > deadline:
                raise AssertionError(
                    f"Claude Code: no {what} after {timeout:.0f}s (screen: {self.screen_log})"
                )
            try:
                self.child.expect(pexpect.TIMEOUT, timeout=0.2)
            except pexpect.EOF as exc:
                raise AssertionError(f"Claude Code exited while waiting for {what}") from exc

    def wait_for_text(self, text: str, timeout: float) -> str:
        """Wait until ``text`` is on the screen; the screen's text."""
        self.wait_until(lambda: text in self.screen.text, timeout, repr(text))
        return self.screen.text

    def press(self, *keys: str, pause: float = 0.5) -> None:
        """Send keys one by one (names from ``KEYS``, else literal text), letting the TUI redraw between."""
        for key in keys:
            self.child.send(KEYS.get(key, key))
            self.child.expect(pexpect.TIMEOUT, timeout=pause)  # keeps reading the screen meanwhile

    def close(self) -> None:
        """Leave as a person does (Ctrl-C twice), then make sure it is gone."""
        if self.child is None:
            return
        with contextlib.suppress(Exception):
            self.child.sendcontrol("c")
            time.sleep(0.3)
            self.child.sendcontrol("c")
            self.child.expect(pexpect.EOF, timeout=15)
        self.child.close(force=True)
        self.child.logfile_read.close()

    def _server_log(self) -> str:
        return self.server_log.read_text(errors="replace") if self.server_log.exists() else ""


class _Tee:
    """pexpect's ``logfile_read``: the raw output to the screen log, and into the screen."""

    def __init__(self, log: Any, screen: TerminalScreen) -> None:
        self.log, self.screen = log, screen

    def write(self, data: str) -> None:
        self.log.write(data)
        self.screen.feed(data)

    def flush(self) -> None:
        self.log.flush()

    def close(self) -> None:
        self.log.close()
