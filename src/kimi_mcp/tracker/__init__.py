"""Workspace snapshots: what Kimi created, modified or deleted during a turn, and the new contents.

``take_snapshot`` walks the tree once, recording a stat key ``(size, mtime_ns, ctime_ns, inode)`` and an
xxh3-64 content hash for every tracked file. ``diff`` walks again, trusting an identical stat key (git's
"racily clean" rule aside) and re-hashing only files whose stat changed, so rewriting a file with identical
content is not a modification while an edit hidden behind ``os.utime`` still is (ctime moves).

What is tracked: regular files and symlinks (the link itself: retargeting is a modification, the target is
never read), outside excluded directories (by basename anywhere) and git-ignored paths. Symlinked directories
are not followed; FIFOs, sockets and devices are skipped.

Ignore rules and rule changes: a path that existed at snapshot time keeps the classification it had then,
and only paths that appeared since are matched against the current ignore rules. So editing ``.gitignore``
during the turn neither reports still-present files as deleted nor floods previously-ignored files in as
created, while new build output under a new ignore pattern stays hidden.

Watching (Linux): ``take_snapshot`` also opens an inotify instance (``_watch.py``) and watches every directory
it walks *before* listing it (create, delete, modify, attrib, close_write, moves, delete_self, move_self; no
access/open events, so the tracker's own reads dirty nothing). Anything that happens in a directory after
it was listed therefore leaves an event, and ``diff`` re-examines only the *dirty* directories with the same
per-directory code as the full walk: listing, stat fast path, re-hash when needed, ignore rules for new
paths. A subdirectory that is new (or was deleted and recreated, so unwatched) is walked whole; one that
vanished has all its files reported deleted; every other directory is taken as unchanged without being
touched. Directories the watcher cannot vouch for are scanned every time: those holding a file that was
unreadable or had other hard links at snapshot time (a write through another name leaves no event here),
and the parents of directories the snapshot had to skip. A daemon thread drains the kernel queue during
the turn so a burst of writes does not overflow it. The snapshot owns the instance: ``Snapshot.close()``.

Fallbacks: ``diff`` walks the whole tree, exactly as without a watcher, when watching never started (not
Linux, ``KIMI_MCP_TRACKER_WATCH=0``, no inotify instance left, the watch limit reached: at most a quarter
of ``max_user_watches`` is used) or can no longer be trusted: the event queue overflowed, a watched
directory was moved or renamed (its watches would map to stale paths; a new, unwatched directory may be
renamed freely), a filesystem was unmounted, the root was replaced, a changed directory cannot be read, or
a new or changed file has other hard links (written through another name, a file leaves no event in its
own directory). ``Changes.method`` and ``Changes.reason`` say which path was taken. Limits shared with
every inotify user: writes that leave no event are not seen (a file given a second name *after* the
snapshot where no tracked directory sees it, outside the workspace or in an ignored or excluded directory,
and written through that name; a shared ``mmap`` still mapped when ``diff`` runs, whose ``close_write``
comes at unmap; changes made by another machine on a network filesystem); set ``KIMI_MCP_TRACKER_WATCH=0``
where that matters.

Memory: what is per tracked file (its name, size/mtime/ctime, inode, content hash and a kind byte: about 61
bytes, 6 MB for 100k files) is not kept in memory. ``take_snapshot`` encodes each directory's records into one
block as soon as the directory is listed and appends it to an anonymous temporary file (``_spill.py``: in
``tempfile.gettempdir()``, never inside the workspace, unlinked from the start so nothing can be left behind,
close-on-exec), written through a small buffer; at the end the file is mapped read-only and its descriptor
closed. In memory stays a packed record per directory (where its block is, its xxh3 checksum, its file count
and stat: a few bytes per file on a typical tree). ``diff`` reads back the blocks of the directories it
re-examines (the watched diff: the dirty ones; the full walk, and its forked helper: each directory as it
gets there), checks them, and drops the pages from the mapping again, so the process's resident set does not
grow. The file goes when the snapshot is garbage-collected (``close()`` only stops watching: ``diff`` still
works after it). When no temporary file can be had (the temporary directory is missing, read-only, inside the
workspace or full, or ``KIMI_MCP_TRACKER_SPILL=0``) the blocks are kept in memory instead, with the same
result (logged at debug).

POSIX only (directory file descriptors, ``O_NOFOLLOW``).
"""

from __future__ import annotations

import codecs
import contextlib
import errno
import gc
import marshal
import os
import select
import signal
import stat as stat_mod
import struct
import sys
import time
import warnings
import weakref
from array import array
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal, NamedTuple

from xxhash import xxh3_64, xxh3_64_intdigest

from .._logging import get_logger
from ..config import DEFAULT_EXCLUDED_DIRS
from ..secrets import is_secret_path
from ._ignore import IgnoreRules, chain_ignores
from ._spill import Records, open_records
from ._watch import Watcher, open_watcher

__all__ = [
    "Changes",
    "ContentReport",
    "Snapshot",
    "TrackerOptions",
    "TruncatedItem",
    "collect_contents",
    "diff",
    "take_snapshot",
]

log = get_logger("tracker")

RACY_WINDOW_NS = 50_000_000
"""A file whose mtime/ctime is this close to (or after) the snapshot start may change again without its
stat key changing (timestamp granularity), so it is always re-hashed by ``diff``."""
_COARSE_RACY_WINDOW_NS = 2_000_000_000  # whole-second timestamps (FAT has 2 s): widen the window
_SECOND_NS = 1_000_000_000

