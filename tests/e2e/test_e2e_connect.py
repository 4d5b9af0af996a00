"""The fast connect (``_connect``): the real server, started twice with the same cache, answers its handshake
and tool list the second time from its record, exactly as it answered them the first time, while every
message still reaches the server. The record's key covers every input (the ``.env`` and the config file it
names, the tool settings, the package's files, the installed distributions), so a changed one is a new
record; ``KIMI_MCP_FAST_CONNECT=false`` (in the environment or the ``.env``) records nothing; a list served
from a record the server contradicts is followed by ``notifications/tools/list_changed``; and a start that
fails after the recorded handshake answers the client's requests with the reason, not a dropped connection.

End to end: each test starts the real server process two to four times (about 2 s of CPU each), so they are
e2e, out of the one-minute tier, though no Kimi is involved."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import sys
from importlib import metadata
from pathlib import Path
from typing import NamedTuple

import pytest
from fastmcp import Client
from fastmcp.client.transports import StdioTransport
from mcp.shared.exceptions import MCPError
from mcp_helpers import INITIALIZE, SERVER, transport

pytestmark = pytest.mark.e2e

INITIALIZED = {"jsonrpc": "2.0", "method": "notifications/initialized"}
LIST = {"jsonrpc": "2.0", "id": 2, "method": "tools/list"}
JOBS = {"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {"name": "kimi_jobs", "arguments": {}}}
PACKAGE = Path(__file__).resolve().parents[2] / "src" / "kimi_mcp"


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    keep = ("PATH", "LANG", "LC_ALL")
    return {
        **{k: v for k, v in os.environ.items() if k in keep},
        "HOME": str(tmp_path / "home"), "XDG_CACHE_HOME": str(tmp_path / "cache"),
        "XDG_CONFIG_HOME": str(tmp_path / "config"), "KIMI_MCP_STATE_DIR": str(tmp_path / "state"),
        "FASTMCP_LOG_LEVEL": "WARNING", "PYTHONWARNINGS": "ignore",
    }  # fmt: skip


class Session(NamedTuple):
    answers: dict[int, dict]  # by request id
    out: list[dict]  # every message the server wrote (each line must be JSON-RPC)
    stderr: str
    code: int


def session(env: dict[str, str], cwd: Path, argv: tuple[str, ...] = (SERVER,)) -> Session:
    """initialize, initialized, tools/list, then a tool call, in one write (a client that does not wait);
    stdin stays open until the call is answered."""
    messages = [INITIALIZE, INITIALIZED, LIST, JOBS]
    proc = subprocess.Popen(
        argv, env=env, cwd=cwd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    assert proc.stdin is not None and proc.stdout is not None and proc.stderr is not None
    proc.stdin.write("".join(json.dumps(m) + "\n" for m in messages))
    proc.stdin.flush()
    out: list[dict] = []
    while not any(m.get("id") == 3 for m in out):
        line = proc.stdout.readline()
        assert line, f"the server ended before answering the tool call: {proc.stderr.read()[-2000:]}"
        out.append(json.loads(line))
    proc.stdin.close()
    out += [json.loads(line) for line in proc.stdout.read().splitlines()]
    code = proc.wait(timeout=60)
    return Session({m["id"]: m for m in out if "id" in m}, out, proc.stderr.read(), code)


def records(env: dict[str, str]) -> list[Path]:
    return sorted((Path(env["XDG_CACHE_HOME"]) / "kimi-mcp").glob("connect-*.json"))


def names(answer: dict) -> list[str]:
    return [tool["name"] for tool in answer["result"]["tools"]]


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def test_the_second_start_answers_the_handshake_from_its_record_as_the_first_did(
    env: dict[str, str], tmp_path: Path
) -> None:
    first = session(env, tmp_path)
    [record] = records(env)
    second = session(env, tmp_path)
    assert second.answers[1]["result"] == first.answers[1]["result"]
    assert second.answers[2]["result"] == first.answers[2]["result"]
    assert len(second.answers[2]["result"]["tools"]) == 16
    assert sorted(m["id"] for m in second.out if "id" in m) == [1, 2, 3]  # the server's own answers dropped
    assert second.answers[3]["result"]["structuredContent"]["success"] is True  # the server got everything
    assert records(env) == [record] and "Traceback" not in second.stderr
    assert not any(m.get("method") == "notifications/tools/list_changed" for m in second.out)


def test_a_changed_tool_setting_is_a_new_record_and_a_wrong_record_is_corrected(
    env: dict[str, str], tmp_path: Path
) -> None:
    session(env, tmp_path)
    only_status = {**env, "KIMI_MCP_TOOLS": "kimi_status,kimi_jobs"}
    assert names(session(only_status, tmp_path).answers[2]) == ["kimi_jobs", "kimi_status"]
    assert len(records(env)) == 2
    spoil_the_tool_lists(env)
    stale = session(env, tmp_path)
    assert len(stale.answers[2]["result"]["tools"]) == 1  # answered from the record ...
    fixed = session(env, tmp_path)
    assert len(fixed.answers[2]["result"]["tools"]) == 16  # ... which the server's own answer corrected


def spoil_the_tool_lists(env: dict[str, str]) -> None:
    """Every record's tool list says one tool: a record that no longer says what the server answers."""
    for path in records(env):
        record = json.loads(path.read_text())
        key = next(k for k in record if k.startswith("tools/list"))
        record[key]["tools"] = record[key]["tools"][:1]
        path.write_text(json.dumps(record))


