"""Isolated jobs (``isolation="worktree"``): Kimi works on its own copy of the user's git tree (see
``worktree``), so the user's tree stays as it is until ``kimi_apply``. Here: the checks of the isolation
arguments (and of ``verify_command`` and ``fix_rounds``, which also work without isolation), the turn's work
in its copy (a new copy, or the conversation's for a follow-up), what the result gains (the diff, the copy)
and the ranking of parallel attempts (by the final verify outcome)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from .. import worktree
from .._logging import CLIENT, get_logger
from ..config import Settings
from ..errors import BadInput
from ..jobs import FINISHED, JobManager, JobRecord, JobStore
from ..models import AttemptSummary, TaskResult

if TYPE_CHECKING:
    pass

log = get_logger("tools")

IsolationMode = Literal["none", "worktree"]
MAX_ATTEMPTS = 4
MAX_FIX_ROUNDS = 5


@dataclass(frozen=True, slots=True)
class Isolation:
    """How a write call runs: in the user's tree, or on isolated copies (``attempts`` of them); each job
    checked with ``verify_command`` where it ran, and given ``fix_rounds`` more turns while the check fails;
    ``copy``: a follow-up continues in that existing copy."""

    mode: IsolationMode = "none"
    attempts: int = 1
    verify_command: str | None = None
    copy: str | None = None
    fix_rounds: int = 0

    @property
    def isolated(self) -> bool:
        return self.mode == "worktree"


def isolation_for(
    settings: Settings,
    isolation: IsolationMode | None,
    attempts: int,
    verify_command: str | None,
    fix_rounds: int = 0,
) -> Isolation:
    """The call's isolation (``None``: ``KIMI_MCP_ISOLATION``); bad combinations are the caller's error."""
    mode = isolation or settings.isolation
    if verify_command is not None and not verify_command.strip():
        raise BadInput("verify_command is empty", suggestion="Pass a shell command, or leave it out.")
    if mode != "worktree" and attempts != 1:
        raise BadInput(
            "attempts need isolation='worktree' (each attempt works on its own copy)",
            suggestion="Pass isolation='worktree' (or set KIMI_MCP_ISOLATION=worktree).",
        )
    if not 1 <= attempts <= MAX_ATTEMPTS:
        raise BadInput(f"attempts must be 1 to {MAX_ATTEMPTS}, not {attempts}")
    check_fix_rounds(fix_rounds, verify_command)
    return Isolation(mode, attempts, verify_command, fix_rounds=fix_rounds)


def check_fix_rounds(fix_rounds: int, verify_command: str | None) -> None:
    """``fix_rounds``: 0 to ``MAX_FIX_ROUNDS``, and only with a ``verify_command`` to fix against."""
    if not 0 <= fix_rounds <= MAX_FIX_ROUNDS:
        raise BadInput(
            f"fix_rounds must be 0 to {MAX_FIX_ROUNDS}, not {fix_rounds}",
            suggestion=f"Pass at most {MAX_FIX_ROUNDS} fix rounds (0: verify only).",
        )
    if fix_rounds and not verify_command:
        raise BadInput(
            "fix_rounds needs verify_command (the check whose failing output Kimi gets to fix)",
            suggestion="Pass verify_command (e.g. 'pytest -q'), or leave fix_rounds out.",
        )


def check_repository(workspace: Path, state: Path) -> None:
    """Refuse a worktree job whose workspace is not in a git work tree (before any job starts); ``state``:
    kimi-mcp's state directory."""
    worktree.repo_top(workspace, state)


def copy_of(result: dict | None) -> str | None:
    """The isolated copy a stored result worked in, if any."""
    worktree = (result or {}).get("worktree") or {}
    return worktree.get("id")


def isolated_copy(store: JobStore, record: JobRecord) -> str:
    """The isolated copy of ``record`` that ``kimi_apply`` / ``kimi_discard`` (and the dashboard) may land or
    drop: ``BadInput`` if the job ran in the user's tree, or if a turn of its conversation still runs in that
    copy (retryable: wait for it or cancel it)."""
    copy_id = copy_of(record.result)
    if record.status in FINISHED and copy_id is None:
        raise BadInput(
            f"job {record.job_id} did not run on an isolated copy (isolation='worktree'): its changes are "
            "in your tree already",
            suggestion="Only jobs started with isolation='worktree' can be applied or discarded.",
        )
    latest = record
    if record.session_id:
        latest = store.latest_for_session(record.session_id) or record
    for job in (record, latest):
        if job.status not in FINISHED:
            raise BadInput(
                f"job {job.job_id} is still {job.status} in that copy",
                suggestion=f"Wait for it with kimi_job(job_id={job.job_id!r}) (or cancel it), then try again.",
                retryable=True,
            )
    assert copy_id is not None
    return copy_id


def ranked(results: list[TaskResult]) -> list[TaskResult]:
    """Attempts best first: succeeded before failed, verify passed before failed (or not run), then the
    smaller change."""

    def key(result: TaskResult) -> tuple:
        size = result.worktree.insertions + result.worktree.deletions if result.worktree else 0
        changed = bool(result.worktree and result.worktree.files_changed)
        verified = result.verify.passed if result.verify else False
        return (not result.success, not verified, not changed, size)

    return sorted(results, key=key)


def summary(result: TaskResult) -> AttemptSummary:
    wt = result.worktree
    return AttemptSummary(
        job_id=result.job_id, status=result.status, success=result.success is True, output=result.output[:1_000],
        files_changed=wt.files_changed if wt else 0, insertions=wt.insertions if wt else 0,
        deletions=wt.deletions if wt else 0, verify=result.verify,
        error=result.error.message if result.error else None,
    )  # fmt: skip


def prune_copies(jobs: JobManager, state: Path) -> list[str]:
    """Remove the isolated copies nothing needs any more (server start): a copy whose job is gone from the
    store (never recorded, or pruned after ``KIMI_MCP_JOB_TTL_DAYS``), or whose conversation's last turn was
    interrupted (its server died mid-turn: the copy is half-changed). Copies of finished jobs stay for
    kimi_apply; copies another live server is working in stay too. ``state``: kimi-mcp's state directory."""
    if not (state / worktree.WORKTREES_DIR).is_dir():
        return []
    store = jobs.store  # opening it records dead servers' jobs as interrupted and prunes old ones

    def keep(copy_id: str) -> bool:
        record = store.get(copy_id)
        if record is None:
            return False
        latest = (store.latest_for_session(record.session_id) if record.session_id else None) or record
        if latest.status in FINISHED:
            return latest.status != "interrupted"
        return (
            True  # running in a live server, or on a worker for a dead one (adopted once the broker answers)
        )

    removed = worktree.prune(state, keep)
    if removed:
        log.info("removed %d stale isolated copies: %s", len(removed), ", ".join(removed), extra=CLIENT)
    return removed
