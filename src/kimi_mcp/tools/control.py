"""Steering a running job: ``kimi_steer`` sends Kimi a message while it works (typed into the running turn,
or as the next turn after an interrupt or when the turn ends)."""

from __future__ import annotations

import time
from typing import Annotated, Literal

import anyio
import mcp_types
from fastmcp import Context
from fastmcp.dependencies import Depends
from fastmcp.tools import tool
from fastmcp.tools.base import ToolResult
from pydantic import Field

from ..adapter.budget import result_json
from ..adapter.client import error_text, to_tool_result
from ..adapter.pipeline import Backend, Reply, current_backend, stored_reply
from ..errors import BadInput, KimiMCPError
from ..jobs import FINISHED, Job
from ..message import MessageRules, check_size, prepare
from ..models import TaskResult
from ..scope import Delivery, SteerMode
from ._lookups import check_scope, job_record
from ._params import IN_ONE_MESSAGE, writes
from .jobs import _failure

MAX_MESSAGE_CHARS = 200_000  # a first bound; the message limit itself is KIMI_MCP_MAX_MESSAGE_TOKENS (_fits)
DELIVERY: dict[SteerMode, Delivery] = {"steer": "in_turn", "queue": "next_turn", "interrupt": "next_turn"}
UNKNOWN_JOB = (
    "kimi_jobs lists recent jobs with their job_id and session_id; a job that finished takes no message: send "
    "a follow-up in its conversation with kimi_continue(session_id, message)."
)


class SteerResult(TaskResult):
    """``kimi_steer``'s answer: the job's status (the fields of its tool's result) and how the message
    reaches Kimi."""

    delivered: Delivery | None = Field(
        default=None,
        description="How the message is to reach Kimi: in_turn (steer: typed into the running turn), next_turn "
        "(queue, interrupt: sent as the next turn); null: not sent (see error). The job's result lists it in "
        "messages once Kimi's own log shows it arrived (a steer that came too late for the turn goes as the "
        "next turn)",
    )


@tool(
    description=(
        "Send a message to a running Kimi job. mode='steer' (default) types it into Kimi's running turn; "
        "'interrupt' stops the turn (Kimi's own interrupt) and sends it as the next turn; 'queue' sends it as "
        "the next turn when the current one ends. The job's result then covers every turn and lists the "
        "messages that reached Kimi (messages). A finished job: use kimi_continue(session_id, message)."
    ),
    annotations=writes("Kimi: steer a running job"),
    output_schema=SteerResult.model_json_schema(),
)
async def kimi_steer(
    ctx: Context,
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
        try:
            record = await job_record(backend, job_id)
        except (
            BadInput
        ) as exc:  # an unknown job: maybe a finished conversation, whose follow-up is kimi_continue
            exc.suggestion = UNKNOWN_JOB
            raise
        if isinstance(scope := await check_scope(ctx, record.workspace), mcp_types.InputRequiredResult):
            return scope
        if record.status in FINISHED:
            raise BadInput(
                f"job {record.job_id} is {record.status}: it has no running turn to send a message to",
                suggestion=f"Send a follow-up with kimi_continue(session_id={record.session_id!r}, message=...)."
                if record.session_id
                else "Start a new task.",
            )
        # this server's job, taken before sending: once it has the message it may finish at once
        job = backend.jobs.local(record.job_id)
        _fits(backend, job, message)
        sent = {"text": message, "mode": mode, "at": time.time()}
        await anyio.to_thread.run_sync(backend.jobs.send, record.job_id, "message", sent)
        if job is None:
            return _delivered(stored_reply(backend, record), mode)
        return _delivered(to_tool_result(_steered(job, message, mode), backend.settings), mode)
    except KimiMCPError as exc:
        return _failure(backend, exc)


def _steered(job: Job, message: str, mode: SteerMode) -> TaskResult:
    """This server's job once the message is sent: still going (the message is queued for Kimi), or finished
    meanwhile, with the message (Kimi took it: its messages list it, as sent or as the run typed it) or
    without it (``BadInput``: it never reaches Kimi)."""
    result = job.snapshot(files=False).model_copy(deep=True)  # a finished job's result is its own: copied
    if result.status not in FINISHED:
        result.notes = [
            f"Message queued for Kimi ({mode}); kimi_job(job_id={job.job_id!r}) waits for the result, whose "
            "messages list it once Kimi's log shows it arrived."
        ]
    elif {m.text.strip() for m in result.messages} & {message.strip(), job.scope.prepare(message).strip()}:
        result.notes = [*result.notes, "Kimi took the message; the job has finished since."]
    else:
        raise BadInput(
            f"job {job.job_id} finished before the message reached Kimi",
            suggestion=f"Send it with kimi_continue(session_id={result.session_id!r}, message=...)."
            if result.session_id
            else "Start a new task.",
        )
    return result


def _fits(backend: Backend, job: Job | None, message: str) -> None:
    """``BadInput`` at once for a message that cannot reach Kimi whole: by the message limit of this server
    (KIMI_MCP_MAX_MESSAGE_TOKENS, on the text as any dialect types it at least), and for a job running here by
    its run's own rule (``Scope.prepare``: the dialect's, set once the run knows its Kimi)."""
    try:
        rules = MessageRules(keeps_tabs=True, max_tokens=backend.settings.max_message_tokens)
        check_size(prepare(message, rules), rules)
        if job is not None:
            job.scope.prepare(message)
    except BadInput as exc:
        exc.suggestion = "Shorten the message, or send it in parts (each kimi_steer call is one message)."
        raise


def _delivered(reply: ToolResult, mode: SteerMode) -> ToolResult:
    """The job's status with ``delivered``: how the message reaches Kimi (every field of the status kept)."""
    payload = {**(reply.structured_content or {}), "delivered": DELIVERY[mode]}
    text = error_text(payload) if reply.is_error else result_json(payload)
    content = [mcp_types.TextContent(type="text", text=text), *reply.content[1:]]
    return ToolResult(content=content, structured_content=payload, is_error=reply.is_error)
