"""What the dashboard's buttons do, by the rules of the MCP tools that do the same: answering a question
(``kimi_job(action="answer")``: ``job_answers.answer``), cancelling (``kimi_job(action="cancel")``: the job's
server is asked through the store), landing or dropping an isolated job's change (``kimi_apply`` /
``kimi_discard``: ``adapter.isolation.isolated_copy``, then ``worktree.apply`` / ``worktree.discard``).
Each returns what to tell the person, or raises the tools' own ``KimiMCPError``."""

from __future__ import annotations

from .. import job_answers, worktree
from ..adapter.isolation import isolated_copy
from ..errors import BadInput
from ..jobs import FINISHED
from ._source import Source


def answer(source: Source, job_id: str, given: str | list[str], question_id: str | None) -> str:
    """Send ``given`` to the question ``question_id`` the job waits on."""
    record = source.record(job_id)
    job_answers.answer(source.jobs, record, given, question_id or None)
    shown = ", ".join(given) if isinstance(given, list) else given
    return f"Answer sent to {record.job_id}: {shown}"


def cancel(source: Source, job_id: str) -> str:
    """Ask the job's server to interrupt it (it stops at its next tick, about a second)."""
    record = source.record(job_id)
    if record.status in FINISHED:
        raise BadInput(f"job {record.job_id} is {record.status} already: there is nothing to cancel")
    source.jobs.cancel(record.job_id)
    return f"Cancellation asked of {record.job_id}'s server"


def apply(source: Source, job_id: str) -> str:
    """Land the isolated job's whole change in the user's tree (all or nothing, as ``kimi_apply``)."""
    record = source.record(job_id)
    copy = worktree.load(source.state_dir, isolated_copy(source.store, record))
    applied = worktree.apply(copy, None)
    if applied.ok:
        return f"Applied {len(applied.applied)} path(s) to {copy.user_workspace}; nothing is staged or committed."
    named = "; ".join(f"{c.path}: {c.reason}" for c in applied.conflicts)
    raise BadInput(
        f"Nothing was written: {len(applied.conflicts)} path(s) conflict with your tree ({named})",
        details={"conflicts": [c.to_dict() for c in applied.conflicts]},
        suggestion="Resolve them in your tree, or ask Kimi to adapt (kimi_continue), then apply again.",
    )


def discard(source: Source, job_id: str) -> str:
    """Drop the isolated job's copy (the user's tree is not touched), as ``kimi_discard``."""
    record = source.record(job_id)
    copy_id = isolated_copy(source.store, record)
    if record.session_id and source.close_live is not None:
        source.close_live(record.session_id)  # its live Kimi runs in the copy about to go
    removed = worktree.discard(source.state_dir, copy_id)
    return "The isolated copy is removed." if removed else "The isolated copy was already gone."
