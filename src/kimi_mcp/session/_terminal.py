"""Kimi on a pty: spawn it (pexpect), keep a virtual screen (pyte) current, type into it, wait on it.

This is the drivers' ``Console`` (what a login script uses). Every wait is :meth:`Terminal.until`: read
the pty, look, repeat until a condition holds or the time is up.
"""

from __future__ import annotations

import contextlib
import math
import os
import re
import select
import sys
import threading
import time
import weakref
from collections.abc import Callable
from pathlib import Path

import pexpect
import psutil

from .._logging import get_logger
from ..drivers.base import Driver, ScreenState
from ..errors import AuthError, SessionError
from ._proc import descendants, terminate_tree
from ._screen import TerminalScreen, excerpt, strip_ansi

log = get_logger("session")

ROWS, COLS = 40, 120
POLL = 0.02  # seconds between looks at the pty and the session log
QUIET_BEFORE_TYPING = 0.25  # screen must be idle this long before typing after a turn
SEND_CHUNK = 4096  # characters written to the pty at once
EXIT_POLL = 0.05  # seconds between looks while Kimi exits
EXIT_WAIT = 2.5  # seconds Kimi has to exit after each exit sequence
EXIT_IDLE_FIRST, EXIT_IDLE_RETRY = 3.0, 1.5  # idle screen awaited before the first / a later exit sequence
PROCESS_SAMPLE = 0.5  # seconds between records of Kimi's descendants (ended with it, however it dies)
IDLE_SAMPLE = 5.0  # the same while nobody uses the session (a standby or a live session between turns)


GUARD = Path(__file__).with_name("_guard.py")


def guarded(argv: list[str]) -> list[str]:
    """``argv`` run by its guard, so nothing it starts outlives this server (Linux; elsewhere as it is)."""
    if not sys.platform.startswith("linux"):
        return argv
    return [sys.executable, "-I", "-S", str(GUARD), str(os.getpid()), "--", *argv]


