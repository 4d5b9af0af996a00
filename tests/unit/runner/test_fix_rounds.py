"""Fix until the checks pass (issue 31 item 3): after Kimi's turn ``verify_command`` runs in the run's
workspace; while it fails, the same conversation gets a next turn with the command, its exit code and its
output's end (masked, cut), until it passes, ``fix_rounds`` fix turns were spent, the tokens are used up or the
deadline came. The rounds (and the last round's verdict) are the result's."""

from __future__ import annotations

import time
from collections.abc import Callable
from concurrent.futures import Future
from pathlib import Path

from kimi_mcp.config import Settings
from kimi_mcp.drivers import KimiInstall
from kimi_mcp.errors import SessionError
from kimi_mcp.runner import Runner, TaskRequest
from kimi_mcp.runner._fix import TAIL, budget_reached, masked_tail, stop_reason
from kimi_mcp.runner._run import TaskRun
from kimi_mcp.scope import Message, Scope, TokenMeter
from kimi_mcp.secrets import Redactor
from kimi_mcp.session import TurnTrace

CHECK = 'test "$(cat answer.txt)" = 42 || { echo "got: $(cat answer.txt)"; exit 3; }'
SECRET = "sk-fixround-0123456789abcdef"


class Kimi:
    """A live session: each turn writes ``answers[n]`` into answer.txt, spends 100 tokens (recorded in the
    run's meter as the real turn does), shows the message arrived, and calls ``during[n]`` if given (what it
    returns: the turn's error)."""

    def __init__(self, run: Callable[[], TaskRun], *answers: str, during: dict | None = None) -> None:
        self.run, self.answers, self.during = run, list(answers), during or {}
        self.sent: list[str] = []
        self.session_id = "s-1"
        self.driver = None

    def ready_again(self, limit: float) -> bool:
        return True

    def run_turn(self, prompt: str, on_received: Callable[[], None] | None = None) -> TurnTrace:
        number = len(self.sent)
        self.sent.append(prompt)
        run = self.run()
        (run.request.workspace / "answer.txt").write_text(self.answers[number])
        run.scope.tokens.record(run.scope, number, 100)
        if on_received is not None:  # Kimi's log shows the message arrived
            on_received()
        trace = TurnTrace(
            begun=True, ended=True, steps=[[f"turn {number}"]], input_tokens=90, output_tokens=10
        )
        if number in self.during:
            trace.error = self.during[number](run)
        return trace


def fix_run(tmp_path: Path, *answers: str, fix_rounds: int, max_tokens: int | None = None, **kw) -> TaskRun:
    request = TaskRequest("first", tmp_path, verify_command=CHECK, fix_rounds=fix_rounds)
    scope = Scope.detached(redactor=Redactor([SECRET]))
    scope.tokens = TokenMeter(max_tokens)
    run = TaskRun(Runner(), request, Settings(), scope=scope, environ={"HOME": str(tmp_path)})
    run.session = Kimi(lambda: run, *answers, **kw)  # type: ignore[assignment]
    run.install = KimiInstall("/k/kimi", "2.1.0", "kimi-code")
    run.before = Future()
    run.before.set_result(None)  # type: ignore[arg-type]
    return run


def test_a_failing_check_goes_back_to_kimi_until_it_passes(tmp_path: Path) -> None:
    run = fix_run(tmp_path, f"wrong {SECRET}", "41", "42", fix_rounds=3)
    run._turn("first")
    sent = run.session.sent  # type: ignore[union-attr]
    assert len(sent) == 3 and sent[0] == "first"
    assert "exit code 3" in sent[1] and CHECK in sent[1] and "got: wrong ***" in sent[1]
    assert SECRET not in sent[1]  # the output Kimi is sent is masked
    assert "got: 41" in sent[2]
    result = run._report()
    assert [(r.round, r.exit_code, r.tokens) for r in result.rounds] == [
        (0, 3, 100),
        (1, 3, 100),
        (2, 0, 100),
    ]
    assert result.rounds[0].output_tail == "got: wrong ***\n" and result.rounds[2].output_tail == ""
    assert all(r.duration_s > 0 for r in result.rounds)
    assert result.verify is not None and result.verify.passed and result.verify.command == CHECK
    assert result.success and result.usage is not None and result.usage.input_tokens == 270
    assert not [n for n in result.notes if "fix round" in n]
    assert result.messages == []  # a fix turn is no message of the caller's (none is listed as delivered)


def test_the_rounds_stop_when_fix_rounds_are_spent(tmp_path: Path) -> None:
    run = fix_run(tmp_path, "1", "2", "3", "42", fix_rounds=2)
    run._turn("first")
    assert len(run.session.sent) == 3  # type: ignore[union-attr]
    result = run._report()
    assert [r.exit_code for r in result.rounds] == [3, 3, 3]
    assert result.verify is not None and result.verify.passed is False and result.verify.exit_code == 3
    assert result.success and "verify_command still fails after 2 fix round(s) (fix_rounds)" in result.notes


