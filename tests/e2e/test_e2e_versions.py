"""Which Kimi releases are driven, end to end (issue 13, item 4): Kimi Code under its pre-2.0 numbering
(npm @moonshot-ai/kimi-code 0.43.1) is Kimi Code, whatever its major version says."""

from __future__ import annotations

from pathlib import Path

import kimi_install
import pytest
from fake_moonshot import FakeMoonshot, Reply
from kimi_env import FAKE_KEY, base_env, with_node
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
    binary, node_bin = old_kimi_code
    env = with_node(base_env(home), node_bin)
    env.update(
        KIMI_MCP_KIMI_BIN=str(binary),
        KIMI_MODEL_NAME="kimi-k2-fake",
        KIMI_MODEL_API_KEY=FAKE_KEY,
        KIMI_MODEL_PROVIDER_TYPE="kimi",
        KIMI_MODEL_BASE_URL=fake.base_url,
        KIMI_MODEL_CAPABILITIES="tool_use",
        KIMI_CODE_BASE_URL=fake.base_url.replace("/v1", "/coding/v1"),
        KIMI_LOOP_MAX_ATTEMPTS_PER_STEP="2",
        KIMI_MCP_TIMEOUT="120",
    )
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
