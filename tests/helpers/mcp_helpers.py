"""Calling the real kimi-mcp server through a real MCP client (fastmcp.Client over stdio)."""

from __future__ import annotations

import asyncio
import os
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import psutil
from fastmcp import Client
from fastmcp.client.transports import StdioTransport

REPO = Path(__file__).resolve().parents[2]
#: a raw JSON-RPC ``initialize`` request (tests that speak the protocol without an MCP client)
INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-11-25",
        "capabilities": {},
        "clientInfo": {"name": "raw", "version": "0"},
    },
}
SERVER = str(Path(sys.executable).parent / "kimi-mcp")  # the console script `uv run kimi-mcp` runs


def transport(env: dict[str, str], cwd: str | Path, log_file: Path) -> StdioTransport:
    return StdioTransport(
        SERVER,
        [],
        env=env,
        cwd=str(cwd),
        keep_alive=False,
        log_file=open(log_file, "a"),  # noqa: SIM115
    )


async def with_client(
    env: dict[str, str], cwd: str | Path, log_file: Path, body: Callable[[Client], Awaitable[Any]]
) -> Any:
    async with Client(transport(env, cwd, log_file), timeout=600) as client:
        return await body(client)


def call_tool(
    env: dict[str, str],
    cwd: str | Path,
    log_file: Path,
    name: str,
    arguments: dict[str, Any],
    progress: list | None = None,
):
    """One tool call in a fresh server process; returns the CallToolResult."""

    async def progress_handler(done: float, total: float | None, message: str | None) -> None:
        if progress is not None:
            progress.append((done, total, message))

    async def body(client: Client):
        return await client.call_tool(
            name, arguments, raise_on_error=False, progress_handler=progress_handler
        )

    return asyncio.run(with_client(env, cwd, log_file, body))


def processes_with_home(home: Path) -> list[psutil.Process]:
    """Live processes with HOME=home other than the kimi-mcp server: Kimi and anything it started."""
    found = []
    for proc in psutil.process_iter(["pid", "name"]):
        try:
            if proc.pid == os.getpid() or proc.status() == psutil.STATUS_ZOMBIE:
                continue
            if proc.environ().get("HOME") != str(home):
                continue
            if any(part.endswith("kimi-mcp") for part in proc.cmdline()[:2]):
                continue  # the server under test itself
            found.append(proc)
        except psutil.Error:
            continue
    return found
