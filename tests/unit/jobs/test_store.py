"""The job store (issue 9, "Where jobs live"): jobs round-trip with their JSON, list newest first without
their results, orphans of dead servers become ``interrupted``, old finished jobs are pruned, and two
servers (two store objects, or two processes) share one file."""

from __future__ import annotations

import json
import os
import sqlite3
import stat
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from kimi_mcp.jobs._database import SCHEMA_VERSION
from kimi_mcp.jobs._store import (
    FINISHED,
    INTERRUPTED_MESSAGE,
    JobRecord,
    JobStore,
    owner_alive,
    owner_id,
)

ME = "test-owner"  # an owner string; interrupt_orphans() would find it malformed, so dead
RESULT = {
    "success": True,
    "output": "Fertig: 日本語 ✓ — “quotes” and emoji 🚀",
    "files_created": ["src/ünïcode.py"],
    "file_contents": {"src/ünïcode.py": "print('héllo')\n"},
    "usage": {"input_tokens": 12, "output_tokens": 34},
}


@pytest.fixture
def db(tmp_path: Path) -> Path:
    return tmp_path / "state" / "jobs.sqlite3"


@pytest.fixture
def store(db: Path) -> Iterator[JobStore]:
    store = JobStore(db)
    yield store
    store.close()


def new_job(store: JobStore, **overrides: object) -> JobRecord:
    fields: dict = {"tool": "kimi_code_task", "workspace": "/repo", "read_only": False, "arguments": {}}
    fields |= {"owner": ME, **overrides}
    return store.create(**fields)


def backdate(db: Path, job_id: str, *, started_at: float, finished_at: float | None) -> None:
    """Move a job's timestamps through a second connection, as another process would see the file."""
    with sqlite3.connect(db) as conn:
        conn.execute(
            "UPDATE jobs SET started_at = ?, finished_at = ? WHERE job_id = ?",
            (started_at, finished_at, job_id),
        )
    conn.close()


def count_rows(db: Path) -> int:
    conn = sqlite3.connect(db)
    try:
        return conn.execute("SELECT COUNT(*) FROM jobs").fetchone()[0]
    finally:
        conn.close()


# --- one job ---------------------------------------------------------------------------------------------


def test_create_then_get_round_trips_arguments_and_result(store: JobStore) -> None:
    arguments = {"task_description": "Schreib Tests für Ünïcode — 中文", "context_files": ["a.py"], "n": 3}
    before = time.time()
    job = store.create(
        tool="kimi_refactor",
        workspace="/home/me/répo",
        read_only=True,
        arguments=arguments,
        owner=owner_id(),
        status="running",
        session_id="session_1",
        summary="refactor\nthe parser",
    )
    assert job.job_id.startswith("job_") and len(job.job_id) == 20 and int(job.job_id[4:], 16) >= 0
    assert before <= job.started_at <= time.time()
    got = store.get(job.job_id)
    assert got == job  # everything as created; no result yet
    assert got.arguments == arguments and got.read_only is True and got.summary == "refactor the parser"
    assert got.finished_at is None and got.result is None and got.progress is None

    store.finish(job.job_id, status="done", result=RESULT, summary="wrote src/ünïcode.py")
    done = store.get(job.job_id)
    assert done is not None and done.status == "done" and done.result == RESULT
    assert done.finished_at is not None and done.finished_at >= done.started_at
    assert done.duration_s == round(done.finished_at - done.started_at, 1)
    assert done.session_id == "session_1"  # kept when finish() names none
    assert store.get("job_0000000000000000") is None


def test_json_is_stored_as_readable_text(store: JobStore, db: Path) -> None:
    job = new_job(store, arguments={"message": "naïve café"})
    conn = sqlite3.connect(db)
    try:
        (text,) = conn.execute("SELECT arguments FROM jobs WHERE job_id = ?", (job.job_id,)).fetchone()
    finally:
        conn.close()
    assert text == '{"message": "naïve café"}'  # ensure_ascii=False


