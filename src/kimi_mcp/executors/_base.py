"""The executor family's base class: a few methods, one module per kind (as httpx's transports)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, ClassVar, Protocol

if TYPE_CHECKING:
    from ..config import Settings
    from ..job_spec import JobSpec
    from ..models import TaskResult
    from ..scope import Scope
    from ..task import RunWatch, TaskRequest


class RunTask(Protocol):
    """How one Kimi turn runs: the server's ``LazyRunner`` (a fake in the tool layer's unit tests)."""

    def __call__(
        self,
        request: TaskRequest,
        settings: Settings,
        *,
        scope: Scope,
        environ: Mapping[str, str],
        watch: RunWatch | None = None,
    ) -> TaskResult: ...


class Executor:
    """Runs job specs. :meth:`run` is called in the job's own thread and returns the job's result when the
    work is done; the job's ``scope`` carries its cancellation, progress, limits and inbox, ``watch`` what
    the job reports while it runs (queued, starting, its conversation, the files changed so far). A
    ``KimiMCPError`` raised is the job's error."""

    #: recorded with each job's spec (``executor``): a "remote" job may outlive its server (see ``adopt``)
    name: ClassVar[str] = "local"

    def run(self, spec: JobSpec, *, job_id: str, scope: Scope, watch: RunWatch) -> TaskResult:
        raise NotImplementedError

    def adoptable(self, job_id: str) -> bool:
        """Whether a job a dead server started can still be followed to its end (a worker runs it)."""
        return False

    def resume(self, spec: JobSpec, *, job_id: str, scope: Scope, watch: RunWatch) -> TaskResult:
        """Follow an adopted job (:meth:`adoptable`) to its result, as :meth:`run` would have."""
        raise NotImplementedError

    def close(self) -> None:
        """Release what the executor holds (the server stops). Idempotent."""
