"""Steering a running job: ``kimi_steer`` sends Kimi a message while it works (typed into the running turn,
or as the next turn after an interrupt or when the turn ends)."""

from __future__ import annotations

import time
from typing import Annotated, Literal

import anyio
from fastmcp.dependencies import Depends
from fastmcp.tools import tool
from pydantic import Field

from ..adapter.client import to_tool_result
from ..adapter.pipeline import Backend, Reply, current_backend, stored_reply
from ..errors import BadInput, KimiMCPError
from ..jobs import FINISHED
from ..models import TaskResult
from ._params import IN_ONE_MESSAGE, writes
from .jobs import _failure, job_record

MAX_MESSAGE_CHARS = (
    200_000  # the message limit itself is Kimi's (KIMI_MCP_MAX_MESSAGE_TOKENS), checked by the run
)


@tool(
    description=(
        "Send a message to a running Kimi job. mode='steer' (default) types it into Kimi's running turn; "
        "'interrupt' stops the turn (Kimi's own interrupt) and sends it as the next turn; 'queue' sends it as "
        "the next turn when the current one ends. The job's result then covers every turn and lists the "
        "messages that reached Kimi (messages). A finished job: use kimi_continue(session_id, message)."
    ),
    annotations=writes("Kimi: steer a running job"),
    output_schema=TaskResult.model_json_schema(),
)
async def kimi_steer(
    job_id: Annotated[str, Field(description="The running job (its job_id)", max_length=100)],
    message: Annotated[str, Field(description="The message for Kimi" + IN_ONE_MESSAGE)],
    mode: Annotated[
        Literal["steer", "interrupt", "queue"], Field(description="How it reaches Kimi")
    ] = "steer",
    backend: Backend = Depends(current_backend),  # noqa: B008
) -> Reply:
    try:
        backend.check()
        if not message.strip():
            raise BadInput("message is empty")
        if len(message) > MAX_MESSAGE_CHARS:
            raise BadInput(f"message is {len(message)} characters; at most {MAX_MESSAGE_CHARS} are sent")
        record = await job_record(backend, job_id)
        if record.status in FINISHED:
            raise BadInput(
                f"job {record.job_id} is {record.status}: it has no running turn to send a message to",
                suggestion=f"Send a follow-up with kimi_continue(session_id={record.session_id!r}, message=...)."
                if record.session_id
                else "Start a new task.",
            )
        sent = {"text": message, "mode": mode, "at": time.time()}
        await anyio.to_thread.run_sync(backend.jobs.send, record.job_id, "message", sent)
    except KimiMCPError as exc:
        return _failure(backend, exc)
    job = backend.jobs.local(record.job_id)
    if job is not None:
        result = job.snapshot(files=False)
        result.notes = [
            f"Message queued for Kimi ({mode}); kimi_job(job_id={job.job_id!r}) waits for the result."
        ]
        return to_tool_result(result, backend.settings)
    return stored_reply(backend, record)
