"""Fixtures: the real Kimi binaries, the suite's fake Moonshot API, isolated homes and workspaces."""

from __future__ import annotations

import os
import sys
import time
import types
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

import kimi_install  # noqa: E402
from fake_moonshot import FakeMoonshot  # noqa: E402

from kimi_mcp.tracker import _snapshot  # noqa: E402

FAKE_KEY = "sk-test-FAKEKEY-0123456789abcdef"


@pytest.fixture(scope="session")
def legacy_kimi() -> Path:
    try:
        return kimi_install.install_legacy()
    except kimi_install.InstallFailed as exc:
        pytest.fail(f"cannot install kimi-cli {kimi_install.LEGACY_VERSION}: {exc}")


@pytest.fixture(scope="session")
def kimi_code() -> tuple[Path, Path]:
    """(kimi binary, directory with node 22)."""
    try:
        return kimi_install.install_kimi_code()
    except kimi_install.InstallFailed as exc:
        pytest.fail(f"cannot install Kimi Code {kimi_install.KIMI_CODE_VERSION}: {exc}")


@pytest.fixture(scope="session")
def stub_kimi() -> Path:
    try:
        return kimi_install.install_stub()
    except kimi_install.InstallFailed as exc:
        pytest.fail(f"cannot install the kimi-cli stub: {exc}")


@pytest.fixture(scope="session")
def _fake_server():
    with FakeMoonshot() as fake:
        yield fake


@pytest.fixture
def fake(_fake_server: FakeMoonshot) -> FakeMoonshot:
    _fake_server.reset()
    return _fake_server


@pytest.fixture
def home(tmp_path: Path) -> Path:
    path = tmp_path / "home"
    path.mkdir()
    return path


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    path = tmp_path / "work"
    path.mkdir()
    return path


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
    )
    return env


@pytest.fixture
def legacy_env(legacy_kimi: Path, fake: FakeMoonshot, home: Path) -> dict[str, str]:
    """A logged-in legacy Kimi (model from env vars) pointed at the fake API."""
    env = base_env(home)
    env.update(
        KIMI_MCP_KIMI_BIN=str(legacy_kimi),
        KIMI_BASE_URL=fake.base_url,
        KIMI_API_KEY=FAKE_KEY,
        KIMI_MODEL_NAME="kimi-k2-fake",
        KIMI_MCP_TIMEOUT="120",
    )
    return env


def with_node(env: dict[str, str], node_bin: Path) -> dict[str, str]:
    env = dict(env)
    env["PATH"] = f"{node_bin}{os.pathsep}{env.get('PATH', '')}"
    return env


@pytest.fixture
def kimi_code_env(kimi_code: tuple[Path, Path], fake: FakeMoonshot, home: Path) -> dict[str, str]:
    """A Kimi Code configured by environment (no login) and pointed at the fake API."""
    binary, node_bin = kimi_code
    env = with_node(base_env(home), node_bin)
    env.update(
        KIMI_MCP_KIMI_BIN=str(binary),
        KIMI_MODEL_NAME="kimi-k2-fake",
        KIMI_MODEL_API_KEY=FAKE_KEY,
        KIMI_MODEL_PROVIDER_TYPE="kimi",
        KIMI_MODEL_BASE_URL=fake.base_url,
        KIMI_MODEL_CAPABILITIES="tool_use",
        KIMI_CODE_BASE_URL=fake.base_url.replace("/v1", "/coding/v1"),  # keep startup calls on loopback
        KIMI_LOOP_MAX_ATTEMPTS_PER_STEP="2",
        KIMI_MCP_TIMEOUT="120",
    )
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


@pytest.fixture(params=["legacy", "kimi-code"])
def kimi(request: pytest.FixtureRequest, home: Path) -> KimiUnderTest:
    if request.param == "legacy":
        env = request.getfixturevalue("legacy_env")
    else:
        env = request.getfixturevalue("kimi_code_env")
    return KimiUnderTest(request.param, env, home)


@pytest.fixture
def settled(monkeypatch: pytest.MonkeyPatch) -> None:
    """Make tracker snapshots believe they were taken 10 s from now, so no file counts as racily clean."""
    fake = types.SimpleNamespace(time_ns=lambda: time.time_ns() + 10_000_000_000)
    monkeypatch.setattr(_snapshot, "time", fake)