TRUST_DIR_STAT = True
"""Skip listing a directory whose (mtime, ctime, inode) are those recorded at snapshot time: creating,
deleting or renaming an entry always updates the directory's mtime and ctime on POSIX filesystems (git's
untracked cache relies on the same rule). Known files in it are still lstat'ed one by one."""

_CHUNK = 1 << 20
_BINARY_SNIFF = 8192
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | getattr(os, "O_CLOEXEC", 0)
_SUBDIR_FLAGS = _DIR_FLAGS | getattr(os, "O_NOFOLLOW", 0)
# O_NONBLOCK: a file swapped for a FIFO between stat and open must not block us.
_FILE_FLAGS = os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
_O_NOATIME = getattr(os, "O_NOATIME", 0)
_S_ISREG = stat_mod.S_ISREG
_S_ISLNK = stat_mod.S_ISLNK
_S_ISDIR = stat_mod.S_ISDIR

_EMPTY: frozenset[str] = frozenset()
_UNTRACKABLE = object()  # identity of something that is neither a regular file nor a symlink


@dataclass(frozen=True, slots=True)
class TrackerOptions:
    """What to track and how much content to return."""

    extra_excluded_dirs: frozenset[str] = frozenset()
    respect_gitignore: bool = True
    max_file_chars: int = 20_000
    max_total_chars: int = 60_000


@dataclass
class Changes:
    """Sorted POSIX paths relative to the root.

    ``method`` says how ``diff`` found them: ``"watched"`` (only directories the watcher saw change were
    re-examined) or ``"full"`` (the whole tree was walked), and ``reason`` why the full walk was used. Both
    are diagnostics: they take no part in ``==``.
    """

    created: list[str] = field(default_factory=list)
    modified: list[str] = field(default_factory=list)
    deleted: list[str] = field(default_factory=list)
    method: Literal["watched", "full"] = field(default="full", compare=False)
    reason: str | None = field(default=None, compare=False)

    def without(self, prefixes: tuple[str, ...]) -> Changes:
        """These changes minus the paths in (or equal to) any of ``prefixes`` (relative directories)."""
        if not prefixes:
            return self

        def keep(paths: list[str]) -> list[str]:
            return [p for p in paths if not any(p == d or p.startswith(d + "/") for d in prefixes)]

        return Changes(keep(self.created), keep(self.modified), keep(self.deleted), self.method, self.reason)


@dataclass
class TruncatedItem:
    path: str
    reason: Literal["file_too_large", "total_budget"]
    size_bytes: int
    returned_chars: int


@dataclass
class ContentReport:
    """Contents of created/modified files, within budgets.

    Symlinks (and any path that resolves outside the root) never have content read and are listed in
    ``binary_files``.
    """

    file_contents: dict[str, str] = field(default_factory=dict)
    binary_files: list[str] = field(default_factory=list)
    secret_files: list[str] = field(default_factory=list)
    truncated: list[TruncatedItem] = field(default_factory=list)
    lossy_decoded: list[str] = field(default_factory=list)


_KIND_FILE, _KIND_LINK, _KIND_UNKNOWN = 0, 1, 2  # what a file's hash field holds

# A directory in memory: its block's offset, length, checksum; tracked files; mtime_ns, ctime_ns, inode; stat known.
_DIR = struct.Struct("=QQQIqqQ?")
_BLOCK = struct.Struct("=IIII")  # tracked files, subdirectories, ignored files, ignored directories


class _Dir:
    """One walked directory of a snapshot, as held in memory: where its records are (a block of the
    snapshot's ``Records``, with its xxh3 checksum), how many tracked files they describe, and the
    directory's own ``stat``. Packed into one bytes object: about 220 bytes per directory, with its dict entry
    and key."""

    __slots__ = ("_packed",)

    def __init__(self, block: tuple[int, int, int], count: int, stat: tuple[int, int, int] | None) -> None:
        self._packed = _DIR.pack(*block, count, *(stat or (0, 0, 0)), stat is not None)

    @property
    def block(self) -> tuple[int, int, int]:
        """``(offset, length, checksum)`` of the directory's records; length 0 if it has none."""
        return _DIR.unpack_from(self._packed)[:3]  # type: ignore[return-value]

    @property
    def count(self) -> int:
        """Tracked files in the directory."""
        return _DIR.unpack_from(self._packed)[3]

    @property
    def stat(self) -> tuple[int, int, int] | None:
        """(mtime_ns, ctime_ns, inode) taken before listing; None if racy."""
        *_, mtime, ctime, inode, known = _DIR.unpack(self._packed)
        return (mtime, ctime, inode) if known else None

    @stat.setter
    def stat(self, stat: tuple[int, int, int] | None) -> None:
        self._packed = _DIR.pack(*self.block, self.count, *(stat or (0, 0, 0)), stat is not None)


def _frozen(names: list[str]) -> frozenset[str]:
    return frozenset(names) if names else _EMPTY


