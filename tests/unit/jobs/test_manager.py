"""The job manager (``jobs._manager``): a job's life from submission to its stored result, progress and
cancellation through the store, shutdown, and one turn per conversation."""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from polling import wait_until

from kimi_mcp.errors import BadInput
from kimi_mcp.executors import Executor
from kimi_mcp.jobs import JobManager, JobSpec, JobStore
from kimi_mcp.jobs import _manager as manager_module
from kimi_mcp.models import ErrorInfo, TaskResult
from kimi_mcp.scope import Scope
from kimi_mcp.task import RunWatch


class Works(Executor):
    """Runs each spec's work: a function of the running job, found by the spec's prompt."""

    def __init__(self) -> None:
        self.jobs: JobManager | None = None
        self.works: dict[str, Callable] = {}

    def run(self, spec: JobSpec, *, job_id: str, scope: Scope, watch: RunWatch) -> TaskResult:
        assert self.jobs is not None
        job = self.jobs.local(job_id)
        assert job is not None and job.scope is scope and job.watch is watch
        return self.works.pop(spec.prompt)(job)


def managed(path: Path) -> JobManager:
    works = Works()
    jobs = works.jobs = JobManager(path, executor=works)
    return jobs


@pytest.fixture
def manager(tmp_path: Path):
    jobs = managed(tmp_path / "state" / "jobs.sqlite3")
    yield jobs
    jobs.shutdown()


def submit(jobs: JobManager, work, session_id: str | None = None):
    assert isinstance(jobs.executor, Works)
    prompt = f"do the thing {len(jobs.executor.works)} {time.monotonic()}\nsecond line"
    jobs.executor.works[prompt] = work
    spec = JobSpec(
        tool="kimi_code_task", prompt=prompt, workspace="/w", read_only=False, arguments={"task": "t"},
        session_id=session_id,
    )  # fmt: skip
    return jobs.submit(
        spec, cls=TaskResult, arguments={"task": "t"}, summary="do the thing\nsecond line",
        scope=Scope(deadline=math.inf),
    )  # fmt: skip


def test_a_finished_job_is_stored_with_its_whole_result(manager: JobManager) -> None:
    def work(job):
        job.on_progress("Kimi runs WriteFile a.txt")
        return TaskResult(success=True, output="Done.\nMore.", files_created=["a.txt"], session_id="s-1")

    job = submit(manager, work)
    assert job.done.wait(5)
    record = manager.store.get(job.job_id)
    assert record.status == "done" and record.session_id == "s-1" and record.finished_at is not None
    assert record.summary == "1 created, 0 modified, 0 deleted: Done."
    assert record.result["files_created"] == ["a.txt"] and record.result["job_id"] == job.job_id
    assert record.arguments == {"task": "t"} and job.activity == "Kimi runs WriteFile a.txt"
    assert manager.local(job.job_id) is None  # no longer running here


def test_errors_and_bugs_finish_the_job_as_failed_or_cancelled(manager: JobManager) -> None:
    cancelled = ErrorInfo(type="cancelled", message="c", suggestion="-", retryable=False)
    jobs = [
        submit(manager, lambda _job: TaskResult(success=False, error=cancelled)),
        submit(manager, lambda _job: 1 / 0),
    ]
    assert all(job.done.wait(5) for job in jobs)
    first, second = (manager.store.get(job.job_id) for job in jobs)
    assert first.status == "cancelled"
    assert second.status == "failed" and "ZeroDivisionError" in second.result["error"]["message"]


