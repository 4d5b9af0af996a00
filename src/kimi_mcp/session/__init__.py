"""One Kimi TUI process driven through a pty: starting → ready → prompting → waiting → collected →
exiting → closed.

Like ``pexpect.replwrap``, one clear idea decides when the other side is ready: the *driver* says what
the screen means and where the session log is; this class only moves through the states. The end of a
turn comes from the session log (``TurnEnd`` / ``turn.ended``), never from guessing at the screen; the
screen is used for what the log does not record (readiness, approval panels, error lines) and to confirm
that Kimi is idle before anything else is typed.
"""

from __future__ import annotations

import contextlib
import enum
import json
import os
import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import assert_never

import pexpect

from .._logging import get_logger
from ..drivers.base import (
    ApprovalRequest,
    ApprovalResolved,
    Driver,
    LoginOptions,
    ScreenState,
    StepBegin,
    TextPart,
    ThinkPart,
    TokenUsage,
    ToolCall,
    ToolResult,
    TurnBegin,
    TurnEnd,
    WireEvent,
    squash,
)
from ..errors import AuthError, KimiMCPError, SessionError, TaskCancelled, TaskTimeout
from ..models import ToolCallTrace
from ..secrets import Redactor, touches_secret, withhold_arguments
from ._policy import ApprovalPolicy
from ._proc import descendants, terminate_tree
from ._screen import TerminalScreen, strip_ansi

log = get_logger("session")

ROWS, COLS = 40, 120
POLL = 0.02  # seconds between looks at the pty and the session log
QUIET_BEFORE_TYPING = 0.25  # screen must be idle this long before typing after a turn
UNMATCHED_WAIT = 8.0  # seconds an approval panel waits for its call to appear in the session log
SEND_CHUNK = 4096  # characters written to the pty at once
PANEL_GRACE = 1.5  # a panel too tall to show what it is for waits this long, then goes to the first call
TRIM = 2_000


class State(enum.Enum):
    NEW = "new"
    STARTING = "starting"
    READY = "ready"
    SETUP = "setup"
    PROMPTING = "prompting"
    WAITING = "waiting"
    COLLECTED = "collected"
    EXITING = "exiting"
    CLOSED = "closed"


@dataclass
class CallRecord:
    call_id: str
    name: str
    arguments: str
    result: str | None = None
    is_error: bool = False
    approval: str = "auto"
    awaiting_approval: bool = False

    def trace(self, redact: Callable[[str], str] = lambda text: text) -> ToolCallTrace:
        arguments, result = self.arguments, self.result
        if touches_secret(arguments):
            arguments = withhold_arguments(arguments)
            result = None if result is None else "[withheld: the call touched a secret file]"
        return ToolCallTrace(
            name=self.name,
            arguments=_trim(redact(arguments)),
            result=None if result is None else _trim(redact(result)),
            is_error=self.is_error,
            approval=self.approval,  # type: ignore[arg-type]
        )


@dataclass
class TurnTrace:
    """Everything the session log said about one turn."""

    begun: bool = False
    ended: bool = False
    steps: list[list[str]] = field(default_factory=list)
    calls: dict[str, CallRecord] = field(default_factory=dict)
    input_tokens: int = 0
    output_tokens: int = 0
    error: KimiMCPError | None = None
    ended_at: float | None = None  # perf_counter when the turn end was seen
    received: str | None = None  # the user message as Kimi logged it at the start of the turn
    unmatched: list[str] = field(default_factory=list)  # panels rejected without a logged call

    @property
    def output(self) -> str:
        for texts in reversed(self.steps):
            text = "".join(texts).strip()
            if text:
                return text
        return ""

    def tool_traces(self, redact: Callable[[str], str] = lambda text: text) -> list[ToolCallTrace]:
        """The calls as reported, ``redact`` applied before long texts are cut (so no cut leaves half a
        secret)."""
        return [call.trace(redact) for call in self.calls.values()]


def _trim(text: str, limit: int = TRIM) -> str:
    return text if len(text) <= limit else text[:limit] + f"… [{len(text) - limit} more chars]"


