"""The broker's settings (``KIMI_MCP_BROKER``): what is refused and why, and its password never shown; its
connections survive a Redis restart (a real redis-server)."""

from __future__ import annotations

import asyncio
import shutil
import socket
import subprocess
import time
from pathlib import Path

import pytest

from kimi_mcp.config import broker_problem, configured
from kimi_mcp.remote import broker
from kimi_mcp.secrets import Redactor, configured_secrets


@pytest.mark.parametrize(
    "url",
    [
        "redis://127.0.0.1:6379/0",
        "redis://localhost/1",
        "redis://[::1]:6380/0",
        "unix:///run/redis/redis.sock",
        "redis://:s3cret@10.0.0.5:6379/0",
        "rediss://user:s3cret@redis.example.com:6380/0",
    ],
)
def test_loopback_sockets_and_brokers_with_a_password_are_accepted(url: str) -> None:
    assert broker_problem(url) is None


@pytest.mark.parametrize(
    ("url", "why"),
    [
        ("redis://10.0.0.5:6379/0", "must have a password"),
        ("rediss://redis.example.com/0", "must have a password"),
        ("http://127.0.0.1:6379", "scheme must be"),
        ("redis:///0", "no host"),
        ("unix://", "socket's path"),
    ],
)
def test_an_open_or_malformed_broker_is_refused_saying_why(url: str, why: str) -> None:
    problem = broker_problem(url)
    assert problem is not None and why in problem


def test_a_refused_broker_is_a_configuration_problem_and_its_password_is_masked() -> None:
    _settings, problem = configured({"KIMI_MCP_BROKER": "redis://10.1.1.1:6379/0"})
    assert problem is not None and "KIMI_MCP_BROKER" in problem.message and "password" in problem.message
    url = "redis://:hunter2-long-pw@10.1.1.1:6379/0"
    settings, problem = configured({"KIMI_MCP_BROKER": url})
    assert problem is None and settings.broker == url and "hunter2" not in repr(settings)
    masked = Redactor(configured_secrets({"KIMI_MCP_BROKER": url}))(
        f"connecting to {url} with hunter2-long-pw"
    )
    assert "hunter2" not in masked
    assert (
        broker.broker_host(url) == "10.1.1.1:6379"
        and broker.broker_host("unix:///tmp/r.sock") == "/tmp/r.sock"
    )
    error = broker.unreachable(broker.broker_host(url), ConnectionRefusedError("refused"))
    assert error.type == "broker" and error.retryable and "hunter2" not in error.message + str(error.details)


def _redis_server(port: int, folder: Path) -> subprocess.Popen:
    binary = shutil.which("redis-server")
    assert binary
    proc = subprocess.Popen(
        [binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", str(folder)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    for _ in range(200):
        with socket.socket() as sock:
            if sock.connect_ex(("127.0.0.1", port)) == 0:
                return proc
        time.sleep(0.05)
    proc.kill()
    raise AssertionError("redis-server did not start")


@pytest.mark.skipif(
    shutil.which("redis-server") is None,
    reason="redis-server is not on PATH (Debian: apt-get install redis-server; .ci/run installs it)",
)
def test_a_pooled_connection_from_before_a_redis_restart_is_replaced_not_failed(tmp_path: Path) -> None:
    """Every client on the broker (kimi-mcp's, and Docket's pools: its result store's too) checks a connection
    idle for a second before using it and reconnects when the check fails: a job that reached a worker right
    after Redis came back could fail on such a connection. The canary of redis-py 8.1.0 (redis/redis-py#4252:
    there a pooled connection the server closed raises unless the client has a retry policy)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    url = f"redis://127.0.0.1:{port}/0"
    servers = [_redis_server(port, tmp_path)]

    def restart() -> None:
        servers[0].terminate()
        servers[0].wait(10)
        servers.append(_redis_server(port, tmp_path))

    async def main() -> tuple[bytes | None, dict | None, int]:
        async with broker.redis_client(url) as redis, broker.open_docket(url) as docket:
            results = docket.result_storage
            await redis.set("k", "before")
            await results.put("k", {"v": "before"}, collection="canary")
            await docket.snapshot()
            await asyncio.to_thread(restart)  # the pooled connections are dead now
            await asyncio.sleep(broker.HEALTH_CHECK_S + 0.2)
            await redis.set("k", "after")
            await results.put("k", {"v": "after"}, collection="canary")
            return (
                await redis.get("k"),
                await results.get("k", collection="canary"),
                (await docket.snapshot()).total_tasks,
            )

    try:
        assert asyncio.run(main()) == (b"after", {"v": "after"}, 0)
    finally:
        for proc in servers:
            proc.terminate()
            proc.wait(10)


@pytest.mark.parametrize(
    ("option", "value", "why"),
    [
        ("--keep-copies", "0", "--keep-copies must be positive, not 0.0"),
        ("--redelivery-timeout", "-1", "--redelivery-timeout must be positive, not -1.0"),
        ("--concurrency", "0", "--concurrency must be at least 1, not 0"),
    ],
)
def test_a_worker_with_a_bad_option_refuses_to_start_saying_why(
    option: str, value: str, why: str, capsys: pytest.CaptureFixture[str]
) -> None:
    import argparse

    from kimi_mcp.cli import worker

    parser = argparse.ArgumentParser()
    worker.add_arguments(parser)
    args = parser.parse_args(["--broker", "redis://127.0.0.1:1/0", option, value])
    assert worker.run(args) == 2
    assert capsys.readouterr().err.strip() == f"kimi-mcp worker: {why}"
