"""Dirty-directory watching for the tracker with Linux inotify (how ``diff`` uses it: see ``_diff``).

``take_snapshot`` gives every directory it walks a watch *before* listing it, so anything that happens to
that directory's entries, or to a file in it, after it was listed leaves an event. ``Watcher.plan`` turns the
events into the directories ``diff`` has to look at again, or says why the watches cannot be trusted any more
(the tracker then walks the whole tree, as without a watcher).

Events are only used as "something happened in directory N": names are not even decoded. A daemon thread
drains the kernel queue (``/proc/sys/fs/inotify/max_queued_events``, 16384 by default) a few tens of
milliseconds after each burst starts, so a long turn that writes thousands of files does not overflow it;
it sleeps in ``poll`` otherwise. The mask has no access/open events: the tracker's own reads dirty nothing.
"""

from __future__ import annotations

import contextlib
import errno
import os
import select
import struct
import sys
import threading

from .._logging import get_logger

try:
    from inotify_simple import INotify
    from inotify_simple import flags as _flags
except ImportError:  # pragma: no cover - a broken install: the tracker walks instead
    INotify = None  # type: ignore[assignment,misc]

__all__ = ["DRAIN_DELAY_S", "WATCH_SHARE", "Watcher", "open_watcher"]

log = get_logger("tracker.watch")

DRAIN_DELAY_S = 0.02
"""After the first event of a burst, wait this long before reading: fewer, larger reads (and the kernel merges
an event identical to the one queued just before it). Far below the time needed to fill the queue."""

WATCH_SHARE = 4
"""Use at most 1/WATCH_SHARE of the user's ``max_user_watches``: the limit is shared with editors and other
watchers of the same user, which must not start failing because a big workspace is being tracked."""

_DEFAULT_MAX_WATCHES = 8192  # the kernel's floor, if /proc cannot tell
_READ_SIZE = 1 << 16  # one inotify event is at most 16 + NAME_MAX + 1 bytes
_EVENT = struct.Struct("iIII")  # wd, mask, cookie, len; then `len` bytes of NUL-padded name

if INotify is not None:
    MASK = (
        _flags.CREATE
        | _flags.DELETE
        | _flags.MODIFY
        | _flags.ATTRIB
        | _flags.CLOSE_WRITE
        | _flags.MOVED_FROM
        | _flags.MOVED_TO
        | _flags.DELETE_SELF
        | _flags.MOVE_SELF
        | _flags.ONLYDIR
        | _flags.DONT_FOLLOW
        | _flags.EXCL_UNLINK
    )
    _ROOT_MASK = MASK & ~_flags.DONT_FOLLOW  # the workspace root itself may be a symlink
    _OVERFLOW = int(_flags.Q_OVERFLOW)
    _UNTRUSTED = int(_flags.Q_OVERFLOW | _flags.MOVE_SELF | _flags.UNMOUNT)
    _GONE = int(_flags.DELETE_SELF | _flags.IGNORED)

_VANISHED = frozenset({errno.ENOENT, errno.ENOTDIR, errno.ELOOP, errno.EACCES})
"""add_watch errors meaning this directory cannot be listed either (gone, replaced, unreadable): the
snapshot skips it, as it skips a directory it cannot open."""


def open_watcher() -> Watcher | str:
    """A new watcher with its drain thread running, or why there is none (logged at debug)."""
    if not sys.platform.startswith("linux"):
        return _unavailable("inotify is Linux-only")
    if INotify is None:
        return _unavailable("inotify_simple cannot be imported")
    try:
        inotify = INotify(inheritable=False, nonblocking=True)
    except OSError as exc:  # EMFILE: the user's inotify instances are used up; ENOSYS...
        return _unavailable(f"inotify_init1 failed: {exc}")
    try:
        return Watcher(inotify, _watch_budget())
    except (OSError, RuntimeError) as exc:  # pipe or thread could not be created
        inotify.close()
        return _unavailable(f"watcher could not start: {exc}")


def _unavailable(reason: str) -> str:
    log.debug("tracker: not watching (%s); diffs walk the whole tree", reason)
    return reason