def test_progress_reaches_the_store_and_a_remote_cancel_reaches_the_job(
    manager: JobManager, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(manager_module, "TICK", 0.05)

    def work(job):
        job.watch.queued = False
        job.watch.session_id = "s-9"
        job.on_progress("Kimi runs Shell ls")
        if not job.cancel.wait(5):
            return TaskResult(success=True)
        error = ErrorInfo(type="cancelled", message="cancelled", suggestion="-", retryable=False)
        return TaskResult(success=False, error=error)

    job = submit(manager, work)
    other = JobStore(manager.path)  # another server on the same store
    try:
        assert wait_until(
            lambda: (other.get(job.job_id).progress or {}).get("activity") == "Kimi runs Shell ls"
        )
        seen = other.get(job.job_id)
        assert seen.status == "running" and seen.session_id == "s-9"
        other.request_cancel(job.job_id)
        assert job.done.wait(5) and other.get(job.job_id).status == "cancelled"
    finally:
        other.close()


def test_kimis_session_id_is_in_the_store_as_soon_as_kimi_has_one(
    manager: JobManager, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 29 item 8: not at the next tick, not at the end: a server killed right after keeps it."""
    monkeypatch.setattr(manager_module, "TICK", 3600.0)  # no tick writes it
    told, release = threading.Event(), threading.Event()

    def work(job):
        job.scope.on_session("session_found-mid-turn")  # what the session does when it finds the id
        told.set()
        release.wait(5)
        return TaskResult(success=True)

    job = submit(manager, work)
    assert told.wait(5)
    try:
        assert manager.store.get(job.job_id).session_id == "session_found-mid-turn"
        assert job.watch.session_id == "session_found-mid-turn"
        assert manager.store.get(job.job_id).finished_at is None
    finally:
        release.set()
    assert job.done.wait(5)


def test_shutdown_records_running_jobs_as_interrupted_for_good(tmp_path: Path) -> None:
    jobs = managed(tmp_path / "jobs.sqlite3")
    release = threading.Event()

    def work(job):
        job.watch.session_id = "s-5"
        release.wait(5)
        return TaskResult(success=True, output="too late")

    job = submit(jobs, work)
    assert wait_until(lambda: job.watch.session_id == "s-5")
    jobs.shutdown()
    assert job.done.is_set() and job.result.status == "interrupted"
    release.set()
    time.sleep(0.2)
    store = JobStore(tmp_path / "jobs.sqlite3")
    try:
        record = store.get(job.job_id)
        assert record.status == "interrupted" and record.session_id == "s-5"
        assert "kimi_continue" in record.result["error"]["suggestion"]
    finally:
        store.close()
    with pytest.raises(Exception, match="shutting down"):
        submit(jobs, lambda _job: TaskResult(success=True))


def test_a_conversation_has_one_turn_at_a_time(manager: JobManager) -> None:
    release = threading.Event()

    def work(job):
        release.wait(5)
        return TaskResult(success=True)

    first = submit(manager, work, session_id="s-1")
    with pytest.raises(BadInput, match="has a turn running"):
        submit(manager, work, session_id="s-1")
    other = submit(manager, lambda _job: TaskResult(success=True), session_id="s-2")
    release.set()
    assert first.done.wait(5) and other.done.wait(5)
    again = submit(manager, lambda _job: TaskResult(success=True), session_id="s-1")
    assert again.done.wait(5)


def test_a_waiter_gets_every_step_since_it_last_looked_not_only_the_latest(manager: JobManager) -> None:
    release = threading.Event()

    def work(job):
        release.wait(5)
        return TaskResult(success=True, output="ok")

    job = submit(manager, work)
    seen = job.seq
    for step in ("running verify_command (round 0)", "fix round 1 of 2", "prompt sent"):
        job.on_progress(step)
    assert job.progress_since(seen) == ["running verify_command (round 0)", "fix round 1 of 2", "prompt sent"]
    assert job.progress_since(job.seq) == [] and job.activity == "prompt sent"
    for n in range(manager_module.RECENT + 3):
        job.on_progress(f"step {n}")
    assert job.progress_since(seen) == [
        f"step {n}" for n in range(3, manager_module.RECENT + 3)
    ]  # the newest
    release.set()
    assert job.done.wait(5)


def test_a_changed_screen_reaches_the_store_between_progress_ticks_and_an_unchanged_one_is_not_rewritten(
    manager: JobManager, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 34: a job's live screen is ≤ 1 s behind on the dashboard: it is published at its own, shorter
    cadence (``SCREEN_TICK``), not only with the progress (``TICK``), and only when it changed."""
    monkeypatch.setattr(manager_module, "TICK", 3600.0)  # no progress tick publishes it
    monkeypatch.setattr(manager_module, "SCREEN_TICK", 0.02)
    screens = iter(["Kimi reads app.py", "Kimi edits app.py"])
    shown = {"now": next(screens)}
    writes: list[str] = []
    update = JobStore.update

    def counted(store: JobStore, job_id: str, **fields) -> None:
        if fields.get("screen") is not None:
            writes.append(fields["screen"])
        update(store, job_id, **fields)

    monkeypatch.setattr(JobStore, "update", counted)
    release = threading.Event()

    def work(job):
        job.scope.screen = lambda: shown["now"]
        release.wait(10)
        return TaskResult(success=True)

    job = submit(manager, work)
    try:
        assert wait_until(lambda: manager.store.screen(job.job_id)[1] == "Kimi reads app.py")
        time.sleep(0.2)  # ten screen ticks on the same screen
        assert writes == ["Kimi reads app.py"]
        shown["now"] = next(screens)
        assert wait_until(lambda: manager.store.screen(job.job_id)[1] == "Kimi edits app.py")
        assert writes == ["Kimi reads app.py", "Kimi edits app.py"]
    finally:
        release.set()
    assert job.done.wait(5)