class _Files:
    """A directory's records, read back from its block: the tracked files' ``names`` and, slot by slot, their
    ``stats`` (size, -1 if racy: always re-hash; mtime_ns; ctime_ns), ``inodes``, ``hashes`` and ``kinds``
    (see ``ident``); the ``subdirs`` walked, and the entries found ignored at snapshot time."""

    __slots__ = ("names", "stats", "inodes", "hashes", "kinds", "subdirs", "ign_files", "ign_dirs")

    def __init__(self, block: bytes | bytearray) -> None:
        n, n_sub, n_ign_files, n_ign_dirs = _BLOCK.unpack_from(block)
        view = memoryview(block)
        start = _BLOCK.size
        self.stats = view[start : start + 24 * n].cast("q")
        start += 24 * n
        self.inodes = view[start : start + 8 * n].cast("Q")
        start += 8 * n
        self.hashes = view[start : start + 8 * n].cast("Q")
        start += 8 * n
        self.kinds = view[start : start + n]
        text = str(view[start + n :], "utf-8", "surrogatepass")
        strings = text.split("\0") if text else []
        self.names = strings[:n]
        end = n + n_sub
        self.subdirs = _frozen(strings[n:end])
        self.ign_files = _frozen(strings[end : end + n_ign_files])
        self.ign_dirs = _frozen(strings[end + n_ign_files : end + n_ign_files + n_ign_dirs])

    def ident(self, j: int) -> int | None:
        """The ``_ident`` recorded for slot ``j``."""
        kind = self.kinds[j]
        if kind == _KIND_FILE:
            return self.hashes[j]
        if kind == _KIND_LINK:
            return -1 - self.hashes[j]
        return None


def _encode_block(
    names: list[str],
    stats: array,
    inodes: array,
    hashes: array,
    kinds: bytearray,
    subdirs: Iterable[str],
    ign_files: Iterable[str],
    ign_dirs: Iterable[str],
) -> bytes:
    """A directory's records (see ``_Files``): counts, then the fixed-size fields column by column, then the
    names, NUL-separated UTF-8 (lone surrogates from undecodable names round-trip)."""
    subdirs, ign_files, ign_dirs = list(subdirs), list(ign_files), list(ign_dirs)
    text = "\0".join([*names, *subdirs, *ign_files, *ign_dirs]).encode("utf-8", "surrogatepass")
    counts = _BLOCK.pack(len(names), len(subdirs), len(ign_files), len(ign_dirs))
    return b"".join((counts, stats, inodes, hashes, kinds, text))


_NO_FILES = _Files(_BLOCK.pack(0, 0, 0, 0))


class _FileRecord(NamedTuple):
    """What a snapshot recorded for one tracked file (tests and debugging)."""

    size: int
    mtime_ns: int
    ctime_ns: int
    inode: int
    ident: int | None


class Snapshot:
    """The state of a tree at one moment; opaque apart from ``root``, ``started_ns``, ``watching`` and ``len()``.

    Small: what is per tracked file (its name, size/mtime/ctime, inode, content hash, one kind byte: about 61
    bytes) lives in the snapshot's ``Records`` (``_spill``: an anonymous temporary file, mapped but not read
    into memory), one block per directory; in memory it keeps a packed ``_Dir`` per directory (~220 bytes:
    where its block is, its stat) and little else, so ~2.5 bytes per file on a typical tree. ``diff`` reads
    the blocks of the directories it re-examines. Nothing per file is a Python object that lives between
    diffs, and a forked helper shares the mapping.

    It may own an inotify watcher (see the module docstring): ``close()`` it, or use the snapshot as a
    context manager, once done diffing; ``diff`` never closes it. An unclosed snapshot closes its watcher
    when it is garbage-collected; its records go with it.
    """

    __slots__ = (
        "root",
        "started_ns",
        "_dirs",
        "_records",
        "_files",
        "_spec_cache",
        "_root_id",
        "_rescan",
        "_watch",
        "_unwatched",
        "_finalizer",
        "__weakref__",
    )

    def __init__(
        self, root: Path, started_ns: int, builder: _Builder, spec_cache: dict, watch: Watcher | str
    ) -> None:
        self.root = root
        self.started_ns = started_ns
        self._dirs = builder.dirs
        self._records = builder.records
        self._files = builder.files
        self._spec_cache = spec_cache
        self._root_id = builder.root_id
        self._rescan = frozenset(builder.rescan)  # directories the watcher cannot vouch for: always scanned
        self._watch: Watcher | None = None
        self._finalizer: weakref.finalize | None = None
        if isinstance(watch, Watcher) and watch.active:
            self._watch = watch
            self._unwatched: str | None = None
            self._finalizer = weakref.finalize(self, watch.close)
        else:
            self._unwatched = watch if isinstance(watch, str) else watch.reason

    def __len__(self) -> int:
        return self._files

    def __repr__(self) -> str:
        return f"Snapshot(root={str(self.root)!r}, files={len(self)}, dirs={len(self._dirs)})"

    @property
    def watching(self) -> bool:
        """True while an inotify watcher can still narrow ``diff`` down to the directories that changed."""
        return self._watch is not None and self._watch.active

    def close(self) -> None:
        """Stop watching: end the watcher's thread and close its inotify descriptor. Idempotent; ``diff``
        still works afterwards (it walks the whole tree). The records hold no descriptor; they are released
        with the snapshot."""
        if self._finalizer is not None:
            self._finalizer()

    def __enter__(self) -> Snapshot:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _load(self, rel: str, record: _Dir) -> _Files:
        """The records of directory ``rel``, read back and checked."""
        offset, length, checksum = record.block
        if not length:
            return _NO_FILES
        block = self._records.read(offset, length)
        if xxh3_64_intdigest(block) != checksum:
            raise OSError(errno.EIO, f"the snapshot's records of directory {rel!r} read back corrupted")
        return _Files(block)

    def _file(self, relpath: str) -> _FileRecord | None:
        """What was recorded for a tracked file (tests and debugging)."""
        rel, _, name = relpath.rpartition("/")
        record = self._dirs.get(rel)
        files = self._load(rel, record) if record is not None else _NO_FILES
        if name not in files.names:
            return None
        j = files.names.index(name)
        return _FileRecord(*files.stats[3 * j : 3 * j + 3], files.inodes[j], files.ident(j))

    def _rewrite(self, relpath: str, **fields: int) -> None:
        """Change what was recorded for a tracked file: ``size``, ``mtime_ns``, ``ctime_ns`` or ``inode``
        (tests: simulate a filesystem whose timestamps do not move). Moves the records into memory."""
        rel, _, name = relpath.rpartition("/")
        record = self._dirs[rel]
        files = self._load(rel, record)
        j = files.names.index(name)
        stats, inodes = array("q", files.stats), array("Q", files.inodes)
        for key, value in fields.items():
            if key == "inode":
                inodes[j] = value
            else:
                stats[3 * j + ("size", "mtime_ns", "ctime_ns").index(key)] = value
        block = _encode_block(
            files.names,
            stats,
            inodes,
            array("Q", files.hashes),
            bytearray(files.kinds),
            files.subdirs,
            files.ign_files,
            files.ign_dirs,
        )
        offset = self._records.append(block)
        self._dirs[rel] = _Dir((offset, len(block), xxh3_64_intdigest(block)), record.count, record.stat)