def test_job_ids_are_distinct(store: JobStore) -> None:
    ids = {new_job(store).job_id for _ in range(50)}
    assert len(ids) == 50


def test_update_changes_only_the_given_fields(store: JobStore) -> None:
    job = new_job(store, session_id="s1", summary="first")
    store.update(job.job_id, progress={"elapsed_s": 1.5, "activity": "WriteFile src/app.py"})
    got = store.get(job.job_id)
    assert got.progress == {"elapsed_s": 1.5, "activity": "WriteFile src/app.py"}
    assert (got.status, got.session_id, got.summary) == ("queued", "s1", "first")

    store.update(job.job_id, status="running", summary="second")
    got = store.get(job.job_id)
    assert (got.status, got.session_id, got.summary) == ("running", "s1", "second")
    assert got.progress == {"elapsed_s": 1.5, "activity": "WriteFile src/app.py"}  # untouched

    store.update(job.job_id, session_id="s2")
    got = store.get(job.job_id)
    assert (got.status, got.session_id, got.summary) == ("running", "s2", "second")
    assert got.arguments == {} and got.owner == ME and got.started_at == job.started_at


def test_update_refuses_a_finished_status_and_leaves_a_finished_job_alone(store: JobStore) -> None:
    job = new_job(store, status="running")
    with pytest.raises(ValueError):
        store.update(job.job_id, status="done")  # finishing is finish()'s: it sets finished_at and result
    store.finish(job.job_id, status="done", result=RESULT, summary="ok")
    store.update(job.job_id, progress={"elapsed_s": 9}, status="running")  # a late progress report
    got = store.get(job.job_id)
    assert got.status == "done" and got.progress is None and got.result == RESULT


@pytest.mark.parametrize("status", ["running", "queued", "bogus"])
def test_finish_refuses_an_unfinished_status(store: JobStore, status: str) -> None:
    job = new_job(store, status="running")
    with pytest.raises(ValueError):
        store.finish(job.job_id, status=status, result=RESULT, summary="x")
    got = store.get(job.job_id)
    assert got.status == "running" and got.finished_at is None and got.result is None


def test_finish_clears_progress_and_may_name_the_session(store: JobStore) -> None:
    job = new_job(store, status="running")
    store.update(job.job_id, progress={"files_changed": ["a.py"]})
    store.finish(job.job_id, status="failed", result={"success": False}, summary="boom", session_id="s9")
    got = store.get(job.job_id)
    assert (got.status, got.progress, got.session_id, got.summary) == ("failed", None, "s9", "boom")


def test_create_refuses_a_finished_or_unknown_status(store: JobStore) -> None:
    for status in ("done", "nonsense"):
        with pytest.raises(ValueError):
            new_job(store, status=status)
    assert store.list() == []


def test_duration_while_running_counts_up_to_now(store: JobStore, db: Path) -> None:
    job = new_job(store, status="running")
    backdate(db, job.job_id, started_at=time.time() - 12.34, finished_at=None)
    duration = store.get(job.job_id).duration_s
    assert 12.3 <= duration <= 13.5 and duration == round(duration, 1)


# --- many jobs -------------------------------------------------------------------------------------------


def test_list_is_newest_first_with_limit_and_filters_and_no_result(store: JobStore, db: Path) -> None:
    now = time.time()
    jobs = []
    for i, (status, workspace) in enumerate(
        [("done", "/a"), ("running", "/b"), ("failed", "/a"), ("running", "/a"), ("done", "/b")]
    ):
        job = new_job(store, workspace=workspace, status="running")
        if status in FINISHED:
            store.finish(job.job_id, status=status, result=RESULT, summary=f"job {i}")
        backdate(db, job.job_id, started_at=now - 100 + i, finished_at=None if status == "running" else now)
        jobs.append(job.job_id)
    newest_first = list(reversed(jobs))

    assert [j.job_id for j in store.list()] == newest_first
    assert [j.job_id for j in store.list(limit=2)] == newest_first[:2]
    assert store.list(limit=0) == []
    assert [j.job_id for j in store.list(status="running")] == [jobs[3], jobs[1]]
    assert [j.job_id for j in store.list(workspace="/a")] == [jobs[3], jobs[2], jobs[0]]
    assert [j.job_id for j in store.list(status="done", workspace="/b")] == [jobs[4]]
    assert store.list(workspace="/nowhere") == []
    listed = store.list()
    assert all(j.result is None for j in listed)  # never read: speed
    assert store.get(jobs[4]).result == RESULT  # but it is there
    assert listed[0].summary == "job 4" and listed[0].status == "done"


