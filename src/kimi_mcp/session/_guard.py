"""A Kimi's guard: nothing a Kimi starts outlives the kimi-mcp server, however the server ends (SIGKILL too).

The session starts ``python -I -S _guard.py SERVER_PID -- KIMI_ARGV...`` on Kimi's pty instead of Kimi. The
guard makes itself a child subreaper (Linux ``PR_SET_CHILD_SUBREAPER``: what Kimi starts and then leaves
behind, e.g. a command Kimi Code runs in a session of its own, becomes the guard's child instead of init's),
runs Kimi as its child in the same pty and process group, and exits with Kimi's status. It kills every
process left below it when Kimi exits, when its parent (the server) is gone, when the pty hangs up or when
it is asked to stop (SIGTERM). A parent-death signal would not do: it fires when the *thread* that started
Kimi ends, and a standby outlives that thread.

Standard library only, and nothing of kimi_mcp is imported: with ``-I -S`` it starts in milliseconds.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import sys
import time

PR_SET_CHILD_SUBREAPER = 36
CHECK_S = 0.25  # how often the guard looks whether the server is still its parent
TERM_GRACE_S = 1.0  # after SIGTERM, what is left below the guard is killed


def main(argv: list[str]) -> int:
    server, kimi = int(argv[1]), argv[3:]
    if argv[2] != "--" or not kimi:
        print("usage: _guard.py SERVER_PID -- KIMI_ARGV...", file=sys.stderr)
        return 2
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    child = os.fork()
    if child == 0:
        try:
            os.execvp(kimi[0], kimi)
        except OSError as exc:
            print(f"kimi-mcp: cannot start {kimi[0]}: {exc}", file=sys.stderr)
        os._exit(127)
    stop: list[str] = []
    signal.signal(signal.SIGHUP, lambda *_: stop.append("the terminal hung up"))
    signal.signal(signal.SIGTERM, lambda *_: stop.append("asked to stop"))
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a Ctrl-C on the pty is Kimi's to handle
    signal.signal(signal.SIGQUIT, signal.SIG_IGN)
    signal.signal(signal.SIGCHLD, lambda *_: None)  # pending while blocked: sigtimedwait wakes on it
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGCHLD})
    status = _watch(server, child, stop)
    _kill_all_below()
    return status


def _watch(server: int, child: int, stop: list[str]) -> int:
    """Wait for Kimi to exit (its exit code, as a shell reports it), or for a reason to stop it."""
    while True:
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return 1
            if pid == 0:
                break
            if pid == child:
                return os.WEXITSTATUS(status) if os.WIFEXITED(status) else 128 + os.WTERMSIG(status)
        if stop or os.getppid() != server:
            with contextlib.suppress(ProcessLookupError):
                os.kill(child, signal.SIGTERM)
            _reap_for(child, TERM_GRACE_S)
            return 128 + signal.SIGTERM
        signal.sigtimedwait({signal.SIGCHLD}, CHECK_S)


def _reap_for(child: int, seconds: float) -> None:
    """Give Kimi ``seconds`` to exit after SIGTERM, reaping what ends meanwhile."""
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        try:
            pid, _status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == child:
            return
        if pid == 0:
            signal.sigtimedwait({signal.SIGCHLD}, 0.05)


def _kill_all_below() -> None:
    """SIGKILL every process below the guard (orphans were re-parented to it), until none is left."""
    for _round in range(50):
        below = _descendants(os.getpid())
        for pid in below:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        try:
            while os.waitpid(-1, os.WNOHANG)[0] != 0:
                pass
        except ChildProcessError:
            return
        if not below:
            signal.sigtimedwait({signal.SIGCHLD}, 0.02)


def _descendants(root: int) -> list[int]:
    """Every process below ``root`` (from ``/proc/<pid>/task/<tid>/children``, else a scan of ``/proc``)."""
    found: list[int] = []
    todo = [root]
    while todo:
        pid = todo.pop()
        kids = _children(pid)
        found += kids
        todo += kids
    return found


def _children(pid: int) -> list[int]:
    kids = child_pids(pid)
    return _children_by_scan(pid) if kids is None else kids


def child_pids(pid: int) -> list[int] | None:
    """The pids of ``pid``'s children ([] if it is gone), ``None`` where the kernel offers no
    ``children`` file (``_proc`` reads Kimi's tree with it too)."""
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except FileNotFoundError:
        return []
    except OSError:
        return None
    kids: list[int] = []
    for tid in tasks:
        try:
            with open(f"/proc/{pid}/task/{tid}/children", "rb") as handle:
                kids += [int(field) for field in handle.read().split()]
        except (FileNotFoundError, ProcessLookupError):
            if not os.path.exists(f"/proc/{pid}/task/{tid}"):
                continue  # the thread ended meanwhile
            return None
        except OSError:
            return None
    return kids


def _children_by_scan(pid: int) -> list[int]:
    """Where the kernel has no ``children`` files: every process whose parent is ``pid``."""
    kids = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat", "rb") as handle:
                    fields = handle.read().rsplit(b")", 1)[1].split()
            except OSError:
                continue
            if int(fields[1]) == pid:
                kids.append(int(entry))
    return kids


if __name__ == "__main__":
    sys.exit(main(sys.argv))