class _Builder:
    """Accumulates a snapshot while walking: directory records go to ``records`` as each is listed."""

    __slots__ = ("dirs", "records", "files", "rescan", "root_id")

    def __init__(self, records: Records, root_id: tuple[int, int]) -> None:
        self.dirs: dict[str, _Dir] = {}
        self.records = records
        self.files = 0
        self.rescan: set[str] = set()
        self.root_id = root_id

    def add_dir(
        self,
        rel: str,
        files: tuple[list[str], array, array, array, bytearray],
        subdirs: list[str],
        ign_files: list[str],
        ign_dirs: list[str],
        stat: tuple[int, int, int] | None,
    ) -> None:
        names = files[0]
        where = (0, 0, 0)
        if names or subdirs or ign_files or ign_dirs:
            block = _encode_block(*files, subdirs, ign_files, ign_dirs)
            where = (self.records.append(block), len(block), xxh3_64_intdigest(block))
        self.dirs[rel] = _Dir(where, len(names), stat)
        self.files += len(names)

    def skipped(self, rel: str) -> None:
        """``rel`` could not be watched or walked: it is not in the snapshot, so ``diff`` walks it as new,
        and its parent (which lists it as a subdirectory) is always scanned to get there."""
        self.rescan.add(rel.rpartition("/")[0])


# ---------------------------------------------------------------------------------------------- walking


def _excluded(options: TrackerOptions) -> frozenset[str]:
    return DEFAULT_EXCLUDED_DIRS | options.extra_excluded_dirs


def _open_dir(root: str, rel: str) -> int:
    """fd of ``root/rel``; the root may be a symlink, nothing below it may."""
    if not rel:
        return os.open(root, _DIR_FLAGS)
    return os.open(os.path.join(root, rel), _SUBDIR_FLAGS)


def _open_file(path: str, dir_fd: int | None = None) -> int:
    """Open for reading without following a final symlink, blocking on a FIFO or touching atime."""
    if _O_NOATIME:
        try:
            return os.open(path, _FILE_FLAGS | _O_NOATIME, dir_fd=dir_fd)
        except PermissionError:  # O_NOATIME needs ownership of the file
            pass
    return os.open(path, _FILE_FLAGS, dir_fd=dir_fd)


def _hash_file(dir_fd: int, name: str, size: int) -> int | None:
    try:
        fd = _open_file(name, dir_fd)
    except OSError:
        return None
    try:
        want = size + 1 if size < _CHUNK else _CHUNK
        data = os.read(fd, want)
        if len(data) < want:
            return xxh3_64_intdigest(data)
        hasher = xxh3_64(data)
        while chunk := os.read(fd, _CHUNK):
            hasher.update(chunk)
        return hasher.intdigest()
    except OSError:
        return None
    finally:
        os.close(fd)


def _ident(dir_fd: int, name: str, st: os.stat_result) -> object:
    """Content identity: xxh3_64 of a file's bytes (>= 0); ``-1 - xxh3_64(target)`` for a symlink (< 0, so a
    type change always differs); None if unreadable; ``_UNTRACKABLE`` for directories, FIFOs, devices..."""
    if _S_ISREG(st.st_mode):
        return _hash_file(dir_fd, name, st.st_size)
    if _S_ISLNK(st.st_mode):
        try:
            target = os.readlink(name, dir_fd=dir_fd)
        except OSError:
            return None
        return -1 - xxh3_64_intdigest(os.fsencode(target))
    return _UNTRACKABLE


def _is_racy(t: int, started_ns: int) -> bool:
    if t >= started_ns - RACY_WINDOW_NS:
        return True
    return t % _SECOND_NS == 0 and t >= started_ns - _COARSE_RACY_WINDOW_NS