def test_list_within_roots_keeps_the_jobs_in_those_folders_only(store: JobStore) -> None:
    """A client's roots: the root itself and folders below it, compared exactly (case, a sibling that only
    shares the root's prefix, LIKE's wildcards in a name)."""
    made = {
        w: new_job(store, workspace=w).job_id
        for w in ["/r/a", "/r/a/sub", "/r/ab", "/r/A", "/x/a_b", "/x/aXb", "/q/100%/w"]
    }

    def within(*roots: str) -> set[str]:
        return {j.workspace for j in store.list(limit=50, within=roots)}

    assert within("/r/a") == {"/r/a", "/r/a/sub"}
    assert within("/x/a_b") == {"/x/a_b"}
    assert within("/q/100%") == {"/q/100%/w"}
    assert within("/r/a/sub", "/x") == {"/r/a/sub", "/x/a_b", "/x/aXb"}
    assert within("/elsewhere") == set()
    assert len(within()) == len(made)  # no roots: every job


def test_list_breaks_ties_in_start_time_by_insertion_order(store: JobStore, db: Path) -> None:
    same = time.time() - 5
    ids = [new_job(store).job_id for _ in range(8)]
    for job_id in ids:
        backdate(db, job_id, started_at=same, finished_at=None)
    assert [j.job_id for j in store.list()] == list(reversed(ids))


def test_latest_for_session_is_the_newest_job_of_that_session_with_its_result(
    store: JobStore, db: Path
) -> None:
    first = new_job(store, session_id="s1", status="running")
    store.finish(first.job_id, status="done", result={"turn": 1}, summary="t1")
    second = new_job(store, tool="kimi_continue", session_id="s1", status="running")
    store.finish(second.job_id, status="done", result={"turn": 2}, summary="t2")
    other = new_job(store, session_id="s2")
    backdate(db, first.job_id, started_at=time.time() - 60, finished_at=time.time() - 50)

    latest = store.latest_for_session("s1")
    assert latest.job_id == second.job_id and latest.result == {"turn": 2}
    assert store.latest_for_session("s2").job_id == other.job_id
    assert store.latest_for_session("unknown") is None


def test_request_cancel_is_seen_by_cancel_requested(store: JobStore) -> None:
    job, other = new_job(store, status="running"), new_job(store, status="running")
    assert not store.cancel_requested(job.job_id)
    store.request_cancel(job.job_id)
    assert store.cancel_requested(job.job_id) and store.get(job.job_id).cancel_requested
    assert not store.cancel_requested(other.job_id)
    assert not store.cancel_requested("job_unknown")


# --- orphans and owners ----------------------------------------------------------------------------------


