"""run_verify(): a command in the copy's workspace, with its exit code, its output's end and a hard
time limit after which nothing of it is left running."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import psutil
import pytest

from kimi_mcp import worktree
from kimi_mcp.errors import BadInput, TaskCancelled, WorkspaceError
from kimi_mcp.worktree import Isolated, _verify


@pytest.fixture
def iso(repo: Path, state: Path) -> Isolated:
    return worktree.create(repo / "pkg", state, "job-1")


def gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def test_pass(iso: Isolated) -> None:
    result = worktree.run_verify(iso, "pwd; cat notes.md", 10)
    assert (result.exit_code, result.passed, result.timed_out) == (0, True, False)
    assert result.output_tail == f"{iso.workspace}\npackage notes\n"
    assert result.command == "pwd; cat notes.md"
    assert 0 <= result.duration_s < 10  # measured, within the command's time limit


def test_fail_with_exit_code_and_merged_output(iso: Isolated) -> None:
    result = worktree.run_verify(iso, "echo out; echo err >&2; exit 7", 10)
    assert (result.exit_code, result.passed, result.timed_out) == (7, False, False)
    assert result.output_tail == "out\nerr\n"


def test_git_in_the_command_sees_the_copy(iso: Isolated, monkeypatch: pytest.MonkeyPatch, repo: Path) -> None:
    monkeypatch.setenv("GIT_DIR", str(repo / ".git"))
    result = worktree.run_verify(iso, "git rev-parse --show-toplevel", 10)
    assert result.output_tail == f"{iso.checkout}\n"


def test_timeout_kills_the_whole_group(iso: Isolated) -> None:
    started = time.monotonic()
    result = worktree.run_verify(iso, "sleep 30 & echo $! > ../sleep.pid; wait", 1)
    assert time.monotonic() - started < 20  # stopped at its 1 s limit, not when the 30 s sleep ended
    assert (result.exit_code, result.passed, result.timed_out) == (None, False, True)
    assert 1 <= result.duration_s < 20
    pid = int((iso.checkout / "sleep.pid").read_text())
    assert gone(pid)


def test_term_ignoring_processes_get_killed(iso: Isolated, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_verify, "KILL_GRACE_S", 0.3)  # how long TERM may go unanswered is not tested here
    result = worktree.run_verify(iso, "trap '' TERM; sleep 30 & echo $! > ../sleep.pid; wait", 0.5)
    assert result.timed_out
    assert gone(int((iso.checkout / "sleep.pid").read_text()))


def test_background_leftovers_of_a_finished_command_are_stopped(iso: Isolated) -> None:
    result = worktree.run_verify(iso, "sleep 30 & echo $! > ../sleep.pid; echo done", 10)
    assert (result.exit_code, result.output_tail) == (0, "done\n")
    assert gone(int((iso.checkout / "sleep.pid").read_text()))


def test_output_tail_is_the_last_4000_characters(iso: Isolated) -> None:
    result = worktree.run_verify(
        iso, "i=0; while [ $i -lt 2000 ]; do echo 'ab€d'; i=$((i+1)); done; echo END", 10
    )
    assert len(result.output_tail) == 4000
    assert result.output_tail.endswith("ab€d\nEND\n")
    assert "\ufffd" not in result.output_tail[1:]


def test_bad_arguments(iso: Isolated) -> None:
    with pytest.raises(BadInput, match="empty"):
        worktree.run_verify(iso, "  ", 10)
    with pytest.raises(BadInput, match="positive"):
        worktree.run_verify(iso, "true", 0)


def test_verify_in_runs_in_a_plain_workspace_and_reads_the_asked_tail(tmp_path: Path) -> None:
    """Without isolation the command runs in the workspace itself (no git needed); ``tail_chars``: how much
    of its output's end is read (the fix rounds read more, then mask and cut)."""
    (tmp_path / "a.txt").write_text("x" * 6000)
    result = worktree.verify_in(tmp_path, "cat a.txt; echo; pwd", 10, tail_chars=5000)
    assert result.passed and result.output_tail == "x" * (4999 - len(str(tmp_path)) - 1) + f"\n{tmp_path}\n"
    with pytest.raises(WorkspaceError, match="does not exist"):
        worktree.verify_in(tmp_path / "gone", "true", 10)


def test_a_cancelled_job_stops_its_command(tmp_path: Path) -> None:
    """The job is cancelled while its command runs (once the command has said its child's pid through a
    pipe): the command's whole group is stopped and the run learns it was cancelled."""
    cancel = threading.Event()
    os.mkfifo(tmp_path / "pid")
    pids: list[int] = []

    def cancel_once_started() -> None:
        pids.append(int((tmp_path / "pid").read_text()))  # blocks until the command writes it
        cancel.set()

    threading.Thread(target=cancel_once_started, daemon=True).start()
    with pytest.raises(TaskCancelled):
        worktree.verify_in(tmp_path, "sleep 30 & echo $! > pid; wait", 60, cancel=cancel)
    assert len(pids) == 1 and gone(pids[0])