def take_snapshot(root: Path, options: TrackerOptions = TrackerOptions()) -> Snapshot:
    """Walk ``root`` and record the stat key and content hash of every tracked file.

    On Linux every walked directory is also watched with inotify (``KIMI_MCP_TRACKER_WATCH=0`` disables
    this), so ``diff`` can skip the directories where nothing happened: ``close()`` the snapshot when done.
    """
    root = Path(root)
    root_str = os.fspath(root)
    started_ns = time.time_ns()
    rules = IgnoreRules(root_str, enabled=options.respect_gitignore)
    root_id = _dir_id(os.stat(root_str))
    records = open_records(root_str)
    watcher: Watcher | None = None
    try:
        builder = _Builder(records, root_id)
        watch = _start_watching()
        watcher = watch if isinstance(watch, Watcher) else None
        _walk_snapshot(root_str, rules, _excluded(options), started_ns, builder, watcher)
        records.seal()
    except BaseException:
        if watcher is not None:
            watcher.close()
        records.close()  # nothing is left behind by a failed snapshot
        raise
    return Snapshot(root, started_ns, builder, rules.spec_cache, watch)


def _walk_snapshot(
    root: str,
    rules: IgnoreRules,
    excluded: frozenset[str],
    started_ns: int,
    builder: _Builder,
    watcher: Watcher | None,
) -> None:
    stack = [""]
    while stack:
        rel = stack.pop()
        # Watch before listing: whatever happens in the directory after it was listed leaves an event.
        if watcher is not None and not watcher.watch(
            os.path.join(root, rel) if rel else root, rel, root=not rel
        ):
            builder.skipped(rel)
            continue
        try:
            dir_fd = _open_dir(root, rel)
        except OSError:
            if not rel:
                raise
            builder.skipped(rel)
            continue
        mark = len(stack)
        try:
            if not rel and watcher is not None and _dir_id(os.fstat(dir_fd)) != builder.root_id:
                watcher.give_up("the workspace root was replaced while it was being snapshotted")
            _snapshot_dir(dir_fd, rel, rules, excluded, started_ns, stack, builder)
        except OSError:
            if not rel:
                raise
            del stack[mark:]  # forget a directory that failed half-way (its block was not added), its subdirs
            builder.skipped(rel)
        finally:
            os.close(dir_fd)


def _dir_id(st: os.stat_result) -> tuple[int, int]:
    return st.st_dev, st.st_ino


def _snapshot_dir(
    dir_fd: int,
    rel: str,
    rules: IgnoreRules,
    excluded: frozenset[str],
    started_ns: int,
    stack: list[str],
    builder: _Builder,
) -> None:
    prefix = rel + "/" if rel else ""
    chain = rules.chain_for(rel)
    dir_stat = _dir_stat(os.fstat(dir_fd), started_ns)  # before listing: later changes must show
    names: list[str] = []
    subdirs: list[str] = []
    ign_files: list[str] = []
    ign_dirs: list[str] = []
    stats, inodes, hashes, kinds = array("q"), array("Q"), array("Q"), bytearray()
    # An unreadable file, or one with other hard links (written through another name, it leaves no event
    # here), makes the directory one that diff always scans, watcher or not.
    rescan = False
    with os.scandir(dir_fd) as it:
        for entry in it:
            name = entry.name
            try:
                if entry.is_dir(follow_symlinks=False):
                    if name in excluded:
                        continue
                    if chain and chain_ignores(chain, prefix + name, True):
                        ign_dirs.append(name)
                    else:
                        subdirs.append(name)
                        stack.append(prefix + name)
                    continue
                if name == ".git":  # gitdir pointer of a worktree/submodule
                    continue
                if chain and chain_ignores(chain, prefix + name, False):
                    ign_files.append(name)
                    continue
                st = entry.stat(follow_symlinks=False)
                ident = _ident(dir_fd, name, st)
            except FileNotFoundError:
                continue
            except OSError:  # e.g. a directory we may list but not search: known, state unknown
                names.append(name)
                stats.extend((-1, 0, 0))
                inodes.append(0)
                hashes.append(0)
                kinds.append(_KIND_UNKNOWN)
                rescan = True
                continue
            if ident is _UNTRACKABLE:
                continue
            mtime, ctime = st.st_mtime_ns, st.st_ctime_ns
            racy = _is_racy(mtime, started_ns) or _is_racy(ctime, started_ns)
            names.append(name)
            stats.extend((-1 if racy else st.st_size, mtime, ctime))
            inodes.append(st.st_ino)
            if ident is None:
                hashes.append(0)
                kinds.append(_KIND_UNKNOWN)
                rescan = True
            elif ident >= 0:  # type: ignore[operator]
                hashes.append(ident)  # type: ignore[arg-type]
                kinds.append(_KIND_FILE)
            else:
                hashes.append(-1 - ident)  # type: ignore[operator]
                kinds.append(_KIND_LINK)
            if st.st_nlink > 1:
                rescan = True
    builder.add_dir(rel, (names, stats, inodes, hashes, kinds), subdirs, ign_files, ign_dirs, dir_stat)
    if rescan:
        builder.rescan.add(rel)


def _dir_stat(st: os.stat_result, started_ns: int) -> tuple[int, int, int] | None:
    mtime, ctime = st.st_mtime_ns, st.st_ctime_ns
    if _is_racy(mtime, started_ns) or _is_racy(ctime, started_ns):
        return None
    return mtime, ctime, st.st_ino


def diff(before: Snapshot, options: TrackerOptions = TrackerOptions()) -> Changes:
    """Compare the tree with ``before`` (pass the options given to ``take_snapshot``). ``before`` is neither
    consumed nor closed: diffing it again compares with the same snapshot.

    While ``before`` is watching, only the directories its watcher saw change are re-examined
    (``Changes.method == "watched"``); otherwise, or if the watcher cannot be trusted (queue overflow, a
    watched directory moved, the root replaced, an unreadable directory...), the whole tree is walked again
    (``"full"``, with ``Changes.reason``). Both give the same result.
    """
    reason = before._unwatched
    if before._watch is not None:
        plan = _watch_plan(before)
        if isinstance(plan, str):
            reason = plan
        else:
            changes = _diff_dirty(before, options, *plan)
            if not isinstance(changes, str):
                changes.method = "watched"
                return changes
            reason = changes
    log.debug("tracker: walking the whole tree (%s)", reason)
    changes = _diff_full(before, options)
    changes.reason = reason
    return changes