def test_interrupt_orphans_marks_only_dead_owners_unfinished_jobs(store: JobStore) -> None:
    dead_running = new_job(store, owner="dead:1", status="running", session_id="s-dead", workspace="/w")
    dead_queued = new_job(store, owner="dead:1", status="queued")
    dead_done = new_job(store, owner="dead:1", status="running")
    store.finish(dead_done.job_id, status="done", result=RESULT, summary="finished earlier")
    other_dead = new_job(store, owner="dead:2", status="running")
    alive_running = new_job(store, owner="alive:1", status="running")
    store.update(dead_running.job_id, progress={"elapsed_s": 3})
    asked: list[str] = []

    def is_alive(owner: str) -> bool:
        asked.append(owner)
        return owner.startswith("alive")

    ids = store.interrupt_orphans(is_alive)

    assert sorted(ids) == sorted([dead_running.job_id, dead_queued.job_id, other_dead.job_id])
    assert sorted(asked) == ["alive:1", "dead:1", "dead:2"]  # once per distinct owner
    got = store.get(dead_running.job_id)
    assert got.status == "interrupted" and got.finished_at is not None and got.progress is None
    assert got.result == {
        "success": False,
        "status": "interrupted",
        "job_id": dead_running.job_id,
        "session_id": "s-dead",
        "workspace": "/w",
        "error": {
            "type": "session",
            "message": INTERRUPTED_MESSAGE,
            "details": {},
            "suggestion": "Continue the conversation with kimi_continue(session_id, ...) if it has a "
            "session_id, or start the task again.",
            "retryable": True,
        },
    }
    assert store.get(dead_queued.job_id).result["session_id"] is None
    assert store.get(dead_done.job_id).status == "done" and store.get(dead_done.job_id).result == RESULT
    assert store.get(alive_running.job_id).status == "running"
    assert store.interrupt_orphans(is_alive) == []  # nothing left to interrupt


def test_interrupt_orphans_keeps_this_process_jobs_by_default(store: JobStore) -> None:
    mine = new_job(store, owner=owner_id(), status="running")
    assert store.interrupt_orphans() == []
    assert store.get(mine.job_id).status == "running"


def test_owner_alive_for_this_process() -> None:
    me = owner_id()
    pid, _, ticks = me.partition(":")
    assert int(pid) == os.getpid() and ticks.isdigit()
    assert owner_alive(me)
    assert not owner_alive(f"{pid}:{int(ticks) + 1}")  # same pid, another start time: a reused pid


def test_owner_alive_for_a_dead_process() -> None:
    proc = subprocess.Popen(["true"])
    proc.wait()
    assert not owner_alive(f"{proc.pid}:12345")


@pytest.mark.parametrize("owner", ["", "abc", "123", "123:", ":5", "12:x", "x:12", "-1:5", "0:0", "1:2:3"])
def test_owner_alive_refuses_malformed_owners(owner: str) -> None:
    assert not owner_alive(owner)


# --- pruning ---------------------------------------------------------------------------------------------


def test_prune_deletes_only_old_finished_jobs(store: JobStore, db: Path) -> None:
    day = 86400
    now = time.time()
    old_done = new_job(store, status="running")
    store.finish(old_done.job_id, status="done", result=RESULT, summary="old")
    backdate(db, old_done.job_id, started_at=now - 10 * day, finished_at=now - 9 * day)
    old_interrupted = new_job(store, status="running")
    store.finish(old_interrupted.job_id, status="interrupted", result=RESULT, summary="old")
    backdate(db, old_interrupted.job_id, started_at=now - 10 * day, finished_at=None)  # by started_at
    long_run = new_job(store, status="running")  # finished recently after a long run: kept
    store.finish(long_run.job_id, status="done", result=RESULT, summary="long")
    backdate(db, long_run.job_id, started_at=now - 10 * day, finished_at=now - 1 * day)
    old_running = new_job(store, status="running")  # never pruned while unfinished
    backdate(db, old_running.job_id, started_at=now - 30 * day, finished_at=None)
    fresh = new_job(store, status="running")
    store.finish(fresh.job_id, status="cancelled", result=RESULT, summary="new")

    assert store.prune(7) == 2
    assert {j.job_id for j in store.list()} == {long_run.job_id, old_running.job_id, fresh.job_id}
    assert store.prune(7) == 0
    assert store.prune(0.5) == 1 and store.get(long_run.job_id) is None


