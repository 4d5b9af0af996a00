"""Running a verification command (tests, a build) in a workspace (an isolated copy's, or the caller's own),
with a hard time limit.

The command runs under ``/bin/sh -c`` in the workspace, in its own session (so its whole process group can
be stopped), stdin from /dev/null, stdout and stderr into one temporary file (no pipe to fill up). On
timeout, on cancellation (the job's cancel event, looked at every 0.1 s), and after it exits, whatever is
left of its process group gets SIGTERM, then SIGKILL.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import tempfile
import threading
import time
from pathlib import Path
from typing import IO

import psutil

from ..errors import BadInput, TaskCancelled, WorkspaceError
from ._git import scrubbed_env
from ._model import Isolated, Verify

TAIL_CHARS = 4000
KILL_GRACE_S = 2.0
CANCEL_LOOK_S = 0.1


def run_verify(iso: Isolated, command: str, timeout_s: float) -> Verify:
    """Run ``command`` in ``iso.workspace``; its exit code, whether it timed out, and its output's end."""
    if not iso.workspace.is_dir():
        raise WorkspaceError(f"the isolated copy's workspace {iso.workspace} does not exist (discarded?)")
    return verify_in(iso.workspace, command, timeout_s)


def verify_in(
    workspace: Path,
    command: str,
    timeout_s: float,
    *,
    cancel: threading.Event | None = None,
    tail_chars: int = TAIL_CHARS,
) -> Verify:
    """Run ``command`` in ``workspace``; its exit code, whether it timed out, and the last ``tail_chars``
    characters of its output. ``cancel`` set while it runs: it is stopped and ``TaskCancelled`` raised."""
    if not isinstance(command, str) or not command.strip():
        raise BadInput("the verification command is empty")
    if not timeout_s > 0:
        raise BadInput(f"the verification timeout must be positive, not {timeout_s!r}")
    if not workspace.is_dir():
        raise WorkspaceError(f"the workspace {workspace} does not exist")
    with tempfile.TemporaryFile(prefix="kimi-verify-") as out:
        started = time.monotonic()
        proc = subprocess.Popen(
            ["/bin/sh", "-c", command],
            cwd=workspace,
            env=scrubbed_env(),  # no GIT_DIR & co: git in the command must see the workspace's repository
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        try:
            ended = _wait(proc, started + timeout_s, cancel)
        finally:
            _stop_group(proc)
        duration = time.monotonic() - started
        tail = _tail(out, tail_chars)
    if ended == "cancelled":
        raise TaskCancelled("the tool call was cancelled", details={"phase": "verify"})
    timed_out = ended == "timed_out"
    code = None if timed_out else proc.returncode
    return Verify(
        command=command,
        exit_code=code,
        passed=code == 0,
        timed_out=timed_out,
        duration_s=round(duration, 3),
        output_tail=tail,
    )


def _wait(proc: subprocess.Popen[bytes], deadline: float, cancel: threading.Event | None) -> str:
    """Wait for the command until ``deadline`` (monotonic): "exited", "timed_out" or "cancelled"."""
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            return "timed_out"
        try:
            proc.wait(timeout=left if cancel is None else min(left, CANCEL_LOOK_S))
            return "exited"
        except subprocess.TimeoutExpired:
            if cancel is not None and cancel.is_set():
                return "cancelled"


def _stop_group(proc: subprocess.Popen[bytes]) -> None:
    """SIGTERM the command's process group, SIGKILL what is left after a grace period, reap the shell."""
    pgid = proc.pid  # start_new_session: the shell leads its own group
    if not _group_alive(pgid) and proc.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGTERM)
    deadline = time.monotonic() + KILL_GRACE_S
    while time.monotonic() < deadline:
        proc.poll()
        if not _group_alive(pgid):
            break
        time.sleep(0.02)
    else:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pgid, signal.SIGKILL)
    proc.wait()
    deadline = time.monotonic() + KILL_GRACE_S
    while _group_alive(pgid) and time.monotonic() < deadline:  # killed members still being reaped
        time.sleep(0.01)


def _group_alive(pgid: int) -> bool:
    """Whether any process of the group still runs (zombies waiting for a parent to reap them don't)."""
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    for proc in psutil.process_iter(["status"]):
        with contextlib.suppress(psutil.Error, OSError):
            if os.getpgid(proc.pid) == pgid and proc.info["status"] != psutil.STATUS_ZOMBIE:
                return True
    return False


def _tail(out: IO[bytes], chars: int = TAIL_CHARS) -> str:
    """The last ``chars`` characters of the output file (read from its end)."""
    size = out.seek(0, os.SEEK_END)
    out.seek(max(0, size - chars * 4))
    return out.read().decode("utf-8", "replace")[-chars:]
