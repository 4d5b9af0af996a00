"""How many Kimis run at once, and which calls may share a workspace tree.

Two calls *overlap* when one's workspace is the other's or contains it (``/repo`` and ``/repo/pkg``).
Overlapping write calls are serialized: each change list is then exactly its own Kimi's. Read-only calls
never wait (their Kimi cannot write), but a read-only call that overlapped a write call at any moment of
its run cannot tell the writer's changes from anything else, so it reports no change list
(:attr:`Claim.shared`). Nothing is kept once the last call in a tree is done.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from ..errors import SessionError, TaskCancelled

WAIT_STEP = 0.1  # seconds between looks at cancellation and the deadline while waiting


@dataclass(eq=False)
class Claim:
    """One call's hold on its workspace tree."""

    workspace: Path
    read_only: bool
    shared: bool = False  # a read-only call overlapped a write call: its change list is not its own


def overlaps(a: Path, b: Path) -> bool:
    """Whether one of the two workspaces is, or contains, the other."""
    return a == b or a in b.parents or b in a.parents


class Slots:
    """Bounds concurrent Kimi processes and keeps overlapping writers apart."""

    def __init__(self) -> None:
        self._lock = threading.Condition()
        self._claims: list[Claim] = []
        self._semaphore: threading.BoundedSemaphore | None = None
        self._size = 0

    def semaphore(self, size: int) -> threading.BoundedSemaphore:
        with self._lock:
            if self._semaphore is None or self._size != size:
                self._semaphore, self._size = threading.BoundedSemaphore(size), size
            return self._semaphore

    def claim(self, workspace: Path, read_only: bool, cancel: threading.Event, deadline: float) -> Claim:
        """Hold ``workspace``'s tree: a writer waits until no other writer overlaps it."""
        claim = Claim(workspace, read_only)
        with self._lock:
            while not read_only and any(self._writers_over(workspace)):
                _check(cancel, deadline)
                self._lock.wait(WAIT_STEP)
            for other in self._claims:
                if overlaps(other.workspace, workspace) and other.read_only != read_only:
                    (claim if read_only else other).shared = True
            self._claims.append(claim)
        return claim

    def release(self, claim: Claim) -> None:
        with self._lock:
            self._claims.remove(claim)
            self._lock.notify_all()

    def held(self) -> int:
        """How many calls hold a workspace now (tests, logs)."""
        with self._lock:
            return len(self._claims)

    def _writers_over(self, workspace: Path) -> list[Claim]:
        return [c for c in self._claims if not c.read_only and overlaps(c.workspace, workspace)]


class Hold:
    """One thing a call holds, released exactly once: by the call's cleanup, or earlier by its watchdog
    (whichever comes first; the other is a no-op)."""

    def __init__(self, release: Callable[[], None]) -> None:
        self._release: Callable[[], None] | None = release
        self._lock = threading.Lock()

    def release(self) -> None:
        with self._lock:
            release, self._release = self._release, None
        if release is not None:
            release()

    @property
    def held(self) -> bool:
        return self._release is not None


def acquire(lock: threading.BoundedSemaphore, cancel: threading.Event, deadline: float) -> None:
    """Take ``lock``, giving up on cancellation or at ``deadline`` (structured errors)."""
    while not lock.acquire(timeout=WAIT_STEP):
        _check(cancel, deadline)


def _check(cancel: threading.Event, deadline: float) -> None:
    if cancel.is_set():
        raise TaskCancelled("cancelled while waiting for another task in the same workspace")
    if time.monotonic() > deadline:
        raise SessionError(
            "timed out waiting for other Kimi tasks to finish",
            suggestion="Raise KIMI_MCP_MAX_CONCURRENT or wait for running tasks.",
            retryable=True,
        )
