"""The tools of isolated jobs (``isolation="worktree"``): land a job's change in the user's tree
(``kimi_apply``: three-way, all or nothing) or drop its copy (``kimi_discard``)."""

from __future__ import annotations

from typing import Annotated

import anyio
import mcp_types
from fastmcp import Context
from fastmcp.dependencies import Depends
from fastmcp.tools import tool
from fastmcp.tools.base import ToolResult
from pydantic import Field

from .. import telemetry, worktree
from ..adapter.budget import result_json
from ..adapter.client import error_text
from ..adapter.isolation import isolated_copy
from ..adapter.pipeline import Backend, current_backend
from ..errors import KimiMCPError
from ..jobs import JobRecord
from ..models import ApplyResult, ConflictInfo, ErrorInfo
from ._lookups import check_scope, job_record
from ._params import writes

JobId = Annotated[
    str, Field(description="A worktree job's job_id (any turn of its conversation)", max_length=64)
]


@tool(
    description=(
        "Land an isolated job's change (isolation='worktree') in your working tree: all of it, or only "
        "`paths`. A three-way merge against the job's base keeps edits you made meanwhile to other lines. "
        "All or nothing: if any path conflicts, nothing is written and the result lists each conflict with "
        "its hunks. Creations, deletions, renames, mode changes and binary files apply too; your index, "
        "HEAD, branches and stash are not touched. A change applies once."
    ),
    annotations=writes("Kimi: apply an isolated job's change"),
    output_schema=ApplyResult.model_json_schema(),
)
async def kimi_apply(
    ctx: Context,
    job_id: JobId,
    paths: Annotated[
        list[str] | None,
        Field(description="Only these paths (relative to the workspace; default: the whole change)"),
    ] = None,
    backend: Backend = Depends(current_backend),  # noqa: B008
) -> ToolResult | mcp_types.InputRequiredResult:
    try:
        if isinstance(found := await _isolated_job(ctx, backend, job_id), mcp_types.InputRequiredResult):
            return found
        record, copy_id = found
        copy = await anyio.to_thread.run_sync(worktree.load, backend.state_dir, copy_id)
        apply = telemetry.traced(
            "kimi_apply", worktree.apply, job_id=record.job_id
        )  # a span under tools/call
        applied = await anyio.to_thread.run_sync(apply, copy, list(paths) if paths else None)
    except KimiMCPError as exc:
        return _reply(ApplyResult(success=False, job_id=job_id, error=ErrorInfo.from_exception(exc)))
    result = ApplyResult(
        success=applied.ok, job_id=record.job_id, workspace=str(copy.user_workspace), applied=applied.applied,
        conflicts=[ConflictInfo(path=c.path, reason=c.reason, hunks=c.hunks) for c in applied.conflicts],
    )  # fmt: skip
    if applied.ok:
        result.notes.append(
            f"Applied {len(applied.applied)} path(s) to {copy.user_workspace}; nothing is staged or committed."
        )
    else:
        result.notes.append(
            f"Nothing was written: {len(applied.conflicts)} path(s) conflict with your tree. Resolve them in "
            "your tree, apply the other paths with paths=[...], or ask Kimi to adapt (kimi_continue)."
        )
    return _reply(result)


@tool(
    description=(
        "Drop an isolated job's copy (isolation='worktree') and everything it registered; your tree is not "
        "touched. Idempotent. Use it for attempts you do not apply (unapplied copies are also dropped after "
        "KIMI_MCP_JOB_TTL_DAYS)."
    ),
    annotations=writes("Kimi: discard an isolated job"),
    output_schema=ApplyResult.model_json_schema(),
)
async def kimi_discard(
    ctx: Context,
    job_id: JobId,
    backend: Backend = Depends(current_backend),  # noqa: B008
) -> ToolResult | mcp_types.InputRequiredResult:
    try:
        if isinstance(found := await _isolated_job(ctx, backend, job_id), mcp_types.InputRequiredResult):
            return found
        record, copy_id = found
        if record.session_id:
            # its live Kimi runs in the copy about to go
            await anyio.to_thread.run_sync(backend.runner.close_live, record.session_id)
        removed = await anyio.to_thread.run_sync(worktree.discard, backend.state_dir, copy_id)
    except KimiMCPError as exc:
        return _reply(ApplyResult(success=False, job_id=job_id, error=ErrorInfo.from_exception(exc)))
    result = ApplyResult(success=True, job_id=record.job_id, workspace=record.workspace, discarded=True)
    result.notes.append("The isolated copy is removed." if removed else "The isolated copy was already gone.")
    return _reply(result)


async def _isolated_job(
    ctx: Context, backend: Backend, job_id: str
) -> tuple[JobRecord, str] | mcp_types.InputRequiredResult:
    """The job and its copy, if nothing runs in that copy now (no turn of its conversation)."""
    backend.check()
    record = await job_record(backend, job_id)
    if isinstance(scope := await check_scope(ctx, record.workspace), mcp_types.InputRequiredResult):
        return scope
    copy_id = await anyio.to_thread.run_sync(isolated_copy, backend.jobs.store, record)
    return record, copy_id


def _reply(result: ApplyResult) -> ToolResult:
    payload = result.model_dump(mode="json")
    failed = result.error is not None
    text = error_text(payload) if failed else result_json(payload)
    return ToolResult(content=text, structured_content=payload, is_error=failed)
