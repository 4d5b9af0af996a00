"""The broker's settings (``KIMI_MCP_BROKER``): what is refused and why, and its password never shown."""

from __future__ import annotations

import pytest

from kimi_mcp import broker
from kimi_mcp.config import broker_problem, configured
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
