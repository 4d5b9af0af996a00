"""Which calls may share a workspace tree (issue 13, items 2 and 15): overlapping writers are serialized,
read-only calls never wait but know when a writer overlapped them, and nothing is kept afterwards."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from kimi_mcp.errors import SessionError, TaskCancelled
from kimi_mcp.runner._slots import Slots, overlaps

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
