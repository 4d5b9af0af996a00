"""An answer to a job's question (``kimi_job(action="answer")``, the dashboard's buttons): checked against
the question the job waits on, then sent to the job, here or through the job store to the server that runs
it. No MCP here: a process without the MCP SDK (``kimi-mcp dashboard``) answers by the same rules."""

from __future__ import annotations

from typing import Any

from .errors import BadInput
from .jobs import JobManager, JobRecord
from .models import QuestionInfo
from .question import Choice, Option, Question, choice_for
from .scope import QUESTION_GONE


def checked(info: QuestionInfo, answer: str | list[str]) -> Choice:
    """The caller's answer to ``info`` as the choice to type (``BadInput`` naming the options if it is not
    one of them, and free text is not taken)."""
    question = Question(
        text=info.text, header=info.header, options=tuple(Option(o.label, o.description) for o in info.options),
        multi_select=info.multi_select, free_text=info.free_text,
    )  # fmt: skip
    return choice_for(question, answer)


def payload(choice: Choice, question_id: str) -> dict[str, Any]:
    """The answer ``choice`` to the question ``question_id``, as ``scope.Inbox.deliver`` takes it."""
    return {"picks": list(choice.picks), "text": choice.text, "question": question_id}


def answer(
    jobs: JobManager, record: JobRecord, given: str | list[str] | None, question_id: str | None = None
) -> None:
    """Send ``given`` to the job's question (here, or through the store to its server; that server refuses
    it if the question is gone by then). ``question_id``: the question the caller answers (default: the
    one asked now); an answer to a question that is gone is refused, never typed into the next one."""
    if given is None or (isinstance(given, str) and not given.strip()) or given == []:
        raise BadInput(
            "action 'answer' needs an answer", suggestion="Pass answer=<an option's label or text>."
        )
    job = jobs.local(record.job_id)
    info = job.question if job is not None else None
    if job is None and record.status == "waiting" and record.question:
        info = QuestionInfo.model_validate(record.question)
    if info is None:
        status = job.status if job is not None else record.status
        if question_id:
            raise _gone(question_id)
        raise BadInput(
            f"job {record.job_id} is not waiting for an answer (status {status})",
            suggestion="kimi_job(job_id) waits for it; kimi_steer(job_id, message) sends Kimi a message.",
        )
    if question_id and question_id != info.id:
        raise _gone(question_id, info)
    choice = checked(info, given)
    if not jobs.send(record.job_id, "answer", payload(choice, info.id)):
        raise _gone(info.id)


def _gone(question_id: str, waiting: QuestionInfo | None = None) -> BadInput:
    """The refusal of an answer to a question that is no longer asked (``waiting``: the one asked now)."""
    now = f"; the job now waits on question {waiting.id}: {waiting.text[:200]!r}" if waiting else ""
    return BadInput(
        f"{QUESTION_GONE} (question {question_id}){now}",
        suggestion="kimi_job(job_id) shows the job's current question, if any, with its id.",
    )