def test_refs_name_each_jobs_session_and_copy(store: JobStore) -> None:
    plain = new_job(store, session_id="s-1")
    store.finish(plain.job_id, status="done", result=RESULT, summary="plain")
    isolated = new_job(store, status="running", session_id="s-2")
    store.finish(isolated.job_id, status="failed", result={"worktree": {"id": "job_copy"}}, summary="iso")
    running = new_job(store, status="running")
    refs = {ref.job_id: ref for ref in store.refs()}
    assert refs[plain.job_id].session_id == "s-1" and refs[plain.job_id].copy is None
    assert refs[isolated.job_id].copy == "job_copy" and refs[isolated.job_id].status == "failed"
    assert refs[running.job_id].copy is None and refs[running.job_id].status == "running"
    assert refs[running.job_id].ended_at == store.get(running.job_id).started_at  # type: ignore[union-attr]


def test_delete_takes_only_finished_jobs_and_returns_those_left(store: JobStore) -> None:
    done = [new_job(store) for _ in range(3)]
    for job in done:
        store.finish(job.job_id, status="done", result=RESULT, summary="x")
    running = new_job(store, status="running")
    deleted, left = store.delete([done[0].job_id, done[1].job_id, running.job_id, "job_unknown"])
    assert {ref.job_id for ref in deleted} == {done[0].job_id, done[1].job_id}
    assert {ref.job_id for ref in left} == {done[2].job_id, running.job_id}
    assert store.get(running.job_id) is not None and store.get(done[0].job_id) is None
    many = [new_job(store) for _ in range(1200)]  # more ids than one statement's parameters
    for job in many:
        store.finish(job.job_id, status="cancelled", result={}, summary="x")
    deleted, left = store.delete(job.job_id for job in many)
    assert len(deleted) == 1200 and {ref.job_id for ref in left} == {done[2].job_id, running.job_id}


def test_compact_gives_the_space_back(store: JobStore, db: Path) -> None:
    big = {"output": "x" * 200_000}
    jobs = [new_job(store) for _ in range(20)]
    for job in jobs:
        store.finish(job.job_id, status="done", result=big, summary="big")
    store.compact()  # the write-ahead log folded into the file
    full = db.stat().st_size
    store.delete(job.job_id for job in jobs)
    store.compact()
    assert db.stat().st_size < full / 10
    assert not os.path.exists(f"{db}-wal") or os.path.getsize(f"{db}-wal") == 0


# --- sharing one file ------------------------------------------------------------------------------------


def test_two_stores_on_one_file_see_each_others_writes(db: Path) -> None:
    first, second = JobStore(db), JobStore(db)
    try:
        job = new_job(first, status="running", owner="server-1")
        assert second.get(job.job_id).owner == "server-1"
        second.request_cancel(job.job_id)  # the other window asks
        assert first.cancel_requested(job.job_id)  # the owner sees it
        first.finish(job.job_id, status="cancelled", result=RESULT, summary="cancelled")
        assert second.get(job.job_id).result == RESULT
        other = new_job(second, owner="server-2")
        assert [j.job_id for j in first.list()] == [other.job_id, job.job_id]
    finally:
        first.close()
        second.close()


def test_concurrent_creates_from_eight_threads_all_land(store: JobStore, db: Path) -> None:
    errors: list[BaseException] = []

    def work() -> None:
        try:
            for _ in range(50):
                job = new_job(store, status="running")
                store.update(job.job_id, progress={"n": 1})
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=work) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert errors == []
    assert len(store.list(limit=1000)) == 400 and count_rows(db) == 400


def test_concurrent_interrupts_report_each_orphan_exactly_once(db: Path) -> None:
    """Servers starting together (threads of one store, and a second store) interrupt every orphan once."""
    stores = [JobStore(db), JobStore(db)]
    created: list[str] = []
    reported: list[str] = []
    errors: list[BaseException] = []

    def work(store: JobStore) -> None:
        try:
            for _ in range(25):
                created.append(new_job(store, owner="gone:1", status="running").job_id)
                reported.extend(store.interrupt_orphans(lambda owner: False))
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(s,)) for s in stores for _ in range(3)]
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        assert errors == []
        assert sorted(reported) == sorted(created) and len(created) == 150
        assert stores[0].list(status="interrupted", limit=1000) == stores[0].list(limit=1000)
    finally:
        for s in stores:
            s.close()


