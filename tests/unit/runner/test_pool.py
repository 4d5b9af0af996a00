"""The standby pool (``runner._pool``): which standby serves which call, staleness, expiry and shutdown.

Sessions here are small stand-ins with the KimiSession methods the pool uses; the real Kimi under a pool
is covered end to end in test_e2e_code_task.py.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest
from polling import wait_until

from kimi_mcp.runner._pool import SessionPool, StandbyKey, workspace_signature


class FakeSession:
    def __init__(self, cancel: threading.Event, fail: bool = False, start_delay: float = 0.0) -> None:
        self.cancel = cancel
        self.fail = fail
        self.start_delay = start_delay
        self.events: list[str] = []
        self.alive = True

    def start(self) -> None:
        end = time.monotonic() + self.start_delay
        while time.monotonic() < end:
            if self.cancel.is_set():
                raise RuntimeError("cancelled")
            time.sleep(0.01)
        if self.fail:
            raise RuntimeError("Kimi did not start")
        self.events.append("started")

    def idle_until(self, stop: threading.Event) -> None:
        stop.wait()

    def wake(self) -> None:
        self.woken = True

    def usable(self, limit: float) -> bool:
        return self.alive

    def kill(self, grace: float = 1.0) -> None:
        self.events.append("killed")
        self.alive = False

    def close(self) -> None:
        self.events.append("closed")
        self.alive = False


def key_for(root: Path, lists: bool = True, read_only: bool = False) -> StandbyKey:
    return StandbyKey("/bin/kimi", "1.50.0", str(root), read_only, True, lists)


@pytest.fixture
def pool():
    pool = SessionPool()
    yield pool
    pool.shutdown()


class Factory:
    def __init__(self, **kwargs) -> None:
        self.kwargs = kwargs
        self.made: list[FakeSession] = []

    def __call__(self, cancel: threading.Event) -> FakeSession:
        session = FakeSession(cancel, **self.kwargs)
        self.made.append(session)
        return session


def test_signature_sees_two_levels_of_names_and_instruction_files(tmp_path: Path):
    (tmp_path / "src" / "deep").mkdir(parents=True)
    (tmp_path / "AGENTS.md").write_text("rules\n")
    (tmp_path / "a.txt").write_text("a\n")
    base = workspace_signature(tmp_path)
    (tmp_path / "a.txt").write_text("same name, new content\n")  # names only: not in Kimi's listing
    (tmp_path / "src" / "deep" / "x.py").write_text("")  # third level: not in Kimi's listing
    assert workspace_signature(tmp_path) == base
    (tmp_path / "src" / "new.py").write_text("")  # second level
    second = workspace_signature(tmp_path)
    assert second != base
    (tmp_path / "b.txt").write_text("")
    third = workspace_signature(tmp_path)
    assert third != second
    (tmp_path / "AGENTS.md").write_text("other rules\n")
    assert workspace_signature(tmp_path) != third


def test_signature_without_listing_only_watches_instruction_files(tmp_path: Path):
    (tmp_path / "AGENTS.md").write_text("rules\n")
    base = workspace_signature(tmp_path, listing=False)
    (tmp_path / "new.txt").write_text("")
    (tmp_path / "dir").mkdir()
    assert workspace_signature(tmp_path, listing=False) == base
    (tmp_path / "AGENTS.md").write_text("changed rules\n")
    assert workspace_signature(tmp_path, listing=False) != base
    (tmp_path / "CLAUDE.md").write_text("more\n")
    assert workspace_signature(tmp_path, listing=False) != base


def test_take_returns_the_ready_standby_once(pool: SessionPool, tmp_path: Path):
    factory = Factory()
    key = key_for(tmp_path)
    pool.prewarm(key, factory, idle=60, limit=2)
    pool.prewarm(key, factory, idle=60, limit=2)  # one standby per key
    session = pool.take(key, threading.Event(), time.monotonic() + 5)
    assert session is factory.made[0] and len(factory.made) == 1
    assert session.events == ["started"]
    assert pool.take(key, threading.Event(), time.monotonic() + 5) is None
    assert pool.take(key_for(tmp_path, read_only=True), threading.Event(), time.monotonic() + 5) is None


def test_take_waits_for_a_standby_that_is_still_starting(pool: SessionPool, tmp_path: Path):
    factory = Factory(start_delay=0.3)
    key = key_for(tmp_path)
    pool.prewarm(key, factory, idle=60, limit=2)
    session = pool.take(key, threading.Event(), time.monotonic() + 5)
    assert session is factory.made[0] and session.events == ["started"]


def test_changed_workspace_discards_the_standby(pool: SessionPool, tmp_path: Path):
    factory = Factory()
    key = key_for(tmp_path)
    pool.prewarm(key, factory, idle=60, limit=2)
    (tmp_path / "new-top-level-file.txt").write_text("")
    assert pool.take(key, threading.Event(), time.monotonic() + 5) is None
    assert wait_until(lambda: "killed" in factory.made[0].events)


def test_listing_changes_do_not_matter_when_the_dialect_lists_later(pool: SessionPool, tmp_path: Path):
    factory = Factory()
    key = key_for(tmp_path, lists=False)
    pool.prewarm(key, factory, idle=60, limit=2)
    (tmp_path / "new-top-level-file.txt").write_text("")
    assert pool.take(key, threading.Event(), time.monotonic() + 5) is factory.made[0]


def test_failed_standby_is_not_used(pool: SessionPool, tmp_path: Path):
    factory = Factory(fail=True)
    key = key_for(tmp_path)
    pool.prewarm(key, factory, idle=60, limit=2)
    assert pool.take(key, threading.Event(), time.monotonic() + 5) is None
    assert factory.made[0].events == ["killed"]


def test_unused_standby_expires_with_a_clean_exit(pool: SessionPool, tmp_path: Path):
    factory = Factory()
    pool.prewarm(key_for(tmp_path), factory, idle=0.2, limit=2)
    assert wait_until(lambda: "closed" in factory.made[0].events)
    assert pool.counts() == (0, 0, 0) or wait_until(lambda: pool.counts() == (0, 0, 0))


def test_a_zero_limit_starts_no_standby(pool: SessionPool, tmp_path: Path):
    factory = Factory()
    pool.prewarm(key_for(tmp_path), factory, idle=60, limit=0)  # KIMI_MCP_MAX_STANDBYS=0
    assert factory.made == [] and pool.counts()[0] == 0


def test_at_most_limit_standbys_the_oldest_is_evicted(pool: SessionPool, tmp_path: Path):
    factory = Factory()
    roots = []
    for name in ("a", "b", "c"):
        (tmp_path / name).mkdir()
        roots.append(tmp_path / name)
        pool.prewarm(key_for(tmp_path / name), factory, idle=60, limit=2)
    assert wait_until(lambda: "killed" in factory.made[0].events)
    assert pool.take(key_for(roots[0]), threading.Event(), time.monotonic() + 5) is None
    assert pool.take(key_for(roots[2]), threading.Event(), time.monotonic() + 5) is factory.made[2]


def test_shutdown_stops_standbys_active_and_exiting_sessions(tmp_path: Path):
    pool = SessionPool()
    factory = Factory(start_delay=30)  # still starting: shutdown must abort it, not wait 30 s
    pool.prewarm(key_for(tmp_path), factory, idle=60, limit=2)
    active = FakeSession(threading.Event())
    pool.adopt(active)
    slow = FakeSession(threading.Event())
    slow.close = lambda: time.sleep(10)  # an exit that hangs: shutdown kills it after the grace
    pool.retire(slow)
    pool.shutdown(grace=0.3)
    assert "killed" in active.events
    assert "killed" in slow.events
    assert wait_until(lambda: "started" not in factory.made[0].events and pool.counts()[0] == 0)
    # a closed pool starts nothing new
    pool.prewarm(key_for(tmp_path), factory, idle=60, limit=2)
    assert len(factory.made) == 1
    assert pool.take(key_for(tmp_path), threading.Event(), time.monotonic() + 1) is None


# ----------------------------------------------- issue 13, item 14: a standby thread that does not stop


class StuckSession(FakeSession):
    """A Kimi whose idle loop does not notice ``stop`` (stuck in a read); it ends when killed."""

    def __init__(self, cancel: threading.Event) -> None:
        super().__init__(cancel)
        self.gone = threading.Event()

    def idle_until(self, stop: threading.Event) -> None:
        self.gone.wait(30)

    def kill(self, grace: float = 1.0) -> None:
        super().kill(grace)
        self.gone.set()


@pytest.mark.parametrize("how", ["take", "expire", "shutdown"])
def test_a_standby_whose_thread_does_not_stop_is_killed_not_forgotten(tmp_path: Path, how: str) -> None:
    pool = SessionPool(halt_wait=0.3)
    made: list[StuckSession] = []

    def factory(cancel: threading.Event) -> StuckSession:
        made.append(StuckSession(cancel))
        return made[-1]

    key = key_for(tmp_path)
    pool.prewarm(key, factory, idle=0.2 if how == "expire" else 60, limit=2)
    assert wait_until(lambda: made and made[0].events == ["started"])
    if how == "take":
        assert pool.take(key, threading.Event(), time.monotonic() + 5) is None
    elif how == "shutdown":
        pool.shutdown()
    assert wait_until(lambda: "killed" in made[0].events), made[0].events
    assert wait_until(lambda: pool.counts() == (0, 0, 0))
    pool.shutdown()


# -- live sessions (kimi_continue) --------------------------------------------------------------------------
class LiveSession(FakeSession):
    """A session whose turn has ended: it has an id and is asked whether it is ready again."""

    def __init__(self, session_id: str | None, ready: bool = True) -> None:
        super().__init__(threading.Event())
        self.session_id = session_id
        self.ready = ready

    def start(self) -> None:  # a live session was started long ago
        raise AssertionError("a live session must not be started again")

    def ready_again(self, limit: float) -> bool:
        return self.ready and self.alive


def test_a_kept_session_is_taken_back_by_its_id_once(pool: SessionPool, tmp_path: Path):
    session = LiveSession("s-1")
    assert pool.keep(session, key_for(tmp_path), idle=60, limit=4)
    assert pool.live("s-1") and pool.live_count() == 1
    assert pool.take_live("s-2") is None
    assert pool.take_live("s-1") is session
    assert pool.take_live("s-1") is None and pool.live_count() == 0
    assert session.events == []  # neither closed nor killed: the caller owns it now
    assert session.woken  # its idle loop was told to stop at once


def test_a_session_without_id_or_a_zero_limit_is_not_kept(pool: SessionPool, tmp_path: Path):
    assert not pool.keep(LiveSession(None), key_for(tmp_path), idle=60, limit=4)
    assert not pool.keep(LiveSession("s-1"), key_for(tmp_path), idle=60, limit=0)
    assert pool.live_count() == 0


def test_the_least_recently_used_live_session_is_closed_beyond_the_limit(pool: SessionPool, tmp_path: Path):
    sessions = [LiveSession(f"s-{i}") for i in range(3)]
    for session in sessions[:2]:
        pool.keep(session, key_for(tmp_path), idle=60, limit=2)
    assert pool.take_live("s-0") is sessions[0]  # used again: now the most recent
    pool.keep(sessions[0], key_for(tmp_path), idle=60, limit=2)
    pool.keep(sessions[2], key_for(tmp_path), idle=60, limit=2)
    assert wait_until(lambda: sessions[1].events == ["closed"])  # Kimi's own exit: the conversation is saved
    assert pool.live("s-0") and pool.live("s-2") and not pool.live("s-1")
    assert sessions[0].events == sessions[2].events == []


def test_an_idle_live_session_exits_gracefully(pool: SessionPool, tmp_path: Path):
    session = LiveSession("s-1")
    pool.keep(session, key_for(tmp_path), idle=0.2, limit=4)
    assert wait_until(lambda: session.events == ["closed"])
    assert pool.take_live("s-1") is None


def test_a_live_session_no_longer_ready_is_killed_not_returned(pool: SessionPool, tmp_path: Path):
    session = LiveSession("s-1", ready=False)
    pool.keep(session, key_for(tmp_path), idle=60, limit=4)
    assert pool.take_live("s-1") is None
    assert wait_until(lambda: session.events == ["killed"])


def test_shutdown_closes_live_sessions(tmp_path: Path):
    pool = SessionPool()
    session = LiveSession("s-1")
    pool.keep(session, key_for(tmp_path), idle=60, limit=4)
    pool.shutdown()
    assert session.events == ["closed"] and pool.live_count() == 0
    assert not pool.keep(LiveSession("s-2"), key_for(tmp_path), idle=60, limit=4)  # closed for good


def test_a_live_session_of_another_model_is_closed_and_resumed(pool: SessionPool, tmp_path: Path):
    """A follow-up naming another model must not run in the live Kimi: it exits now (Kimi saves the
    conversation) and the caller resumes it with the new model."""
    same, other = LiveSession("s-1"), LiveSession("s-2")
    key = StandbyKey("/bin/kimi", "1.50.0", str(tmp_path), False, True, True, "two")
    pool.keep(same, key, idle=60, limit=4)
    pool.keep(other, key, idle=60, limit=4)
    assert pool.take_live("s-1", "two") is same and same.events == []
    assert pool.take_live("s-2", "one") is None
    assert other.events == ["closed"]  # synchronously, before the resumed Kimi starts
    assert pool.live_count() == 0
