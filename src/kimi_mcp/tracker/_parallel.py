"""The full walk of ``diff`` (``walk_full``), part of it in a forked helper process on big trees."""

from __future__ import annotations

import contextlib
import dataclasses
import gc
import marshal
import os
import select
import signal
import sys
import time
import warnings
from collections.abc import Iterator

from ._fs import CHUNK
from ._model import Changes, TrackerOptions
from ._records import DirRecord
from ._snapshot import Snapshot
from ._walk import DiffWalk, Findings

__all__ = ["CHILD_TIMEOUT_S", "PARALLEL_MIN_FILES", "parallel_ok", "walk_full"]

PARALLEL_MIN_FILES = 20_000
"""Below this many tracked files a forked helper costs more than it saves."""
_EXPAND_LIMIT = 64
_FINDINGS = len(dataclasses.fields(Findings))

CHILD_TIMEOUT_S = 60.0
"""The forked walker must finish within this; otherwise it is killed and the parent walks its part."""


def walk_full(before: Snapshot, options: TrackerOptions, *, forked: bool | None = None) -> Changes:
    """Walk the whole tree again and compare it with ``before``.

    On Linux with 2+ usable CPUs and at least ``PARALLEL_MIN_FILES`` tracked files, part of the tree is
    walked by a forked child process: it inherits ``before`` (it only reads the small in-memory index, so
    few pages get copied, and the records' mapping, which is shared), walks, sends back its findings and
    ``_exit``s; if it fails, that part is walked in-process. ``options.fork`` False disables this.
    ``forked`` overrides that decision (True: fork a helper whatever the tree's size; tests).
    """
    walk = DiffWalk.start(before, options)
    if not (parallel_ok(before, options) if forked is None else forked):
        walk.walk([""])
        return walk.finish()
    items: list[str] = []
    walk.scan("", items)
    weights = _subtree_weights(before.tree.dirs)
    items = _expand(walk, items, weights)
    mine, theirs = _split(items, weights)
    child = _fork_walk(walk.fresh(), theirs) if theirs else None
    try:
        walk.walk(mine)
    finally:
        found = _join_child(child) if child is not None else None
    if found is None:
        walk.walk(theirs)
    else:
        walk.found.merge(found)
    return walk.finish()


def parallel_ok(before: Snapshot, options: TrackerOptions) -> bool:
    """Whether the full walk of ``before`` forks a helper."""
    if not options.fork or len(before) < PARALLEL_MIN_FILES:
        return False
    if not sys.platform.startswith("linux") or not hasattr(os, "fork"):
        return False
    try:
        cpus = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cpus = os.cpu_count() or 1
    return cpus >= 2


def _subtree_weights(dirs: dict[str, DirRecord]) -> dict[str, int]:
    """The number of tracked files in each snapshot directory's subtree (to balance parallel diffs)."""
    weights = {rel: record.count for rel, record in dirs.items()}
    for rel in sorted(dirs, key=lambda r: r.count("/"), reverse=True):
        if rel and (parent := rel.rpartition("/")[0]) in weights:
            weights[parent] += weights[rel]
    return weights


def _expand(walk: DiffWalk, items: list[str], weights: dict[str, int]) -> list[str]:
    """Scan the heaviest subtrees in-process until no single one holds more than a quarter of the work."""
    for _ in range(_EXPAND_LIMIT):
        if not items:
            break
        heavy = max(items, key=lambda rel: weights.get(rel, 0))
        if weights.get(heavy, 0) * 4 <= sum(weights.get(rel, 0) for rel in items):
            break
        items.remove(heavy)
        walk.scan(heavy, items)
    return items


def _split(items: list[str], weights: dict[str, int]) -> tuple[list[str], list[str]]:
    """Greedy two-way partition of subtrees by snapshot weight."""
    bins: tuple[list[str], list[str]] = ([], [])
    loads = [0, 0]
    for rel in sorted(items, key=lambda r: weights.get(r, 0), reverse=True):
        i = 0 if loads[0] <= loads[1] else 1
        bins[i].append(rel)
        loads[i] += weights.get(rel, 0)
    return bins


def _fork_walk(walk: DiffWalk, items: list[str]) -> tuple[int, int] | None:
    """Walk ``items`` in a forked child: (pid, read end of its result pipe), or None if fork failed."""
    read_fd, write_fd = os.pipe()
    try:
        with _quiet_fork_warning():
            pid = os.fork()
    except OSError:
        os.close(read_fd)
        os.close(write_fd)
        return None
    if pid == 0:  # child: never returns
        code = 1
        try:
            os.close(read_fd)
            gc.disable()
            walk.walk(list(items))
            payload = memoryview(marshal.dumps(walk.found.lists()))
            while payload:
                payload = payload[os.write(write_fd, payload) :]
            code = 0
        finally:
            os._exit(code)
    os.close(write_fd)
    return pid, read_fd


@contextlib.contextmanager
def _quiet_fork_warning() -> Iterator[None]:
    """3.12+ warns about forking a multi-threaded process; our child only makes syscalls, then ``_exit``s."""
    if sys.version_info < (3, 12):
        yield
        return
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        yield


def _join_child(child: tuple[int, int], timeout: float = CHILD_TIMEOUT_S) -> tuple[list[str], ...] | None:
    """The child's findings, or None if it failed or hung (the caller then walks its part itself)."""
    pid, read_fd = child
    chunks: list[bytes] = []
    deadline = time.monotonic() + timeout
    try:
        while True:
            left = deadline - time.monotonic()
            ready, _, _ = select.select([read_fd], [], [], max(0.0, left))
            if not ready:  # hung (e.g. a lock inherited across fork): never let diff() hang
                chunks = []
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
                break
            chunk = os.read(read_fd, CHUNK)
            if not chunk:
                break
            chunks.append(chunk)
    except OSError:
        chunks = []
    finally:
        os.close(read_fd)
        try:
            _, status = os.waitpid(pid, 0)
        except ChildProcessError:  # reaped by someone else's SIGCHLD handling: trust a complete payload
            status = 0
    if not chunks or os.waitstatus_to_exitcode(status) != 0:
        return None
    try:
        found = marshal.loads(b"".join(chunks))
    except (EOFError, ValueError, TypeError):
        return None
    return found if isinstance(found, tuple) and len(found) == _FINDINGS else None