def test_concurrent_creates_from_two_stores_all_land(db: Path) -> None:
    stores = [JobStore(db), JobStore(db)]
    errors: list[BaseException] = []

    def work(store: JobStore) -> None:
        try:
            for _ in range(200):
                store.finish(new_job(store).job_id, status="done", result=RESULT, summary="x")
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(s,)) for s in stores for _ in range(2)]
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
    finally:
        for s in stores:
            s.close()
    assert errors == [] and count_rows(db) == 800


def test_concurrent_creates_from_two_processes_all_land(db: Path, store: JobStore) -> None:
    script = textwrap.dedent(
        f"""
        from pathlib import Path
        from kimi_mcp.jobs._store import JobStore
        store = JobStore(Path({str(db)!r}))
        for i in range(300):
            job = store.create(tool="t", workspace="/other", read_only=False, arguments={{"i": i}}, owner="p")
            store.finish(job.job_id, status="done", result={{"i": i}}, summary="x")
        store.close()
        """
    )
    child = subprocess.Popen([sys.executable, "-c", script])
    for _ in range(300):
        store.finish(new_job(store).job_id, status="done", result=RESULT, summary="x")
    assert child.wait(60) == 0
    assert count_rows(db) == 600 and len(store.list(limit=1000, workspace="/other")) == 300


# --- files and places ------------------------------------------------------------------------------------


def test_the_store_is_private(tmp_path: Path) -> None:
    db = tmp_path / "state" / "kimi-mcp" / "jobs.sqlite3"
    store = JobStore(db)
    try:
        new_job(store)  # the WAL file exists while the connection is open
        assert stat.S_IMODE(db.parent.stat().st_mode) == 0o700
        for path in (db, db.with_name(db.name + "-wal"), db.with_name(db.name + "-shm")):
            assert stat.S_IMODE(path.stat().st_mode) == 0o600, path
    finally:
        store.close()


def test_reopening_keeps_the_jobs_and_the_schema_version(db: Path) -> None:
    first = JobStore(db)
    job = new_job(first)
    first.close()
    again = JobStore(db)
    try:
        assert again.get(job.job_id) == job
        assert again._query("PRAGMA user_version") == [(SCHEMA_VERSION,)]
        assert again._query("PRAGMA journal_mode") == [("wal",)]
    finally:
        again.close()


V1_SCHEMA = """
CREATE TABLE jobs (job_id TEXT PRIMARY KEY, tool TEXT NOT NULL, workspace TEXT NOT NULL,
    read_only INTEGER NOT NULL, status TEXT NOT NULL, session_id TEXT, owner TEXT NOT NULL,
    started_at REAL NOT NULL, finished_at REAL, summary TEXT NOT NULL,
    cancel_requested INTEGER NOT NULL DEFAULT 0, progress TEXT, arguments TEXT NOT NULL, result TEXT);
CREATE INDEX jobs_started ON jobs (started_at);
CREATE INDEX jobs_session ON jobs (session_id, started_at);
PRAGMA user_version = 1;
"""