def test_turned_off_it_records_nothing(env: dict[str, str], tmp_path: Path) -> None:
    answers = session({**env, "KIMI_MCP_FAST_CONNECT": "false"}, tmp_path).answers
    assert len(answers[2]["result"]["tools"]) == 16 and records(env) == []


@pytest.mark.parametrize("where", ["KIMI_MCP_ENV_FILE", "beside the config file"])
def test_turned_off_in_the_env_file_it_records_nothing(
    env: dict[str, str], tmp_path: Path, where: str
) -> None:
    if where == "KIMI_MCP_ENV_FILE":
        env = {
            **env,
            "KIMI_MCP_ENV_FILE": str(write(tmp_path / "server.env", "KIMI_MCP_FAST_CONNECT=false\n")),
        }
    else:  # ~/.config/kimi-mcp/.env, as .env.example offers (a checkout's own .env would come first)
        write(
            Path(env["XDG_CONFIG_HOME"]) / "kimi-mcp" / ".env", "export KIMI_MCP_FAST_CONNECT='off'  # slow\n"
        )
    answers = session(env, tmp_path).answers
    assert len(answers[2]["result"]["tools"]) == 16 and records(env) == []


def test_the_tool_set_of_the_env_file_and_of_the_config_file_it_names_is_served(
    env: dict[str, str], tmp_path: Path
) -> None:
    assert len(session(env, tmp_path).answers[2]["result"]["tools"]) == 16  # recorded: every tool
    dot_env = write(tmp_path / "server.env", 'KIMI_MCP_TOOLS="kimi_status,kimi_jobs"\n')
    assert names(session({**env, "KIMI_MCP_ENV_FILE": str(dot_env)}, tmp_path).answers[2]) == [
        "kimi_jobs", "kimi_status",
    ]  # fmt: skip
    write(tmp_path / "conf" / "kimi.toml", 'tools = ["kimi_jobs"]\n')
    write(dot_env, f"CONF_DIR={tmp_path / 'conf'}\nKIMI_MCP_CONFIG=${{CONF_DIR}}/kimi.toml\n")
    configured = session({**env, "KIMI_MCP_ENV_FILE": str(dot_env)}, tmp_path)
    assert names(configured.answers[2]) == ["kimi_jobs"]
    write(tmp_path / "conf" / "kimi.toml", 'tools = ["kimi_status"]\n')  # the config file changed
    assert names(session({**env, "KIMI_MCP_ENV_FILE": str(dot_env)}, tmp_path).answers[2]) == ["kimi_status"]