class _WireTail:
    """Reads complete new lines appended to a JSONL file."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._offset = 0
        self._partial = b""

    def poll(self) -> list[str]:
        """New complete lines; [] when the file is missing or unreadable. A file that shrank (rewritten or
        truncated) is read again from its start."""
        try:
            size = os.stat(self.path).st_size
            if size < self._offset:
                log.warning("session log %s shrank; reading it again from the start", self.path)
                self._offset, self._partial = 0, b""
            if size <= self._offset:
                return []
            with open(self.path, "rb") as handle:
                handle.seek(self._offset)
                data = handle.read(size - self._offset)
        except OSError:
            return []
        self._offset += len(data)
        chunks = (self._partial + data).split(b"\n")
        self._partial = chunks.pop()
        return [chunk.decode("utf-8", "replace") for chunk in chunks if chunk.strip()]


class KimiSession:
    """Drive one interactive Kimi process. Blocking: call from a worker thread, not the event loop."""

    def __init__(
        self,
        driver: Driver,
        workspace: Path,
        *,
        env: dict[str, str],
        policy: ApprovalPolicy,
        deadline: float,
        startup_timeout: float = 60.0,
        cancel: threading.Event | None = None,
        on_progress: Callable[[str], None] | None = None,
        redact: Redactor | None = None,
        transcript_dir: str | None = None,
        login: LoginOptions | None = None,
    ) -> None:
        self.driver = driver
        self.workspace = workspace
        self.env = driver.environment(env)
        self.policy = policy
        self.deadline = deadline
        self.startup_timeout = startup_timeout
        self.cancel = cancel or threading.Event()
        self._on_progress = on_progress or (lambda _msg: None)
        self._redactor = redact or Redactor()
        self._transcript_dir = transcript_dir
        self._transcript: list[str] = []
        self.screen = TerminalScreen(ROWS, COLS)
        self.state = State.NEW
        self.session_id: str | None = None
        self.trace = TurnTrace()
        self.ready_after_s: float | None = None
        self._child: pexpect.spawn | None = None
        self._eof = False
        self._last_activity = time.monotonic()
        self._wire: _WireTail | None = None
        self._known_procs: list = []
        self._prompt: str | None = None
        self._last_wire_search = 0.0
        self._mark = 0  # screen position of the last console send (login dialogs look after it)
        self._logs_before_spawn: set[Path] = set()
        self._login = login
        self._logged_in_here = False
        self.model_from_login: str | None = None
        if login is not None:
            self._redactor.add([login.api_key])

    # -- lifecycle -----------------------------------------------------------------------------------
    def start(self) -> None:
        """Spawn Kimi and wait until its input box is ready (running setup when it is not logged in)."""
        self.state = State.STARTING
        self.driver.prepare_workspace(self.workspace, self.env)
        argv = self.driver.argv(read_only=self.policy.read_only)
        log.info("spawning %s in %s", " ".join(argv), self.workspace)
        started = time.monotonic()
        self._logs_before_spawn = set(self.driver.wire_logs(self.env))
        try:
            self._child = pexpect.spawn(
                argv[0],
                argv[1:],
                cwd=str(self.workspace),
                env=self.env,
                dimensions=(ROWS, COLS),
                encoding="utf-8",
                codec_errors="replace",
                echo=False,
            )
        except (pexpect.ExceptionPexpect, OSError) as exc:
            raise SessionError(f"could not start Kimi: {exc}", details={"argv": argv}) from exc
        self._progress(f"starting Kimi ({self.driver.name} {self.driver.install.version})")
        limit = min(self.deadline, started + self.startup_timeout)
        while True:
            self._check_abort(limit_for_timeout=limit, phase="startup")
            self._pump(POLL * 2)
            if self._eof:
                raise SessionError(
                    "Kimi exited during startup",
                    details={"screen": self._redact(self.screen.tail[-1500:])},
                    suggestion="Run `kimi` by hand in the workspace to see why it does not start.",
                )
            state = self.driver.classify(self.screen.lines)
            if state == ScreenState.TRUST:
                self._send(self.driver.trust_key)
                self._sleep_pumping(0.3)
                continue
            if state == ScreenState.NOT_LOGGED_IN and not self._logged_in_here:
                self._not_logged_in()
                continue
            if state == ScreenState.NOT_LOGGED_IN:  # stale "not set" text left on screen after our login
                state = ScreenState.READY
            if state == ScreenState.READY:
                self.session_id = self.driver.session_id(self.screen.text)
                break
        self.ready_after_s = time.monotonic() - started
        self.state = State.READY
        self._progress(f"Kimi ready after {self.ready_after_s:.1f}s")
        log.info("kimi ready after %.2fs, session %s", self.ready_after_s, self.session_id)

    def _not_logged_in(self) -> None:
        if self._login is None:
            raise AuthError(
                "Kimi is not logged in (no model configured) and MOONSHOT_API_KEY is not set",
                details={"dialect": self.driver.name},
                suggestion=(
                    "Either set MOONSHOT_API_KEY in the server's environment (or its .env) so kimi-mcp logs "
                    "Kimi in automatically, or run `kimi` once by hand and log in with /login."
                ),
            )
        self.state = State.SETUP
        self._progress(f"Kimi is not logged in; logging in to {self._login.platform} with MOONSHOT_API_KEY")
        log.info("running the automated login (%s, platform %s)", self.driver.name, self._login.platform)
        try:
            self.model_from_login = self.driver.login(self, self._login)
        except KimiMCPError as exc:
            exc.message = self._redact(exc.message)
            exc.details = {k: self._redact(v) if isinstance(v, str) else v for k, v in exc.details.items()}
            raise
        self._logged_in_here = True
        self._progress(f"logged in; model {self.model_from_login}")
        log.info("automated login done; model %s", self.model_from_login)
        self.state = State.STARTING

    # -- Console (what a driver's login script uses) -----------------------------------------------------
    def send(self, keys: str, pause: float = 0.0) -> None:
        self._mark = self.screen.total_chars
        self._send(keys)
        if pause:
            self._sleep_pumping(pause)

    def wait_for(self, patterns: list[str], timeout: float) -> tuple[int, re.Match[str]]:
        compiled = [re.compile(p) for p in patterns]
        end = min(time.monotonic() + timeout, self.deadline)
        while True:
            self._check_abort(limit_for_timeout=float("inf"), phase="setup")
            self._pump(POLL)
            screen = self.screen.text
            since = self.screen.tail_since(self._mark)
            for index, pattern in enumerate(compiled):
                match = pattern.search(screen) or pattern.search(since)
                if match:
                    return index, match
            if self._eof:
                raise SessionError(
                    "Kimi exited during the automated login",
                    details={"screen": self._redact(self.screen.tail[-1500:])},
                )
            if time.monotonic() >= end:
                raise AuthError(
                    "the automated Kimi login did not reach the expected screen "
                    f"({' | '.join(patterns)}) in {timeout:.0f}s",
                    details={"screen": self._redact(self.screen.text[-1500:])},
                    suggestion="Log in once by hand with `kimi` and /login, then retry.",
                    retryable=True,
                )

    def screen_lines(self) -> list[str]:
        return self.screen.lines

    def run_turn(self, prompt: str) -> TurnTrace:
        """Submit ``prompt`` and return once the session log reports the end of the turn."""
        if self.state != State.READY:
            raise SessionError(f"cannot submit a prompt in state {self.state.value}")
        self.state = State.PROMPTING
        self.trace = TurnTrace()
        self._prompt = prompt
        mark = self.screen.total_chars
        self._submit(prompt)
        submitted = time.monotonic()
        self.state = State.WAITING
        self._progress("prompt sent; Kimi is working")
        resubmitted = verified = False
        approval_seen: float | None = None
        answered: dict[str, tuple[str, float, int, str]] = {}
        busy_seen = False
        while not self.trace.ended:
            self._check_abort(limit_for_timeout=self.deadline, phase="turn")
            self._pump(POLL)
            self._read_wire()
            if self.trace.begun and not verified:
                self._verify_received(prompt)
                verified = True
            if self.trace.ended:
                break
            if self._eof:
                err = self.driver.screen_error(self.screen.tail_since(mark))
                raise err or SessionError(
                    "Kimi exited in the middle of the turn",
                    details={"screen": self._redact(self.screen.tail[-1500:])},
                )
            state = self.driver.classify(self.screen.lines)
            now = time.monotonic()
            if state == ScreenState.BUSY:
                busy_seen = True
            if state == ScreenState.APPROVAL:
                approval_seen = approval_seen or now
                self._answer_approval(approval_seen, answered)
                continue
            approval_seen = None
            if state == ScreenState.QUESTION:
                self._progress("Kimi asked a question; dismissing it (no human in the loop)")
                self._send(self.driver.dismiss_question_key)
                self._sleep_pumping(0.5)
                continue
            since = self.screen.tail_since(mark)
            if not self.trace.begun and state == ScreenState.READY and now - submitted > 0.5:
                err = self.driver.screen_error(since)
                if isinstance(err, AuthError):
                    raise err
            if (
                not self.trace.begun
                and not resubmitted
                and now - submitted > 5.0
                and not self.driver.echo_seen(since, prompt)
            ):
                self._resubmit(prompt)
                resubmitted = True
            if (
                self._wire is None
                and busy_seen
                and state == ScreenState.READY
                and now - submitted > 10.0
                and now - self._last_activity > 1.0
            ):
                log.warning("no session log found; ending the turn on the screen going idle")
                self.trace.ended = True
                self.trace.ended_at = time.perf_counter()
        self.state = State.COLLECTED
        if not self.trace.output:
            # No answer text: Kimi may have printed an error instead. Errors are committed to the screen
            # shortly after the turn ends, so wait for the idle screen before reading them.
            self._wait_idle(3.0)
            self.trace.error = self.driver.screen_error(self.screen.tail_since(mark))
        if self.trace.unmatched and self.trace.error is None:
            self.trace.error = SessionError(
                f"kimi-mcp rejected {len(self.trace.unmatched)} approval request(s) it could not match to a "
                "tool call in Kimi's session log, so the turn may be missing work Kimi meant to do",
                details={"rejected_tools": list(self.trace.unmatched)},
                suggestion="Retry the call; the files changed so far are listed in this result.",
                retryable=True,
            )
        self._progress("turn finished")
        return self.trace

    def close(self) -> None:
        """Exit Kimi cleanly if possible; in every case leave no process behind."""
        child = self._child
        if child is None or self.state == State.CLOSED:
            self.state = State.CLOSED
            return
        self.state = State.EXITING
        pid = child.pid
        try:
            self._known_procs = descendants(pid)
            if _alive(child) and not self._eof:
                if self.trace.begun and not self.trace.ended:
                    self._interrupt(2.0)
                clear = self.driver.clear_input_sequence()  # stray text on the prompt blocks the exit keys
                for attempt, sequence in enumerate(
                    (
                        self.driver.exit_sequence(),
                        clear + self.driver.exit_sequence(),
                        clear + self.driver.exit_retry_sequence(),
                    )
                ):
                    idle = self._wait_idle(3.0 if attempt == 0 else 1.5)
                    if attempt:
                        log.warning(
                            "Kimi did not exit (attempt %d, idle=%s); screen:\n%s",
                            attempt,
                            idle,
                            self._redact("\n".join(line for line in self.screen.lines if line.strip())),
                        )
                    for keys, pause in sequence:
                        self._send(keys)
                        self._sleep_pumping(pause)
                    end = time.monotonic() + 2.5
                    while not self._eof and time.monotonic() < end:
                        self._pump(0.05)
                    if self._eof:
                        break
        except Exception as exc:  # cleanup must go on whatever happened
            log.warning("graceful exit failed: %s", exc)
        finally:
            alive = _alive(child)
            if alive:
                log.warning("Kimi did not exit by itself; terminating its process group")
            terminate_tree(pid if alive else None, self._known_procs, grace=5.0)
            with contextlib.suppress(Exception):
                child.close(force=True)
            self._save_transcript()
            self.state = State.CLOSED
            log.info("session closed (exit status %s)", child.exitstatus)

    # -- standby (a ready session kept for a later call) ----------------------------------------------
    def rebind(
        self,
        *,
        deadline: float,
        cancel: threading.Event,
        on_progress: Callable[[str], None] | None = None,
        redact: Redactor | None = None,
    ) -> None:
        """Hand the session to another caller: its deadline, cancellation, progress reporting and the
        secrets it masks (when given).

        Session logs that appeared while it waited (other calls' sessions) are not this session's.
        """
        self.deadline = deadline
        self.cancel = cancel
        self._on_progress = on_progress or (lambda _msg: None)
        if redact is not None:
            self._redactor = redact
        if self.state == State.READY and self._wire is None:
            self._logs_before_spawn = set(self.driver.wire_logs(self.env))

    def idle_until(self, stop: threading.Event) -> None:
        """Keep the screen current while nobody uses the session; returns when ``stop`` is set or Kimi exits."""
        while not stop.is_set() and not self._eof:
            self._pump(0.05)

    def usable(self, limit: float) -> bool:
        """Ready, alive and quiet: safe to submit a prompt (waits at most ``limit`` seconds)."""
        if self.state != State.READY or self._child is None or self._eof or not _alive(self._child):
            return False
        return self._wait_idle(limit)

    def kill(self, grace: float = 1.0) -> None:
        """Stop Kimi now without the exit dialogue (a standby that never ran a turn, or server shutdown)."""
        child = self._child
        if child is None:
            return
        terminate_tree(child.pid if descendants(child.pid) else None, grace=grace)  # it signals the tree
        with contextlib.suppress(Exception):
            child.close(force=True)

    def __enter__(self) -> KimiSession:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def pid(self) -> int | None:
        return self._child.pid if self._child else None

    # -- internals -----------------------------------------------------------------------------------
    def _check_abort(self, *, limit_for_timeout: float, phase: str) -> None:
        if self.cancel.is_set():
            self._interrupt(2.0)
            raise TaskCancelled("the tool call was cancelled", details={"phase": phase})
        if time.monotonic() >= limit_for_timeout:
            if phase == "turn":
                self._progress("time is up; interrupting Kimi")
                self._interrupt(2.0)
                raise TaskTimeout(
                    "Kimi did not finish the turn in time",
                    details={"phase": phase, "screen": self._redact(self.screen.tail[-800:])},
                )
            raise SessionError(
                "Kimi did not become ready in time",
                details={"phase": phase, "screen": self._redact(self.screen.tail[-1500:])},
                suggestion="Run `kimi` by hand in the workspace to see what it waits for.",
                retryable=True,
            )

    def _interrupt(self, wait: float) -> None:
        """Interrupt a running turn and give Kimi a moment to log its end."""
        if self._child is None or self._eof or not self.trace.begun or self.trace.ended:
            return
        with contextlib.suppress(Exception):
            self._send(self.driver.interrupt_key)
            end = time.monotonic() + wait
            while not self.trace.ended and not self._eof and time.monotonic() < end:
                self._pump(POLL)
                self._read_wire()

    def _resubmit(self, prompt: str) -> None:
        """The message shows no sign of having been taken: press Enter again if it still sits in the
        input box, else type it again (the keys were lost). It is inert text either way."""
        if self.driver.input_pending(self.screen.lines):
            log.warning("the message was not submitted after 5s; pressing Enter again")
            self._send("\r")
        else:
            log.warning("the message did not arrive after 5s; typing it again")
            self._submit(prompt)

    def _verify_received(self, prompt: str) -> None:
        """The turn began: Kimi must have received exactly our message, else the turn is stopped."""
        received = self.trace.received or ""
        got, sent = _trimmed(received), _trimmed(prompt)
        if got == sent:
            return
        at = next(
            (i for i, (a, b) in enumerate(zip(got, sent, strict=False)) if a != b), min(len(got), len(sent))
        )
        log.warning("Kimi received a different message (first difference at %d); stopping the turn", at)
        self._interrupt(2.0)
        raise SessionError(
            "Kimi did not receive the message as sent, so the turn was stopped",
            details={
                "sent_chars": len(prompt),
                "received_chars": len(received),
                "first_difference_at": at,
                "sent_near": self._redact(sent[max(0, at - 40) : at + 40]),
                "received_near": self._redact(got[max(0, at - 40) : at + 40]),
            },
            suggestion="Retry the call; if it happens again, save a transcript (KIMI_MCP_TRANSCRIPT_DIR) and "
            "report it.",
            retryable=True,
        )

    def _submit(self, prompt: str) -> None:
        for keys, pause in self.driver.submit_sequence(prompt):
            self._send(keys)
            if pause:
                self._sleep_pumping(pause)

    def _send(self, data: str) -> None:
        """Write to Kimi in bounded pieces, reading its output between them (Kimi blocked on a full output
        buffer would stop reading its input, and the write would block). Terminal-query answers wait until
        the whole of ``data`` is written, so none lands inside a paste."""
        for start in range(0, len(data), SEND_CHUNK):
            if self._child is None or self._eof:
                return
            self._child.send(data[start : start + SEND_CHUNK])
            if start + SEND_CHUNK < len(data):
                self._pump(0, answer=False)

    def _pump(self, wait: float, *, answer: bool = True) -> None:
        """Read what the child wrote (waiting at most ``wait``), feed the screen, answer queries."""
        child = self._child
        if child is None or self._eof:
            time.sleep(wait)
            return
        timeout = wait
        while True:
            try:
                data = child.read_nonblocking(65536, timeout=timeout)
            except pexpect.TIMEOUT:
                break
            except pexpect.EOF:
                self._eof = True
                break
            self._on_output(data)
            timeout = 0
        if not answer:
            return
        if self.driver.answer_terminal_queries:
            for reply in self.screen.take_replies():
                self._send(reply)
        else:
            self.screen.take_replies()

    def _on_output(self, data: str) -> None:
        self.screen.feed(data)
        if self._transcript_dir is not None:
            self._transcript.append(data)
        if strip_ansi(data).strip():
            self._last_activity = time.monotonic()

    def _sleep_pumping(self, seconds: float) -> None:
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            self._pump(min(POLL, max(0.0, end - time.monotonic())))

    def _wait_idle(self, limit: float) -> bool:
        """Wait until the screen is idle and quiet (safe to type). Returns False on timeout."""
        end = time.monotonic() + limit
        while time.monotonic() < end and not self._eof:
            self._pump(POLL)
            self._read_wire()
            state = self.driver.classify(self.screen.lines)
            quiet = time.monotonic() - self._last_activity
            if state in (ScreenState.READY, ScreenState.NOT_LOGGED_IN) and quiet >= QUIET_BEFORE_TYPING:
                return True
        return False

    def _read_wire(self) -> None:
        if self.session_id is None:  # some dialects only create the session on the first message
            self.session_id = self.driver.session_id(self.screen.text)
        if self._wire is None:
            path = self.driver.wire_log(self.env, self.workspace, self.session_id)
            if path is None and self.session_id is None:
                path = self._find_wire_by_prompt()
            if path is None:
                return
            log.debug("session log: %s", path)
            self._wire = _WireTail(path)
        for line in self._wire.poll():
            for event in self.driver.events(line):
                self._apply(event)

    def _find_wire_by_prompt(self) -> Path | None:
        """Our session log when the screen never showed the session id (e.g. it scrolled away).

        Candidates are logs that did not exist when we spawned Kimi; ours is the one whose first prompt
        is ours, which stays unambiguous when several sessions run in the same workspace.
        """
        now = time.monotonic()
        if self._prompt is None or now - self._last_wire_search < 0.2:
            return None
        self._last_wire_search = now
        wanted = self._prompt.strip()[:200]
        for path in self.driver.wire_logs(self.env):
            if path in self._logs_before_spawn:
                continue
            try:
                with open(path, encoding="utf-8", errors="replace") as handle:
                    for _, line in zip(range(400), handle, strict=False):
                        if '"turn' not in line and "TurnBegin" not in line:
                            continue
                        events = self.driver.events(line)
                        begin = next((e for e in events if isinstance(e, TurnBegin)), None)
                        if begin is not None:
                            if begin.text.strip()[:200] == wanted:
                                self.session_id = self.driver.session_id_of(path)
                                return path
                            break
            except OSError:
                continue
        return None

    def _apply(self, event: WireEvent) -> None:
        trace = self.trace
        match event:
            case TurnBegin(text=text):
                if not trace.begun:
                    trace.received = text
                trace.begun = True
                trace.steps.append([])
            case StepBegin():
                trace.steps.append([])
            case TextPart(text=text):
                if not trace.steps:
                    trace.steps.append([])
                trace.steps[-1].append(text)
            case ThinkPart():
                pass  # reasoning is not part of the answer
            case ApprovalRequest(call_id=call_id, name=name, arguments=arguments):  # before the call itself
                call = trace.calls.get(call_id)
                if call is None:
                    call = trace.calls[call_id] = CallRecord(call_id, name, arguments)
                    self._progress(f"Kimi asks to run {name} {_summarize_args(arguments)}".strip())
                call.awaiting_approval = True
            case ApprovalResolved(call_id=call_id):
                if (call := trace.calls.get(call_id)) is not None:
                    call.awaiting_approval = False
            case ToolCall(call_id=call_id, name=name, arguments=arguments):
                known = trace.calls.get(call_id)
                if known is not None:
                    known.arguments = arguments or known.arguments
                else:
                    trace.calls[call_id] = CallRecord(call_id, name, arguments)
                    self._progress(f"Kimi runs {name} {_summarize_args(arguments)}".strip())
            case ToolResult(call_id=call_id, output=output, is_error=is_error):
                if (call := trace.calls.get(call_id)) is not None:
                    call.result = output
                    call.is_error = is_error
            case TokenUsage(input_tokens=input_tokens, output_tokens=output_tokens):
                trace.input_tokens += input_tokens
                trace.output_tokens += output_tokens
            case TurnEnd():
                if trace.begun:
                    trace.ended = True
                    trace.ended_at = time.perf_counter()
            case _:
                assert_never(event)

    def _answer_approval(self, seen_at: float, answered: dict[str, tuple[str, float, int, str]]) -> None:
        """Answer the approval panel on screen by policy, for the logged call the panel shows.

        A panel is matched to a call of the session log by its tool name and by what it displays (the
        command, the path); a panel still showing a call already answered is waited out (its key pressed
        again only if it stays); a panel whose call the log does not show yet is waited for, up to
        ``UNMATCHED_WAIT`` seconds, then rejected — and the turn is then reported as failed, never as a
        success with a refused write.
        """
        self._read_wire()  # the log up to the moment the panel is looked at
        now = time.monotonic()
        panel, whole = self.driver.approval_text(self.screen.lines)
        call, key_id = self._panel_call(panel, answered, waited=now - seen_at, whole=whole)
        if key_id in answered:
            key, sent_at, tries, shown = answered[key_id]
            if now - sent_at >= 2.0 and tries < 3 and shown == panel:
                self._send(key)  # the same panel is still there: the key was lost, press it again
                answered[key_id] = (key, now, tries + 1, panel)
            return
        if call is None and now - seen_at < UNMATCHED_WAIT:
            return  # the session log shows the call before its panel; give it time (under load, seconds)
        if call is None:
            approve, reason = False, "approval panel without a matching tool call in the session log"
            self.trace.unmatched.append(self.driver.approval_tool(self.screen.lines) or "unknown tool")
        else:
            approve, reason = self._decide(call)
        key = self._press_answer(approve, reason)
        answered[key_id] = (key, time.monotonic(), 1, panel)
        verb = "approved" if approve else "rejected"
        name = call.name if call else "unknown tool"
        self._progress(f"{verb} {name}: {reason}")
        log.info("%s %s (%s)", verb, name, reason)

    def _panel_call(
        self, panel: str, answered: dict[str, tuple[str, float, int, str]], *, waited: float, whole: bool
    ) -> tuple[CallRecord | None, str]:
        """The call an approval panel is for, and the key its answer is filed under (``whole``: the panel's
        first line, naming the tool and path, is on screen)."""
        calls = list(self.trace.calls.values())
        shown = self.driver.approval_tool(self.screen.lines)
        if self.driver.logs_approvals:
            pending = [c for c in calls if c.awaiting_approval and c.approval == "auto"]
        else:
            pending = [c for c in calls if c.result is None and c.approval == "auto"]
        pending = [c for c in pending if not shown or c.name == shown]
        for call in pending:  # panels come in call order
            if _panel_shows(call, panel):
                return call, call.call_id
        if pending and self.driver.logs_approvals:
            return pending[0], pending[0].call_id  # the log names the calls awaiting approval, in order
        stale = [c for c in calls if c.call_id in answered and answered[c.call_id][3] == panel]
        if stale:
            return stale[-1], stale[-1].call_id
        if pending and not whole and waited >= PANEL_GRACE:
            return pending[0], pending[0].call_id  # a panel too tall to show what it is for: call order
        return None, "?" + panel

    def _decide(self, call: CallRecord) -> tuple[bool, str]:
        kind = self.driver.tool_kind(call.name)
        try:
            args = json.loads(call.arguments or "{}")
        except ValueError:
            args = {}
        targets = self.driver.edit_targets(call.name, args if isinstance(args, dict) else {})
        approve, reason = self.policy.decide(kind, targets)
        call.approval = "approved" if approve else "rejected"
        return approve, reason

    def _press_answer(self, approve: bool, reason: str) -> str:
        if approve:
            self._send(self.driver.approve_key)
            return self.driver.approve_key
        for keys, pause in self.driver.reject_with_feedback(self.policy.feedback(reason)):
            self._send(keys)
            if pause:
                self._sleep_pumping(pause)
        return self.driver.reject_key  # pressed again if the panel stays: the feedback input did not take

    def _progress(self, message: str) -> None:
        """Tell the caller what is happening (progress notifications), secrets masked."""
        self._on_progress(self._redactor(message))

    def _redact(self, text: str) -> str:
        return self._redactor(text)

    def _save_transcript(self) -> None:
        if not self._transcript_dir or not self._transcript:
            return
        try:
            folder = Path(self._transcript_dir)
            folder.mkdir(parents=True, exist_ok=True)
            name = f"{time.strftime('%Y%m%dT%H%M%S')}-{self.session_id or os.getpid()}.log"
            (folder / name).write_text(self._redact("".join(self._transcript)), encoding="utf-8")
        except OSError as exc:
            log.warning("could not save transcript: %s", exc)


_SHOWN_KEYS = ("command", "cmd", "path", "file_path", "url", "pattern", "content")


def _panel_shows(call: CallRecord, panel: str) -> bool:
    """Whether an approval panel displays this call (its command or path); True when the call has
    nothing such a panel displays."""
    try:
        args = json.loads(call.arguments or "{}")
    except ValueError:
        return True
    values = [args[k] for k in _SHOWN_KEYS if isinstance(args, dict) and isinstance(args.get(k), str)]
    values = [squash(v.removeprefix("./")) for v in values if v.strip()]
    if not values:
        return True
    return any((v[:40] if len(v) > 40 else v) in panel or v[-40:] in panel for v in values)


def _trimmed(text: str) -> str:
    """What both TUIs trim from a message (JavaScript's ``trim`` also takes U+FEFF)."""
    return text.strip().strip("\ufeff").strip()


def _alive(child: pexpect.spawn) -> bool:
    """``isalive`` that tolerates another thread having reaped the child already (shutdown kills)."""
    try:
        return bool(child.isalive())
    except (pexpect.ExceptionPexpect, OSError):
        return False


def _summarize_args(arguments: str) -> str:
    try:
        args = json.loads(arguments or "{}")
    except ValueError:
        return ""
    if not isinstance(args, dict):
        return ""
    for key in ("path", "file_path", "command", "pattern", "url"):
        if isinstance(args.get(key), str):
            return _trim(args[key], 120)
    return ""