def test_a_version_1_store_is_migrated_with_its_jobs_and_their_columns(db: Path) -> None:
    """A store written by the previous kimi-mcp: its jobs survive, the new columns (tokens, model, copy)
    come from their results, the indexes exist on the new table, and new jobs can be added."""
    result = {
        "usage": {"input_tokens": 120, "output_tokens": 30},
        "model": "kimi-k2",
        "worktree": {"id": "job_a"},
    }
    db.parent.mkdir(parents=True, exist_ok=True)
    with sqlite3.connect(db) as conn:
        conn.executescript(V1_SCHEMA)
        conn.execute(
            "INSERT INTO jobs VALUES ('job_a', 'kimi_prompt', '/w', 0, 'done', 'sid', '1:2', 10.0, 11.0, 's', 0, "
            "NULL, '{}', ?)",
            (json.dumps(result),),
        )
    conn.close()
    store = JobStore(db)
    try:
        old = store.get("job_a")
        assert old is not None and old.result == result and old.session_id == "sid"
        assert (old.tokens, old.model, old.copy) == (150, "kimi-k2", "job_a")
        assert store._query("PRAGMA user_version") == [(SCHEMA_VERSION,)]
        indexes = {row[0] for row in store._query("SELECT name FROM sqlite_master WHERE type = 'index'")}
        assert {"jobs_started", "jobs_session", "jobs_finished", "control_job"} <= indexes
        new_job(store)
        assert len(store.list()) == 2
    finally:
        store.close()


V2_SCHEMA = """
CREATE TABLE jobs (job_id TEXT PRIMARY KEY, tool TEXT NOT NULL, workspace TEXT NOT NULL,
    read_only INTEGER NOT NULL, status TEXT NOT NULL, session_id TEXT, owner TEXT NOT NULL,
    started_at REAL NOT NULL, finished_at REAL, summary TEXT NOT NULL,
    cancel_requested INTEGER NOT NULL DEFAULT 0, progress TEXT, tokens INTEGER NOT NULL DEFAULT 0, model TEXT,
    copy TEXT, question TEXT, arguments TEXT NOT NULL, screen TEXT, result TEXT);
CREATE INDEX jobs_started ON jobs (started_at);
CREATE TABLE control (id INTEGER PRIMARY KEY AUTOINCREMENT, job_id TEXT NOT NULL, kind TEXT NOT NULL,
    payload TEXT NOT NULL, created_at REAL NOT NULL, taken_at REAL);
INSERT INTO control (job_id, kind, payload, created_at) VALUES ('job_b', 'message', '{"text": "hi"}', 1.0);
PRAGMA user_version = 2;
"""


def test_a_version_2_store_is_migrated_keeping_every_column_and_what_was_sent(db: Path) -> None:
    """A store of the release before job specs: its rows keep every column (no spec: None), the control
    table keeps what was sent, the spec column comes before the result, and new jobs record their spec."""
    db.parent.mkdir(parents=True, exist_ok=True)
    with sqlite3.connect(db) as conn:
        conn.executescript(V2_SCHEMA)
        conn.execute(
            "INSERT INTO jobs VALUES ('job_b', 'kimi_prompt', '/w', 1, 'waiting', 'sid', '1:2', 10.0, NULL, 's', 1, "
            '\'{"activity": "x"}\', 77, \'kimi-k2\', \'job_b\', \'{"text": "Which?"}\', \'{"prompt": "p"}\', '
            "'screen', NULL)"
        )
    conn.close()
    store = JobStore(db)
    try:
        old = store.get("job_b")
        assert old is not None and old.read_only and old.cancel_requested and old.arguments == {"prompt": "p"}
        assert (old.tokens, old.model, old.copy, old.question) == (77, "kimi-k2", "job_b", {"text": "Which?"})
        assert old.progress == {"activity": "x"} and store.screen("job_b") == ("waiting", "screen")
        assert store.spec("job_b") is None and store.take_sent("job_b") == [("message", {"text": "hi"})]
        columns = [row[1] for row in store._query("PRAGMA table_info(jobs)")]
        assert columns[-2:] == ["spec", "result"]
        assert store._query("PRAGMA user_version") == [(SCHEMA_VERSION,)]
        spec = {"tool": "kimi_prompt", "prompt": "p", "workspace": "/w", "read_only": False}
        job = store.create(
            tool="kimi_prompt", workspace="/w", read_only=False, arguments={}, owner="1:2", spec=spec
        )
        assert store.spec(job.job_id) == spec and store.spec("job_nope") is None
    finally:
        store.close()