def test_a_changed_source_file_is_a_new_record(env: dict[str, str], tmp_path: Path) -> None:
    """A checkout's edited source (here the server's instructions) is served as edited at the next start."""
    copy = tmp_path / "src" / "kimi_mcp"
    shutil.copytree(PACKAGE, copy, ignore=shutil.ignore_patterns("__pycache__"))
    env = {**env, "PYTHONPATH": str(copy.parent), "PYTHONDONTWRITEBYTECODE": "1"}
    argv = (sys.executable, "-m", "kimi_mcp")
    before = session(env, tmp_path, argv).answers[1]["result"]["instructions"]
    instructions = copy / "instructions.py"
    instructions.write_text(
        instructions.read_text().replace("delegates work to Kimi", "hands work to Kimi", 1)
    )
    after = session(env, tmp_path, argv).answers[1]["result"]["instructions"]
    assert "delegates work to Kimi" in before and "hands work to Kimi" in after
    assert len(records(env)) == 2


def test_a_changed_dependency_version_is_a_new_record(env: dict[str, str], tmp_path: Path) -> None:
    """pydantic builds the tools' schemas: an upgraded pydantic is a new record, not the old one's answers."""
    site = tmp_path / "site"
    site.mkdir()
    env = {**env, "PYTHONPATH": str(site)}
    session(env, tmp_path)
    upgraded = f"{metadata.version('pydantic')}.post1"
    write(site / f"pydantic-{upgraded}.dist-info" / "METADATA", f"Name: pydantic\nVersion: {upgraded}\n")
    session(env, tmp_path)
    assert len(records(env)) == 2


def test_a_stale_list_served_is_followed_by_list_changed_and_the_servers_own_list(
    env: dict[str, str], tmp_path: Path
) -> None:
    """Through a real MCP client on the 2025-11-25 handshake, which declares ``tools.listChanged``: the list
    served from a record the server contradicts is announced changed, and the client's next list is the
    server's. (The 2026-07-28 era declares no ``listChanged``: kimi-mcp serves no ``subscriptions/listen``.)"""
    session(env, tmp_path)
    spoil_the_tool_lists(env)

    async def body() -> tuple[int, int]:
        changed = asyncio.Event()

        async def on_message(message: object) -> None:
            if getattr(getattr(message, "root", message), "method", "") == "notifications/tools/list_changed":
                changed.set()

        client = Client(client_transport(env, tmp_path), mode="legacy", message_handler=on_message)
        async with client:
            served = len(await client.list_tools())
            await asyncio.wait_for(changed.wait(), timeout=120)
            return served, len(await client.list_tools())

    assert asyncio.run(body()) == (1, 16)


def client_transport(env: dict[str, str], cwd: Path) -> StdioTransport:
    return transport(env, cwd, cwd / "client.log")


async def list_tools(env: dict[str, str], cwd: Path) -> int:
    async with Client(client_transport(env, cwd)) as client:
        return len(await client.list_tools())


def test_a_start_that_fails_after_the_recorded_handshake_answers_with_the_reason(
    env: dict[str, str], tmp_path: Path
) -> None:
    """The log file's folder is gone (the record's inputs are the same): the handshake and tool list come from
    the record, then the server cannot start; every request the client makes is answered with why."""
    logs = tmp_path / "logs"
    logs.mkdir()
    env = {**env, "KIMI_MCP_LOG_FILE": str(logs / "server.log")}
    session(env, tmp_path)  # recorded: the 2025-11-25 handshake ...
    assert asyncio.run(list_tools(env, tmp_path)) == 16  # ... and the 2026-07-28 one (a real MCP client's)
    shutil.rmtree(logs)
    failed = session(env, tmp_path)
    assert len(failed.answers[2]["result"]["tools"]) == 16  # from the record
    error = failed.answers[3]["error"]
    assert "kimi-mcp could not start" in error["message"] and "server.log" in error["message"]
    assert error["data"]["type"] == "filesystem" and error["data"]["retryable"] is False
    assert error["data"]["suggestion"]
    assert failed.code == 1 and "FileNotFoundError" in failed.stderr

    async def body() -> list[str]:
        async with Client(client_transport(env, tmp_path)) as client:
            assert len(await client.list_tools()) == 16
            said = []
            for _ in range(2):  # every call, not just the first: the client is still connected
                with pytest.raises(MCPError) as refused:
                    await client.call_tool("kimi_jobs", {})
                said.append(refused.value.message)
            return said

    assert all("could not start" in text and "server.log" in text for text in asyncio.run(body()))


