"""The session's states are checked, the abort phase follows them, and the terminal's one wait primitive
behaves (no pty: a scripted child stands in for Kimi)."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import pexpect
import pytest

from kimi_mcp.drivers.base import KimiInstall, TurnBegin
from kimi_mcp.drivers.kimi_code import KimiCodeDriver
from kimi_mcp.drivers.legacy import LegacyDriver
from kimi_mcp.errors import AuthError, SessionError, TaskCancelled, TaskTimeout
from kimi_mcp.question import Choice, Option, Question
from kimi_mcp.scope import Message, Scope
from kimi_mcp.secrets import Redactor
from kimi_mcp.session import ApprovalPolicy, KimiSession, State
from kimi_mcp.session._terminal import Terminal


def driver() -> LegacyDriver:
    return LegacyDriver(KimiInstall(binary="/usr/local/bin/kimi", version="1.50.0", dialect="legacy"))


def session(tmp_path: Path, deadline: float = 60.0) -> KimiSession:
    return KimiSession(
        driver(),
        tmp_path,
        env={"HOME": str(tmp_path)},
        policy=ApprovalPolicy(tmp_path, read_only=False),
        scope=Scope(deadline=time.monotonic() + deadline),
    )


class Child:
    """What Kimi prints, chunk by chunk; then silence (or the end of its output)."""

    pid = 2**22 + 1  # no such process: it has no descendants

    def __init__(self, *chunks: str, eof: bool = False) -> None:
        self.chunks = list(chunks)
        self.eof = eof
        self.sent: list[str] = []

    def read_nonblocking(self, size: int, timeout: float) -> str:
        if self.chunks:
            return self.chunks.pop(0)
        if self.eof:
            raise pexpect.EOF("gone")
        time.sleep(min(timeout, 0.005))
        raise pexpect.TIMEOUT("nothing")

    def send(self, data: str) -> None:
        self.sent.append(data)


def terminal(child: Child, **hooks) -> Terminal:
    scope = Scope(deadline=time.monotonic() + 60, redactor=Redactor(["sk-secret"]))
    term = Terminal(driver(), scope=lambda: scope, **hooks)
    term.process.child = child  # type: ignore[assignment]
    return term


# ---------------------------------------------------------------------------------------------- states


def test_a_turn_needs_a_ready_session(tmp_path: Path) -> None:
    kimi = session(tmp_path)
    assert kimi.state is State.NEW
    with pytest.raises(SessionError, match="cannot submit a prompt in state new"):
        kimi.run_turn("hello")
    kimi.state = State.COLLECTED  # one turn per session
    with pytest.raises(SessionError, match="in state collected"):
        kimi.run_turn("hello")
    assert kimi.usable(0.1) is False


def test_start_runs_once(tmp_path: Path) -> None:
    kimi = session(tmp_path)
    kimi.state = State.READY
    with pytest.raises(SessionError, match="cannot start Kimi in state ready"):
        kimi.start()


def test_close_without_a_process_closes_once(tmp_path: Path) -> None:
    kimi = session(tmp_path)
    kimi.close()
    assert kimi.state is State.CLOSED
    kimi.close()
    kimi.kill()
    assert kimi.state is State.CLOSED


@pytest.mark.parametrize(
    ("state", "phase"), [(State.STARTING, "startup"), (State.SETUP, "setup"), (State.WAITING, "turn")]
)
def test_cancellation_names_the_phase_of_the_state(tmp_path: Path, state: State, phase: str) -> None:
    kimi = session(tmp_path)
    kimi.state = state
    kimi.cancel.set()
    with pytest.raises(TaskCancelled) as info:
        kimi._check_abort()
    assert info.value.details["phase"] == phase


def test_time_limits_follow_the_state(tmp_path: Path) -> None:
    kimi = session(tmp_path, deadline=-1.0)  # the caller's time is up
    kimi.state = State.SETUP
    kimi._check_abort()  # the login waits end on their own (an AuthError naming the screen)
    kimi.state = State.WAITING
    with pytest.raises(TaskTimeout):
        kimi._check_abort()
    kimi.state = State.STARTING
    kimi._check_abort()  # the startup limit is set when Kimi is spawned
    kimi._startup_limit = time.monotonic() - 1
    with pytest.raises(SessionError, match="did not become ready in time") as info:
        kimi._check_abort()
    assert info.value.retryable is True and info.value.details["phase"] == "startup"


def test_a_standby_taken_later_ignores_logs_that_appeared_meanwhile(tmp_path: Path) -> None:
    kimi = session(tmp_path)
    calls: list[str] = []
    kimi.wire.exclude_existing = lambda: calls.append("listed")  # type: ignore[method-assign]
    kimi.bind(Scope(deadline=time.monotonic() + 5))
    assert calls == []  # not ready: nothing to hand over
    kimi.state = State.READY
    scope = Scope(deadline=time.monotonic() + 5)
    kimi.bind(scope)
    assert calls == ["listed"]
    assert kimi.scope is scope and kimi.cancel is scope.cancel and kimi.deadline == scope.deadline


@pytest.mark.parametrize("arrives", ["steer", "answer"])
def test_a_message_or_an_answer_ends_the_sessions_wait_for_output_at_once(
    tmp_path: Path, arrives: str
) -> None:
    """Issue 32, goal 2: what the caller sends a running turn wakes the session's wait on Kimi's pty (an
    event), so the turn acts on it then, not at its next poll; also for a scope bound later (a standby)."""
    kimi = session(tmp_path)
    later = Scope(deadline=time.monotonic() + 60)
    kimi.bind(later)
    silent, writer = os.pipe()  # Kimi prints nothing
    child = Child()
    child.child_fd = silent  # type: ignore[attr-defined]
    kimi.term.process.child = child  # type: ignore[assignment]
    kimi.term.waits.arm()
    inbox = later.inbox
    if arrives == "answer":
        inbox.ask(Question("Which colour?", options=(Option("Red"), Option("Blue"))))
    waiter = threading.Thread(
        target=kimi.term.waits.until, args=(inbox.outgoing, 600.0), kwargs={"poll": 600.0}
    )
    try:
        waiter.start()
        time.sleep(0.2)  # the waiter is in its wait for output
        if arrives == "steer":
            inbox.send(Message("look at b.py", "steer"))
        else:
            assert inbox.answer(Choice(picks=(1,)))
        waiter.join(timeout=20)  # its poll is 600 s: only the wake ends the wait before it
        assert not waiter.is_alive()
    finally:
        os.close(writer)  # the pty "closes": a waiter still blocked ends at once
        waiter.join()
        os.close(silent)


def test_the_calls_scope_learns_kimis_session_id_when_it_is_found_and_when_it_is_bound(
    tmp_path: Path,
) -> None:
    """Issue 29 item 8: the job records the id as soon as Kimi has one, also for a standby taken later."""
    kimi = session(tmp_path)
    told: list[str] = []
    kimi.scope.on_session = told.append
    kimi.wire.name(None)  # nothing on screen yet
    kimi.wire.name("sid-1")
    kimi.wire.name("sid-1")  # told once
    assert told == ["sid-1"] and kimi.session_id == "sid-1"
    later, told_later = Scope(deadline=time.monotonic() + 5), []
    later.on_session = told_later.append
    kimi.bind(later)  # a standby (or live session) taken by a later call
    assert told_later == ["sid-1"]


@pytest.mark.parametrize(
    "banner",
    ["", " │  Model:     not set, run /login or /provider   │\r\n"],
    ids=["model shown", "banner drawn after the input box"],
)
def test_llm_not_set_on_a_kimi_code_that_looked_ready_ends_the_turn_as_a_start_up_fault(
    tmp_path: Path, banner: str
) -> None:
    """Issue 29 item 8: the turn never began; the error says so (the runner then tries a fresh Kimi once).
    Under load Kimi Code drew its input box before the welcome banner saying "Model: not set": it looked
    ready, and once the banner was there the screen no longer did, so the error went unread for 120 s."""
    from kimi_mcp.drivers.kimi_code import KimiCodeDriver
    from kimi_mcp.errors import StartupFault

    kimi = KimiSession(
        KimiCodeDriver(KimiInstall(binary="/k/kimi", version="2.1.0", dialect="kimi-code")),
        tmp_path,
        env={"HOME": str(tmp_path)},
        policy=ApprovalPolicy(tmp_path, read_only=False),
        scope=Scope(deadline=time.monotonic() + 30),
    )
    box = " ╭──────────╮\r\n │ >        │\r\n ╰──────────╯\r\n"
    child = Child(banner + ' ✨ hello\r\n Error: LLM not set, send "/login" to login\r\n' + box)
    kimi.term.process.child = child  # type: ignore[assignment]
    kimi.state = State.READY
    with pytest.raises(StartupFault) as caught:
        kimi.run_turn("hello")
    assert caught.value.details["kimi_message"].startswith("Error: LLM not set")
    assert any("hello" in sent for sent in child.sent) and not kimi.trace.begun


# ----------------------------------------------------------------------------------- the wait primitive


def test_until_looks_after_each_read_until_done_or_time_is_up() -> None:
    term = terminal(Child("one", "two"))
    looks: list[str] = []
    assert term.waits.until(lambda: looks.append(term.screen.tail) or "two" in term.screen.tail, 5.0)
    assert looks == ["onetwo"]  # one read takes everything already written
    started = time.monotonic()
    assert term.waits.until(lambda: False, 0.05) is False
    assert time.monotonic() - started >= 0.05


def test_sleep_keeps_reading_and_zero_does_nothing() -> None:
    child = Child("late output")
    term = terminal(child)
    term.sleep(0)
    assert child.chunks == ["late output"]
    term.sleep(0.03)
    assert term.screen.tail == "late output" and term.last_activity > 0


def test_wait_for_matches_the_screen_or_the_output_since_the_last_send() -> None:
    child = Child()
    term = terminal(child)
    term.send("/login\r")
    child.chunks = ["Select a platform\r\n", "1. Kimi\r\n"]
    index, match = term.wait_for([r"Enter your API key", r"Select a (\w+)"], 5)
    assert (index, match.group(1)) == (1, "platform") and child.sent == ["/login\r"]


def test_wait_for_gives_up_at_its_timeout_or_when_kimi_exits() -> None:
    checks: list[int] = []
    term = terminal(Child("sk-secret was shown"), checkpoint=lambda: checks.append(1))
    with pytest.raises(AuthError) as info:
        term.wait_for(["never"], 0.05)
    assert info.value.retryable is True and "sk-secret" not in str(info.value.details)
    assert checks  # the caller may cancel at every look
    term = terminal(Child("bye", eof=True))
    with pytest.raises(SessionError, match="exited during the automated login"):
        term.wait_for(["never"], 5)


def test_wait_for_never_outlasts_the_callers_deadline() -> None:
    term = terminal(Child(), deadline=lambda: time.monotonic() + 0.05)
    started = time.monotonic()
    with pytest.raises(AuthError):
        term.wait_for(["never"], 30)
    assert time.monotonic() - started < 20  # the caller's deadline (0.05 s) ended it, not its own 30 s


def test_terminal_queries_are_answered_after_a_read_only_if_the_dialect_wants() -> None:
    child = Child("\x1b[6n")  # cursor position request
    term = terminal(child)
    term.pump(0.01)
    assert child.sent == ["\x1b[1;1R"]
    child.chunks = ["\x1b[6n"]
    term.pump(0.01, answer=False)  # during a write: kept for later
    assert child.sent == ["\x1b[1;1R"]


def test_kimi_codes_background_colour_query_gets_its_fixed_answer_once_even_split_between_reads() -> None:
    child = Child("\x1b[6n\x1b]11;?\x07\x1b[c\x1b]1", "1;?\x07 drawn")  # the second query split in two reads
    scope = Scope.detached()
    term = Terminal(KimiCodeDriver(KimiInstall("/opt/kimi", "2.1.0", "kimi-code")), scope=lambda: scope)
    term.process.child = child  # type: ignore[assignment]
    term.pump(0.01)
    dark = "\x1b]11;rgb:0000/0000/0000\x07"
    assert child.sent == [dark, dark]  # nothing for the cursor position or DA1: Kimi Code falls back itself
    child.chunks = ["\x1b]11;?", "\x07 more"]
    term.pump(0.01, answer=False)  # during a write: kept for later
    assert child.sent == [dark, dark]
    term.pump(0.01)
    assert child.sent == [dark, dark, dark]


def test_a_kimi_never_prompted_is_usable_once_ready_and_after_a_turn_only_once_ready_and_quiet(
    tmp_path: Path,
) -> None:
    kimi = session(tmp_path)
    kimi.term.process.child = Child("⠋ Composing...\r\n")  # type: ignore[assignment]  # never a quiet ready box
    kimi.term.process.alive = lambda: True  # type: ignore[method-assign]
    kimi.state = State.READY  # what start() saw
    assert kimi.usable(0.3) is True  # a standby taken at once is typed into as a call's own fresh Kimi is
    kimi.prompted = True
    assert kimi.usable(0.3) is False  # after a turn: the ready screen, quiet for a while, is awaited


def test_wait_idle_wants_the_ready_screen_quiet_and_reads_the_log_meanwhile(tmp_path: Path) -> None:
    box = "── input ──────\r\n> \r\n"
    term = terminal(Child(box))
    reads: list[int] = []
    assert term.waits.wait_idle(2.0, lambda: reads.append(1)) is True
    assert time.monotonic() - term.last_activity >= 0.25 and reads
    assert terminal(Child("⠋ Composing...\r\n" + box)).waits.wait_idle(0.3, lambda: None) is False
    assert terminal(Child(box, eof=True)).waits.wait_idle(2.0, lambda: None) is False


def test_a_turn_that_began_is_interrupted_until_its_end_is_logged(tmp_path: Path) -> None:
    kimi = session(tmp_path)
    child = Child()
    kimi.term.process.child = child  # type: ignore[assignment]
    kimi._interrupt(0.05)
    assert child.sent == []  # no turn running: nothing to interrupt
    kimi.wire.apply(TurnBegin("x"))
    started = time.monotonic()
    kimi._interrupt(0.1)
    assert child.sent == ["\x03"] and time.monotonic() - started >= 0.1


# ------------------------------------------------- issue 13, item 10: the login is bounded by the start-up limit


def test_a_login_wait_ends_at_the_start_up_limit_as_a_timeout(tmp_path: Path) -> None:
    kimi = KimiSession(
        driver(),
        tmp_path,
        env={"HOME": str(tmp_path)},
        policy=ApprovalPolicy(tmp_path, read_only=False),
        scope=Scope(deadline=time.monotonic() + 600),  # the call has all the time in the world
        startup_timeout=0.5,
    )
    kimi.term.process.child = Child("Select a platform")  # type: ignore[assignment]  # then nothing more
    kimi.state = State.SETUP
    kimi._startup_limit = time.monotonic() + 0.5
    with pytest.raises(TaskTimeout) as caught:
        kimi.term.wait_for([r"Select a model"], 120)  # the login step's own wait is longer
    error = caught.value
    assert error.type == "timeout" and error.retryable is True
    assert "login did not finish within the start-up time limit" in error.message
    assert error.details["phase"] == "setup"
    assert "KIMI_MCP_STARTUP_TIMEOUT" in error.suggestion


def test_a_login_screen_that_never_comes_before_the_limit_is_still_an_auth_error(tmp_path: Path) -> None:
    kimi = session(tmp_path)
    kimi.term.process.child = Child("Select a platform")  # type: ignore[assignment]
    kimi.state = State.SETUP
    kimi._startup_limit = time.monotonic() + 600
    with pytest.raises(AuthError, match="did not reach the expected screen"):
        kimi.term.wait_for([r"Select a model"], 0.3)


# ------------------------------------------- issue 13, item 18: a turn that ran out of time retrying the API


class EndsAtInterrupt(Child):
    """Kimi taking the interrupt key: its turn ends (what its session log then says)."""

    def __init__(self, kimi: KimiSession) -> None:
        super().__init__()
        self.kimi = kimi

    def send(self, data: str) -> None:
        super().send(data)
        if data == self.kimi.driver.interrupt_key:
            self.kimi.trace.ended = True


def test_time_running_out_while_kimi_retries_a_failing_provider_is_an_api_error(tmp_path: Path) -> None:
    from kimi_mcp.drivers.base import StepRetrying
    from kimi_mcp.errors import ApiError

    kimi = session(tmp_path, deadline=-1)  # the time is already up
    kimi.term.process.child = child = EndsAtInterrupt(kimi)  # type: ignore[assignment]
    kimi.state = State.WAITING
    kimi.trace.begun = True
    kimi.trace.retrying = StepRetrying(8, 10, "APIStatusError: 500 fake error 500", 500)
    with pytest.raises(ApiError) as caught:
        kimi._check_abort()
    error = caught.value
    assert error.type == "api" and error.retryable is True
    assert (
        "kept failing (APIStatusError: 500 fake error 500)" in error.message
        and "attempt 8 of 10" in error.message
    )
    assert error.details["status"] == 500 and error.details["phase"] == "turn"
    assert child.sent == [kimi.driver.interrupt_key]  # the turn was interrupted first


def test_time_running_out_otherwise_is_still_a_timeout(tmp_path: Path) -> None:
    kimi = session(tmp_path, deadline=-1)
    kimi.term.process.child = Child()  # type: ignore[assignment]
    kimi.state = State.WAITING
    with pytest.raises(TaskTimeout, match="did not finish the turn in time"):
        kimi._check_abort()


# ------------------------------------------- issue 13, item 14: a kill from another thread leaves the pty alone


def test_a_kill_from_another_thread_only_signals_and_the_reader_sees_the_end(tmp_path: Path) -> None:
    scope = Scope.detached()
    term = Terminal(driver(), scope=lambda: scope)
    term.spawn(["sleep", "30"], tmp_path, {"PATH": "/usr/bin:/bin"})
    errors: list[BaseException] = []
    inside, killed = threading.Event(), threading.Event()

    def between_reads() -> bool:
        if not inside.is_set():
            inside.set()
            killed.wait(10)  # the reader is between two reads while another thread kills Kimi
        return term.eof

    def reader() -> None:
        try:
            term.waits.until(between_reads, 20)
        except BaseException as exc:  # noqa: BLE001 - what the reader would have died of
            errors.append(exc)

    thread = threading.Thread(target=reader)
    thread.start()
    assert inside.wait(5)
    pid = term.process.pid
    term.kill(grace=1.0)  # from this (other) thread
    pty = term.process.child.ptyproc.fileobj  # type: ignore[union-attr]
    assert not pty.closed  # left to its reader
    killed.set()
    thread.join(10)
    assert not thread.is_alive() and errors == [] and term.eof  # the reader saw Kimi's end, no EBADF
    term.kill(grace=1.0)  # nobody reads now: this closes the pty
    assert pty.closed
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)
