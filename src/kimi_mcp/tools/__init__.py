"""The MCP tools: module-level functions, each supplying its prompt and its finishing step; the shared
pipeline (``_pipeline``) does the rest, running each call as a job. ``TOOLS`` is the one list of them;
``register`` adds the enabled ones to a server. Write tools may change the workspace; read-only tools run
Kimi in plan mode and reject every write or command at the approval layer; the job tools (``jobs``) wait
for, list and continue jobs."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from fastmcp import FastMCP

from ..config import Settings
from ..errors import KimiMCPError
from ._mcp import RunTask
from ._pipeline import Backend, bind, run_task, shutdown_jobs
from .jobs import kimi_continue, kimi_job, kimi_jobs
from .read import kimi_analyze_code, kimi_consult, kimi_verify
from .resources import register_resources
from .status import kimi_status
from .write import kimi_code_task, kimi_debug, kimi_prompt, kimi_refactor

__all__ = ["ALL_TOOLS", "TOOLS", "RunTask", "register_tools", "shutdown_jobs"]

TOOLS: dict[str, Callable[..., Any]] = {
    fn.__name__: fn
    for fn in (
        kimi_code_task,
        kimi_prompt,
        kimi_refactor,
        kimi_debug,
        kimi_analyze_code,
        kimi_verify,
        kimi_consult,
        kimi_continue,
        kimi_job,
        kimi_jobs,
        kimi_status,
    )
}
ALL_TOOLS = tuple(TOOLS)


def register_tools(
    mcp: FastMCP, settings: Settings, run: RunTask = run_task, problem: KimiMCPError | None = None
) -> list[str]:
    """Register the tools allowed by ``settings.tools`` (all when unset), running Kimi with ``run``;
    with a configuration ``problem`` every Kimi call answers with it. Returns their names."""
    enabled = set(settings.tools) if settings.tools else set(ALL_TOOLS)
    unknown = enabled - set(ALL_TOOLS)
    if unknown:
        raise ValueError(
            f"KIMI_MCP_TOOLS names unknown tools {sorted(unknown)}; valid: {', '.join(ALL_TOOLS)}"
        )
    backend = Backend(settings, run, problem)
    bind(mcp, backend)
    register_resources(mcp, backend.jobs)
    names = [name for name in ALL_TOOLS if name in enabled]
    for name in names:
        mcp.add_tool(TOOLS[name])
    return names
