"""Who and where: the workspace may not be / or the home, Kimi's own files are never reported as changes,
and the HTTP transport needs a bearer token off loopback. Through real clients into the real server."""

from __future__ import annotations

import asyncio
import json
import socket
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from fake_moonshot import FakeMoonshot, Reply
from fastmcp import Client
from kimi_env import KimiUnderTest
from mcp_helpers import INITIALIZE, SERVER, call_tool, processes_with_home

pytestmark = pytest.mark.e2e

TOKEN = "tok-0123456789abcdef-ABCDEF"
MCP_HEADERS = {"content-type": "application/json", "accept": "application/json, text/event-stream"}


def post(url: str, headers: dict[str, str]) -> tuple[int, str]:
    """The HTTP status and body of a raw ``initialize`` POST (no MCP client: nothing adds credentials)."""
    request = urllib.request.Request(
        url, json.dumps(INITIALIZE).encode(), {**MCP_HEADERS, **headers}, method="POST"
    )
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def post_status(url: str, headers: dict[str, str]) -> int:
    return post(url, headers)[0]


# ------------------------------------------------------------------------------------------------ workspace


@pytest.mark.parametrize("where", ["cwd", "work_dir", "slash"])
def test_home_and_root_are_refused_as_workspace(
    where: str, legacy_env: dict, fake: FakeMoonshot, home: Path, tmp_path: Path
):
    args = {"task_description": "write something"}
    if where == "work_dir":
        args["work_dir"] = str(home)
    elif where == "slash":
        args["work_dir"] = "/"
    result = call_tool(legacy_env, home, tmp_path / "s.log", "kimi_code_task", args)
    error = result.structured_content["error"]
    assert result.is_error is True
    assert error["type"] == "bad_input"
    if where == "slash":
        assert "filesystem root" in error["message"]
    else:
        assert "home directory" in error["message"]
        assert "KIMI_MCP_ALLOW_HOME_WORKSPACE" in error["suggestion"]
    assert fake.requests == []  # Kimi never started
    assert not processes_with_home(home)


def test_home_workspace_by_opt_in_never_reports_kimis_own_files(
    kimi: KimiUnderTest, fake: FakeMoonshot, tmp_path: Path
):
    env = dict(kimi.env, KIMI_MCP_ALLOW_HOME_WORKSPACE="1", KIMI_MCP_STANDBY="off")
    fake.script([Reply.tool(*kimi.write("made.txt", "in home\n")), Reply.text_reply("done")])
    result = call_tool(env, kimi.home, tmp_path / "s.log", "kimi_code_task", {"task_description": "make it"})
    data = result.structured_content
    assert data["success"] is True, data.get("error")
    assert data["workspace"] == str(kimi.home.resolve())
    assert data["files_created"] == ["made.txt"]
    assert data["files_modified"] == [] and data["files_deleted"] == []
    state = ".kimi" if kimi.name == "legacy" else ".kimi-code"
    assert (kimi.home / state / "sessions").is_dir()  # Kimi did write its session there: it is filtered


# --------------------------------------------------------------------------------------------------- HTTP


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class HttpServer:
    def __init__(self, env: dict[str, str], cwd: Path, host: str, log: Path) -> None:
        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}/mcp"
        self.log = log
        self.proc = subprocess.Popen(
            [SERVER, "--http", "--host", host, "--port", str(self.port)],
            env=env,
            cwd=str(cwd),
            stdout=subprocess.DEVNULL,
            stderr=open(log, "w"),  # noqa: SIM115
        )

    def wait_ready(self, timeout: float = 60.0) -> None:
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            assert self.proc.poll() is None, self.log.read_text()[-2000:]
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.5):
                    return
            except OSError:
                time.sleep(0.1)
        raise AssertionError("the HTTP server did not start")

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def test_http_off_loopback_without_a_token_refuses_to_start(legacy_env: dict, workspace: Path):
    proc = subprocess.run(
        [SERVER, "--http", "--host", "0.0.0.0", "--port", str(_free_port())],
        env=legacy_env,
        cwd=workspace,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2
    assert proc.stdout == ""
    assert "KIMI_MCP_HTTP_TOKEN" in proc.stderr and "without authentication" in proc.stderr


def test_http_token_too_short_refuses_to_start(legacy_env: dict, workspace: Path):
    env = dict(legacy_env, KIMI_MCP_HTTP_TOKEN="short")
    proc = subprocess.run(
        [SERVER, "--http", "--port", str(_free_port())],
        env=env,
        cwd=workspace,
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 2 and "too short" in proc.stderr
    assert "short" not in proc.stderr.replace("too short", "")  # the token itself is not echoed


@pytest.mark.parametrize("host", ["0.0.0.0", "127.0.0.1"])
def test_http_with_a_token_needs_it_and_works_with_it(
    host: str, legacy_env: dict, fake: FakeMoonshot, workspace: Path, tmp_path: Path
):
    env = dict(legacy_env, KIMI_MCP_HTTP_TOKEN=TOKEN, KIMI_MCP_STANDBY="off")
    server = HttpServer(env, workspace, host, tmp_path / "server.log")
    try:
        server.wait_ready()
        status, body = post(server.url, {})
        assert status == 401 and "send `Authorization: Bearer <token>` with the value" in body, body
        status, body = post(server.url, {"authorization": "Bearer " + TOKEN[:-1] + "x"})
        assert status == 401 and "does not match the server's KIMI_MCP_HTTP_TOKEN" in body, body
        assert "re-register" not in body and TOKEN[:-1] not in body  # not OAuth's wording, no token echoed
        assert post_status(server.url, {"authorization": "Bearer " + TOKEN}) == 200
        fake.script(
            [Reply.tool("WriteFile", {"path": "via_http.txt", "content": "h\n"}), Reply.text_reply("ok")]
        )

        async def body():
            async with Client(server.url, auth=TOKEN, timeout=300) as client:
                names = {tool.name for tool in await client.list_tools()}
                result = await client.call_tool("kimi_code_task", {"task_description": "write it"})
                return names, result.structured_content

        names, data = asyncio.run(body())
        assert "kimi_code_task" in names
        assert data["success"] is True and data["files_created"] == ["via_http.txt"]
    finally:
        server.stop()
    assert TOKEN not in (tmp_path / "server.log").read_text()


def test_http_on_loopback_refuses_a_foreign_origin_and_serves_without_token(
    legacy_env: dict, workspace: Path, tmp_path: Path
):
    server = HttpServer(dict(legacy_env), workspace, "127.0.0.1", tmp_path / "server.log")
    try:
        server.wait_ready()
        assert post_status(server.url, {"origin": "http://evil.example"}) == 403
        assert post_status(server.url, {"host": "evil.example"}) in (403, 421)  # DNS rebinding

        async def body():
            async with Client(server.url, timeout=60) as client:
                return {tool.name for tool in await client.list_tools()}

        assert "kimi_consult" in asyncio.run(body())
    finally:
        server.stop()
