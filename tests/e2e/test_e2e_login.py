"""Automated first-run login with MOONSHOT_API_KEY (both dialects), through a real MCP client.

Kimi's platform URLs are hard-coded https URLs; the tests redirect them to the suite's fake API with
test-only means (tests/helpers/fakeplat/sitecustomize.py for legacy, tests/helpers/tls_proxy.py for Kimi Code). The
product code has no test hooks.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from fake_moonshot import FakeMoonshot, Reply
from kimi_env import FAKE_KEY, base_env, with_node
from mcp_helpers import call_tool, processes_with_home
from tls_proxy import TestCA, TLSProxy, proxy_env

pytestmark = pytest.mark.e2e

FAKEPLAT = Path(__file__).parents[1] / "helpers" / "fakeplat"


@pytest.fixture(scope="session")
def test_ca(tmp_path_factory: pytest.TempPathFactory) -> TestCA:
    return TestCA(tmp_path_factory.mktemp("test-ca"))


class Login:
    """A not-logged-in Kimi of one dialect whose platform URLs lead to the fake API."""

    def __init__(self, dialect: str, env: dict[str, str], home: Path, tmp_path: Path) -> None:
        self.dialect, self.env, self.home, self.tmp_path = dialect, env, home, tmp_path
        self.write_tool = "WriteFile" if dialect == "legacy" else "Write"

    def call(self, workspace: Path, args: dict, progress: list | None = None):
        result = call_tool(
            self.env, workspace, self.tmp_path / "server.log", "kimi_code_task",
            {"work_dir": str(workspace), **args}, progress,
        )  # fmt: skip
        return result, result.structured_content

    def everything_written(self, results: list) -> str:
        """Every output stream, log and transcript of the run, as one text to grep."""
        texts = [json.dumps(r.structured_content) for r in results]
        texts += ["".join(getattr(c, "text", "") for c in r.content) for r in results]
        for folder in (self.tmp_path,):
            for path in folder.rglob("*"):
                if path.is_file() and (path.suffix in (".log", ".txt") or "transcript" in str(path)):
                    texts.append(path.read_text(errors="replace"))
        return "\n".join(texts)


@pytest.fixture(params=["legacy", "kimi-code"])
def login(request: pytest.FixtureRequest, fake: FakeMoonshot, home: Path, tmp_path: Path, test_ca: TestCA):
    env = base_env(home)
    env.update(
        MOONSHOT_API_KEY=FAKE_KEY,
        KIMI_MCP_TIMEOUT="120",
        KIMI_MCP_LOG_FILE=str(tmp_path / "kimi-mcp.log"),
        KIMI_MCP_TRANSCRIPT_DIR=str(tmp_path / "transcripts"),
    )
    if request.param == "legacy":
        env.update(
            KIMI_MCP_KIMI_BIN=str(request.getfixturevalue("legacy_kimi")),
            PYTHONPATH=str(FAKEPLAT),
            KIMI_FAKE_PLATFORM_BASE_URL=fake.base_url,
            KIMI_MCP_PLATFORM="moonshot.ai",
        )
        yield Login("legacy", env, home, tmp_path)
        return
    binary, node_bin = request.getfixturevalue("kimi_code")
    with TLSProxy(fake.port, test_ca) as proxy:
        env = with_node(env, node_bin)
        env.update(proxy_env(proxy, test_ca))
        env.update(
            KIMI_MCP_KIMI_BIN=str(binary),
            KIMI_CODE_BASE_URL=fake.base_url.replace("/v1", "/coding/v1"),
            KIMI_LOOP_MAX_ATTEMPTS_PER_STEP="2",
            KIMI_MCP_PLATFORM="moonshot.cn",
        )
        login = Login("kimi-code", env, home, tmp_path)
        login.proxy = proxy
        yield login


def test_fresh_machine_logs_in_and_finishes_the_task(login: Login, fake: FakeMoonshot, workspace: Path):
    fake.script(
        [Reply.tool(login.write_tool, {"path": "done.txt", "content": "logged in\n"}), Reply.text_reply("ok")]
    )
    progress: list = []
    first, data = login.call(workspace, {"task_description": "write done.txt"}, progress)
    assert data["success"] is True, data["error"]
    assert data["files_created"] == ["done.txt"]
    assert (workspace / "done.txt").read_text() == "logged in\n"
    verified = [r for r in fake.requests if r["path"].endswith("/models")]
    assert verified and verified[0]["headers"]["authorization"] == f"Bearer {FAKE_KEY}"
    assert any("logging in" in (m or "") for _, _, m in progress)
    if login.dialect == "kimi-code":
        assert any(target.startswith("api.moonshot.cn") for target in login.proxy.connects)

    # already logged in: the next call runs no setup
    fake.script([Reply.text_reply("second")])
    second, data2 = login.call(workspace, {"task_description": "again"}, progress)
    assert data2["success"] is True and data2["output"] == "second"
    log = (login.tmp_path / "kimi-mcp.log").read_text()
    assert log.count("running the automated login") == 1
    assert list((login.tmp_path / "transcripts").glob("*.log")), "transcripts were not saved"
    assert FAKE_KEY not in login.everything_written([first, second])
    assert not processes_with_home(login.home)


def test_wrong_key_is_a_clear_auth_error(login: Login, fake: FakeMoonshot, workspace: Path):
    fake.models_status = 401
    result, data = login.call(workspace, {"task_description": "anything"})
    assert result.is_error is True
    error = data["error"]
    assert error["type"] == "auth" and error["retryable"] is False
    assert "login" in error["message"] and "failed" in error["message"]
    assert "MOONSHOT_API_KEY" in error["suggestion"]
    assert fake.chat_requests() == []
    assert FAKE_KEY not in login.everything_written([result])
    assert not processes_with_home(login.home)


def test_unreachable_platform_is_an_auth_error(login: Login, fake: FakeMoonshot, workspace: Path):
    if login.dialect == "legacy":
        login.env["KIMI_FAKE_PLATFORM_BASE_URL"] = "http://127.0.0.1:9/v1"
    else:
        login.proxy.upstream_port = 9  # the proxy relays to a closed port
    result, data = login.call(workspace, {"task_description": "anything"})
    error = data["error"]
    assert error["type"] == "auth"
    assert error["retryable"] is True and "network" in error["suggestion"]
    assert not processes_with_home(login.home)


def test_not_logged_in_without_a_key_names_both_remedies(login: Login, fake: FakeMoonshot, workspace: Path):
    del login.env["MOONSHOT_API_KEY"]
    result, data = login.call(workspace, {"task_description": "anything"})
    error = data["error"]
    assert result.is_error is True and error["type"] == "auth"
    assert "MOONSHOT_API_KEY" in error["suggestion"] and "/login" in error["suggestion"]
    assert fake.requests == [] or all(not r["path"].endswith("/chat/completions") for r in fake.requests)
    assert not processes_with_home(login.home)