V3_SCHEMA = V2_SCHEMA.replace("screen TEXT, result TEXT", "screen TEXT, spec TEXT, result TEXT").replace(
    "PRAGMA user_version = 2", "PRAGMA user_version = 3"
)


def test_a_version_3_store_is_migrated_its_jobs_in_no_group_and_new_jobs_listed_by_group(db: Path) -> None:
    """A store of the release before groups: its rows keep every column (the spec too) and belong to no
    group; the group column comes before the spec; jobs are listed by group."""
    db.parent.mkdir(parents=True, exist_ok=True)
    with sqlite3.connect(db) as conn:
        conn.executescript(V3_SCHEMA)
        conn.execute(
            "INSERT INTO jobs VALUES ('job_c', 'kimi_prompt', '/w', 0, 'done', 'sid', '1:2', 10.0, 11.0, 's', 0, "
            "NULL, 5, 'kimi-k2', NULL, NULL, '{}', NULL, '{\"tool\": \"kimi_prompt\"}', '{\"success\": true}')"
        )
    conn.close()
    store = JobStore(db)
    try:
        old = store.get("job_c")
        assert old is not None and old.group is None and old.result == {"success": True} and old.tokens == 5
        assert store.spec("job_c") == {"tool": "kimi_prompt"}
        columns = [row[1] for row in store._query("PRAGMA table_info(jobs)")]
        assert columns[-3:] == ["job_group", "spec", "result"]
        assert store._query("PRAGMA user_version") == [(SCHEMA_VERSION,)] and SCHEMA_VERSION == 4
        one = store.create(
            tool="kimi_prompt", workspace="/w", read_only=False, arguments={}, owner="1:2", group="g"
        )
        two = store.create(
            tool="kimi_prompt", workspace="/w", read_only=False, arguments={}, owner="1:2", group="g"
        )
        store.create(
            tool="kimi_prompt", workspace="/w", read_only=False, arguments={}, owner="1:2", group="h"
        )
        assert [r.job_id for r in store.list(group="g")] == [two.job_id, one.job_id]
        assert store.get(one.job_id).group == "g" and len(store.list()) == 4  # type: ignore[union-attr]
    finally:
        store.close()


def test_sent_answers_and_messages_are_taken_once_and_only_for_unfinished_jobs(db: Path) -> None:
    store = JobStore(db)
    try:
        running, done = new_job(store), new_job(store)
        store.finish(done.job_id, status="done", result={}, summary="")
        store.send(running.job_id, "message", {"text": "a"})
        store.send(running.job_id, "answer", {"answer": "Blue"})
        store.send(done.job_id, "message", {"text": "late"})
        assert store.take_sent(running.job_id) == [("message", {"text": "a"}), ("answer", {"answer": "Blue"})]
        assert store.take_sent(running.job_id) == []
        assert store.take_sent(done.job_id) == []
    finally:
        store.close()


def test_tokens_of_the_last_day_count_running_and_recently_finished_jobs(db: Path) -> None:
    store = JobStore(db)
    try:
        old, recent, running = new_job(store), new_job(store), new_job(store)
        usage = {"usage": {"input_tokens": 70, "output_tokens": 30}}
        store.finish(old.job_id, status="done", result=usage, summary="")
        store._execute("UPDATE jobs SET finished_at = ? WHERE job_id = ?", (time.time() - 90_000, old.job_id))
        store.finish(recent.job_id, status="done", result=usage, summary="")
        store.update(running.job_id, tokens=40)
        assert store.tokens_since(time.time() - 86_400) == 140
    finally:
        store.close()


def test_a_newer_schema_is_refused(db: Path) -> None:
    JobStore(db).close()
    with sqlite3.connect(db) as conn:
        conn.execute("PRAGMA user_version = 99")
    conn.close()
    with pytest.raises(sqlite3.DatabaseError, match="newer"):
        JobStore(db)
