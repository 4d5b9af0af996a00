"""The join: where a set of jobs stands, and waiting until enough of them are ready (``kimi_wait``).

A job of this server is followed through its :class:`~._manager.Job`, held from the start (its end is seen
even after the manager let go of it); every end, question asked or answered notifies the manager's
condition (:meth:`~._manager.JobEvents.wait_change`), so a waiter wakes at once. A job of another server
(or one it sent to a worker) is read from the store, ``FOREIGN_STEP`` seconds apart.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal

from ..finish import result_class
from ..models import JobProgress, QuestionInfo, TaskResult
from ._manager import record_result
from ._store import FINISHED, JobRecord

if TYPE_CHECKING:
    from ._manager import Job, JobManager

Until = Literal["any", "all"]

FOREIGN_STEP = 0.5  # seconds between reads of the store for the jobs of other servers
LOCAL_STEP = 2.0  # seconds a waiter blocks when every job is this server's (its progress is sent between)


@dataclass(frozen=True, slots=True)
class Standing:
    """One job at one moment: finished, waiting on a question, or still going."""

    job_id: str
    status: str
    group: str | None
    finished: bool
    question: QuestionInfo | None = None
    progress: JobProgress | None = None

    @property
    def asking(self) -> bool:
        return not self.finished and self.question is not None


@dataclass
class Gathered:
    """Where every job of a join stands, in the order the join was given them."""

    standings: list[Standing] = field(default_factory=list)

    @property
    def finished(self) -> list[str]:
        return [s.job_id for s in self.standings if s.finished]

    @property
    def pending(self) -> list[Standing]:
        return [s for s in self.standings if not s.finished]

    def ready(self, until: Until) -> bool:
        """Whether a wait for ``until`` is over: ``any`` once one job is finished, ``all`` once every one is;
        either way at once when one waits on a question (only the caller can move it on), or when there
        is no job at all."""
        if not self.standings or any(s.asking for s in self.standings):
            return True
        finished = [s.finished for s in self.standings]
        return any(finished) if until == "any" else all(finished)


class Join:
    """The jobs ``records`` of ``jobs`` (the store's records, known to exist), followed to their ends."""

    def __init__(self, jobs: JobManager, records: list[JobRecord]) -> None:
        self.jobs = jobs
        self.records = {record.job_id: record for record in records}
        self.held: dict[str, Job] = {}
        for record in records:
            job = jobs.local(record.job_id)
            if job is not None:
                self.held[record.job_id] = job

    @property
    def step(self) -> float:
        """How long a waiter may block between looks: short while a job of another server is unfinished
        (the store is read then), else long (this server's events wake it)."""
        foreign = any(
            job_id not in self.held and record.status not in FINISHED
            for job_id, record in self.records.items()
        )
        return FOREIGN_STEP if foreign else LOCAL_STEP

    def look(self, files: bool = False) -> Gathered:
        """Where each job stands now (re-reads the unfinished jobs of other servers from the store; a thread;
        ``files``: a running job's progress lists the files changed so far, which walks its tracker)."""
        return Gathered([self._standing(job_id, files) for job_id in self.records])

    def _standing(self, job_id: str, files: bool) -> Standing:
        job = self.held.get(job_id) or self.jobs.local(job_id)
        if job is not None:
            self.held[job_id] = job
            done = job.done.is_set()
            question = None if done else job.question
            progress = None if done else job.progress(files=files)
            return Standing(job_id, job.status, job.group, done, question, progress)
        record = self.records[job_id]
        if record.status not in FINISHED:
            record = self._reread(record)
        finished = record.status in FINISHED
        question = QuestionInfo.model_validate(record.question) if record.question and not finished else None
        progress = JobProgress.model_validate(record.progress) if record.progress and not finished else None
        return Standing(job_id, record.status, record.group, finished, question, progress)

    def _reread(self, record: JobRecord) -> JobRecord:
        store = self.jobs.store
        fresh = store.get(record.job_id) or record
        if self.jobs.orphaned(fresh):  # its server died: recorded as interrupted first
            self.jobs.settle_orphans()
            fresh = store.get(record.job_id) or fresh
        self.records[record.job_id] = fresh
        return fresh

    def result(self, job_id: str) -> TaskResult:
        """A finished job's whole result, as ``kimi_job`` has it (a thread: it may read the store)."""
        job = self.held.get(job_id)
        if job is not None and job.result is not None:
            return job.result
        record = self.records[job_id]
        if record.result is None:
            record = self.jobs.store.get(job_id) or record
        return record_result(record, result_class(record.tool))
