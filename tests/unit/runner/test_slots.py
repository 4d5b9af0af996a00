"""Which calls may share a workspace tree (issue 13, items 2 and 15): overlapping writers are serialized,
read-only calls never wait but know when a writer overlapped them, and nothing is kept afterwards."""

from __future__ import annotations

import threading
import time
import types
from pathlib import Path

import pytest

from kimi_mcp.errors import SessionError, TaskCancelled
from kimi_mcp.runner._slots import Hold, Slots, acquire, overlaps

FAR = 3600.0


def later(seconds: float = FAR) -> float:
    return time.monotonic() + seconds


def test_overlap_is_same_or_nested_never_siblings() -> None:
    repo = Path("/repo")
    assert overlaps(repo, repo) and overlaps(repo, repo / "pkg") and overlaps(repo / "pkg" / "a", repo)
    assert not overlaps(repo / "pkg", repo / "pkg2") and not overlaps(repo, Path("/repository"))


@pytest.mark.parametrize("second", ["/repo", "/repo/pkg", "/"])
def test_a_writer_waits_for_an_overlapping_writer(second: str) -> None:
    slots = Slots()
    first = slots.claim(Path("/repo"), False, threading.Event(), later())
    got: list = []
    waiter = threading.Thread(
        target=lambda: got.append(slots.claim(Path(second), False, threading.Event(), later()))
    )
    waiter.start()
    waiter.join(0.5)
    assert waiter.is_alive() and got == []  # still waiting
    slots.release(first)
    waiter.join(5)
    assert len(got) == 1 and got[0].workspace == Path(second)
    slots.release(got[0])
    assert slots.held() == 0  # nothing kept per workspace (item 15)


def test_writers_in_sibling_trees_run_together() -> None:
    slots = Slots()
    a = slots.claim(Path("/repo/a"), False, threading.Event(), later())
    b = slots.claim(Path("/repo/b"), False, threading.Event(), later(1))  # would time out if it waited
    assert slots.held() == 2 and not a.shared and not b.shared


def test_a_reader_never_waits_and_is_marked_shared_by_an_overlapping_writer() -> None:
    slots = Slots()
    reader = slots.claim(Path("/repo/pkg"), True, threading.Event(), later(1))
    other_reader = slots.claim(Path("/repo"), True, threading.Event(), later(1))
    assert not reader.shared and not other_reader.shared  # readers do not disturb each other
    writer = slots.claim(Path("/repo"), False, threading.Event(), later(1))  # readers do not block writers
    assert reader.shared and other_reader.shared and not writer.shared
    late = slots.claim(Path("/repo/pkg/sub"), True, threading.Event(), later(1))  # starts during the write
    assert late.shared
    unrelated = slots.claim(Path("/elsewhere"), True, threading.Event(), later(1))
    assert not unrelated.shared


def test_waiting_ends_on_cancel_or_deadline() -> None:
    slots = Slots()
    slots.claim(Path("/repo"), False, threading.Event(), later())
    cancel = threading.Event()
    cancel.set()
    with pytest.raises(TaskCancelled):
        slots.claim(Path("/repo/x"), False, cancel, later())
    with pytest.raises(SessionError, match="timed out waiting for other Kimi tasks"):
        slots.claim(Path("/repo"), False, threading.Event(), later(0.2))
    assert slots.held() == 1  # the ones that gave up hold nothing


# ------------------------------------------ issue 13, item 17: the deadline releases whatever a call holds


def test_a_hold_is_released_exactly_once_whoever_comes_first() -> None:
    released: list[str] = []
    hold = Hold(lambda: released.append("x"))
    assert hold.held
    threads = [threading.Thread(target=hold.release) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    hold.release()
    assert released == ["x"] and not hold.held


def test_a_stuck_call_past_its_deadline_releases_its_slots_and_ends_its_kimi(tmp_path: Path) -> None:
    from kimi_mcp.config import Settings
    from kimi_mcp.runner import Runner, TaskRequest
    from kimi_mcp.runner._run import TaskRun
    from kimi_mcp.scope import Scope

    runner = Runner()
    call = TaskRun(
        runner,
        TaskRequest("x", tmp_path),
        Settings(),
        scope=Scope.detached(),
        environ={"HOME": str(tmp_path)},
    )
    semaphore = runner.slots.semaphore(1)
    acquire(semaphore, threading.Event(), later(1))
    call.holds.append(Hold(semaphore.release))
    claim = runner.slots.claim(tmp_path, False, threading.Event(), later(1))
    call.holds.append(Hold(lambda: runner.slots.release(claim)))
    killed: list[float] = []
    call.session = types.SimpleNamespace(kill=lambda grace: killed.append(grace))  # type: ignore[assignment]

    call._abandon()  # what the watchdog does at deadline + DEADLINE_GRACE

    assert killed == [1.0]
    assert runner.slots.held() == 0 and semaphore.acquire(blocking=False)  # the next call can go
    assert runner.slots.claim(tmp_path, False, threading.Event(), later(1))  # the workspace is free again
    for hold in call.holds:
        hold.release()  # the call's own cleanup, when it unwinds at last: a no-op
    assert runner.slots.held() == 1
