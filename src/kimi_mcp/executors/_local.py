"""The local executor: a job's Kimi turn runs in this process, through the server's runner, in the caller's
workspace or on an isolated copy of its tree (``isolation="worktree"``, see ``worktree``), then the tool's
finishing step (:mod:`kimi_mcp.finish`)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from .. import telemetry, worktree
from ..config import Settings
from ..finish import finish
from ..models import TaskResult, VerifyOutcome, WorktreeInfo
from ..scope import Scope
from ..task import RunWatch, TaskRequest
from ._base import Executor, RunTask

if TYPE_CHECKING:
    from ..job_spec import JobSpec
    from ..worktree import Isolated

APPLY_NOTE = (
    "Kimi worked on an isolated copy of your tree (worktree.path); your tree is unchanged. Review diff, then "
    "kimi_apply(job_id) lands it (three-way, all or nothing) or kimi_discard(job_id) drops it; "
    "kimi_continue(session_id, ...) revises it in the same copy."
)


@dataclass(frozen=True, slots=True)
class Runtime:
    """What running a spec here needs: the settings and environment read at the server's start, kimi-mcp's
    state directory (where isolated copies live) and the function that runs a Kimi turn."""

    settings: Settings
    env: dict[str, str]
    state_dir: Path
    run: RunTask


class Local(Executor):
    """Runs each job in this process (in the job's thread)."""

    def __init__(self, runtime: Runtime) -> None:
        self.runtime = runtime

    def run(self, spec: JobSpec, *, job_id: str, scope: Scope, watch: RunWatch) -> TaskResult:
        runtime = self.runtime

        def turn(request: TaskRequest) -> TaskResult:
            return runtime.run(request, runtime.settings, scope=scope, environ=runtime.env, watch=watch)

        if not spec.isolated:
            return run_turn(spec, runtime, scope=scope, watch=watch)
        request = spec.request()
        base, where = run_isolated(spec, request, job_id, runtime, turn)
        result = finish(spec, base, where, runtime.settings)
        result.diff = base.diff  # the whole change, whatever the tool's own diff was
        return result


def run_turn(
    spec: JobSpec, runtime: Runtime, *, scope: Scope, watch: RunWatch, isolated: bool = False
) -> TaskResult:
    """The spec's turn in ``spec.workspace`` (``isolated``: a one-off copy, no standby kept for it), then its
    tool's finishing step."""
    request = dataclasses.replace(spec.request(), isolated=isolated)
    base = runtime.run(request, runtime.settings, scope=scope, environ=runtime.env, watch=watch)
    return finish(spec, base, request.workspace, runtime.settings)


def run_isolated(
    spec: JobSpec,
    request: TaskRequest,
    job_id: str,
    runtime: Runtime,
    turn: Callable[[TaskRequest], TaskResult],
) -> tuple[TaskResult, Path]:
    """One turn on an isolated copy (kept in the state directory): a new one named after ``job_id``, or the
    conversation's (``spec.copy``). Returns the result (its diff, copy and verify outcome filled in, paths
    relative to the workspace as always) and the workspace inside the copy."""
    state = runtime.state_dir
    if spec.copy is not None:
        copy = worktree.load(state, spec.copy)
    else:
        copy = worktree.create(request.workspace, state, job_id)
    result = turn(dataclasses.replace(request, workspace=copy.workspace, isolated=True))
    describe(result, copy)
    if spec.verify_command and result.success:
        outcome = telemetry.call(
            "kimi_mcp.verify", worktree.run_verify, copy, spec.verify_command, runtime.settings.verify_timeout
        )
        result.verify = VerifyOutcome(**dataclasses.asdict(outcome))
    result.workspace = str(request.workspace)
    return result, copy.workspace


def describe(result: TaskResult, copy: Isolated) -> None:
    """Fill in ``diff`` and ``worktree``: the whole change of the copy against its base."""
    change = worktree.diff(copy)
    result.diff = change.text
    result.worktree = WorktreeInfo(
        id=copy.id, path=str(copy.workspace), base=copy.base, files_changed=len(change.files),
        insertions=change.insertions, deletions=change.deletions,
    )  # fmt: skip
    if change.files and APPLY_NOTE not in result.notes:
        result.notes.append(APPLY_NOTE)
