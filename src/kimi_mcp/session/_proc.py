"""Process-tree cleanup: nothing Kimi started may outlive the tool call."""

from __future__ import annotations

import contextlib
import os
import signal
import time

import psutil

from .._logging import get_logger
from ._guard import child_pids

log = get_logger("proc")

WAIT_STEP = 0.05  # seconds between looks at processes that were asked to end


def descendants(pid: int) -> list[psutil.Process]:
    """The process and all its descendants that exist now (empty if it is gone).

    On Linux the tree is read from ``/proc/<pid>/task/<tid>/children`` (a few small reads per process of
    the tree) instead of psutil's scan of every process on the machine: the session records Kimi's tree
    twice a second while a turn runs."""
    try:
        root = psutil.Process(pid)
    except psutil.Error:
        return []
    found = [root]
    todo = [pid]
    while todo:
        kids = child_pids(todo.pop())
        if kids is None:  # no /proc children files here: psutil's scan
            try:
                return [root, *root.children(recursive=True)]
            except psutil.Error:
                return []
        for kid in kids:
            with contextlib.suppress(psutil.Error):
                found.append(psutil.Process(kid))
                todo.append(kid)
    return found


def _alive(procs: list[psutil.Process]) -> list[psutil.Process]:
    alive = []
    for proc in procs:
        try:
            if proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE:
                alive.append(proc)
        except psutil.Error:
            pass
    return alive


def terminate_tree(pid: int | None, known: list[psutil.Process] | None = None, grace: float = 5.0) -> int:
    """SIGTERM the process group of ``pid`` and every known/current descendant, then SIGKILL after ``grace``.

    ``known`` are processes recorded earlier (they may have been re-parented since). Returns how many
    processes had to be signalled.
    """
    procs = list(known or [])
    if pid is not None:
        procs += descendants(pid)
    unique = {p.pid: p for p in procs}
    procs = _alive(list(unique.values()))
    if pid is not None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pid, signal.SIGTERM)
    for proc in procs:
        with contextlib.suppress(psutil.Error):
            proc.terminate()
    procs = _wait_gone(procs, grace)
    if pid is not None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pid, signal.SIGKILL)
    for proc in procs:
        log.warning("process %s ignored SIGTERM for %.1fs; killing it", proc.pid, grace)
        with contextlib.suppress(psutil.Error):
            proc.kill()
    _wait_gone(procs, 2.0)
    return len(unique)


def _wait_gone(procs: list[psutil.Process], limit: float) -> list[psutil.Process]:
    """Wait until ``procs`` are gone (or zombies), at most ``limit`` seconds; returns those still alive.
    Never reaps: Kimi is pexpect's child, and a ``waitpid`` here would leave pexpect unable to tell it
    exited (its reader would fail with "no child process")."""
    end = time.monotonic() + limit
    procs = _alive(procs)
    while procs and time.monotonic() < end:
        time.sleep(min(WAIT_STEP, max(0.0, end - time.monotonic())))
        procs = _alive(procs)
    return procs
