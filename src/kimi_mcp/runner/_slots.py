"""How many Kimis run at once, and which calls must not overlap in one workspace."""

from __future__ import annotations

import threading
import time
from pathlib import Path

from ..errors import SessionError, TaskCancelled


class Slots:
    """Bounds concurrent Kimi processes and serializes write tasks per workspace."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._workspaces: dict[str, threading.Lock] = {}
        self._semaphore: threading.BoundedSemaphore | None = None
        self._size = 0

    def semaphore(self, size: int) -> threading.BoundedSemaphore:
        with self._lock:
            if self._semaphore is None or self._size != size:
                self._semaphore, self._size = threading.BoundedSemaphore(size), size
            return self._semaphore

    def workspace_lock(self, workspace: Path) -> threading.Lock:
        with self._lock:
            return self._workspaces.setdefault(str(workspace), threading.Lock())


def acquire(
    lock: threading.Lock | threading.BoundedSemaphore, cancel: threading.Event, deadline: float
) -> None:
    """Take ``lock``, giving up on cancellation or at ``deadline`` (structured errors)."""
    while not lock.acquire(timeout=0.1):
        if cancel.is_set():
            raise TaskCancelled("cancelled while waiting for another task in the same workspace")
        if time.monotonic() > deadline:
            raise SessionError(
                "timed out waiting for other Kimi tasks to finish",
                suggestion="Raise KIMI_MCP_MAX_CONCURRENT or wait for running tasks.",
                retryable=True,
            )
