"""Kimi's screen I/O: what Kimi prints fed to a virtual screen (pyte) kept current, keys typed into it, the
transcript. This is the drivers' ``Console`` (what a login script uses). The process it runs in is a
:class:`~kimi_mcp.session._process.KimiProcess` (``process``); every wait is one of ``waits``
(:class:`~kimi_mcp.session._waits.Waits`: read the pty, look, repeat).
"""

from __future__ import annotations

import math
import os
import re
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pexpect

from .._logging import get_logger
from ..drivers.base import Driver, ScreenState
from ..scope import Scope
from ._process import KimiProcess
from ._screen import TerminalScreen, excerpt, strip_ansi
from ._waits import Waits

log = get_logger("session")

ROWS, COLS = 40, 120
SEND_CHUNK = 4096  # characters written to the pty at once
EXIT_POLL = 0.05  # seconds between looks while Kimi exits
EXIT_WAIT = 2.5  # seconds Kimi has to exit after each exit sequence
EXIT_IDLE_FIRST, EXIT_IDLE_RETRY = 3.0, 1.5  # idle screen awaited before the first / a later exit sequence


class Terminal:
    """One Kimi process on a pty, read through a virtual screen. Blocking, used by one thread at a time
    (except :meth:`kill`, which any thread may call: it signals, and leaves the pty to its reader).

    ``scope`` gives the current call's scope, whose redactor masks secrets in what leaves through errors, logs
    and transcripts; ``checkpoint`` and
    ``deadline`` bound the login's waits (see :class:`~kimi_mcp.session._waits.Waits`).
    """

    def __init__(
        self,
        driver: Driver,
        *,
        scope: Callable[[], Scope],
        checkpoint: Callable[[], None] = lambda: None,
        deadline: Callable[[], float] = lambda: math.inf,
        transcript_dir: str | None = None,
    ) -> None:
        self.driver = driver
        self._scope = scope  # the current call's (its redactor masks what leaves)
        self.process = KimiProcess(ROWS, COLS)
        self.waits = Waits(self, checkpoint=checkpoint, deadline=deadline)
        self.screen = TerminalScreen(ROWS, COLS)
        self.eof = False  # the child's output ended (it exited)
        self.last_activity = time.monotonic()  # when the child last printed something visible
        self.mark = 0  # screen position of the last console send (login dialogs look after it)
        self._transcript_dir = transcript_dir
        self._transcript: list[str] = []
        self._fixed_due: list[str] = []  # fixed answers (the driver's) to queries seen, not yet written
        self._query_tail = ""  # the output's last characters: a query split between two reads is found

    # -- the process -------------------------------------------------------------------------------------
    def spawn(self, argv: list[str], cwd: Path, env: dict[str, str]) -> None:
        """Start ``argv`` on a fresh pty of ``ROWS`` x ``COLS``, under its guard; its output wakes waits."""
        self.process.spawn(argv, cwd, env)
        self.waits.arm()

    def kill(self, grace: float) -> None:
        """Terminate Kimi and its descendants now, without any exit dialogue. From a thread other than
        the one reading the pty, only signals are sent: that thread sees Kimi's end and closes the pty
        itself (closing it under a reader is what made a concurrent exit fail with EBADF)."""
        self.process.kill(grace, close=self.waits.reader in (None, threading.get_ident()))

    def leave(self, sequences: list[list[tuple[str, float]]], refresh: Callable[[], None]) -> None:
        """Type one exit sequence after the other until Kimi exits, each once the screen is idle (or
        after a short wait for that); a retry logs the screen it was not obeyed on. Never on a panel
        (an approval or a question): there Enter approves, so that attempt types nothing (the caller
        terminates what is left)."""
        for attempt, sequence in enumerate(sequences):
            idle = self.waits.wait_idle(EXIT_IDLE_FIRST if attempt == 0 else EXIT_IDLE_RETRY, refresh)
            if self.driver.classify(self.screen.lines) in (ScreenState.APPROVAL, ScreenState.QUESTION):
                log.warning("Kimi shows a panel: no exit keys typed (attempt %d)", attempt + 1)
                continue
            if attempt:
                log.warning(
                    "Kimi did not exit (attempt %d, idle=%s); screen:\n%s",
                    attempt,
                    idle,
                    self._redact("\n".join(line for line in self.screen.lines if line.strip())),
                )
            self.play(sequence)
            if not self.eof:
                self.waits.until(lambda: self.eof, EXIT_WAIT, poll=EXIT_POLL)
            if self.eof:
                return

    # -- the drivers' Console ----------------------------------------------------------------------------
    def send(self, keys: str, pause: float = 0.0) -> None:
        """Type ``keys`` (``wait_for`` also searches the output after this point), then wait ``pause``."""
        self.mark = self.screen.total_chars
        self.write(keys)
        self.sleep(pause)

    def wait_for(self, patterns: list[str], timeout: float) -> tuple[int, re.Match[str]]:
        """Wait until one of the regexes matches the screen or the output since the last send."""
        return self.waits.wait_for(patterns, timeout)

    def screen_lines(self) -> list[str]:
        return self.screen.lines

    # -- typing and reading ------------------------------------------------------------------------------
    def write(self, data: str) -> None:
        """Write to Kimi in bounded pieces, reading its output between them (Kimi blocked on a full output
        buffer would stop reading its input, and the write would block). Terminal-query answers wait until
        the whole of ``data`` is written, so none lands inside a paste."""
        for start in range(0, len(data), SEND_CHUNK):
            child = self.process.child
            if child is None or self.eof:
                return
            child.send(data[start : start + SEND_CHUNK])
            if start + SEND_CHUNK < len(data):
                self.pump(0, answer=False)

    def play(self, sequence: list[tuple[str, float]]) -> None:
        """Type each step's keys, then wait its pause (seconds)."""
        for keys, pause in sequence:
            self.write(keys)
            self.sleep(pause)

    def sleep(self, seconds: float) -> None:
        """Wait ``seconds``, keeping the screen current (the pauses between keys)."""
        self.waits.sleep(seconds)

    def pump(self, wait: float, *, answer: bool = True) -> None:
        """Read what the child wrote (waiting at most ``wait``), feed the screen, answer queries."""
        child = self.process.child
        if child is None or self.eof:
            time.sleep(wait)
            return
        timeout = wait
        if wait > 0 and self.waits.armed:
            self.waits.await_output(child.child_fd, wait)
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
        if not self.eof:
            self.process.sample()
        if not answer:
            return
        replies = self.screen.take_replies()  # taken either way: never answered late
        if not self.driver.answer_terminal_queries:
            replies = []
        replies, self._fixed_due = replies + self._fixed_due, []
        for reply in replies:
            self.write(reply)

    def _on_output(self, data: str) -> None:
        self.screen.feed(data)
        if self.driver.fixed_answers:
            self._find_queries(data)
        if self._transcript_dir is not None:
            self._transcript.append(data)
        if strip_ansi(data).strip():
            self.last_activity = time.monotonic()

    def _find_queries(self, data: str) -> None:
        """Queue the driver's fixed answer to each of its queries in ``data`` (or begun in the last read)."""
        seen = self._query_tail + data
        for query, reply in self.driver.fixed_answers:
            self._fixed_due += [reply] * seen.count(query)
        keep = max(len(query) for query, _ in self.driver.fixed_answers) - 1  # never a whole query again
        self._query_tail = seen[-keep:] if keep else ""

    def screen_for_error(self, text: str | None = None) -> str:
        """A few trimmed lines of what Kimi shows (``text``: the output tail) for an error, secrets masked;
        the whole of it goes to the debug log."""
        text = self.screen.tail if text is None else text
        log.debug("Kimi's screen at the error:\n%s", self._redact(text[-4000:]))
        return self._redact(excerpt(text[-4000:]))

    def _redact(self, text: str) -> str:
        return self._scope().redactor(text)

    # -- transcript --------------------------------------------------------------------------------------
    def save_transcript(self, session_id: str | None) -> None:
        """Write everything Kimi printed, secrets masked, to the transcript folder (if one is set)."""
        if not self._transcript_dir or not self._transcript:
            return
        try:
            folder = Path(self._transcript_dir)
            folder.mkdir(parents=True, exist_ok=True)
            name = f"{time.strftime('%Y%m%dT%H%M%S')}-{session_id or os.getpid()}.log"
            (folder / name).write_text(self._redact("".join(self._transcript)), encoding="utf-8")
        except OSError as exc:
            log.warning("could not save transcript: %s", exc)
