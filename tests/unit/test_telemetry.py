"""OpenTelemetry is off unless configured the standard way, and then loads: what the server imports, with
and without the variables (the real server process, through initialize, tools/list and a tool call)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from mcp_helpers import INITIALIZE
from otlp_receiver import OtlpReceiver

from kimi_mcp import telemetry

INITIALIZED = {"jsonrpc": "2.0", "method": "notifications/initialized"}
LIST = {"jsonrpc": "2.0", "id": 2, "method": "tools/list"}
JOBS = {"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {"name": "kimi_jobs", "arguments": {}}}
LOADED_ONLY_WHEN_ON = ("opentelemetry.sdk", "opentelemetry.exporter", "kimi_mcp.telemetry._otel")


@pytest.mark.parametrize(
    ("environ", "on"),
    [
        ({}, False),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318"}, True),
        ({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://127.0.0.1:4318/v1/traces"}, True),
        ({"OTEL_TRACES_EXPORTER": "otlp"}, True),
        ({"OTEL_TRACES_EXPORTER": "none"}, False),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318", "OTEL_SDK_DISABLED": "true"}, False),
        ({"OTEL_SERVICE_NAME": "x"}, False),
    ],
)
def test_only_the_standard_variables_turn_it_on(environ: dict[str, str], on: bool) -> None:
    assert telemetry.wanted(environ) is on


def test_off_every_hook_just_runs_what_it_wraps() -> None:
    assert telemetry.call("x", lambda a, b=0: a + b, 1, b=2) == 3
    assert telemetry.traced("x", len) is len
    assert telemetry.handoff({}, lambda: "sent") == "sent"
    assert telemetry.job("j", None, None) is telemetry.NO_TRACE  # type: ignore[arg-type]
    telemetry.asked("question").end("answered")


def imported(env: dict[str, str], cwd: Path) -> set[str]:
    """The modules a real server process imports from its start through tools/list and a tool call
    (``python -X importtime``), among those only OpenTelemetry's SDK side is."""
    log = cwd / f"imports-{len(list(cwd.glob('imports-*')))}.log"  # a file: a pipe would fill and block it
    proc = subprocess.Popen(
        [sys.executable, "-X", "importtime", "-m", "kimi_mcp"], env=env, cwd=cwd, text=True,
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log.open("w"),
    )  # fmt: skip
    assert proc.stdin is not None and proc.stdout is not None
    proc.stdin.write("".join(json.dumps(m) + "\n" for m in (INITIALIZE, INITIALIZED, LIST, JOBS)))
    proc.stdin.flush()
    answered: list[dict] = []
    while not any(m.get("id") == 3 for m in answered):
        line = proc.stdout.readline()
        assert line, "the server ended before answering the tool call"
        answered.append(json.loads(line))
    proc.stdin.close()
    proc.stdout.read()
    proc.wait(timeout=60)
    err = log.read_text()
    assert proc.returncode == 0, err[-2000:]
    assert len(next(m for m in answered if m.get("id") == 2)["result"]["tools"]) == 16
    names = {line.split("|")[-1].strip() for line in err.splitlines() if line.startswith("import time:")}
    return {n for n in names if n.startswith(LOADED_ONLY_WHEN_ON)}


def test_unset_no_sdk_or_exporter_is_imported_and_set_they_are(tmp_path: Path) -> None:
    keep = ("PATH", "LANG", "LC_ALL")
    env = {
        **{k: v for k, v in os.environ.items() if k in keep},
        "HOME": str(tmp_path / "home"), "XDG_CACHE_HOME": str(tmp_path / "cache"),
        "XDG_CONFIG_HOME": str(tmp_path / "config"), "KIMI_MCP_STATE_DIR": str(tmp_path / "state"),
        "KIMI_MCP_FAST_CONNECT": "0",
    }  # fmt: skip
    assert imported(env, tmp_path) == set()
    with OtlpReceiver() as otlp:
        on = imported({**env, "OTEL_EXPORTER_OTLP_ENDPOINT": otlp.endpoint}, tmp_path)
        otlp.wait_for(lambda o: any(s.name == "tools/call kimi_jobs" for s in o.spans))
    assert {"opentelemetry.sdk.trace", "opentelemetry.exporter.otlp.proto.http.trace_exporter"} <= on
