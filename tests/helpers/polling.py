"""Waiting in tests for something another thread does."""

from __future__ import annotations

import time
from collections.abc import Callable


def wait_until(predicate: Callable[[], object], limit: float = 5.0) -> bool:
    """Whether ``predicate()`` held within ``limit`` seconds (asked every 10 ms, and once more at the end)."""
    end = time.monotonic() + limit
    while time.monotonic() < end:
        if predicate():
            return True
        time.sleep(0.01)
    return bool(predicate())
