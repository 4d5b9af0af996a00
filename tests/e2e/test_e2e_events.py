"""Events for the client over HTTP, two real MCP clients of one `kimi-mcp --http` server: a job's event (the
standby used for A's workspace) reaches A only, a server-wide one (a misspelt variable) each client once
(each tool call on the 2026-07-28 protocol, which has no session: every request is its own connection)."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest
from fake_moonshot import FakeMoonshot, Reply
from fastmcp import Client
from kimi_env import KimiUnderTest
from mcp_helpers import processes_with_home
from test_e2e_security_access import HttpServer

pytestmark = pytest.mark.e2e

WARNING = "KIMI_MCP_TIMOUT is not a kimi-mcp setting and is ignored; did you mean KIMI_MCP_TIMEOUT?"


class Heard:
    """The log notifications one client received (their text)."""

    def __init__(self) -> None:
        self.messages: list[str] = []

    async def __call__(self, message) -> None:
        data = message.data
        self.messages.append(data.get("msg", str(data)) if isinstance(data, dict) else str(data))


async def logged(log: Path, text: str, timeout: float = 120.0) -> None:
    """Wait until the server's log (stderr) holds ``text``: what happened, seen without an MCP call."""
    end = time.monotonic() + timeout
    while text not in log.read_text():
        assert time.monotonic() < end, f"the server never logged {text!r}:\n{log.read_text()[-3000:]}"
        await asyncio.sleep(0.1)


@pytest.mark.parametrize("mode", ["legacy", "auto"])  # 2025-11-25 sessions; 2026-07-28 (no session)
@pytest.mark.parametrize("kimi", ["legacy"], indirect=True)  # what is relayed does not depend on the dialect
def test_a_jobs_event_reaches_its_client_only_and_a_server_wide_one_each_client_once(
    mode: str, kimi: KimiUnderTest, fake: FakeMoonshot, workspace: Path, tmp_path: Path
):
    fake.script([Reply.text_reply("first done")], marker="FIRST")
    fake.script([Reply.text_reply("second done")], marker="SECOND")
    log = tmp_path / "server.log"
    env = {
        **kimi.env,
        "KIMI_MCP_TIMOUT": "5",
        "KIMI_MCP_STANDBY": "after-call",
    }  # the default: the standby used
    server = HttpServer(env, workspace, "127.0.0.1", log)
    standby = f"using the standby Kimi for {workspace}"
    heard_a, heard_b = Heard(), Heard()
    calls = {"a": 0, "b": 0}

    async def body() -> dict:
        async with (
            Client(server.url, log_handler=heard_a, mode=mode, timeout=300) as a,
            Client(server.url, log_handler=heard_b, mode=mode, timeout=300) as b,
        ):

            async def call(who: str, client: Client, name: str, args: dict) -> dict:
                calls[who] += 1
                return (await client.call_tool(name, args, raise_on_error=False)).structured_content

            first = await call(
                "a", a, "kimi_code_task", {"task_description": "FIRST", "work_dir": str(workspace)}
            )
            assert first["success"] is True, first
            # the standby for A's workspace is still starting: this call returns before its job takes it
            args = {"task_description": "SECOND", "work_dir": str(workspace), "wait_s": 0}
            second = await call("a", a, "kimi_code_task", args)
            await logged(log, standby)  # A's job took the standby while no call of A's was open
            await call("b", b, "kimi_jobs", {})  # B calls next
            done = await call("a", a, "kimi_job", {"job_id": second["job_id"], "wait_s": 120})
            await call("a", a, "kimi_jobs", {})
            await call("b", b, "kimi_jobs", {})
            return done

    server.wait_ready()
    try:
        done = asyncio.run(body())
    finally:
        server.stop()
    assert done["status"] == "done" and done["warm_start"] is True, done
    assert heard_a.messages.count(standby) == 1, heard_a.messages
    assert standby not in heard_b.messages, heard_b.messages
    once = {"a": 1, "b": 1} if mode == "legacy" else calls  # 2026-07-28: each call is its own connection
    assert heard_a.messages.count(WARNING) == once["a"], heard_a.messages
    assert heard_b.messages.count(WARNING) == once["b"], heard_b.messages
    assert not processes_with_home(kimi.home)
