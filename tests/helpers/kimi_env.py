"""What the tests share about a Kimi under test: the fake key, the server's base environment, the dialect's
tool names."""

from __future__ import annotations

import os
from pathlib import Path

from kimi_install import CACHE

FAKE_KEY = "sk-test-FAKEKEY-0123456789abcdef"


def base_env(home: Path) -> dict[str, str]:
    """The server's environment: the test runner's, minus anything that could reach a real API."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("KIMI_", "MOONSHOT_", "OPENAI_")) and k not in ("HOME", "XDG_CONFIG_HOME")
    }
    env.update(
        HOME=str(home),
        XDG_CONFIG_HOME=str(home / ".config"),
        NO_PROXY="127.0.0.1,localhost",
        FASTMCP_LOG_LEVEL="WARNING",
        PYTHONWARNINGS="ignore",
        KIMI_MCP_LOG_LEVEL="DEBUG",
        # The product's default starts a standby Kimi after each successful call (KIMI_MCP_STANDBY=after-call);
        # after a test's last call that is a Kimi started for nothing: 15 % of an e2e file's CPU, measured.
        # The standby is tested where it is the subject, with the default set again (test_e2e_standby,
        # test_e2e_events, test_e2e_model's standby test, the benchmarks).
        KIMI_MCP_STANDBY="off",
    )
    return env


def with_node(env: dict[str, str], node_bin: Path) -> dict[str, str]:
    """``env`` with Node 22 first on PATH, and one Node compile cache for every test's Kimi Code (kimi-mcp's
    own default is under each test's HOME, so every test's first Kimi Code would compile its bundle anew)."""
    env = dict(env)
    env["PATH"] = f"{node_bin}{os.pathsep}{env.get('PATH', '')}"
    env.setdefault("NODE_COMPILE_CACHE", str(CACHE / "node-compile-cache"))
    return env


class KimiUnderTest:
    """A dialect under test: its server environment and the names of its file/shell tools."""

    def __init__(self, name: str, env: dict[str, str], home: Path) -> None:
        self.name = name
        self.env = env
        self.home = home
        self.write_tool = "WriteFile" if name == "legacy" else "Write"
        self.shell_tool = "Shell" if name == "legacy" else "Bash"

    def write(self, path: str, content: str) -> tuple[str, dict]:
        return (self.write_tool, {"path": path, "content": content})

    def shell(self, command: str) -> tuple[str, dict]:
        return (self.shell_tool, {"command": command})


def kimi_code_env_for(install: tuple[Path, Path], base_url: str, home: Path) -> dict[str, str]:
    """The server's environment for a Kimi Code ``install`` (binary, Node's bin directory) configured by
    environment (no login) and pointed at the fake API at ``base_url``."""
    binary, node_bin = install
    env = with_node(base_env(home), node_bin)
    env.update(kimi_code_fake_model(base_url), KIMI_MCP_KIMI_BIN=str(binary))
    return env


def kimi_code_fake_model(base_url: str) -> dict[str, str]:
    """The variables that configure Kimi Code's model (no login) as the fake API at ``base_url``."""
    return dict(
        KIMI_MODEL_NAME="kimi-k2-fake",
        KIMI_MODEL_API_KEY=FAKE_KEY,
        KIMI_MODEL_PROVIDER_TYPE="kimi",
        KIMI_MODEL_BASE_URL=base_url,
        KIMI_MODEL_CAPABILITIES="tool_use",
        KIMI_CODE_BASE_URL=base_url.replace("/v1", "/coding/v1"),  # keep startup calls on loopback
        KIMI_LOOP_MAX_ATTEMPTS_PER_STEP="2",
        KIMI_MCP_TIMEOUT="120",
    )
