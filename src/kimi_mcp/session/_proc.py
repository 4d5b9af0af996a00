"""Process-tree cleanup: nothing Kimi started may outlive the tool call."""

from __future__ import annotations

import contextlib
import os
import signal
import time

import psutil

from .._logging import get_logger

log = get_logger("proc")


def descendants(pid: int) -> list[psutil.Process]:
    """The process and all its descendants that exist now (empty if it is gone)."""
    try:
        root = psutil.Process(pid)
        return [root, *root.children(recursive=True)]
    except psutil.Error:
        return []


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
    deadline = time.monotonic() + grace
    while procs and time.monotonic() < deadline:
        _, procs = psutil.wait_procs(procs, timeout=min(0.1, max(0.0, deadline - time.monotonic())))
        procs = _alive(procs)
    if pid is not None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pid, signal.SIGKILL)
    for proc in procs:
        log.warning("process %s ignored SIGTERM for %.1fs; killing it", proc.pid, grace)
        with contextlib.suppress(psutil.Error):
            proc.kill()
    if procs:
        psutil.wait_procs(procs, timeout=2)
    return len(unique)
