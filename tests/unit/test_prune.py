"""``kimi-mcp prune``: finished jobs go with their isolated copies and the Kimi sessions they created (both
dialects' stores, moved homes honoured); running jobs, what a kept job still uses, and everything else in
or outside the stores stay; a dry run changes nothing; a store that cannot be opened is a one-line error."""

from __future__ import annotations

import functools
import hashlib
import os
import sqlite3
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
from git_helpers import committed_repo

from kimi_mcp import cli, worktree
from kimi_mcp.config import Settings, state_dir
from kimi_mcp.drivers import session_dirs, session_roots
from kimi_mcp.drivers.base import KimiInstall
from kimi_mcp.drivers.kimi_code import KimiCodeDriver
from kimi_mcp.drivers.legacy import LegacyDriver
from kimi_mcp.jobs import STORE_FILE, JobManager, JobRecord, JobRef, JobStore, owner_id
from kimi_mcp.jobs.prune import forget_sessions, human_bytes, leftovers

DAY = 86_400.0
DEAD = "dead-owner"  # malformed, so never alive
LOG = '{"type": "TurnEnd"}\n' * 200


@dataclass
class World:
    home: Path
    state: Path
    repo: Path
    store: JobStore

    @property
    def legacy(self) -> Path:
        return self.home / ".kimi" / "sessions"

    @property
    def kimi_code(self) -> Path:
        return self.home / ".kimi-code" / "sessions"

    def job(
        self,
        *,
        session: str | None = None,
        status: str = "done",
        age_days: float = 30.0,
        owner: str = DEAD,
        copy: str | None = None,
        own_copy: bool = False,
        tool: str = "kimi_code_task",
    ) -> JobRecord:
        """A job that ended ``age_days`` ago (unfinished: started then), its result naming ``copy`` (or,
        ``own_copy``, a real isolated copy made for it, as a worktree job's first turn makes one)."""
        record = self.store.create(
            tool=tool, workspace=str(self.repo), read_only=False, arguments={}, owner=owner,
            status="running", session_id=session,
        )  # fmt: skip
        if own_copy:
            copy = worktree.create(self.repo, self.state, record.job_id).id
        when = time.time() - age_days * DAY
        if status == "running":
            self._backdate(record.job_id, when, None)
            return record
        result = {"success": status == "done", "worktree": {"id": copy} if copy else None}
        self.store.finish(record.job_id, status=status, result=result, summary="x")
        self._backdate(record.job_id, when - 60, when)
        return record

    def _backdate(self, job_id: str, started: float, finished: float | None) -> None:
        with sqlite3.connect(self.store.path) as conn:
            conn.execute(
                "UPDATE jobs SET started_at = ?, finished_at = ? WHERE job_id = ?",
                (started, finished, job_id),
            )
        conn.close()

    def copy(self, job_id: str) -> Path:
        return worktree.create(self.repo, self.state, job_id).root

    def ids(self) -> set[str]:
        return {ref.job_id for ref in self.store.refs()}


def legacy_session(store: Path, workspace: Path, session_id: str) -> Path:
    folder = store / hashlib.md5(str(workspace).encode()).hexdigest() / session_id
    (folder / "wire.jsonl").parent.mkdir(parents=True, exist_ok=True)
    (folder / "wire.jsonl").write_text(LOG)
    (folder / "context.jsonl").write_text("{}\n")
    return folder


def kimi_code_session(store: Path, session_id: str, bucket: str = "wd_repo_1a2b") -> Path:
    folder = store / bucket / session_id
    (folder / "agents" / "main").mkdir(parents=True)
    (folder / "agents" / "main" / "wire.jsonl").write_text(LOG)
    return folder


def prune(*argv: str) -> int:
    with pytest.raises(SystemExit) as exit:
        cli.main(["prune", *argv])
    return int(exit.value.code or 0)