def _watch_budget() -> int:
    try:
        with open("/proc/sys/fs/inotify/max_user_watches", "rb") as fh:
            limit = int(fh.read())
    except (OSError, ValueError):
        limit = _DEFAULT_MAX_WATCHES
    return max(1, limit // WATCH_SHARE)


class Watcher:
    """One inotify instance (close-on-exec, non-blocking), its wd → directory map and what it has seen.

    Thread-safe: the drain thread and ``plan`` share ``_lock``. ``close`` is idempotent.
    """

    __slots__ = (
        "_inotify",
        "_fd",
        "_budget",
        "_paths",
        "_dirty",
        "_gone",
        "_broken",
        "_lock",
        "_close_lock",
        "_stop",
        "_wake",
        "_thread",
    )

    def __init__(self, inotify: INotify, budget: int) -> None:
        self._inotify = inotify
        self._fd = inotify.fileno()
        self._budget = budget
        self._paths: dict[int, str] = {}  # wd -> directory relative to the root
        self._dirty: set[int] = set()  # watches that saw an event
        self._gone: set[int] = set()  # watches whose directory was deleted (or that the kernel dropped)
        self._broken: str | None = None  # why the map cannot be trusted any more
        # Re-entrant: the snapshot's finalizer may close the watcher from any thread, the drain thread too
        # (a garbage collection can start inside ``_note``).
        self._lock = threading.RLock()
        self._close_lock = threading.RLock()
        self._stop = threading.Event()
        self._wake = os.pipe2(os.O_CLOEXEC | os.O_NONBLOCK)
        self._thread: threading.Thread | None = threading.Thread(
            target=self._run, name="kimi-tracker-watch", daemon=True
        )
        try:
            self._thread.start()
        except RuntimeError:
            for fd in self._wake:
                os.close(fd)
            raise

    @property
    def active(self) -> bool:
        """Open, and nothing has made its map untrustworthy so far."""
        return self._broken is None

    @property
    def reason(self) -> str | None:
        """Why it is not (or no longer) usable; None while active."""
        return self._broken

    def __len__(self) -> int:
        return len(self._paths)

    def watch(self, path: str, rel: str, *, root: bool = False) -> bool:
        """Watch directory ``path`` (``rel`` from the root). False if it cannot be listed either (the caller
        skips it); a failure that ends watching (watch limit, memory...) closes the watcher and returns True.
        """
        if self._broken is not None:
            return True
        if len(self._paths) >= self._budget:
            self.give_up(
                f"more than {self._budget} directories to watch (1/{WATCH_SHARE} of the user's limit)"
            )
            return True
        try:
            wd = self._inotify.add_watch(path, _ROOT_MASK if root else MASK)
        except OSError as exc:
            if exc.errno in _VANISHED and not root:
                return False
            self.give_up(f"inotify_add_watch failed: {exc}")  # ENOSPC: watch limit; ENOMEM...
            return True
        if self._paths.setdefault(wd, rel) != rel:  # one directory reached by two paths (bind mount)
            self.give_up(f"{rel!r} and {self._paths[wd]!r} are the same directory")
        return True

    def give_up(self, reason: str) -> None:
        """Stop watching for good (releasing the kernel's watches now); ``plan`` will return ``reason``."""
        with self._lock:
            if self._broken is None:
                self._broken = reason
        log.debug("tracker: stopped watching (%s); diffs walk the whole tree", reason)
        self.close()

    def plan(self) -> tuple[set[str], set[str]] | str:
        """Read what is queued, then ``(dirty, gone)`` directories, or why the whole tree must be walked.

        ``dirty``: watched directories where something happened. ``gone``: watched directories that were
        deleted (one may have been recreated since, unwatched). Not consumed: the next call includes them.
        """
        with self._lock:
            if self._broken is None:
                self._drain()
            if self._broken is not None:
                return self._broken
            paths = self._paths
            try:
                return {paths[wd] for wd in self._dirty}, {paths[wd] for wd in self._gone}
            except KeyError:
                return "an event for an unknown watch"

    def close(self) -> None:
        """Stop the drain thread and close the inotify instance (releasing every watch). Idempotent."""
        with self._close_lock:
            thread, self._thread = self._thread, None
            if thread is None:
                return
            self._stop.set()
            with contextlib.suppress(OSError):
                os.write(self._wake[1], b"x")
            if thread is not threading.current_thread():
                thread.join()
            with self._lock:
                if self._broken is None:
                    self._broken = "closed"
                self._fd = -1
                self._inotify.close()
                for fd in self._wake:
                    os.close(fd)

    # ------------------------------------------------------------------------------------------ draining

    def _run(self) -> None:
        poller = select.poll()
        poller.register(self._fd, select.POLLIN)
        poller.register(self._wake[0], select.POLLIN)
        while not self._stop.is_set():
            try:
                ready = poller.poll()
            except InterruptedError:  # pragma: no cover - retried by Python itself since 3.5
                continue
            if self._stop.wait(DRAIN_DELAY_S) or any(fd == self._wake[0] for fd, _ in ready):
                return
            with self._lock:
                if self._broken is None:
                    self._drain()
                if self._broken is not None:
                    return  # nothing more to learn: diffs walk the tree now

    def _drain(self) -> None:
        """Read every queued event (caller holds ``_lock``)."""
        while self._broken is None:
            try:
                data = os.read(self._fd, _READ_SIZE)
            except BlockingIOError:
                return
            except OSError as exc:
                self._broken = f"reading inotify events failed: {exc}"
                return
            if not data:
                return
            self._note(data)

    def _note(self, data: bytes) -> None:
        dirty, gone = self._dirty, self._gone
        unpack = _EVENT.unpack_from
        pos, end = 0, len(data)
        while pos < end:
            wd, mask, _cookie, name_len = unpack(data, pos)
            pos += _EVENT.size + name_len
            if mask & _UNTRUSTED:
                self._broken = _untrusted_reason(mask)
                return
            if mask & _GONE:
                gone.add(wd)
            else:
                dirty.add(wd)


def _untrusted_reason(mask: int) -> str:
    if mask & _OVERFLOW:
        return "the inotify event queue overflowed"
    if mask & _flags.MOVE_SELF:
        return "a watched directory was moved or renamed"
    return "a watched filesystem was unmounted"
