"""The fast connect (``_connect``): the real server, started twice with the same cache, answers its handshake
and tool list the second time from its record, exactly as it answered them the first time, while every
message still reaches the server; a changed tool setting is a new record, a wrong record is corrected, and
``KIMI_MCP_FAST_CONNECT=false`` records nothing."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
from mcp_helpers import INITIALIZE, SERVER

INITIALIZED = {"jsonrpc": "2.0", "method": "notifications/initialized"}
LIST = {"jsonrpc": "2.0", "id": 2, "method": "tools/list"}
JOBS = {"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {"name": "kimi_jobs", "arguments": {}}}


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    keep = ("PATH", "LANG", "LC_ALL")
    return {
        **{k: v for k, v in os.environ.items() if k in keep},
        "HOME": str(tmp_path / "home"), "XDG_CACHE_HOME": str(tmp_path / "cache"),
        "KIMI_MCP_STATE_DIR": str(tmp_path / "state"), "FASTMCP_LOG_LEVEL": "WARNING", "PYTHONWARNINGS": "ignore",
    }  # fmt: skip


def session(env: dict[str, str], cwd: Path) -> tuple[dict[int, dict], list[dict], str]:
    """initialize, initialized, tools/list, then a tool call, in one write (a client that does not wait);
    stdin stays open until the call is answered. The answers by id, every message the server wrote (each
    line must be JSON-RPC), and its stderr."""
    messages = [INITIALIZE, INITIALIZED, LIST, JOBS]
    proc = subprocess.Popen(
        [SERVER], env=env, cwd=cwd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True,
    )  # fmt: skip
    assert proc.stdin is not None and proc.stdout is not None and proc.stderr is not None
    proc.stdin.write("".join(json.dumps(m) + "\n" for m in messages))
    proc.stdin.flush()
    out: list[dict] = []
    while not any(m.get("id") == 3 for m in out):
        line = proc.stdout.readline()
        assert line, "the server ended before answering the tool call"
        out.append(json.loads(line))
    proc.stdin.close()
    out += [json.loads(line) for line in proc.stdout.read().splitlines()]
    proc.wait(timeout=60)
    return {m["id"]: m for m in out if "id" in m}, out, proc.stderr.read()


def records(env: dict[str, str]) -> list[Path]:
    return sorted((Path(env["XDG_CACHE_HOME"]) / "kimi-mcp").glob("connect-*.json"))


def test_the_second_start_answers_the_handshake_from_its_record_as_the_first_did(
    env: dict[str, str], tmp_path: Path
) -> None:
    first, _, _ = session(env, tmp_path)
    [record] = records(env)
    second, out, stderr = session(env, tmp_path)
    assert second[1]["result"] == first[1]["result"] and second[2]["result"] == first[2]["result"]
    assert len(second[2]["result"]["tools"]) == 14
    assert sorted(m["id"] for m in out if "id" in m) == [1, 2, 3]  # the server's own answers were dropped
    assert second[3]["result"]["structuredContent"]["success"] is True  # the server got everything
    assert records(env) == [record] and "Traceback" not in stderr


def test_a_changed_tool_setting_is_a_new_record_and_a_wrong_record_is_corrected(
    env: dict[str, str], tmp_path: Path
) -> None:
    session(env, tmp_path)
    only_status = {**env, "KIMI_MCP_TOOLS": "kimi_status,kimi_jobs"}
    answers, _, _ = session(only_status, tmp_path)
    assert [t["name"] for t in answers[2]["result"]["tools"]] == ["kimi_jobs", "kimi_status"]
    assert len(records(env)) == 2
    for path in records(env):  # a record that no longer says what the server answers
        record = json.loads(path.read_text())
        key = next(k for k in record if k.startswith("tools/list"))
        record[key]["tools"] = record[key]["tools"][:1]
        path.write_text(json.dumps(record))
    stale, _, _ = session(env, tmp_path)
    assert len(stale[2]["result"]["tools"]) == 1  # answered from the record ...
    fixed, _, _ = session(env, tmp_path)
    assert len(fixed[2]["result"]["tools"]) == 14  # ... which the server's own answer corrected


def test_turned_off_it_records_nothing(env: dict[str, str], tmp_path: Path) -> None:
    answers, _, _ = session({**env, "KIMI_MCP_FAST_CONNECT": "false"}, tmp_path)
    assert len(answers[2]["result"]["tools"]) == 14 and records(env) == []
