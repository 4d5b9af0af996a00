"""MCP plumbing shared by the tools: client roots (both protocol eras), waiting for a job while relaying
its progress and events, and results as structured content + JSON text."""

from __future__ import annotations

import threading
import time
import warnings
from collections.abc import Iterable
from pathlib import Path

import anyio
import mcp_types
from fastmcp import Context
from fastmcp.tools.base import ToolResult
from mcp.shared.exceptions import MCPDeprecationWarning
from pydantic import ValidationError as PydanticValidationError

from .._logging import CLIENT_EVENTS, get_logger
from ..config import Settings
from ..errors import BadInput, KimiMCPError
from ..jobs import Job
from ..models import ErrorInfo, TaskResult
from ..secrets import Redactor
from ..workspace import roots_to_paths
from .budget import fit_to_budget, result_json

log = get_logger("tools")

HEARTBEAT_S = 5.0
WAIT_STEP = 0.5  # seconds a waiting thread blocks before it looks whether its wait was cancelled
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
        with warnings.catch_warnings():  # the deprecation warning is raised by the call, not the await
            warnings.simplefilter("ignore", MCPDeprecationWarning)
            request = session.list_roots()
        with anyio.fail_after(3):
            listed = await request
        return _root_paths(listed)
    except Exception as exc:  # roots are optional: any failure means "no roots"
        log.debug("no client roots: %s", exc)
        return []


def in_roots(workspace: str, roots: list[str]) -> bool:
    """Whether ``workspace`` is one of ``roots`` or inside one (no roots: anywhere)."""
    path = Path(workspace)
    return not roots or any(path == Path(root) or Path(root) in path.parents for root in roots)


def invalid_arguments(tool: str, exc: Exception, output_schema: dict | None) -> ToolResult:
    """The reply to a call whose arguments do not fit the tool's input schema: a ``bad_input`` error like the
    server's own checks (each problem as ``argument: what is wrong``, what to do), with the fields every
    result has (``success``, ``error``; ``status`` where the result has one)."""
    cause = exc.__cause__
    if isinstance(cause, PydanticValidationError):
        problems = [
            f"{'.'.join(str(part) for part in error['loc']) or 'arguments'}: {error['msg']}"
            for error in cause.errors(include_url=False)
        ]
    else:
        problems = [str(exc).splitlines()[0]]
    error = BadInput(
        f"{tool}: invalid arguments: " + "; ".join(problems),
        details={"problems": problems},
        suggestion=f"Fix the arguments named above as {tool}'s input schema describes them, then call it again.",
    )
    payload: dict = {"success": False, "error": ErrorInfo.from_exception(error).model_dump(mode="json")}
    if "status" in ((output_schema or {}).get("properties") or {}):
        payload["status"] = "failed"
    text = mcp_types.TextContent(type="text", text=error_text(payload))
    return ToolResult(content=[text], structured_content=payload, is_error=True)


def client_key(ctx: Context) -> str | None:
    """Who is calling, for the server-wide events each client hears once: the MCP session (handshake era),
    the one client of this server on stdio (or in memory); a 2026-07-28 request over HTTP is its own
    connection (nothing ties it to an earlier one; a bearer token is the same for every client, so FastMCP's
    principal would not tell two clients apart either), so each such call hears the server-wide events kept."""
    try:
        modern = getattr(ctx, "_is_modern_protocol", lambda: False)()
        if modern and ctx.transport not in ("sse", "streamable-http"):
            return f"server-{id(ctx.fastmcp)}"
        return ctx.session_id  # the session's id, or one made for this request's own connection
    except RuntimeError:  # no session: nothing to tell apart
        return None


async def relay_events(ctx: Context | None, jobs: Iterable[str] = ()) -> None:
    """Send this call's events as MCP log notifications of its request, oldest first: those of ``jobs`` (the
    ids of the jobs it is about) and the server-wide ones its client has not had yet; never fails the
    request."""
    if ctx is None:
        return
    for event in CLIENT_EVENTS.take(client_key(ctx), jobs):
        try:
            with warnings.catch_warnings():  # the logging capability is deprecated on 2026-07-28: still sent
                warnings.simplefilter("ignore")
                await ctx.log(event.message, level=event.level, logger_name="kimi-mcp")  # type: ignore[arg-type]
        except Exception as exc:
            log.debug("event not relayed: %s", exc)
            return


def error_result(exc: KimiMCPError, workspace: str = "", cls: type[TaskResult] = TaskResult) -> TaskResult:
    return cls(success=False, status="failed", workspace=workspace, error=ErrorInfo.from_exception(exc))


