"""``kimi-mcp install-kimi`` for real: npm installs Kimi Code and Node 22 into a fresh data directory, then a
server whose PATH has neither `kimi` nor a recent Node finds them (``--check``) and runs a Kimi turn on that
Node. npm runs with the suite's own npm configuration and cache (where the suite's Kimi Code install left
the packages) and ``--prefer-offline``, so nothing is downloaded again."""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest
from fake_moonshot import FakeMoonshot, Reply
from kimi_env import base_env, kimi_code_fake_model
from kimi_install import KIMI_CODE_VERSION
from mcp_helpers import SERVER, call_tool, processes_with_home

pytestmark = pytest.mark.e2e

BARE_PATH = "/usr/bin:/bin"  # no `kimi`; any Node there is not the one Kimi Code runs on


def install_kimi(data: Path) -> tuple[subprocess.CompletedProcess[str], float]:
    npm = shutil.which("npm")
    if npm is None:
        pytest.fail("npm is needed for this test (as for the suite's own Kimi Code install)")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("KIMI_", "MOONSHOT_"))}
    env.update(
        XDG_DATA_HOME=str(data),
        PATH=f"{Path(npm).parent}{os.pathsep}{BARE_PATH}",  # npm, and no Kimi anywhere
        npm_config_prefer_offline="true",  # npm's own setting: the warm cache first
    )
    started = time.monotonic()
    done = subprocess.run([SERVER, "install-kimi"], env=env, capture_output=True, text=True, timeout=600)
    return done, time.monotonic() - started


def test_install_kimi_then_the_server_finds_it_and_runs_kimi_on_its_node(
    kimi_code: tuple[Path, Path], fake: FakeMoonshot, home: Path, workspace: Path, tmp_path: Path
):
    # kimi_code: the suite's install of the same version ran, so npm's cache holds every package
    data = tmp_path / "data"
    done, seconds = install_kimi(data)
    print(f"kimi-mcp install-kimi took {seconds:.1f} s")
    assert done.returncode == 0, done.stdout + done.stderr
    prefix = data / "kimi-mcp" / "kimi-code"
    assert (
        f"kimi: {prefix}/node_modules/.bin/kimi" in done.stdout
        and f"Kimi Code {KIMI_CODE_VERSION} on Node v22." in done.stdout
    )

    env = base_env(home)
    env.update(kimi_code_fake_model(fake.base_url), XDG_DATA_HOME=str(data), PATH=BARE_PATH)
    check = subprocess.run([SERVER, "--check"], env=env, cwd=workspace, capture_output=True, text=True)
    assert check.returncode == 0, check.stdout + check.stderr
    assert (
        f"kimi binary: {prefix}/node_modules/.bin/kimi\ndialect: kimi-code {KIMI_CODE_VERSION}\nnode (Kimi Code): v22."
        in (check.stdout)
    )

    fake.script([Reply.tool("Write", {"path": "hello.txt", "content": "hi\n"}), Reply.text_reply("done")])
    result = call_tool(env, workspace, tmp_path / "server.log", "kimi_code_task", {"task_description": "hi"})
    assert result.is_error is False, result.content[0].text
    assert result.structured_content["files_created"] == ["hello.txt"]
    assert (workspace / "hello.txt").read_text() == "hi\n"
    assert not processes_with_home(home)

    again, seconds = install_kimi(data)
    print(f"a second kimi-mcp install-kimi took {seconds:.1f} s")
    assert again.returncode == 0 and f"Kimi Code {KIMI_CODE_VERSION} is already installed" in again.stdout
