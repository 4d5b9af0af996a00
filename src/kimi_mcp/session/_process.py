"""Kimi's process: started on a pty under its guard, its descendants recorded while it runs, and ended with
every one of them (however it dies). What it prints and what is typed into it is the terminal's."""

from __future__ import annotations

import contextlib
import os
import sys
import threading
import time
from pathlib import Path

import pexpect
import psutil

from .._logging import get_logger
from ..errors import SessionError
from ._proc import descendants, terminate_tree

log = get_logger("session")

PROCESS_SAMPLE = 0.5  # seconds between records of Kimi's descendants (ended with it, however it dies)
IDLE_SAMPLE = 5.0  # the same while nobody uses the session (a standby or a live session between turns)

GUARD = Path(__file__).with_name("_guard.py")


def guarded(argv: list[str]) -> list[str]:
    """``argv`` run by its guard, so nothing it starts outlives this server (Linux; elsewhere as it is)."""
    if not sys.platform.startswith("linux"):
        return argv
    return [sys.executable, "-I", "-S", str(GUARD), str(os.getpid()), "--", *argv]


class KimiProcess:
    """One Kimi process on a pty of ``rows`` x ``cols``. :meth:`kill` may be called from any thread; the
    rest from the thread that reads the pty."""

    def __init__(self, rows: int, cols: int) -> None:
        self.rows, self.cols = rows, cols
        self.child: pexpect.spawn | None = None  # read and written by the terminal
        self.sample_every = PROCESS_SAMPLE  # seconds between records of the descendants (:meth:`sample`)
        self._seen: dict[int, psutil.Process] = {}  # every descendant recorded while Kimi ran
        self._seen_lock = threading.Lock()  # kill() reads the record from another thread
        self._sampled = 0.0

    def spawn(self, argv: list[str], cwd: Path, env: dict[str, str]) -> None:
        """Start ``argv`` on a fresh pty, under its guard (see ``_guard``)."""
        command = guarded(argv)
        try:
            self.child = pexpect.spawn(
                command[0],
                command[1:],
                cwd=str(cwd),
                env=env,
                dimensions=(self.rows, self.cols),
                encoding="utf-8",
                codec_errors="replace",
                echo=False,
            )
        except (pexpect.ExceptionPexpect, OSError) as exc:
            raise SessionError(f"could not start Kimi: {exc}", details={"argv": argv}) from exc
        # pexpect sleeps 50 ms before every send by default (for password prompts); every keystroke here is
        # sent when the screen says Kimi is ready for it, and pauses are explicit (``play``, ``send``)
        self.child.delaybeforesend = None

    @property
    def started(self) -> bool:
        return self.child is not None

    @property
    def pid(self) -> int | None:
        return self.child.pid if self.child is not None else None

    @property
    def exit_status(self) -> int | None:
        return self.child.exitstatus if self.child is not None else None

    def alive(self) -> bool:
        """Whether Kimi runs; tolerates another thread having reaped it already (shutdown kills)."""
        if self.child is None:
            return False
        try:
            return bool(self.child.isalive())
        except (pexpect.ExceptionPexpect, OSError):
            return False

    def record(self) -> None:
        """Remember Kimi's descendants as they are now: one that left Kimi's process group is re-parented
        when Kimi dies (``kill -9``, OOM) and can only be found through this record."""
        self._sampled = time.monotonic()
        if self.child is not None:
            found = descendants(self.child.pid)
            with self._seen_lock:
                for proc in found:
                    self._seen.setdefault(proc.pid, proc)

    def sample(self) -> None:
        """:meth:`record` if ``sample_every`` seconds passed since the last record (the terminal asks at
        each read)."""
        if time.monotonic() - self._sampled >= self.sample_every:
            self.record()

    def _recorded(self) -> list[psutil.Process]:
        with self._seen_lock:
            return list(self._seen.values())

    def terminate(self, grace: float) -> None:
        """Whatever is still running of Kimi is terminated: its process group and every recorded
        descendant (they may have been re-parented), SIGKILL after ``grace`` seconds."""
        if self.child is None:
            return
        alive = self.alive()
        if alive:
            log.warning("Kimi did not exit by itself; terminating its process group")
        terminate_tree(self.child.pid if alive else None, self._recorded(), grace=grace)
        with contextlib.suppress(Exception):
            self.child.close(force=True)

    def kill(self, grace: float, *, close: bool) -> None:
        """Terminate Kimi and its descendants now. The pty is closed only when ``close`` (nobody else reads
        it: closing it under a reader is what made a concurrent exit fail with EBADF)."""
        child = self.child
        if child is None:
            return
        known = self._recorded()  # not sampled here: the owning thread may be using the child
        terminate_tree(child.pid if descendants(child.pid) else None, known, grace=grace)  # signals the tree
        if close:
            with contextlib.suppress(Exception):
                child.close(force=True)
