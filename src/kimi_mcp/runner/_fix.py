"""Fix until the checks pass (``verify_command``, ``fix_rounds``).

A round is Kimi's turn (with the messages sent to the job meanwhile, typed as next turns first; one sent while
the check ran begins the next round, as a fix turn does) and then the check: ``verify_command`` run in the
run's workspace (the isolated copy, a worker's checkout, or the caller's workspace), with its own time limit
(``KIMI_MCP_VERIFY_TIMEOUT``; the job's deadline stands still meanwhile, as it does while a question waits).
While the check fails, the same conversation gets the command, its exit code and the end of its output
(masked, at most :data:`TAIL` characters) as its next turn, until it passes, ``fix_rounds`` fix turns were
sent, the job's tokens (``max_tokens``, ``KIMI_MCP_DAILY_TOKENS``) are used up, or its deadline came. The run
sends a fix turn like any queued message (``scope.prepare``: one inert input), so cancelling, steering,
questions and the token limits work inside it.
"""

from __future__ import annotations

import time
from typing import Literal

from .. import prompts, telemetry
from ..config import Settings
from ..errors import KimiMCPError
from ..models import FixRound, TaskResult, VerifyOutcome
from ..scope import Scope, TokenMeter
from ..secrets import Redactor
from ..session import TurnTrace
from ..task import TaskRequest
from ..worktree import Verify, verify_in

TAIL = 4_000  # characters of the check's output a round keeps and Kimi is sent, after masking
READ = 2 * TAIL  # read more than is kept: a secret cut off at the start of the kept end is still masked

Stop = Literal["passed", "rounds", "budget", "deadline"]

_WHY = {
    "budget": "the job's token limit (max_tokens or KIMI_MCP_DAILY_TOKENS) is reached",
    "deadline": "the job's time (KIMI_MCP_TIMEOUT) is up",
}


def budget_reached(meter: TokenMeter) -> bool:
    """Whether the job has no tokens left for another turn (its ``max_tokens``, or the day's budget)."""
    spent = meter.spent
    if meter.max_tokens is not None and spent >= meter.max_tokens:
        return True
    return meter.daily is not None and meter.daily_used + spent >= meter.daily


def stop_reason(passed: bool, fixes_sent: int, fix_rounds: int, scope: Scope) -> Stop | None:
    """Why no fix turn follows a check (None: one does), in this order: it passed, the ``fix_rounds`` are
    spent, the tokens are, the deadline came."""
    if passed:
        return "passed"
    if fixes_sent >= fix_rounds:
        return "rounds"
    if budget_reached(scope.tokens):
        return "budget"
    if time.monotonic() >= scope.deadline:
        return "deadline"
    return None


def masked_tail(output: str, redactor: Redactor, limit: int = TAIL) -> str:
    """The end of a check's output as a round keeps it and Kimi gets it: masked, then cut to ``limit``."""
    return redactor(output)[-limit:]


class FixLoop:
    """The checks of one run and their rounds (see the module's notes)."""

    def __init__(self, request: TaskRequest, settings: Settings, scope: Scope) -> None:
        self.command = request.verify_command
        self.fix_rounds = request.fix_rounds
        self.workspace = request.workspace
        self.timeout = settings.verify_timeout
        self.scope = scope
        self.rounds: list[FixRound] = []
        self.verdict: VerifyOutcome | None = None
        self._started = time.monotonic()
        self._first_trace = 0  # the round's first turn among the run's traces
        self._fixes_sent = 0

    def begin(self) -> None:
        """Round 0 (the first turn) begins now."""
        self._started = time.monotonic()

    def check(self, traces: list[TurnTrace]) -> str | None:
        """The round's turns are over: run the check and record the round; the next fix turn's message
        (prepared for the terminal), or None: no more rounds."""
        if not self.command:
            return None
        outcome = self._run(self.command)
        tail = masked_tail(outcome.output_tail, self.scope.redactor)
        spent = sum(t.input_tokens + t.output_tokens for t in traces[self._first_trace :])
        self.rounds.append(
            FixRound(
                round=len(self.rounds), exit_code=outcome.exit_code, output_tail=tail,
                duration_s=round(time.monotonic() - self._started, 3), tokens=spent,
            )
        )  # fmt: skip
        self.verdict = VerifyOutcome(
            command=outcome.command, exit_code=outcome.exit_code, passed=outcome.passed,
            timed_out=outcome.timed_out, duration_s=outcome.duration_s, output_tail=tail,
        )  # fmt: skip
        self._first_trace, self._started = len(traces), time.monotonic()  # the next round, if any
        reason = stop_reason(outcome.passed, self._fixes_sent, self.fix_rounds, self.scope)
        if reason is not None:
            self._said(reason)
            return None
        text = prompts.fix_prompt(self.command, outcome.exit_code, tail, self.timeout)
        try:
            text = self.scope.prepare(text)
        except KimiMCPError as exc:
            self.scope.note(f"no more fix rounds: the fix round could not be sent ({exc.message})")
            return None
        self._fixes_sent += 1
        how = "timed out" if outcome.timed_out else f"exit code {outcome.exit_code}"
        self.scope.progress(
            f"verify_command failed ({how}): fix round {self._fixes_sent} of {self.fix_rounds}"
        )
        return text

    def fill(self, result: TaskResult, *, failed: bool) -> None:
        """The rounds into ``result``, and the last round's verdict unless the run failed after it."""
        result.rounds = list(self.rounds)
        result.verify = None if failed else self.verdict

    def _run(self, command: str) -> Verify:
        """The check, with the job's deadline paused while it runs (it has a time limit of its own)."""
        self.scope.progress(f"running verify_command (round {len(self.rounds)})")
        self.scope.pause()
        try:
            return telemetry.call(
                "kimi_mcp.verify", verify_in, self.workspace, command, self.timeout,
                cancel=self.scope.cancel, tail_chars=READ,
            )  # fmt: skip
        finally:
            self.scope.resume()

    def _said(self, reason: Stop) -> None:
        """Why a failing check was not sent back to Kimi, in the notes (a pass, or no rounds asked: nothing)."""
        if reason == "passed" or self.fix_rounds == 0:
            return
        if reason == "rounds":
            self.scope.note(f"verify_command still fails after {self._fixes_sent} fix round(s) (fix_rounds)")
        else:
            self.scope.note(f"no more fix rounds: {_WHY[reason]}; verify_command still fails")