@pytest.fixture
def world(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> World:
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    (tmp_path / "empty.env").write_text("")
    monkeypatch.setenv("KIMI_MCP_ENV_FILE", str(tmp_path / "empty.env"))  # not the checkout's .env
    for name in ("KIMI_SHARE_DIR", "KIMI_CODE_HOME", "XDG_CONFIG_HOME", "KIMI_MCP_CONFIG"):
        monkeypatch.delenv(name, raising=False)
    for name in ("JOB_TTL_DAYS", "SESSION_IDLE", "STATE_DIR"):
        monkeypatch.delenv(f"KIMI_MCP_{name}", raising=False)
    repo = committed_repo(tmp_path / "repo", {"app.py": "print('hi')\n"})
    state = state_dir(Settings(), os.environ)  # $XDG_STATE_HOME/kimi-mcp (tests/conftest.py's private one)
    store = JobStore(state / STORE_FILE)
    yield World(home, state, repo, store)
    store.close()


def test_old_finished_jobs_go_with_their_copies_and_sessions_and_nothing_else(
    world: World, capsys: pytest.CaptureFixture[str]
) -> None:
    # gone: an isolated legacy job, a Kimi Code job, a cancelled one without a session
    iso = world.job(session="11111111-aaaa-bbbb-cccc-000000000001", own_copy=True, age_days=19)
    iso_copy = world.state / "worktrees" / iso.job_id
    iso_session = legacy_session(world.legacy, iso_copy / "tree", iso.session_id or "")
    code = world.job(session="session_22222222-aaaa-bbbb-cccc-000000000002", status="failed")
    code_session = kimi_code_session(world.kimi_code, code.session_id or "")
    bare = world.job(status="cancelled")
    # kept: a recent job; a conversation whose first turn is old but whose follow-up is recent (its copy is
    # named after the first turn); a job running in a live server (this process), old, in its own copy
    recent = world.job(session="33333333-aaaa-bbbb-cccc-000000000003", age_days=2)
    recent_session = legacy_session(world.legacy, world.repo, recent.session_id or "")
    first = world.job(session="44444444-aaaa-bbbb-cccc-000000000004", own_copy=True, age_days=20)
    shared_copy = world.state / "worktrees" / first.job_id
    follow = world.job(session=first.session_id, age_days=1, copy=first.job_id, tool="kimi_continue")
    shared_session = legacy_session(world.legacy, shared_copy / "tree", first.session_id or "")
    turn = world.job(session="66666666-aaaa-bbbb-cccc-000000000006", own_copy=True, age_days=30)
    turn_copy = world.state / "worktrees" / turn.job_id  # its follow-up runs in it now: no result yet
    turn_next = world.job(session=turn.session_id, status="running", owner=owner_id(), tool="kimi_continue")
    running = world.job(status="running", owner=owner_id(), age_days=40, session="55555555-0000")
    running_copy = world.copy(running.job_id)
    running_session = kimi_code_session(world.kimi_code, running.session_id or "")
    # not kimi-mcp's: another session in the same bucket, Kimi's own files, a file beside a session
    stranger = legacy_session(world.legacy, world.repo, "99999999-aaaa-bbbb-cccc-000000000009")
    (world.home / ".kimi" / "config.toml").write_text("default_model = 'k2'\n")
    beside = iso_session.parent / "notes.txt"
    beside.write_text("not a session\n")

    assert prune() == 0

    out = capsys.readouterr().out
    assert world.ids() == {recent.job_id, follow.job_id, running.job_id, turn_next.job_id}
    assert not iso_copy.exists() and not iso_session.exists() and not code_session.exists()
    for kept in (
        recent_session,
        shared_copy,
        shared_session,
        running_copy,
        running_session,
        turn_copy,
        stranger,
        beside,
    ):
        assert kept.exists(), kept
    assert (world.home / ".kimi" / "config.toml").read_text() == "default_model = 'k2'\n"
    assert iso_session.parent.is_dir() and code_session.parent.is_dir()  # Kimi's buckets stay
    assert worktree.load(world.state, first.job_id).root == shared_copy  # still loads for kimi_apply
    assert out.startswith(
        "Removed 5 finished jobs (ended over 7 days ago), 1 isolated copy and 2 Kimi sessions: "
    ), out
    assert bare.job_id not in world.ids() and "Kept 2 jobs still running" in out
    assert _bytes(out, "Kimi sessions") > 2 * len(LOG) and _bytes(out, "isolated copies") > 0


def _bytes(out: str, label: str) -> float:
    """The size a report line ``  <label>: 1.5 KiB`` names, in bytes."""
    line = next(line for line in out.splitlines() if line.startswith(f"  {label}: "))
    number, unit = line.split(": ")[1].split()
    return float(number) * {"B": 1, "KiB": 1024, "MiB": 1024**2, "GiB": 1024**3}[unit]


def test_a_copy_or_session_any_job_left_names_stays() -> None:
    def ref(job_id: str, session: str | None, copy: str | None = None) -> JobRef:
        return JobRef(job_id, "done", DEAD, session, copy, 0.0)

    deleted = [
        ref("job_a", "s-a", copy="job_a"),  # made its copy; a job of another conversation names it
        ref("job_b", "s-b", copy="job_c"),  # names the copy a job left made
        ref("job_d", "s-shared", copy="job_d"),  # its conversation goes on: session and copy stay
        ref("job_e", "s-e", copy="job_e"),  # nothing left uses its session or copy
        ref("job_f", None),  # no session, no copy
    ]
    left = [ref("job_x", "s-x", copy="job_a"), ref("job_c", "s-c"), ref("job_y", "s-shared")]
    assert leftovers(deleted, left) == ({"s-a", "s-b", "s-e"}, {"job_b", "job_e", "job_f"})


def test_older_than_and_all_choose_by_the_end_of_the_job(world: World) -> None:
    day_old = world.job(session="a-1", age_days=1.0)
    week_old = world.job(session="a-2", age_days=8.0)
    hour_old = world.job(session="a-3", age_days=1 / 24)
    running = world.job(status="running", owner=owner_id(), age_days=100)
    sessions = [legacy_session(world.legacy, world.repo, f"a-{i}") for i in (1, 2, 3)]

    assert prune("--older-than", "10") == 0
    assert world.ids() == {day_old.job_id, week_old.job_id, hour_old.job_id, running.job_id}
    assert prune("--older-than", "0.5") == 0
    assert world.ids() == {hour_old.job_id, running.job_id}
    assert [s.exists() for s in sessions] == [False, False, True]
    assert prune("--all") == 0
    assert world.ids() == {running.job_id} and not sessions[2].exists()


def test_a_dry_run_lists_what_would_go_and_changes_nothing(
    world: World, capsys: pytest.CaptureFixture[str]
) -> None:
    old = world.job(session="session_dry-1")
    session = kimi_code_session(world.kimi_code, "session_dry-1")
    isolated = world.job(status="interrupted")
    copy = world.copy(isolated.job_id)  # an interrupted job's copy: named after it, no result naming it
    before = _tree(world.home) | _tree(world.state)
    before_rows = world.store.refs()

    assert prune("--dry-run") == 0

    out = capsys.readouterr().out
    assert _tree(world.home) | _tree(world.state) == before and world.store.refs() == before_rows
    assert out.startswith("Would remove 2 finished jobs (ended over 7 days ago), 1 isolated copy and 1 Kimi")
    assert f"  job {old.job_id}" in out and f"  copy {copy}" in out and f"  session {session}" in out
    assert prune() == 0 and not copy.exists() and not session.exists()


def _tree(top: Path) -> set[tuple[str, int]]:
    """Every path under ``top`` with its size (files) or 0, and the store's rows aside."""
    found = set()
    for folder, dirs, files in os.walk(top):
        for name in dirs + files:
            path = Path(folder, name)
            if not name.startswith(STORE_FILE):
                found.add((str(path), path.lstat().st_size if name in files else 0))
    return found


def test_a_job_that_ended_just_now_in_a_live_server_keeps_its_session(
    world: World, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    live = world.job(session="live-1", owner=owner_id(), age_days=60 / DAY)  # a minute ago, this process
    session = legacy_session(world.legacy, world.repo, "live-1")
    assert prune("--all") == 0
    assert world.ids() == {live.job_id} and session.exists()
    assert "Kept 1 job that ended in a live kimi-mcp server less than KIMI_MCP_SESSION_IDLE" in (
        capsys.readouterr().out
    )
    monkeypatch.setenv("KIMI_MCP_SESSION_IDLE", "30")  # its Kimi has exited by now
    assert prune("--all") == 0
    assert world.ids() == set() and not session.exists()


def test_a_running_job_whose_server_died_is_interrupted_then_pruned(
    world: World, capsys: pytest.CaptureFixture[str]
) -> None:
    orphan = world.job(status="running", owner=DEAD, age_days=30, session="orphan-1")
    session = legacy_session(world.legacy, world.repo, "orphan-1")
    assert prune("--dry-run") == 0  # it would be interrupted now: not old
    assert prune("--dry-run", "--all") == 0
    dry = capsys.readouterr().out.splitlines()
    assert (
        dry[0].startswith("Would remove 0 finished jobs")
        and world.store.get(orphan.job_id).status == "running"
    )  # type: ignore[union-attr]
    assert f"  job {orphan.job_id}" in dry and f"  session {session}" in dry
    assert prune() == 0  # recorded interrupted now: not 7 days old yet
    record = world.store.get(orphan.job_id)
    assert record is not None and record.status == "interrupted" and session.exists()
    assert prune("--all") == 0
    assert world.ids() == set() and not session.exists()


def test_moved_kimi_homes_are_the_stores(
    world: World, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    share, code_home = tmp_path / "share", tmp_path / "code-home"
    monkeypatch.setenv("KIMI_SHARE_DIR", str(share))
    monkeypatch.setenv("KIMI_CODE_HOME", str(code_home))
    world.job(session="moved-1")
    world.job(session="session_moved-2")
    moved = [
        legacy_session(share / "sessions", world.repo, "moved-1"),
        kimi_code_session(code_home / "sessions", "session_moved-2"),
    ]
    default = [
        legacy_session(world.legacy, world.repo, "moved-1"),
        kimi_code_session(world.kimi_code, "session_moved-2"),
    ]
    assert session_roots(dict(os.environ)) == [share / "sessions", code_home / "sessions"]
    assert prune("--all") == 0
    assert [p.exists() for p in moved] == [False, False]
    assert [p.exists() for p in default] == [True, True]  # not Kimi's store while the home is moved


def test_symlinks_in_a_store_are_never_followed(world: World, tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    victim = outside / "bucket" / "link-1"
    victim.mkdir(parents=True)
    (victim / "keep.txt").write_text("mine\n")
    (outside / "link-2").mkdir()
    (outside / "link-2" / "keep.txt").write_text("mine too\n")
    world.legacy.mkdir(parents=True)
    (world.legacy / "bucket-link").symlink_to(outside / "bucket")  # a bucket that is a symlink
    (world.legacy / "real-bucket").mkdir()
    (world.legacy / "real-bucket" / "link-2").symlink_to(outside / "link-2")  # a session that is one
    world.job(session="link-1")
    world.job(session="link-2")
    assert prune("--all") == 0
    assert (victim / "keep.txt").read_text() == "mine\n"
    assert (outside / "link-2" / "keep.txt").read_text() == "mine too\n"
    assert (world.legacy / "real-bucket" / "link-2").is_symlink()


def test_a_symlinked_store_is_searched_where_it_points(world: World, tmp_path: Path) -> None:
    elsewhere = tmp_path / "big-disk" / "kimi-sessions"
    session = legacy_session(elsewhere, world.repo, "far-1")
    (world.home / ".kimi").mkdir()
    world.legacy.symlink_to(elsewhere)
    assert session_dirs([world.legacy], {"far-1", ".."}) == [
        elsewhere.resolve() / session.parent.name / "far-1"
    ]
    world.job(session="far-1")
    assert prune("--all") == 0 and not session.exists() and elsewhere.is_dir()


def test_a_store_that_cannot_be_opened_is_a_one_line_error(
    world: World, capsys: pytest.CaptureFixture[str]
) -> None:
    world.store.close()
    path = world.state / STORE_FILE
    for suffix in ("", "-wal", "-shm"):
        Path(f"{path}{suffix}").unlink(missing_ok=True)
    path.write_bytes(b"this is not a database, " * 100)
    assert prune() == 1
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.count("\n") == 1
    assert captured.err.startswith(f"kimi-mcp prune: error: cannot open the job store {path}: ")
    path.unlink()
    assert prune() == 0 and "nothing to prune" in capsys.readouterr().out
    assert not path.exists()  # looking did not create one


def test_bad_ages_are_refused_by_the_parser(capsys: pytest.CaptureFixture[str]) -> None:
    for argv in (["--older-than", "-1"], ["--older-than", "nan"], ["--older-than", "3", "--all"]):
        with pytest.raises(SystemExit) as exit:
            cli.main(["prune", *argv])
        assert exit.value.code == 2
    assert "not a number of days: '-1'" in capsys.readouterr().err


def test_both_dialects_keep_a_session_two_levels_below_the_store() -> None:
    # session_dirs relies on <store>/<bucket>/<session id>/...: the drivers' own log patterns say so
    for driver in (LegacyDriver, KimiCodeDriver):
        assert driver.wire_glob.startswith("*/{sid}/")
        install = KimiInstall(binary="kimi", version="0", dialect=driver.name)  # type: ignore[arg-type]
        assert driver(install).sessions_root({"HOME": "/h"}) == driver.sessions_root({"HOME": "/h"})


def test_human_bytes() -> None:
    assert [human_bytes(n) for n in (0, 1023, 1024, 1536, 48 * 1024**2 + 200_000, 3 * 1024**4)] == [
        "0 B", "1023 B", "1.0 KiB", "1.5 KiB", "48.2 MiB", "3.0 TiB",
    ]  # fmt: skip


def test_a_servers_own_pruning_at_start_takes_the_pruned_jobs_sessions_along(world: World) -> None:
    """The store's TTL pruning at a server's start used to leave the Kimi sessions of the jobs it deleted,
    which ``kimi-mcp prune`` could then no longer find."""
    old = world.job(session="77777777-aaaa-bbbb-cccc-000000000007", age_days=30)
    old_session = legacy_session(world.legacy, world.repo, old.session_id or "")
    first = world.job(session="88888888-aaaa-bbbb-cccc-000000000008", age_days=30)
    world.job(session=first.session_id, age_days=1, tool="kimi_continue")  # the conversation goes on
    shared_session = kimi_code_session(world.kimi_code, first.session_id or "")
    stranger = legacy_session(world.legacy, world.repo, "99999999-aaaa-bbbb-cccc-000000000009")
    env = {"HOME": str(world.home)}
    jobs = JobManager(world.store.path, ttl_days=7, on_pruned=functools.partial(forget_sessions, env))
    assert {ref.job_id for ref in jobs.store.refs()} == world.ids() - {old.job_id, first.job_id}
    assert not old_session.exists()  # only the pruned job used it
    assert shared_session.exists() and stranger.exists()  # a job left names it; not kimi-mcp's
