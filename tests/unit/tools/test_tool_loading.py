"""What a server loads for its first requests (start-up speed): a first tool call loads that tool only, and
the next request of another kind every tool, listed in the one list's order; FastMCP's session state store
(the ``py-key-value`` package) is made at its first write, and state written through a real ``Context``
reads back as before."""

from __future__ import annotations

import asyncio
from typing import Any

from fastmcp import Client, Context, FastMCP
from fastmcp.server.middleware import Middleware, MiddlewareContext

from kimi_mcp.config import Settings
from kimi_mcp.server import create_server
from kimi_mcp.state_store import KimiFastMCP, LazyStateStore
from kimi_mcp.tools import ALL_TOOLS


def names(mcp: FastMCP) -> list[str]:
    return [tool.name for tool in asyncio.run(mcp.local_provider._list_tools())]


class LoadedAtCalls(Middleware):
    """Records the tools the server has at each tool call (added after kimi-mcp's own: it runs after them)."""

    def __init__(self, mcp: FastMCP) -> None:
        self.mcp = mcp
        self.seen: list[list[str]] = []

    async def on_call_tool(self, context: MiddlewareContext[Any], call_next: Any) -> Any:
        self.seen.append([tool.name for tool in await self.mcp.local_provider._list_tools()])
        return await call_next(context)


def test_a_first_call_loads_the_called_tool_only_and_a_list_then_has_every_tool_in_order() -> None:
    mcp = create_server(Settings())
    probe = LoadedAtCalls(mcp)
    mcp.add_middleware(probe)

    async def body() -> list[str]:
        async with Client(mcp) as client:  # (fastmcp's client lists the tools after a call: output schemas)
            await client.call_tool_mcp("kimi_status", {})
            await client.call_tool_mcp("kimi_status", {})
            return [tool.name for tool in await client.list_tools()]

    listed = asyncio.run(body())
    assert probe.seen[0] == ["kimi_status"]  # the first call waited for no other tool
    assert probe.seen[1] == list(ALL_TOOLS)  # and a list since added every tool, in the one list's order
    assert listed == list(ALL_TOOLS) and names(mcp) == list(ALL_TOOLS)


def test_a_call_of_a_tool_that_is_not_enabled_loads_every_enabled_tool() -> None:
    mcp = create_server(Settings(tools=["kimi_status", "kimi_jobs"]))

    async def body() -> bool:
        async with Client(mcp) as client:
            result = await client.call_tool_mcp("kimi_code_task", {"task_description": "x"})
            return result.is_error

    assert asyncio.run(body()) is True
    assert names(mcp) == ["kimi_jobs", "kimi_status"]


def test_session_state_written_through_a_context_reads_back_from_the_store_made_at_that_write() -> None:
    mcp = KimiFastMCP("state")

    @mcp.tool
    async def remember(value: str, ctx: Context) -> str:
        await ctx.set_state("kept", value)
        return "ok"

    @mcp.tool
    async def recall(ctx: Context) -> str:
        return repr(await ctx.get_state("kept"))

    async def body() -> tuple[str, bool, str]:
        async with Client(mcp, mode="legacy") as client:  # a session, which scopes the state
            before = (await client.call_tool("recall", {})).data
            made_before = mcp._state_store.made
            await client.call_tool("remember", {"value": "v1"})
            return before, made_before, (await client.call_tool("recall", {})).data

    before, made_before, after = asyncio.run(body())
    assert (before, made_before, after) == ("None", False, "'v1'")
    assert isinstance(mcp._state_store, LazyStateStore) and mcp._state_store.made


def test_a_tool_list_and_tool_calls_make_no_session_state_store() -> None:
    mcp = create_server(Settings())

    async def body() -> None:
        async with Client(mcp) as client:
            await client.list_tools()
            await client.call_tool("kimi_status", {}, raise_on_error=False)
            await client.call_tool("kimi_jobs", {}, raise_on_error=False)

    asyncio.run(body())
    assert isinstance(mcp._state_store, LazyStateStore) and not mcp._state_store.made
