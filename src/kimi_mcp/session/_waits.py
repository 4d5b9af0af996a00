"""Every wait on Kimi's terminal is :meth:`Waits.until`: read the pty, look, repeat until a condition holds or
the time is up. The others (a pause, a login screen, an idle screen) are built on it; :meth:`Waits.wake`
ends the current wait for output at once."""

from __future__ import annotations

import contextlib
import math
import os
import re
import select
import threading
import time
import weakref
from collections.abc import Callable
from typing import Protocol

from ..drivers.base import Driver, ScreenState
from ..errors import AuthError, SessionError
from ._screen import TerminalScreen

POLL = 0.02  # seconds between looks at the pty and the session log
QUIET_BEFORE_TYPING = 0.25  # screen must be idle this long before typing after a turn


class Reading(Protocol):
    """The part of the terminal waiting needs: its reads and what they showed."""

    driver: Driver
    screen: TerminalScreen
    eof: bool
    last_activity: float
    mark: int

    def pump(self, wait: float, *, answer: bool = True) -> None: ...

    def screen_for_error(self, text: str | None = None) -> str: ...


class Waits:
    """Waiting on one terminal. ``checkpoint`` runs at each look of :meth:`wait_for` and raises when the
    caller is cancelled; ``deadline`` (monotonic) caps those waits."""

    def __init__(
        self,
        term: Reading,
        *,
        checkpoint: Callable[[], None] = lambda: None,
        deadline: Callable[[], float] = lambda: math.inf,
    ) -> None:
        self.term = term
        self.checkpoint = checkpoint
        self.deadline = deadline
        self.reader: int | None = None  # the thread reading the pty right now, if any
        self._wake_r: int | None = None  # wake(): a byte here ends the current wait for output at once
        self._wake_w: int | None = None

    # -- waking --------------------------------------------------------------------------------------
    def arm(self) -> None:
        """Make waits for output wakeable (at spawn: before, there is no output to wait for)."""
        self._wake_r, self._wake_w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        weakref.finalize(self, _close_fds, self._wake_r, self._wake_w)

    @property
    def armed(self) -> bool:
        return self._wake_r is not None

    def wake(self) -> None:
        """End the reader's current wait for output now (another thread wants the terminal: a standby or
        live session being taken)."""
        if self._wake_w is not None:
            with contextlib.suppress(OSError):
                os.write(self._wake_w, b"!")

    def await_output(self, fd: int, wait: float) -> None:
        """Block until ``fd`` (the pty) has something to read, ``wait`` seconds passed, or :meth:`wake`."""
        try:
            ready, _, _ = select.select([fd, self._wake_r], [], [], wait)
        except (OSError, ValueError):  # the pty was closed under us: the read after this sees EOF
            return
        if self._wake_r in ready:
            with contextlib.suppress(OSError):
                os.read(self._wake_r, 64)

    # -- waiting -------------------------------------------------------------------------------------
    def until(self, done: Callable[[], bool], timeout: float, *, poll: float = POLL) -> bool:
        """Keep reading the pty until ``done()`` holds (True) or ``timeout`` seconds pass (False).

        ``done`` is asked after every read, at least once; it may act on what it sees (answer a panel)
        or raise (cancelled, Kimi gone)."""
        end = time.monotonic() + timeout
        outer = self.reader
        self.reader = threading.get_ident()  # kill() from another thread leaves the pty to this one
        first = True  # the first look does not wait: ``done`` may hold already
        try:
            while True:
                self.term.pump(0.0 if first else min(poll, max(0.0, end - time.monotonic())))
                first = False
                if done():
                    return True
                if time.monotonic() >= end:
                    return False
        finally:
            self.reader = outer

    def sleep(self, seconds: float) -> None:
        """Wait ``seconds``, keeping the screen current."""
        if seconds > 0:
            self.until(lambda: False, seconds)

    def wait_idle(self, limit: float, refresh: Callable[[], None]) -> bool:
        """Wait until the screen is idle and quiet (safe to type); False on timeout or when Kimi exits.
        ``refresh`` runs after each read (the session reads its log)."""
        term = self.term
        idle = False

        def settled() -> bool:
            nonlocal idle
            refresh()
            state = term.driver.classify(term.screen.lines)
            quiet = time.monotonic() - term.last_activity
            idle = state in (ScreenState.READY, ScreenState.NOT_LOGGED_IN) and quiet >= QUIET_BEFORE_TYPING
            return idle or term.eof

        if not term.eof:
            self.until(settled, limit)
        return idle

    def wait_for(self, patterns: list[str], timeout: float) -> tuple[int, re.Match[str]]:
        """Wait until one of the regexes matches the screen or the output since the last send (a login
        script's wait: the drivers' ``Console``)."""
        term = self.term
        compiled = [re.compile(p) for p in patterns]
        end = min(time.monotonic() + timeout, self.deadline())
        found: tuple[int, re.Match[str]] | None = None

        def matched() -> bool:
            nonlocal found
            self.checkpoint()
            found = _search(compiled, term.screen.text, term.screen.tail_since(term.mark))
            return found is not None or term.eof

        self.until(matched, end - time.monotonic())
        if found is not None:
            return found
        if term.eof:
            raise SessionError(
                "Kimi exited during the automated login",
                details={"screen": term.screen_for_error()},
            )
        self.checkpoint()  # the time limit, not this screen, ended the wait: that is a timeout
        raise AuthError(
            f"the automated Kimi login did not reach the expected screen ({' | '.join(patterns)}) "
            f"in {timeout:.0f}s",
            details={"screen": term.screen_for_error(term.screen.text)},
            suggestion="Log in once by hand with `kimi` and /login, then retry.",
            retryable=True,
        )


def _search(compiled: list[re.Pattern[str]], screen: str, since: str) -> tuple[int, re.Match[str]] | None:
    for index, pattern in enumerate(compiled):
        match = pattern.search(screen) or pattern.search(since)
        if match:
            return index, match
    return None


def _close_fds(*fds: int) -> None:
    for fd in fds:
        with contextlib.suppress(OSError):
            os.close(fd)
