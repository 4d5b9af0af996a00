"""What a result had to leave out stays reachable: MCP resources for a job's files, answer and diff, read
from the job store (the whole result the job kept) and, for a file the tracker cut for size, from the
workspace by the tracker's rules (never a secret, a symlink or anything outside the workspace).

``kimi-mcp://jobs/{job_id}/files/{path}``, ``kimi-mcp://jobs/{job_id}/output``, ``kimi-mcp://jobs/{job_id}/diff``.
Only paths the job reported as created or modified are served; anything else (an unknown job, a job outside
the client's roots, a file it did not change) is the MCP spec's "resource not found": ``INVALID_PARAMS`` with
the URI in ``data``.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import anyio
from fastmcp import Context, FastMCP
from fastmcp.exceptions import ResourceError
from fastmcp.server.middleware import MiddlewareContext
from mcp.shared.exceptions import MCPError
from mcp_types import INVALID_PARAMS, InputRequiredResult

from ..jobs import JobManager
from .budget import SCHEME
from .client import client_roots, in_roots

MAX_FILE_BYTES = 2_000_000  # what a file resource returns at most (the rest is marked as cut)


class ResourceNotFound(ResourceError):
    """A job resource that is not there. FastMCP logs it at debug (a client's wrong URI is no fault of the
    server's: no traceback); :func:`not_found` answers it as "resource not found"."""

    def __init__(self, message: str) -> None:
        super().__init__(message, log_level=logging.DEBUG)


async def not_found(context: MiddlewareContext[Any], call_next: Any) -> Any:
    """A ``resources/read`` (the server's middleware, ``tools._ResourceErrors``): a
    :class:`ResourceNotFound` is answered as the MCP spec's "resource not found", ``INVALID_PARAMS`` with
    the URI the client asked for in ``data`` (FastMCP would answer an internal error)."""
    try:
        return await call_next(context)
    except ResourceNotFound as exc:
        raise MCPError(code=INVALID_PARAMS, message=str(exc), data={"uri": str(context.message.uri)}) from exc


def register_resources(mcp: FastMCP, jobs: JobManager) -> None:
    """Add the job resource templates to ``mcp``."""

    @mcp.resource(f"{SCHEME}/{{job_id}}/files/{{path*}}", mime_type="text/plain", name="job_file")
    async def job_file(job_id: str, path: str, ctx: Context) -> str | InputRequiredResult:
        """A file a Kimi job created or modified, whole (as far as the result budget cut it)."""
        if isinstance(roots := await client_roots(ctx), InputRequiredResult):
            return roots
        return await anyio.to_thread.run_sync(_file_text, jobs, job_id, path, roots)

    @mcp.resource(f"{SCHEME}/{{job_id}}/output", mime_type="text/plain", name="job_output")
    async def job_output(job_id: str, ctx: Context) -> str | InputRequiredResult:
        """Kimi's whole final answer of a job."""
        if isinstance(roots := await client_roots(ctx), InputRequiredResult):
            return roots
        return await anyio.to_thread.run_sync(_field_text, jobs, job_id, "output", roots)

    @mcp.resource(f"{SCHEME}/{{job_id}}/diff", mime_type="text/x-diff", name="job_diff")
    async def job_diff(job_id: str, ctx: Context) -> str | InputRequiredResult:
        """The whole diff of a job's result (an isolated job's change, or kimi_refactor's)."""
        if isinstance(roots := await client_roots(ctx), InputRequiredResult):
            return roots
        return await anyio.to_thread.run_sync(_field_text, jobs, job_id, "diff", roots)


def _result(jobs: JobManager, job_id: str, roots: list[str]) -> dict:
    """The finished job's result; a job outside the client's ``roots`` is not found for that client."""
    record = jobs.store.get(job_id)
    if record is None or record.result is None or not in_roots(record.workspace, roots):
        raise ResourceNotFound(f"no finished job {job_id!r} (kimi_jobs lists the jobs)")
    return record.result


def _field_text(jobs: JobManager, job_id: str, name: str, roots: list[str]) -> str:
    text = _result(jobs, job_id, roots).get(name)
    if not text:
        raise ResourceNotFound(f"job {job_id} has no {name}")
    return text


def _file_text(jobs: JobManager, job_id: str, path: str, roots: list[str]) -> str:
    from .. import tracker  # start-up speed: it loads with the runner at the first call, not with the tools

    result = _result(jobs, job_id, roots)
    if path not in {*result.get("files_created", []), *result.get("files_modified", [])}:
        raise ResourceNotFound(f"job {job_id} did not create or modify {path!r}")
    if path in result.get("secret_files", []) or path in result.get("binary_files", []):
        raise ResourceNotFound(f"{path} is withheld (a secret, binary, or a symlink)")
    cut_by_tracker = any(
        item["path"] == path and item["reason"] in ("file_too_large", "total_budget")
        for item in result.get("truncated", [])
    )
    if not cut_by_tracker and path in result.get("file_contents", {}):
        return result["file_contents"][path]
    options = tracker.TrackerOptions(max_file_chars=MAX_FILE_BYTES, max_total_chars=MAX_FILE_BYTES)
    report = tracker.collect_contents(Path(result["workspace"]), [path], options)
    if path not in report.file_contents:
        raise ResourceNotFound(f"{path} cannot be read from the workspace any more")
    return report.file_contents[path]