def _diff_full(before: Snapshot, options: TrackerOptions) -> Changes:
    """Walk the whole tree again and compare it with ``before``.

    On Linux with 2+ usable CPUs and at least ``PARALLEL_MIN_FILES`` tracked files, part of the tree is
    walked by a forked child process: it inherits ``before`` (it only reads the small in-memory index, so
    few pages get copied, and the records' mapping, which is shared), walks, sends back its findings and
    ``_exit``s; if it fails, that part is walked in-process.
    ``KIMI_MCP_TRACKER_FORK=0`` disables this.
    """
    walk = _DiffWalk(before, options)
    if not _parallel_ok(before):
        walk.walk([""])
        return walk.finish()
    items: list[str] = []
    walk.scan("", items)
    weights = _subtree_weights(before._dirs)
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
        walk.merge(found)
    return walk.finish()


class _DiffWalk:
    """The "after" walk of ``diff`` over some subtrees; findings accumulate in plain lists."""

    __slots__ = (
        "before",
        "root",
        "old_dirs",
        "rules",
        "excluded",
        "created",
        "modified",
        "deleted",
        "visited",
        "unreadable",
        "linked",
    )

    def __init__(self, before: Snapshot, options: TrackerOptions) -> None:
        self.before = before
        self.root = os.fspath(before.root)
        self.old_dirs = before._dirs
        self.rules = IgnoreRules(self.root, enabled=options.respect_gitignore, spec_cache=before._spec_cache)
        self.excluded = _excluded(options)
        self.created: list[str] = []
        self.modified: list[str] = []
        self.deleted: list[str] = []
        self.visited: list[str] = []  # snapshot directories that were walked again
        self.unreadable: list[str] = []  # directories we may not read: their files are not reported
        # Watched diffs only: changed or new files with another name the watcher may not see written.
        self.linked: list[str] | None = None

    def fresh(self) -> _DiffWalk:
        """A walker sharing this one's configuration, with no findings."""
        other = object.__new__(_DiffWalk)
        for name in ("before", "root", "old_dirs", "rules", "excluded", "linked"):
            setattr(other, name, getattr(self, name))
        for name in ("created", "modified", "deleted", "visited", "unreadable"):
            setattr(other, name, [])
        return other

    def findings(self) -> tuple[list[str], ...]:
        return self.created, self.modified, self.deleted, self.visited, self.unreadable

    def merge(self, found: tuple[list[str], ...]) -> None:
        for mine, theirs in zip(self.findings(), found, strict=True):
            mine.extend(theirs)

    def walk(self, stack: list[str]) -> None:
        while stack:
            self.scan(stack.pop(), stack)

    def scan(self, rel: str, stack: list[str]) -> None:
        """Compare one directory with its snapshot record; push the subdirectories to walk onto ``stack``."""
        record = self.old_dirs.get(rel)
        # Read before the directory is opened: a failure to read the records must not pass for "gone".
        old = self.before._load(rel, record) if record is not None else None
        try:
            dir_fd = _open_dir(self.root, rel)
        except PermissionError:
            self.unreadable.append(rel)
            return
        except OSError:  # gone, or replaced by a file/symlink: its files count as deleted
            return
        try:
            stat = record.stat if record is not None and TRUST_DIR_STAT else None
            if old is not None and stat is not None and _same_dir(dir_fd, stat):
                self._scan_unchanged_dir(dir_fd, rel, old, stack)
            else:
                self._scan_listing(dir_fd, rel, old or _NO_FILES, stack)
        except PermissionError:
            self.unreadable.append(rel)
            return
        except OSError:
            return
        finally:
            os.close(dir_fd)
        if old is not None:
            self.visited.append(rel)

    def _scan_unchanged_dir(self, dir_fd: int, rel: str, old: _Files, stack: list[str]) -> None:
        """Same entries as at snapshot time (the directory's mtime/ctime/inode did not move): lstat the known
        files by name instead of listing the directory. Hot loop: once per file of an unchanged tree."""
        stats = iter(old.stats)
        lstat = os.lstat
        for j, (name, size, mtime, ctime, ino) in enumerate(
            zip(old.names, stats, stats, stats, old.inodes, strict=True)
        ):
            try:
                st = lstat(name, dir_fd=dir_fd)
            except FileNotFoundError:  # removed after we looked at the directory
                self.deleted.append(_join(rel, name))
                continue
            except OSError:
                continue
            if (
                size != st.st_size or mtime != st.st_mtime_ns or ctime != st.st_ctime_ns or ino != st.st_ino
            ) and not self._changed(dir_fd, rel, name, st, old.ident(j), stack):
                self.deleted.append(_join(rel, name))
        excluded = self.excluded
        prefix = rel + "/" if rel else ""
        stack.extend(prefix + name for name in old.subdirs if name not in excluded)

    def _scan_listing(self, dir_fd: int, rel: str, old: _Files, stack: list[str]) -> None:
        """List the directory: new entries, vanished files, changed files (``old`` is ``_NO_FILES`` if new)."""
        names = old.names
        slot_of = {name: j for j, name in enumerate(names)}
        stats, inodes = old.stats, old.inodes
        seen = bytearray(len(names))
        with os.scandir(dir_fd) as it:
            for entry in it:
                name = entry.name
                j = slot_of.get(name)
                try:
                    if j is None:
                        self._unknown_entry(entry, rel, name, old, stack)
                        continue
                    st = entry.stat(follow_symlinks=False)
                except FileNotFoundError:
                    continue
                except OSError:  # cannot tell: not reported
                    if j is not None:
                        seen[j] = 1
                    continue
                k = 3 * j
                if (
                    stats[k] != st.st_size
                    or stats[k + 1] != st.st_mtime_ns
                    or stats[k + 2] != st.st_ctime_ns
                    or inodes[j] != st.st_ino
                ) and not self._changed(dir_fd, rel, name, st, old.ident(j), stack):
                    continue  # no longer a file: deleted
                seen[j] = 1
        if seen.count(0):
            self.deleted.extend(_join(rel, name) for j, name in enumerate(names) if not seen[j])

    def _changed(
        self, dir_fd: int, rel: str, name: str, st: os.stat_result, old_ident: int | None, stack: list[str]
    ) -> bool:
        """A known file's stat moved: compare contents. False if it is no longer a file or symlink (the
        caller reports it deleted); a directory in its place is walked as a new one."""
        ident = _ident(dir_fd, name, st)
        if ident is _UNTRACKABLE:
            if _S_ISDIR(st.st_mode) and name not in self.excluded and not self._ignored(rel, name, True):
                stack.append(_join(rel, name))
            return False
        if ident is None or old_ident is None or ident != old_ident:
            self.modified.append(_join(rel, name))
        if self.linked is not None and st.st_nlink > 1 and rel not in self.before._rescan:
            self.linked.append(_join(rel, name))  # linked since the snapshot
        return True

    def _unknown_entry(
        self, entry: os.DirEntry[str], rel: str, name: str, old: _Files, stack: list[str]
    ) -> None:
        """An entry that was not a tracked file: a directory, a new file or a known-ignored file."""
        if entry.is_dir(follow_symlinks=False):
            if name in self.excluded or name in old.ign_dirs:
                return
            if name in old.subdirs or not self._ignored(rel, name, True):
                stack.append(_join(rel, name))
            return
        if name in old.ign_files or name == ".git":
            return
        if (entry.is_file(follow_symlinks=False) or entry.is_symlink()) and not self._ignored(
            rel, name, False
        ):
            self.created.append(_join(rel, name))
            if self.linked is not None and _has_other_names(entry):
                self.linked.append(_join(rel, name))

    def _ignored(self, rel: str, name: str, is_dir: bool) -> bool:
        chain = self.rules.chain_for(rel)
        return bool(chain) and chain_ignores(chain, _join(rel, name), is_dir)

    def finish(self) -> Changes:
        """Add the files of snapshot directories that were not walked again, and sort."""
        visited = set(self.visited)
        for rel, old in self.old_dirs.items():
            if rel in visited or not old.count or _under_any(rel, self.unreadable):
                continue
            self.deleted.extend(_join(rel, name) for name in self.before._load(rel, old).names)
        return Changes(sorted(set(self.created)), sorted(set(self.modified)), sorted(set(self.deleted)))


