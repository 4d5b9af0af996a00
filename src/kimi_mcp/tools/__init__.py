"""The MCP tools: module-level functions, each supplying its prompt and its finishing step; the shared pipeline
(``kimi_mcp.adapter.pipeline``) does the rest, running each call as a job. ``TOOLS`` is the one list of them
(name → the module that defines it); ``register_tools`` adds the enabled ones to a server *at its first
request after ``initialize``*, so a client's connect does not wait for the tool modules, their result models
and schemas to be built; a first request that is a tool call loads that tool only (the rest load at the next
request of another kind, e.g. the tool list), so a client's first call waits for no other tool. Write tools
may change the workspace; read-only tools run Kimi in plan mode and reject every write or command at the
approval layer; the job tools (``jobs``) wait for, answer, list and continue jobs; ``control`` steers a
running job (``kimi_steer``); ``worktrees`` applies or discards isolated jobs. Kimi's questions are asked of
the caller (``adapter.questions``). The Kimi tools also run as MCP tasks (``adapter.tasks``), for a client
that asks for one."""

from __future__ import annotations

import importlib
import weakref
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from fastmcp import FastMCP
from fastmcp.exceptions import ValidationError
from fastmcp.server.middleware import Middleware, MiddlewareContext

from .._logging import CLIENT_EVENTS, get_logger
from ..adapter.tasks import JobTasks
from ..config import Settings
from ..errors import KimiMCPError
from ..tool_names import ALL_TOOLS, TOOLS, enabled_tools

if TYPE_CHECKING:
    from ..executors import RunTask
    from ..jobs import JobManager
    from ..lazy_runner import LazyRunner

log = get_logger("tools")

__all__ = ["ALL_TOOLS", "TOOLS", "enabled_tools", "prune_copies", "register_tools", "shutdown_jobs"]


def register_tools(
    mcp: FastMCP,
    settings: Settings,
    run: RunTask | None = None,
    problem: KimiMCPError | None = None,
    on_load: Callable[[], None] | None = None,
    *,
    env: dict[str, str],
    runner: LazyRunner,
) -> list[str]:
    """Register the tools allowed by ``settings.tools`` (``ValueError`` at once for unknown names), running
    Kimi with ``run`` (default: the server's ``runner``) in ``env`` (the environment the server read at its
    start); with a configuration ``problem`` every Kimi call answers with it. They are loaded at the
    server's first request other than ``initialize`` (a tool call: that tool first), after the server's
    backend, then ``on_load()`` runs."""
    names = enabled_tools(settings)
    mcp.add_extension(JobTasks(ttl_ms=int(settings.job_ttl_days * 86_400_000)))

    def backend() -> None:
        _bind(mcp, settings, env, runner, run, problem)
        if on_load is not None:
            on_load()

    mcp.add_middleware(_LoadTools(mcp, names, backend))
    mcp.add_middleware(_ArgumentErrors())
    mcp.add_middleware(_RelayEvents())
    mcp.add_middleware(_ResourceErrors())
    return names


def _bind(
    mcp: FastMCP,
    settings: Settings,
    env: dict[str, str],
    runner: LazyRunner,
    run: RunTask | None,
    problem: KimiMCPError | None,
) -> None:
    # the pipeline, the job manager and the tool modules load at the first request, not at start-up
    from ..adapter import pipeline, resources

    backend = pipeline.Backend(settings, env, runner, run or runner, problem)
    pipeline.bind(mcp, backend)
    _job_managers.add(backend.jobs)
    resources.register_resources(mcp, backend.jobs)


class _LoadTools(Middleware):
    """Loads the tools before the first request that may need them (anything but the handshake): the
    server's backend (``bind()``) first, then every enabled tool, except for a call of an enabled tool while
    the rest are not loaded yet: that loads the called tool only."""

    def __init__(self, mcp: FastMCP, names: list[str], bind: Callable[[], None]) -> None:
        self._mcp = mcp
        self._names = names
        self._bind = bind
        self.bound = False
        self.added: set[str] = set()
        self.loaded = False
        self.listed = False

    async def on_request(self, context: MiddlewareContext[Any], call_next: Any) -> Any:
        if not self.loaded and context.method not in ("initialize", "server/discover", "ping"):
            called = getattr(context.message, "name", None) if context.method == "tools/call" else None
            if called not in self.added:
                self._load([called] if called in self._names else self._names)
        result = await call_next(context)
        if context.method == "tools/list" and not self.listed:
            self.listed = True
            log.info("tools listed to the client")
        return result

    def _load(self, names: list[str]) -> None:
        if not self.bound:
            self.bound = True
            self._bind()
        if names == self._names:  # all of them, in the order of TOOLS (a tool called first is added again)
            for name in self.added:
                self._mcp.local_provider.remove_tool(name)
            self.added.clear()
        for name in names:
            self.added.add(name)
            self._mcp.add_tool(getattr(importlib.import_module(f"{__name__}.{TOOLS[name]}"), name))
        self.loaded = names == self._names


class _ArgumentErrors(Middleware):
    """A call whose arguments do not fit the tool's schema (a missing or unknown argument, a value out of
    range) gets the same structured ``bad_input`` result as the server's own checks, not the validator's
    raw text."""

    async def on_call_tool(self, context: MiddlewareContext[Any], call_next: Any) -> Any:
        try:
            return await call_next(context)
        except ValidationError as exc:
            from ..adapter.client import invalid_arguments  # loads with the tools (start-up speed)

            name = context.message.name
            tool = await context.fastmcp_context.fastmcp.get_tool(name) if context.fastmcp_context else None
            return invalid_arguments(name, exc, tool.output_schema if tool is not None else None)


class _RelayEvents(Middleware):
    """After each tool call, its events go out as log notifications of it (a client reads notifications of
    its tool calls): those of the job it names (``job_id``) and the server-wide ones its client has not had
    yet. A job's events also go to the calls that wait for it, as they come (``_mcp.wait_for_job``)."""

    async def on_call_tool(self, context: MiddlewareContext[Any], call_next: Any) -> Any:
        result = await call_next(context)
        ctx = context.fastmcp_context
        if ctx is not None:
            from ..adapter.client import client_key, relay_events  # loads with the tools (start-up speed)

            job_id = (context.message.arguments or {}).get("job_id")
            jobs = [job_id.strip()] if isinstance(job_id, str) else []
            if CLIENT_EVENTS.pending(client_key(ctx), jobs):
                await relay_events(ctx, jobs)
        return result


class _ResourceErrors(Middleware):
    """A job resource that is not there is the MCP spec's "resource not found" (``resources.not_found``;
    added with the server, as the resources load with the tools, at the first request)."""

    async def on_read_resource(self, context: MiddlewareContext[Any], call_next: Any) -> Any:
        from ..adapter.resources import not_found  # loads with the tools (start-up speed)

        return await not_found(context, call_next)


#: the jobs of every server of this process whose tools are loaded (a server with none loaded has no job)
_job_managers: weakref.WeakSet[JobManager] = weakref.WeakSet()


def shutdown_jobs() -> None:
    """Record the jobs still running in every server of this process as interrupted (server exit)."""
    for jobs in list(_job_managers):
        jobs.shutdown()


def prune_copies(mcp: FastMCP) -> list[str]:
    """Remove the stale isolated copies of worktree jobs (see ``adapter.isolation.prune_copies``); the server's
    tools must be loaded."""
    from ..adapter import isolation, pipeline  # loaded with the tools (start-up speed)

    backend = pipeline.current_backend(mcp)
    return isolation.prune_copies(backend.jobs, backend.state_dir)
