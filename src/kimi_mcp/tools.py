"""The MCP tools: a thin layer that validates input, runs the task in a worker thread and keeps the
client informed (progress at least every few seconds, real cancellation)."""

from __future__ import annotations

import json
import threading
import time
import warnings
from collections import deque
from typing import Annotated

import anyio
import mcp_types
from fastmcp import Context, FastMCP
from fastmcp.tools.base import ToolResult
from mcp.types import ToolAnnotations
from pydantic import Field

from ._logging import get_logger
from .config import Settings
from .errors import BadInput, KimiMCPError
from .models import ErrorInfo, TaskResult
from .prompts import code_task_prompt
from .runner import TaskRequest, run_task
from .workspace import read_context_files, resolve_workspace, roots_to_paths

log = get_logger("tools")

HEARTBEAT_S = 5.0


ROOTS_KEY = "kimi_mcp_roots"


def _root_paths(listed: object) -> list[str]:
    roots = getattr(listed, "roots", None)
    if roots is None and isinstance(listed, dict):
        roots = listed.get("roots")
    uris = []
    for root in roots or []:
        uri = getattr(root, "uri", None) or (root.get("uri") if isinstance(root, dict) else None)
        if uri:
            uris.append(str(uri))
    return roots_to_paths(uris)


async def client_roots(ctx: Context) -> list[str] | mcp_types.InputRequiredResult:
    """The client's ``file://`` roots, or [] when it has none.

    Handshake-era clients are asked with ``roots/list``. On the 2026-07-28 protocol there is no
    back-channel: the first round returns an ``InputRequiredResult`` asking for the roots, and the
    client retries the call with the answer in ``input_responses``.
    """
    try:
        responses = ctx.input_responses
        if responses and ROOTS_KEY in responses:
            return _root_paths(responses[ROOTS_KEY])
        session = ctx.session
        caps = getattr(session, "client_capabilities", None)
        if caps is None or getattr(caps, "roots", None) is None:
            return []
        if getattr(ctx, "_is_modern_protocol", lambda: False)():
            return mcp_types.InputRequiredResult(
                input_requests={ROOTS_KEY: mcp_types.ListRootsRequest(method="roots/list")}
            )
        with warnings.catch_warnings(), anyio.fail_after(3):
            warnings.simplefilter("ignore")
            listed = await session.list_roots()
        return _root_paths(listed)
    except Exception as exc:  # roots are optional: any failure means "no roots"
        log.debug("no client roots: %s", exc)
        return []


def error_result(exc: KimiMCPError, workspace: str = "") -> TaskResult:
    return TaskResult(success=False, workspace=workspace, error=ErrorInfo.from_exception(exc))


def to_tool_result(result: TaskResult) -> ToolResult:
    payload = result.model_dump(mode="json")
    return ToolResult(
        content=json.dumps(payload, ensure_ascii=False, indent=1),
        structured_content=payload,
        is_error=not result.success,
    )


async def run_with_progress(ctx: Context, request: TaskRequest, settings: Settings) -> TaskResult:
    """Run the blocking task in a thread; relay progress; turn cancellation into a clean Kimi shutdown."""
    cancel = threading.Event()
    done = threading.Event()
    messages: deque[str] = deque(maxlen=50)
    started = time.monotonic()

    def work() -> TaskResult:
        try:
            return run_task(request, settings, on_progress=messages.append, cancel=cancel)
        finally:
            done.set()

    async def heartbeat() -> None:
        last_message = "starting"
        last_sent = 0.0
        while True:
            await anyio.sleep(0.25)
            fresh = False
            while messages:
                last_message, fresh = messages.popleft(), True
            now = time.monotonic()
            if fresh or now - last_sent >= HEARTBEAT_S:
                elapsed = now - started
                text = f"{last_message} ({elapsed:.0f}s of {settings.timeout:.0f}s)"
                try:
                    await ctx.report_progress(
                        progress=round(elapsed, 1), total=settings.timeout, message=text
                    )
                except Exception as exc:
                    log.debug("progress not sent: %s", exc)
                last_sent = now

    try:
        async with anyio.create_task_group() as group:
            group.start_soon(heartbeat)
            result = await anyio.to_thread.run_sync(work, abandon_on_cancel=True)
            group.cancel_scope.cancel()
        return result
    except BaseException:
        if not done.is_set():
            cancel.set()  # the session interrupts Kimi and cleans up; wait for that before returning
            with anyio.CancelScope(shield=True):
                await anyio.to_thread.run_sync(done.wait)
        raise


def register_tools(mcp: FastMCP, settings: Settings) -> list[str]:
    """Register the tools allowed by ``settings.tools`` (all when unset). Returns their names."""
    enabled = set(settings.tools) if settings.tools else None
    registered: list[str] = []
    output_schema = TaskResult.model_json_schema()

    def allowed(name: str) -> bool:
        return enabled is None or name in enabled

    if allowed("kimi_code_task"):

        @mcp.tool(
            name="kimi_code_task",
            description=(
                "Delegate a coding task to Kimi (Moonshot's coding agent) in a workspace. Kimi may read, "
                "create, edit and delete files inside the workspace and run shell commands there. Returns "
                "Kimi's final answer and every file it created, modified or deleted, with the text contents "
                "of created/modified files (within size budgets; secrets withheld)."
            ),
            annotations=ToolAnnotations(
                title="Kimi: coding task",
                read_only_hint=False,
                destructive_hint=True,
                idempotent_hint=False,
                open_world_hint=True,
            ),
            output_schema=output_schema,
        )
        async def kimi_code_task(
            ctx: Context,
            task_description: Annotated[
                str,
                Field(description="What Kimi should do, in plain language", min_length=1, max_length=100_000),
            ],
            context_files: Annotated[
                list[str],
                Field(description="Files (relative to the workspace) whose contents Kimi should see"),
            ] = [],  # noqa: B006 - JSON schema default; never mutated
            work_dir: Annotated[
                str | None,
                Field(description="Workspace directory (default: client root, KIMI_MCP_WORKSPACE or cwd)"),
            ] = None,
        ) -> ToolResult | mcp_types.InputRequiredResult:
            return await _code_task(ctx, settings, task_description, context_files, work_dir, None)

        registered.append("kimi_code_task")
    return registered


async def _code_task(
    ctx: Context,
    settings: Settings,
    task: str,
    context_files: list[str],
    work_dir: str | None,
    constraints: str | None,
) -> ToolResult | mcp_types.InputRequiredResult:
    workspace = ""
    try:
        if not task.strip():
            raise BadInput("task_description is empty")
        roots = [] if work_dir else await client_roots(ctx)
        if isinstance(roots, mcp_types.InputRequiredResult):
            return roots  # ask the client for its roots; it calls again with the answer
        path = resolve_workspace(work_dir, roots, settings.workspace)
        workspace = str(path)
        files = read_context_files(path, list(context_files), settings.max_context_bytes)
        prompt = code_task_prompt(task, files, constraints)
    except KimiMCPError as exc:
        return to_tool_result(error_result(exc, workspace))
    result = await run_with_progress(ctx, TaskRequest(prompt=prompt, workspace=path), settings)
    return to_tool_result(result)