def test_a_start_refused_before_any_handshake_answers_the_waiting_requests_with_the_reason(
    env: dict[str, str], tmp_path: Path
) -> None:
    """A broker open to anyone is refused: the client's initialize (nothing recorded) gets the reason."""
    refused = session({**env, "KIMI_MCP_BROKER": "redis://kimi-mcp-test.invalid:6379/0"}, tmp_path)
    error = refused.answers[1]["error"]
    assert "KIMI_MCP_BROKER refused" in error["message"] and "password" in error["message"]
    assert error["data"]["type"] == "config"
    assert refused.code == 2 and records(env) == []


#: a stand-in for the server behind the relay: it writes its record first, then logs every message it gets
#: and answers nothing until it has a tool call (``sys.argv[1]``: the log; ``[2]``: seconds before answering)
STAND_IN = """
import json, os, sys, time
from kimi_mcp._connect import FastConnect, record_path
from kimi_mcp._sources import settings_environment

view, env_file = settings_environment(os.environ)
path = record_path(view, env_file)
path.parent.mkdir(parents=True, exist_ok=True)
path.write_text(json.dumps({"initialize 2025-11-25": {"served": "init"}, "tools/list 2025-11-25": {"tools": []}}))
FastConnect.start()
log, waiting = open(sys.argv[1], "w"), []
for line in sys.stdin:
    message = json.loads(line)
    log.write(message.get("method", "") + "\\n")
    log.flush()
    if "id" in message:
        waiting.append(message)
    if message.get("method") == "tools/call" or message.get("method") == "tools/list":
        time.sleep(float(sys.argv[2]))
        for asked in waiting:
            result = {"served": "init"} if asked["method"] == "initialize" else {"tools": []}
            print(json.dumps({"jsonrpc": "2.0", "id": asked["id"], "result": result}), flush=True)
        waiting = []
"""


def stand_in(env: dict[str, str], tmp_path: Path, delay: float) -> tuple[subprocess.Popen, Path]:
    script, log = tmp_path / "stand_in.py", tmp_path / "received.log"
    script.write_text(STAND_IN)
    proc = subprocess.Popen(
        [sys.executable, str(script), str(log), str(delay)], env=env, cwd=tmp_path,
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    assert proc.stdin is not None
    proc.stdin.write("".join(json.dumps(m) + "\n" for m in [INITIALIZE, INITIALIZED, LIST, JOBS]))
    proc.stdin.flush()
    return proc, log


def test_a_tool_list_answered_from_the_record_reaches_the_server_after_the_call_sent_with_it(
    env: dict[str, str], tmp_path: Path
) -> None:
    """The list is answered at once, and checked by the server only once it answered the call: the call does
    not wait for the server building the list the client already has."""
    proc, log = stand_in(env, tmp_path, 0.0)
    assert proc.stdin is not None and proc.stdout is not None
    answers: dict[int, dict] = {}
    while 3 not in answers:
        message = json.loads(proc.stdout.readline())
        answers[message["id"]] = message
    assert answers[2]["result"] == {"tools": []} and list(answers)[:2] == [1, 2]  # from the record, at once
    proc.stdin.close()
    assert proc.wait(timeout=60) == 0
    assert log.read_text().split() == ["initialize", "notifications/initialized", "tools/call", "tools/list"]


def test_a_tool_list_held_back_still_reaches_the_server_when_the_client_leaves_first(
    env: dict[str, str], tmp_path: Path
) -> None:
    """The client leaves before the server answered anything: the list it got from the record is still
    checked by the server, before the server's stdin ends."""
    proc, log = stand_in(env, tmp_path, 1.0)
    assert proc.stdin is not None
    proc.stdin.close()
    assert proc.wait(timeout=60) == 0
    assert log.read_text().split() == ["initialize", "notifications/initialized", "tools/call", "tools/list"]