def _has_other_names(entry: os.DirEntry[str]) -> bool:
    try:
        return entry.stat(follow_symlinks=False).st_nlink > 1
    except OSError:
        return True  # cannot tell


def _join(rel: str, name: str) -> str:
    return f"{rel}/{name}" if rel else name


def _same_dir(dir_fd: int, recorded: tuple[int, int, int]) -> bool:
    st = os.fstat(dir_fd)
    return recorded == (st.st_mtime_ns, st.st_ctime_ns, st.st_ino)


def _under_any(rel: str, prefixes: list[str]) -> bool:
    return any(not p or rel == p or rel.startswith(p + "/") for p in prefixes)


# ---------------------------------------------------------------------------------------------- watched diff


def _watch_plan(before: Snapshot) -> tuple[set[str], set[str]] | str:
    """The watcher's ``(dirty, gone)`` directories, or why the whole tree must be walked."""
    try:
        root_id = _dir_id(os.stat(before.root))
    except OSError as exc:
        return f"the workspace root cannot be read: {exc}"
    if root_id != before._root_id:
        return "the workspace root was replaced"
    return before._watch.plan()  # type: ignore[union-attr]


def _diff_dirty(before: Snapshot, options: TrackerOptions, dirty: set[str], gone: set[str]) -> Changes | str:
    """``diff`` limited to what the watcher saw: scan the dirty directories (and those always scanned),
    walk new directories whole, and take every other snapshot directory as unchanged. A deleted directory is
    scanned like a dirty one: if it is back, it was recreated unwatched and is walked whole; if not, its files
    are reported deleted.

    Returns why the full walk must decide instead if a changed directory could not be read (the full walk
    decides what that hides), or if a new or changed file has other hard links (one of its other names may
    sit in a directory that saw no event although the file's content changed)."""
    walk = _DiffWalk(before, options)
    walk.linked = []
    old_dirs = before._dirs
    todo = sorted(dirty | gone | before._rescan, reverse=True)  # any order gives the same result
    scanned: set[str] = set()
    found: list[str] = []
    while todo:
        rel = todo.pop()
        if rel in scanned:
            continue
        scanned.add(rel)
        walk.scan(rel, found)
        # Known subdirectories have watches of their own; new or recreated ones have none: walk them.
        todo.extend(sub for sub in found if sub not in old_dirs or sub in gone)
        found.clear()
    if walk.unreadable:
        return f"a changed directory could not be read: {walk.unreadable[0]!r}"
    if walk.linked:
        return f"a changed file has other hard links: {walk.linked[0]!r}"
    walk.visited.extend(rel for rel in old_dirs if rel not in scanned)
    return walk.finish()


