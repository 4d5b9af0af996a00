"""Running a verification command (tests, a build) in the copy, with a hard time limit.

The command runs under ``/bin/sh -c`` in the copy's workspace, in its own session (so its whole process
group can be stopped), stdin from /dev/null, stdout and stderr into one temporary file (no pipe to fill
up). On timeout, and after it exits, whatever is left of its process group gets SIGTERM, then SIGKILL.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import tempfile
import time
from typing import IO

import psutil

from ..errors import BadInput, WorkspaceError
from ._git import scrubbed_env
from ._model import Isolated, Verify

TAIL_CHARS = 4000
KILL_GRACE_S = 2.0


def run_verify(iso: Isolated, command: str, timeout_s: float) -> Verify:
    """Run ``command`` in ``iso.workspace``; its exit code, whether it timed out, and its output's end."""
    if not isinstance(command, str) or not command.strip():
        raise BadInput("the verification command is empty")
    if not timeout_s > 0:
        raise BadInput(f"the verification timeout must be positive, not {timeout_s!r}")
    if not iso.workspace.is_dir():
        raise WorkspaceError(f"the isolated copy's workspace {iso.workspace} does not exist (discarded?)")
    with tempfile.TemporaryFile(prefix="kimi-verify-") as out:
        started = time.monotonic()
        proc = subprocess.Popen(
            ["/bin/sh", "-c", command],
            cwd=iso.workspace,
            env=scrubbed_env(),  # no GIT_DIR & co: git in the command must see the copy, not another repo
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        timed_out = False
        try:
            proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            timed_out = True
        finally:
            _stop_group(proc)
        duration = time.monotonic() - started
        tail = _tail(out)
    code = None if timed_out else proc.returncode
    return Verify(
        command=command,
        exit_code=code,
        passed=code == 0,
        timed_out=timed_out,
        duration_s=round(duration, 3),
        output_tail=tail,
    )


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


def _tail(out: IO[bytes]) -> str:
    """The last ``TAIL_CHARS`` characters of the output file (read from its end)."""
    size = out.seek(0, os.SEEK_END)
    out.seek(max(0, size - TAIL_CHARS * 4))
    return out.read().decode("utf-8", "replace")[-TAIL_CHARS:]
