"""One tool call, the same for every tool: check the arguments, find the workspace (the client's roots in
either protocol era), read the context files, build the prompt, run Kimi, shape and package the result."""

from __future__ import annotations

import os
import weakref
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import anyio
import mcp_types
from fastmcp import Context, FastMCP
from fastmcp.dependencies import CurrentFastMCP
from fastmcp.tools.base import ToolResult
from pydantic import BaseModel

from .. import answers
from .._logging import get_logger
from ..config import Settings
from ..errors import BadInput, KimiMCPError
from ..models import Evidence, StructuredResult, TaskResult
from ..runner import TaskRequest, run_task
from ..secrets import Redactor, configured_secrets
from ..workspace import ContextFile, read_context_files, resolve_workspace
from ._mcp import RunTask, client_roots, error_result, run_with_progress, to_tool_result
from ._params import Reply

log = get_logger("tools")

R = TypeVar("R", bound=TaskResult)


@dataclass(frozen=True, slots=True)
class Backend:
    """What the tools of one server use: its settings and the function that runs a Kimi turn."""

    settings: Settings
    run: RunTask = run_task


_backends: weakref.WeakKeyDictionary[FastMCP, Backend] = weakref.WeakKeyDictionary()


def bind(mcp: FastMCP, backend: Backend) -> None:
    """Make ``backend`` the one the tools registered on ``mcp`` use."""
    _backends[mcp] = backend


def current_backend(server: FastMCP = CurrentFastMCP()) -> Backend:  # noqa: B008 - FastMCP dependency
    """The dependency each tool declares (``Depends(current_backend)``; hidden from the tool's schema)."""
    return _backends[server]


class Call:
    """One tool invocation: workspace, context files, the Kimi run, the result."""

    def __init__(self, ctx: Context, backend: Backend, cls: type[TaskResult]) -> None:
        self.ctx, self.backend, self.cls = ctx, backend, cls
        self.settings = backend.settings
        self.workspace: Path | None = None
        self.redactor = Redactor()  # the run adds what it finds; done() masks the whole result with it
        log.debug("%s: call received", cls.__name__)

    async def workspace_for(self, work_dir: str | None) -> Path | mcp_types.InputRequiredResult:
        roots = [] if work_dir else await client_roots(self.ctx)
        if isinstance(roots, mcp_types.InputRequiredResult):
            return roots
        self.workspace = resolve_workspace(
            work_dir, roots, self.settings.workspace, allow_home=self.settings.allow_home_workspace
        )
        return self.workspace

    def files(self, paths: list[str], argument: str, *, required: bool = False) -> list[ContextFile]:
        """The contents of ``paths`` (the caller's ``argument``), within the workspace and the size budget."""
        if required and not paths:
            raise BadInput(f"{argument}: at least one file path is required")
        assert self.workspace is not None
        return read_context_files(self.workspace, list(paths), self.settings.max_context_bytes, argument)

    async def run(self, prompt: str, *, read_only: bool) -> TaskResult:
        assert self.workspace is not None
        log.debug("workspace %s; running", self.workspace)
        request = TaskRequest(
            prompt=prompt, workspace=self.workspace, read_only=read_only, redactor=self.redactor
        )
        return await run_with_progress(self.ctx, request, self.settings, self.backend.run)

    def fail(self, exc: KimiMCPError) -> ToolResult:
        self.redactor.add(configured_secrets(os.environ))
        result = error_result(exc, str(self.workspace or ""), self.cls)
        return to_tool_result(result, self.settings, self.redactor)

    def done(self, result: TaskResult) -> ToolResult:
        reply = to_tool_result(result, self.settings, self.redactor)
        log.debug("result ready")
        return reply


Prompt = Callable[[Call, Path], str]
Finish = Callable[[Call, TaskResult], Awaitable[TaskResult]]


async def run_tool(
    ctx: Context,
    backend: Backend,
    cls: type[TaskResult],
    work_dir: str | None,
    prompt: Prompt,
    *,
    read_only: bool,
    check: Callable[[], None] | None = None,
    finish: Finish | None = None,
) -> Reply:
    """The pipeline: ``check()`` validates the arguments before anything else; ``prompt(call, workspace)``
    reads the context and builds Kimi's prompt (a ``KimiMCPError`` there is the caller's error);
    ``finish(call, base)`` turns the run's TaskResult into the tool's own result."""
    call = Call(ctx, backend, cls)
    try:
        if check is not None:
            check()
        if isinstance(ws := await call.workspace_for(work_dir), mcp_types.InputRequiredResult):
            return ws
        text = prompt(call, ws)
    except KimiMCPError as exc:
        return call.fail(exc)
    base = await call.run(text, read_only=read_only)
    return call.done(await finish(call, base) if finish else base)


async def in_worker(work: Callable[[Call, TaskResult], R], call: Call, base: TaskResult) -> R:
    """Run a finishing step that reads files or diffs them in a worker thread: the event loop keeps
    serving other requests, and a cancelled call returns at once (the thread's result is dropped)."""
    return await anyio.to_thread.run_sync(work, call, base, abandon_on_cancel=True)


def not_blank(**arguments: str) -> Callable[[], None]:
    """A ``check`` that the named arguments are not blank."""

    def check() -> None:
        for name, value in arguments.items():
            if not value.strip():
                raise BadInput(f"{name} is empty")

    return check


def structured(cls: type[R], base: TaskResult, answer_model: type[BaseModel]) -> tuple[R, Any]:
    """``base`` as a ``cls`` result, with Kimi's answer parsed as ``answer_model`` (``None`` if it does not
    parse; the raw answer's preview is kept either way)."""
    assert issubclass(cls, StructuredResult)
    parsed, _raw = answers.parse_answer(base.output, answer_model)
    result = cls(
        **base.model_dump(), parse_ok=parsed is not None, raw_response_preview=answers.preview(base.output)
    )
    if parsed is not None and hasattr(parsed, "evidence"):
        result.evidence = Evidence(**{**result.evidence.model_dump(), "cited": list(parsed.evidence)})
    return result, parsed
