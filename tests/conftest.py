"""Fixtures: the real Kimi binaries, the suite's fake Moonshot API, isolated homes and workspaces."""

from __future__ import annotations

import sys
import time
import types
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent / "helpers"))

import kimi_install  # noqa: E402
from fake_anthropic import FakeAnthropic  # noqa: E402
from fake_moonshot import FakeMoonshot  # noqa: E402
from kimi_env import FAKE_KEY, KimiUnderTest, base_env, kimi_code_env_for  # noqa: E402

from kimi_mcp.tracker import _snapshot  # noqa: E402

# What the suite installs into its cache (the real Kimi binaries, Node 22, Claude Code, the MCP Inspector):
# only e2e tests use it, so the quick tier, `pytest -m "not e2e"`, installs nothing and runs without any of it.
_INSTALLED = frozenset({"legacy_kimi", "kimi_code", "stub_kimi", "claude_code", "inspector", "kimi"})


def _installed_used(item: pytest.Item) -> set[str]:
    """The fixtures of ``_INSTALLED`` the test uses (a parameter of its own by such a name is not one)."""
    own = set()
    for mark in item.iter_markers("parametrize"):
        names = mark.args[0] if mark.args else mark.kwargs["argnames"]
        own.update(names.replace(" ", "").split(",") if isinstance(names, str) else names)
    return (_INSTALLED & set(getattr(item, "fixturenames", ()))) - own


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    if item.get_closest_marker("e2e") is None and (used := _installed_used(item)):
        pytest.fail(
            f"uses {', '.join(sorted(used))} (what the suite installs) but is not marked e2e: mark it, or give "
            "it a fake install from tests/helpers/fake_installs.py",
            pytrace=False,
        )


@pytest.fixture(autouse=True)
def _private_state(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    """kimi-mcp's own files (the job store) of in-process servers go to a fresh directory, never the
    user's ~/.local/state; its data directory (``install-kimi``'s Kimi Code) is a fresh, empty one too, so a
    Kimi the user installed there is never found by a test (servers the tests start inherit both)."""
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path_factory.mktemp("state")))
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path_factory.mktemp("data")))
    monkeypatch.delenv("KIMI_MCP_STATE_DIR", raising=False)


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
def inspector() -> tuple[Path, Path]:
    """(the MCP Inspector CLI, the directory with the Node 22 it runs on)."""
    try:
        return kimi_install.install_inspector()
    except kimi_install.InstallFailed as exc:
        pytest.fail(f"cannot install the MCP Inspector {kimi_install.INSPECTOR_VERSION}: {exc}")


@pytest.fixture(scope="session")
def claude_code() -> Path:
    """The `claude` binary (Claude Code, the MCP client the e2e suite drives)."""
    try:
        return kimi_install.install_claude_code()
    except kimi_install.InstallFailed as exc:
        pytest.fail(f"cannot install Claude Code {kimi_install.CLAUDE_CODE_VERSION}: {exc}")


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


@pytest.fixture(scope="session")
def _fake_anthropic_server():
    with FakeAnthropic() as fake:
        yield fake


@pytest.fixture
def fake_anthropic(_fake_anthropic_server: FakeAnthropic) -> FakeAnthropic:
    """The suite's fake Anthropic Messages API (Claude Code's model), reset for each test."""
    _fake_anthropic_server.reset()
    return _fake_anthropic_server


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


@pytest.fixture
def kimi_code_env(kimi_code: tuple[Path, Path], fake: FakeMoonshot, home: Path) -> dict[str, str]:
    """A Kimi Code configured by environment (no login) and pointed at the fake API."""
    return kimi_code_env_for(kimi_code, fake.base_url, home)


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