def test_no_fix_rounds_asked_checks_once_and_says_nothing_more(tmp_path: Path) -> None:
    run = fix_run(tmp_path, "1", fix_rounds=0)
    run._turn("first")
    result = run._report()
    assert len(run.session.sent) == 1 and [r.round for r in result.rounds] == [0]  # type: ignore[union-attr]
    assert result.verify is not None and result.verify.passed is False
    assert not [n for n in result.notes if "fix" in n]


def test_the_rounds_stop_when_the_tokens_are_used_up(tmp_path: Path) -> None:
    run = fix_run(tmp_path, "1", "42", fix_rounds=3, max_tokens=100)
    run._turn("first")
    result = run._report()
    assert len(run.session.sent) == 1 and len(result.rounds) == 1  # type: ignore[union-attr]
    assert result.success and result.verify is not None and result.verify.passed is False
    assert any(n.startswith("no more fix rounds: the job's token limit") for n in result.notes)


def test_the_rounds_stop_at_the_deadline(tmp_path: Path) -> None:
    def late(run: TaskRun) -> None:
        run.scope.deadline = time.monotonic() - 1

    run = fix_run(tmp_path, "1", "42", fix_rounds=3, during={0: late})
    run._turn("first")
    result = run._report()
    assert len(run.session.sent) == 1 and len(result.rounds) == 1  # type: ignore[union-attr]
    assert any(n.startswith("no more fix rounds: the job's time") for n in result.notes)


def test_a_message_queued_meanwhile_is_sent_before_the_check(tmp_path: Path) -> None:
    run = fix_run(tmp_path, "1", "42", "40", fix_rounds=1)
    run.scope.inbox.send(Message("then make it 42", "queue"))
    run._turn("first")
    assert run.session.sent[:2] == ["first", "then make it 42"]  # type: ignore[union-attr]
    result = run._report()
    assert [(r.exit_code, r.tokens) for r in result.rounds] == [(0, 200)]  # one round, both turns
    assert result.verify is not None and result.verify.passed


def test_a_failed_fix_turn_ends_the_rounds_without_a_verdict(tmp_path: Path) -> None:
    run = fix_run(tmp_path, "1", "2", fix_rounds=2, during={1: lambda _run: SessionError("Kimi exited")})
    run._turn("first")
    result = run._report()
    assert len(run.session.sent) == 2 and [r.round for r in result.rounds] == [0]  # type: ignore[union-attr]
    assert result.success is False and result.error is not None and result.verify is None


def test_stop_rules_in_order() -> None:
    scope = Scope.detached()
    assert stop_reason(True, 0, 0, scope) == "passed"
    assert stop_reason(False, 2, 2, scope) == "rounds"
    assert stop_reason(False, 0, 2, scope) is None
    scope.tokens = TokenMeter(max_tokens=50)
    scope.tokens.record(scope, 0, 50)
    assert stop_reason(False, 0, 2, scope) == "budget"
    scope.tokens = TokenMeter(daily=1000, daily_used=999)
    scope.tokens.record(scope, 0, 1)
    assert budget_reached(scope.tokens) and stop_reason(False, 0, 2, scope) == "budget"
    scope.tokens = TokenMeter()
    scope.deadline = time.monotonic() - 0.1
    assert stop_reason(False, 0, 2, scope) == "deadline"


def test_the_output_tail_is_masked_then_cut() -> None:
    redactor = Redactor([SECRET])
    assert masked_tail("x" * 5000 + f"token {SECRET}\n", redactor) == ("x" * 5000 + "token ***\n")[-TAIL:]
    straddling = "z" * 100 + SECRET + "y" * (TAIL - 5)  # the secret's end is in the last TAIL characters
    assert SECRET[-5:] in straddling[-TAIL:]  # cut first, the rest of the secret would show
    tail = masked_tail(straddling, redactor)
    assert len(tail) == TAIL and SECRET[-5:] not in tail and tail == "zz***" + "y" * (TAIL - 5)


def test_a_message_sent_while_the_check_ran_is_the_next_round(tmp_path: Path) -> None:
    run = fix_run(tmp_path, "42", "42", fix_rounds=1)
    check = run.fixes._run

    def message_meanwhile(command: str):
        if not run.fixes.rounds:
            run.scope.inbox.send(Message("and keep it", "queue"))
        return check(command)

    run.fixes._run = message_meanwhile  # type: ignore[method-assign]
    run._turn("first")
    assert run.session.sent == ["first", "and keep it"]  # type: ignore[union-attr]
    result = run._report()
    assert [(r.round, r.exit_code) for r in result.rounds] == [(0, 0), (1, 0)]
    assert [(m.text, m.delivered) for m in result.messages] == [("and keep it", "next_turn")]
    assert not [n for n in result.notes if "was not sent" in n]