class Terminal:
    """One Kimi process on a pty, read through a virtual screen. Blocking, used by one thread at a time
    (except :meth:`kill`, which any thread may call: it signals, and leaves the pty to its reader).

    ``redact`` masks secrets in what leaves through errors, logs and transcripts; ``checkpoint`` runs at
    each look of :meth:`wait_for` and raises when the caller is cancelled; ``deadline`` (monotonic) caps
    those waits.
    """

    def __init__(
        self,
        driver: Driver,
        *,
        redact: Callable[[str], str],
        checkpoint: Callable[[], None] = lambda: None,
        deadline: Callable[[], float] = lambda: math.inf,
        transcript_dir: str | None = None,
    ) -> None:
        self.driver = driver
        self.redact = redact
        self.checkpoint = checkpoint
        self.deadline = deadline
        self.screen = TerminalScreen(ROWS, COLS)
        self.eof = False  # the child's output ended (it exited)
        self.last_activity = time.monotonic()  # when the child last printed something visible
        self._child: pexpect.spawn | None = None
        self._mark = 0  # screen position of the last console send (login dialogs look after it)
        self._transcript_dir = transcript_dir
        self._transcript: list[str] = []
        self._seen: dict[int, psutil.Process] = {}  # every descendant recorded while Kimi ran
        self._seen_lock = threading.Lock()  # kill() reads the record from another thread
        self._sampled = 0.0
        self.sample_every = PROCESS_SAMPLE
        self._wake_r: int | None = None  # wake(): a byte here ends the current wait for output at once
        self._wake_w: int | None = None
        self._reader: int | None = None  # the thread reading the pty right now, if any

    # -- the process -------------------------------------------------------------------------------------
    def spawn(self, argv: list[str], cwd: Path, env: dict[str, str]) -> None:
        """Start ``argv`` on a fresh pty of ``ROWS`` x ``COLS``, under its guard (see ``_guard``)."""
        command = guarded(argv)
        try:
            self._child = pexpect.spawn(
                command[0],
                command[1:],
                cwd=str(cwd),
                env=env,
                dimensions=(ROWS, COLS),
                encoding="utf-8",
                codec_errors="replace",
                echo=False,
            )
        except (pexpect.ExceptionPexpect, OSError) as exc:
            raise SessionError(f"could not start Kimi: {exc}", details={"argv": argv}) from exc
        # pexpect sleeps 50 ms before every send by default (for password prompts); every keystroke here is
        # sent when the screen says Kimi is ready for it, and pauses are explicit (``play``, ``send``)
        self._child.delaybeforesend = None
        self._wake_r, self._wake_w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        weakref.finalize(self, _close_fds, self._wake_r, self._wake_w)

    @property
    def started(self) -> bool:
        return self._child is not None

    @property
    def pid(self) -> int | None:
        return self._child.pid if self._child is not None else None

    def _recorded(self) -> list[psutil.Process]:
        with self._seen_lock:
            return list(self._seen.values())

    def record_processes(self) -> None:
        """Remember Kimi's descendants as they are now (``pump`` does this every ``PROCESS_SAMPLE``): one that
        left Kimi's process group is re-parented when Kimi dies (``kill -9``, OOM) and can only be found
        through this record."""
        self._sampled = time.monotonic()
        if self._child is not None:
            found = descendants(self._child.pid)
            with self._seen_lock:
                for proc in found:
                    self._seen.setdefault(proc.pid, proc)

    def alive(self) -> bool:
        """Whether Kimi runs; tolerates another thread having reaped it already (shutdown kills)."""
        if self._child is None:
            return False
        try:
            return bool(self._child.isalive())
        except (pexpect.ExceptionPexpect, OSError):
            return False

    def leave(self, sequences: list[list[tuple[str, float]]], refresh: Callable[[], None]) -> None:
        """Type one exit sequence after the other until Kimi exits, each once the screen is idle (or
        after a short wait for that); a retry logs the screen it was not obeyed on. Never on a panel
        (an approval or a question): there Enter approves, so that attempt types nothing (the caller
        terminates what is left)."""
        for attempt, sequence in enumerate(sequences):
            idle = self.wait_idle(EXIT_IDLE_FIRST if attempt == 0 else EXIT_IDLE_RETRY, refresh)
            if self.driver.classify(self.screen.lines) in (ScreenState.APPROVAL, ScreenState.QUESTION):
                log.warning("Kimi shows a panel: no exit keys typed (attempt %d)", attempt + 1)
                continue
            if attempt:
                log.warning(
                    "Kimi did not exit (attempt %d, idle=%s); screen:\n%s",
                    attempt,
                    idle,
                    self.redact("\n".join(line for line in self.screen.lines if line.strip())),
                )
            self.play(sequence)
            if not self.eof:
                self.until(lambda: self.eof, EXIT_WAIT, poll=EXIT_POLL)
            if self.eof:
                return

    def terminate(self, grace: float) -> None:
        """Whatever is still running of Kimi is terminated: its process group and every recorded
        descendant (they may have been re-parented), SIGKILL after ``grace`` seconds."""
        if self._child is None:
            return
        alive = self.alive()
        if alive:
            log.warning("Kimi did not exit by itself; terminating its process group")
        terminate_tree(self._child.pid if alive else None, self._recorded(), grace=grace)
        with contextlib.suppress(Exception):
            self._child.close(force=True)

    def kill(self, grace: float) -> None:
        """Terminate Kimi and its descendants now, without any exit dialogue. From a thread other than
        the one reading the pty, only signals are sent: that thread sees Kimi's end and closes the pty
        itself (closing it under a reader is what made a concurrent exit fail with EBADF)."""
        child = self._child
        if child is None:
            return
        known = self._recorded()  # not sampled here: the owning thread may be using the child
        terminate_tree(child.pid if descendants(child.pid) else None, known, grace=grace)  # signals the tree
        if self._reader not in (None, threading.get_ident()):
            return
        with contextlib.suppress(Exception):
            child.close(force=True)

    @property
    def exit_status(self) -> int | None:
        return self._child.exitstatus if self._child is not None else None

    # -- the drivers' Console ----------------------------------------------------------------------------
    def send(self, keys: str, pause: float = 0.0) -> None:
        """Type ``keys`` (``wait_for`` also searches the output after this point), then wait ``pause``."""
        self._mark = self.screen.total_chars
        self.write(keys)
        self.sleep(pause)

    def wait_for(self, patterns: list[str], timeout: float) -> tuple[int, re.Match[str]]:
        """Wait until one of the regexes matches the screen or the output since the last send."""
        compiled = [re.compile(p) for p in patterns]
        end = min(time.monotonic() + timeout, self.deadline())
        found: tuple[int, re.Match[str]] | None = None

        def matched() -> bool:
            nonlocal found
            self.checkpoint()
            found = self._search(compiled)
            return found is not None or self.eof

        self.until(matched, end - time.monotonic())
        if found is not None:
            return found
        if self.eof:
            raise SessionError(
                "Kimi exited during the automated login",
                details={"screen": self.screen_for_error()},
            )
        self.checkpoint()  # the time limit, not this screen, ended the wait: that is a timeout
        raise AuthError(
            f"the automated Kimi login did not reach the expected screen ({' | '.join(patterns)}) "
            f"in {timeout:.0f}s",
            details={"screen": self.screen_for_error(self.screen.text)},
            suggestion="Log in once by hand with `kimi` and /login, then retry.",
            retryable=True,
        )

    def screen_lines(self) -> list[str]:
        return self.screen.lines

    def _search(self, compiled: list[re.Pattern[str]]) -> tuple[int, re.Match[str]] | None:
        screen, since = self.screen.text, self.screen.tail_since(self._mark)
        for index, pattern in enumerate(compiled):
            match = pattern.search(screen) or pattern.search(since)
            if match:
                return index, match
        return None

    # -- typing and reading ------------------------------------------------------------------------------
    def write(self, data: str) -> None:
        """Write to Kimi in bounded pieces, reading its output between them (Kimi blocked on a full output
        buffer would stop reading its input, and the write would block). Terminal-query answers wait until
        the whole of ``data`` is written, so none lands inside a paste."""
        for start in range(0, len(data), SEND_CHUNK):
            if self._child is None or self.eof:
                return
            self._child.send(data[start : start + SEND_CHUNK])
            if start + SEND_CHUNK < len(data):
                self.pump(0, answer=False)

    def play(self, sequence: list[tuple[str, float]]) -> None:
        """Type each step's keys, then wait its pause (seconds)."""
        for keys, pause in sequence:
            self.write(keys)
            self.sleep(pause)

    def wake(self) -> None:
        """End the reader's current wait for output now (another thread wants the terminal: a standby or
        live session being taken)."""
        if self._wake_w is not None:
            with contextlib.suppress(OSError):
                os.write(self._wake_w, b"!")

    def _await_output(self, child: pexpect.spawn, wait: float) -> None:
        """Block until the child wrote something, ``wait`` seconds passed, or :meth:`wake` was called."""
        try:
            ready, _, _ = select.select([child.child_fd, self._wake_r], [], [], wait)
        except (OSError, ValueError):  # the pty was closed under us: the read below sees EOF
            return
        if self._wake_r in ready:
            with contextlib.suppress(OSError):
                os.read(self._wake_r, 64)

    def pump(self, wait: float, *, answer: bool = True) -> None:
        """Read what the child wrote (waiting at most ``wait``), feed the screen, answer queries."""
        child = self._child
        if child is None or self.eof:
            time.sleep(wait)
            return
        timeout = wait
        if wait > 0 and self._wake_r is not None:
            self._await_output(child, wait)
            timeout = 0
        while True:
            try:
                data = child.read_nonblocking(65536, timeout=timeout)
            except pexpect.TIMEOUT:
                break
            except pexpect.EOF:
                self.eof = True
                break
            self._on_output(data)
            timeout = 0
        if not self.eof and time.monotonic() - self._sampled >= self.sample_every:
            self.record_processes()
        if not answer:
            return
        replies = self.screen.take_replies()
        if self.driver.answer_terminal_queries:
            for reply in replies:
                self.write(reply)

    def _on_output(self, data: str) -> None:
        self.screen.feed(data)
        if self._transcript_dir is not None:
            self._transcript.append(data)
        if strip_ansi(data).strip():
            self.last_activity = time.monotonic()

    # -- waiting -----------------------------------------------------------------------------------------
    def until(self, done: Callable[[], bool], timeout: float, *, poll: float = POLL) -> bool:
        """Keep reading the pty until ``done()`` holds (True) or ``timeout`` seconds pass (False).

        ``done`` is asked after every read, at least once; it may act on what it sees (answer a panel)
        or raise (cancelled, Kimi gone)."""
        end = time.monotonic() + timeout
        outer = self._reader
        self._reader = threading.get_ident()  # kill() from another thread leaves the pty to this one
        first = True  # the first look does not wait: ``done`` may hold already
        try:
            while True:
                self.pump(0.0 if first else min(poll, max(0.0, end - time.monotonic())))
                first = False
                if done():
                    return True
                if time.monotonic() >= end:
                    return False
        finally:
            self._reader = outer

    def sleep(self, seconds: float) -> None:
        """Wait ``seconds``, keeping the screen current."""
        if seconds > 0:
            self.until(lambda: False, seconds)

    def wait_idle(self, limit: float, refresh: Callable[[], None]) -> bool:
        """Wait until the screen is idle and quiet (safe to type); False on timeout or when Kimi exits.
        ``refresh`` runs after each read (the session reads its log)."""
        idle = False

        def settled() -> bool:
            nonlocal idle
            refresh()
            state = self.driver.classify(self.screen.lines)
            quiet = time.monotonic() - self.last_activity
            idle = state in (ScreenState.READY, ScreenState.NOT_LOGGED_IN) and quiet >= QUIET_BEFORE_TYPING
            return idle or self.eof

        if not self.eof:
            self.until(settled, limit)
        return idle

    def screen_for_error(self, text: str | None = None) -> str:
        """A few trimmed lines of what Kimi shows (``text``: the output tail) for an error, secrets masked;
        the whole of it goes to the debug log."""
        text = self.screen.tail if text is None else text
        log.debug("Kimi's screen at the error:\n%s", self.redact(text[-4000:]))
        return self.redact(excerpt(text[-4000:]))

    # -- transcript --------------------------------------------------------------------------------------
    def save_transcript(self, session_id: str | None) -> None:
        """Write everything Kimi printed, secrets masked, to the transcript folder (if one is set)."""
        if not self._transcript_dir or not self._transcript:
            return
        try:
            folder = Path(self._transcript_dir)
            folder.mkdir(parents=True, exist_ok=True)
            name = f"{time.strftime('%Y%m%dT%H%M%S')}-{session_id or os.getpid()}.log"
            (folder / name).write_text(self.redact("".join(self._transcript)), encoding="utf-8")
        except OSError as exc:
            log.warning("could not save transcript: %s", exc)


def _close_fds(*fds: int) -> None:
    for fd in fds:
        with contextlib.suppress(OSError):
            os.close(fd)