def _start_watching() -> Watcher | str:
    """A watcher for a new snapshot, or why there is none."""
    if os.environ.get("KIMI_MCP_TRACKER_WATCH", "1") == "0":
        return "disabled by KIMI_MCP_TRACKER_WATCH=0"
    return open_watcher()


# ---------------------------------------------------------------------------------------------- parallel diff

PARALLEL_MIN_FILES = 20_000
"""Below this many tracked files a forked helper costs more than it saves."""
_EXPAND_LIMIT = 64


def _parallel_ok(before: Snapshot) -> bool:
    if len(before) < PARALLEL_MIN_FILES or not sys.platform.startswith("linux") or not hasattr(os, "fork"):
        return False
    if os.environ.get("KIMI_MCP_TRACKER_FORK", "1") == "0":
        return False
    try:
        cpus = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cpus = os.cpu_count() or 1
    return cpus >= 2


def _subtree_weights(dirs: dict[str, _Dir]) -> dict[str, int]:
    """The number of tracked files in each snapshot directory's subtree (to balance parallel diffs)."""
    weights = {rel: record.count for rel, record in dirs.items()}
    for rel in sorted(dirs, key=lambda r: r.count("/"), reverse=True):
        if rel and (parent := rel.rpartition("/")[0]) in weights:
            weights[parent] += weights[rel]
    return weights


def _expand(walk: _DiffWalk, items: list[str], weights: dict[str, int]) -> list[str]:
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


def _fork_walk(walk: _DiffWalk, items: list[str]) -> tuple[int, int] | None:
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
            payload = memoryview(marshal.dumps(walk.findings()))
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


CHILD_TIMEOUT_S = 60.0
"""The forked walker must finish within this; otherwise it is killed and the parent walks its part."""


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
            chunk = os.read(read_fd, _CHUNK)
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
    return found if isinstance(found, tuple) and len(found) == 5 else None


# ---------------------------------------------------------------------------------------------- contents


def collect_contents(
    root: Path, paths: Iterable[str], options: TrackerOptions = TrackerOptions()
) -> ContentReport:
    """Read created/modified files for the result, in the given priority order, within the budgets.

    Secrets are never opened; symlinks and anything resolving outside ``root`` get no content and are listed
    in ``binary_files``; files that vanished since the diff (or are no longer regular files) are skipped.
    At most ``max(8 KiB, 4 * chars_wanted + 4)`` bytes of a file are read; ``size_bytes`` is the size on disk.
    """
    report = ContentReport()
    root_real = os.path.realpath(root)
    inside_prefix = root_real.rstrip(os.sep) + os.sep
    remaining = options.max_total_chars
    for path in paths:
        full = os.path.join(root_real, path)
        try:
            st = os.lstat(full)
        except OSError:
            continue
        if is_secret_path(path):
            report.secret_files.append(path)
            continue
        real = os.path.realpath(full)
        if _S_ISLNK(st.st_mode) or not real.startswith(inside_prefix):
            report.binary_files.append(path)
            continue
        if _S_ISREG(st.st_mode):
            remaining -= _collect_one(report, path, real, options, remaining)
    return report


def _collect_one(report: ContentReport, path: str, real: str, options: TrackerOptions, remaining: int) -> int:
    """Add one regular file to ``report``; return the number of characters returned."""
    limit = max(0, min(options.max_file_chars, remaining))
    max_bytes = max(_BINARY_SNIFF, 4 * limit + 4)
    try:
        fd = _open_file(real)
    except OSError:
        return 0
    try:
        st = os.fstat(fd)
        if not _S_ISREG(st.st_mode):
            return 0
        head = _read_head(fd, max_bytes)
    except OSError:
        return 0
    finally:
        os.close(fd)
    if b"\0" in head[:_BINARY_SNIFF]:
        report.binary_files.append(path)
        return 0
    complete = len(head) < max_bytes or len(head) >= st.st_size
    text = _decode(report, path, head, complete)
    if complete and len(text) <= limit:
        report.file_contents[path] = text
        return len(text)
    reason: Literal["file_too_large", "total_budget"] = (
        "file_too_large" if options.max_file_chars <= remaining else "total_budget"
    )
    report.truncated.append(TruncatedItem(path, reason, st.st_size, limit))
    if limit:
        report.file_contents[path] = text[:limit]
    return limit


def _read_head(fd: int, max_bytes: int) -> bytes:
    parts: list[bytes] = []
    got = 0
    while got < max_bytes:
        chunk = os.read(fd, min(_CHUNK, max_bytes - got))
        if not chunk:
            break
        parts.append(chunk)
        got += len(chunk)
    return b"".join(parts)


def _decode(report: ContentReport, path: str, data: bytes, complete: bool) -> str:
    """Strict UTF-8, else lossy (recorded). A multi-byte character cut off at the end of a head is dropped."""
    try:
        return codecs.getincrementaldecoder("utf-8")("strict").decode(data, final=complete)
    except UnicodeDecodeError:
        report.lossy_decoded.append(path)
        return codecs.getincrementaldecoder("utf-8")("replace").decode(data, final=complete)