def to_tool_result(result: TaskResult, settings: Settings, redactor: Redactor | None = None) -> ToolResult:
    """The MCP reply: structured content plus the same JSON as text; secrets masked in every string."""
    result, payload = budgeted(result, settings.max_result_chars, redactor)
    links = _link_cuts(result)
    failed = result.error is not None
    text = mcp_types.TextContent(type="text", text=error_text(payload) if failed else result_json(payload))
    return ToolResult(content=[text, *links], structured_content=payload, is_error=failed)


def budgeted(result: TaskResult, limit: int, redactor: Redactor | None = None) -> tuple[TaskResult, dict]:
    """A copy of ``result`` cut to ``limit`` characters (the job keeps it whole), and its masked payload."""
    result = fit_to_budget(result.model_copy(deep=True), limit)
    return result, (redactor or Redactor()).mask_tree(result.model_dump(mode="json"))


def _link_cuts(result: TaskResult) -> list[mcp_types.ResourceLink]:
    """Every cut that a resource holds whole (its ``uri``, set by the budget), as ``resource_link`` items."""
    links = []
    for item in result.truncated:
        if item.uri is None:
            continue
        whole = (
            f"{item.path} whole: {item.size_bytes} bytes; the result holds {item.returned_chars} characters"
        )
        links.append(
            mcp_types.ResourceLink(type="resource_link", uri=item.uri, name=item.path, description=whole)
        )
    return links


def error_text(payload: dict) -> str:
    """A failed result as a few lines a model can act on alone (Claude Code hands its model only the text
    of an error result): what failed, what to do, whether a retry helps, the files already changed, and
    the job and conversation to pick up. The structured content keeps every field."""
    error = payload["error"]
    lines = [f"Error ({error['type']}): {error['message']}", f"What to do: {error['suggestion']}"]
    lines.append(f"Retryable: {'yes' if error['retryable'] else 'no'}")
    changed = [
        f"{kind} {', '.join(payload[f'files_{kind}'])}"
        for kind in ("created", "modified", "deleted")
        if payload.get(f"files_{kind}")
    ]
    lines.append("Files already changed: " + ("; ".join(changed) if changed else "none"))
    details = {k: v for k, v in (error.get("details") or {}).items() if k != "screen"}
    if details:
        lines.append("Details: " + "; ".join(f"{k}={v}" for k, v in details.items())[:400])
    if screen := (error.get("details") or {}).get("screen"):
        lines.append("Kimi's screen (last lines):\n" + screen)
    handles = [f"{name}: {payload[name]}" for name in ("job_id", "session_id") if payload.get(name)]
    if handles:
        lines.append(" · ".join(handles))
    return "\n".join(lines)


async def wait_for_job(ctx: Context, job: Job, wait_s: float | None, settings: Settings) -> bool:
    """Wait until ``job`` is done, asks a question, or ``wait_s`` seconds passed (``None``: no limit),
    relaying its progress to the client; ``True`` if it is done. Cancelling this wait leaves the job alone
    (the caller decides)."""
    stop = threading.Event()
    end = None if wait_s is None else time.monotonic() + wait_s

    def block() -> bool:  # in a worker thread; gives up when the wait is cancelled
        while not stop.is_set() and not job.asking.is_set():
            step = WAIT_STEP if end is None else min(WAIT_STEP, end - time.monotonic())
            if step <= 0:
                return job.done.is_set()
            if job.done.wait(min(step, 0.1)):
                return True
        return job.done.is_set()

    async def heartbeat() -> None:
        seen, last_sent = -1, 0.0
        while True:
            await anyio.sleep(0.25)
            now = time.monotonic()
            if job.seq != seen or now - last_sent >= HEARTBEAT_S:
                # every step since the last notification, in one (progress must grow with each)
                steps = job.progress_since(seen) if seen >= 0 else []
                seen, last_sent = job.seq, now
                elapsed = now - job.started
                text = f"{' → '.join(steps or [job.activity])} ({elapsed:.0f}s of {settings.timeout:.0f}s)"
                try:
                    await ctx.report_progress(
                        progress=round(elapsed, 1), total=settings.timeout, message=text
                    )
                except Exception as exc:
                    log.debug("progress not sent: %s", exc)
                await relay_events(ctx, [job.job_id])

    try:
        async with anyio.create_task_group() as group:
            group.start_soon(heartbeat)
            done = await anyio.to_thread.run_sync(block, abandon_on_cancel=True)
            group.cancel_scope.cancel()
        await relay_events(ctx, [job.job_id])  # what came since the last heartbeat
        return done
    finally:
        stop.set()
