"""Kimi's question asked of whoever waits on its job, and the caller's answer for it
(``kimi_job(action="answer")``).

A waiting tool call asks its client the way the connection allows: ``elicitation/create`` on a handshake-era
connection, an ``InputRequiredResult`` (with the job in ``request_state``) on a 2026-07-28 one, whose retry
answers *the same job*. A client that cannot ask, or whose user is not there (``cancel``), gets the job's
``waiting`` result, question included, so the calling agent answers it with ``kimi_job``.
"""

from __future__ import annotations

from typing import Any, Literal

import mcp_types
from fastmcp import Context

from .._logging import get_logger
from ..errors import BadInput, KimiMCPError
from ..job_answers import checked
from ..jobs import Job, JobManager
from ..models import QuestionInfo
from ..scope import DECLINED

log = get_logger("tools")

QUESTION_KEY = "kimi_mcp_question"  # the input request that carries Kimi's question
STATE_PREFIX = "kimi-job:"  # request_state of a call that waits on a job's question

Outcome = Literal["answered", "nobody"]


# -- the question as a form -------------------------------------------------------------------------------
def form(info: QuestionInfo) -> tuple[str, dict[str, Any]]:
    """The elicitation message and schema of a question: its options as an enum (an array of them for a
    multi-select question), and a free-text field where Kimi takes other answers."""
    labels = [o.label for o in info.options]
    described = "; ".join(f"{o.label}: {o.description}" for o in info.options if o.description)
    choice: dict[str, Any] = {"type": "string", "title": info.header or "Answer", "enum": labels}
    if info.multi_select:
        choice = {
            "type": "array",
            "title": info.header or "Answers",
            "items": {"type": "string", "enum": labels},
        }
    if described:
        choice["description"] = described
    properties: dict[str, Any] = {"answer": choice}
    if info.free_text:
        properties["other"] = {"type": "string", "title": "Other", "description": "Your own answer instead"}
    prefix = "Kimi asks for your approval" if info.kind == "approval" else "Kimi asks"
    return f"{prefix}: {info.text}", {"type": "object", "properties": properties}


def answer_in(content: dict[str, Any] | None) -> str | list[str] | None:
    """The answer an accepted form carries: the free text if given, else the chosen option(s)."""
    content = content or {}
    other = content.get("other")
    if isinstance(other, str) and other.strip():
        return other
    answer = content.get("answer")
    if isinstance(answer, list) and answer and all(isinstance(a, str) for a in answer):
        return answer
    return answer if isinstance(answer, str) and answer.strip() else None


# -- asking the client --------------------------------------------------------------------------------------
async def ask_client(ctx: Context, job: Job) -> Outcome | mcp_types.InputRequiredResult:
    """Ask the client for the answer to the job's question: ``answered`` (typed, or declined: dismissed),
    an ``InputRequiredResult`` (2026-07-28: the client answers in its retry), or ``nobody``."""
    info = job.question
    if info is None:
        return "answered"  # answered meanwhile (another caller)
    caps = getattr(getattr(ctx, "session", None), "client_capabilities", None)
    if caps is None or getattr(caps, "elicitation", None) is None:
        log.info("the client cannot be asked (no elicitation capability): the job waits for an answer")
        return "nobody"
    message, schema = form(info)
    if getattr(ctx, "_is_modern_protocol", lambda: False)():
        request = mcp_types.ElicitRequest(
            method="elicitation/create",
            params=mcp_types.ElicitRequestFormParams(message=message, requested_schema=schema),
        )
        return mcp_types.InputRequiredResult(
            input_requests={QUESTION_KEY: request}, request_state=STATE_PREFIX + job.job_id
        )
    try:
        result = await ctx.session.elicit(
            message=message, requested_schema=schema, related_request_id=ctx.request_id
        )
    except Exception as exc:  # the client could not ask: the agent answers instead
        log.info("elicitation failed: %s", exc)
        return "nobody"
    return deliver_response(job, info, result.action, result.content)


def deliver_response(job: Job, info: QuestionInfo, action: str, content: dict[str, Any] | None) -> Outcome:
    """What the client answered, into the job: ``accept`` types it, ``decline`` dismisses the question,
    ``cancel`` (no person there) leaves it waiting for the agent."""
    if action == "decline":
        job.scope.inbox.answer(DECLINED, info.id)
        return "answered"  # or the question was gone meanwhile: the job no longer waits on it either way
    if action != "accept" or (answer := answer_in(content)) is None:
        return "nobody"
    try:
        choice = checked(info, answer)
    except KimiMCPError as exc:
        log.info("the form's answer does not fit the question: %s", exc.message)
        return "nobody"
    job.scope.inbox.answer(choice, info.id)
    return "answered"


def resumed_job(ctx: Context, jobs: JobManager) -> tuple[Job, bool] | None:
    """On a 2026-07-28 retry that answers a job's question (``request_state``): the job, and whether the
    client answered (else nobody was there: the job waits for the agent); None for any other call."""
    state = getattr(ctx, "request_state", None)
    responses = getattr(ctx, "input_responses", None) or {}
    if not isinstance(state, str) or not state.startswith(STATE_PREFIX) or QUESTION_KEY not in responses:
        return None
    job = jobs.local(state.removeprefix(STATE_PREFIX))
    if job is None:
        raise BadInput(
            "the job this answer is for is no longer running here",
            suggestion="kimi_job(job_id) returns its result; kimi_jobs lists recent jobs.",
        )
    info = job.question
    response = responses[QUESTION_KEY]
    action = getattr(response, "action", None) or (
        response.get("action") if isinstance(response, dict) else None
    )
    content = getattr(response, "content", None)
    if content is None and isinstance(response, dict):
        content = response.get("content")
    if info is None:
        return job, True  # answered meanwhile
    return job, deliver_response(job, info, str(action), content) == "answered"
