"""Which Kimi releases are driven, end to end: Kimi Code under its pre-2.0 numbering (npm
@moonshot-ai/kimi-code 0.43.1) is Kimi Code, whatever its major version says; kimi-cli 1.51.0 (PyPI) is a
working legacy Kimi, unlike the 1.52.0 stub."""

from __future__ import annotations

from pathlib import Path

import kimi_install
import pytest
from fake_moonshot import FakeMoonshot, Reply
from kimi_env import kimi_code_env_for
from mcp_helpers import call_tool, processes_with_home

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def old_kimi_code() -> tuple[Path, Path]:
    try:
        return kimi_install.install_kimi_code(kimi_install.KIMI_CODE_OLD_VERSION)
    except kimi_install.InstallFailed as exc:
        pytest.fail(f"cannot install Kimi Code {kimi_install.KIMI_CODE_OLD_VERSION}: {exc}")


def test_kimi_code_0_43_is_driven_as_kimi_code(
    old_kimi_code: tuple[Path, Path], fake: FakeMoonshot, home: Path, workspace: Path, tmp_path: Path
):
    env = kimi_code_env_for(old_kimi_code, fake.base_url, home)
    fake.script(
        [Reply.tool("Write", {"path": "old.txt", "content": "from 0.43\n"}), Reply.text_reply("written")]
    )
    result = call_tool(
        env,
        workspace,
        tmp_path / "server.log",
        "kimi_code_task",
        {"task_description": "write old.txt", "work_dir": str(workspace)},
    )
    data = result.structured_content
    assert data["success"], data
    assert (data["dialect"], data["kimi_version"]) == ("kimi-code", kimi_install.KIMI_CODE_OLD_VERSION)
    assert data["files_created"] == ["old.txt"] and data["file_contents"] == {"old.txt": "from 0.43\n"}
    assert data["output"] == "written"
    assert (workspace / "old.txt").read_text() == "from 0.43\n"
    assert not processes_with_home(home)


@pytest.fixture(scope="module")
def kimi_cli_151() -> Path:
    try:
        return kimi_install.install_legacy_151()
    except kimi_install.InstallFailed as exc:
        pytest.fail(f"cannot install kimi-cli 1.51.0: {exc}")


def test_kimi_cli_1_51_0_from_pypi_is_driven_as_legacy(
    kimi_cli_151: Path, legacy_env: dict, fake: FakeMoonshot, home: Path, workspace: Path, tmp_path: Path
):
    """PyPI's 1.51.0 ships 1.50.0's code: it is a working Kimi, not the stub (1.52.0)."""
    env = {**legacy_env, "KIMI_MCP_KIMI_BIN": str(kimi_cli_151)}
    fake.script(
        [Reply.tool("WriteFile", {"path": "new.txt", "content": "from 1.51\n"}), Reply.text_reply("ok")]
    )
    result = call_tool(
        env, workspace, tmp_path / "server.log", "kimi_code_task",
        {"task_description": "write new.txt", "work_dir": str(workspace)},
    )  # fmt: skip
    data = result.structured_content
    assert data["success"], data
    assert (data["dialect"], data["kimi_version"]) == ("legacy", "1.51.0")
    assert data["files_created"] == ["new.txt"] and (workspace / "new.txt").read_text() == "from 1.51\n"
    assert not processes_with_home(home)
