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

POSIX only (directory file descriptors, ``O_NOFOLLOW``).
"""

from __future__ import annotations

import codecs
import gc
import marshal
import os
import stat as stat_mod
import sys
import time
import warnings
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from xxhash import xxh3_64, xxh3_64_intdigest

from ._ignore import DEFAULT_EXCLUDED_DIRS, IgnoreRules, chain_ignores, is_secret_path

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

# (size, mtime_ns, ctime_ns, inode, ident). ident: xxh3_64 of the content (>= 0), ``-1 - xxh3_64(target)``
# for a symlink (< 0, so a type change always differs), None if unreadable. size is -1 for racy files so
# the fast path never matches them.
_Key = tuple[int, int, int, int, "int | None"]


@dataclass(frozen=True, slots=True)
class TrackerOptions:
    """What to track and how much content to return."""

    extra_excluded_dirs: frozenset[str] = frozenset()
    respect_gitignore: bool = True
    max_file_chars: int = 20_000
    max_total_chars: int = 60_000


@dataclass
class Changes:
    """Sorted POSIX paths relative to the root."""

    created: list[str] = field(default_factory=list)
    modified: list[str] = field(default_factory=list)
    deleted: list[str] = field(default_factory=list)


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


class _Dir:
    """One walked directory of a snapshot: tracked files and how every other entry was classified."""

    __slots__ = ("files", "subdirs", "ign_files", "ign_dirs", "stat", "weight")

    def __init__(
        self,
        files: dict[str, _Key],
        subdirs: frozenset[str],
        ign_files: frozenset[str],
        ign_dirs: frozenset[str],
        stat: tuple[int, int, int] | None = None,
    ) -> None:
        self.files = files
        self.subdirs = subdirs
        self.ign_files = ign_files
        self.ign_dirs = ign_dirs
        self.stat = stat  # (mtime_ns, ctime_ns, inode) taken before listing; None if racy
        self.weight = 0  # tracked files in this subtree


class Snapshot:
    """The state of a tree at one moment; opaque apart from ``root``, ``started_ns`` and ``len()``."""

    __slots__ = ("root", "started_ns", "_dirs", "_count", "_spec_cache")

    def __init__(self, root: Path, started_ns: int, dirs: dict[str, _Dir], spec_cache: dict) -> None:
        self.root = root
        self.started_ns = started_ns
        self._dirs = dirs
        self._count = sum(len(d.files) for d in dirs.values())
        self._spec_cache = spec_cache

    def __len__(self) -> int:
        return self._count

    def __repr__(self) -> str:
        return f"Snapshot(root={str(self.root)!r}, files={self._count}, dirs={len(self._dirs)})"


# ---------------------------------------------------------------------------------------------- walking


def _frozen(names: list[str]) -> frozenset[str]:
    return frozenset(names) if names else _EMPTY


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
    """Content identity (see ``_Key``), or ``_UNTRACKABLE`` for directories, FIFOs, sockets, devices."""
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
    """Walk ``root`` and record the stat key and content hash of every tracked file."""
    root = Path(root)
    root_str = os.fspath(root)
    started_ns = time.time_ns()
    excluded = _excluded(options)
    rules = IgnoreRules(root_str, enabled=options.respect_gitignore)
    dirs: dict[str, _Dir] = {}
    stack = [""]
    while stack:
        rel = stack.pop()
        try:
            dir_fd = _open_dir(root_str, rel)
        except OSError:
            if not rel:
                raise
            continue
        try:
            dirs[rel] = _snapshot_dir(dir_fd, rel, rules, excluded, started_ns, stack)
        except OSError:
            if not rel:
                raise
        finally:
            os.close(dir_fd)
    _sum_subtrees(dirs)
    return Snapshot(root, started_ns, dirs, rules.spec_cache)


def _snapshot_dir(
    dir_fd: int, rel: str, rules: IgnoreRules, excluded: frozenset[str], started_ns: int, stack: list[str]
) -> _Dir:
    prefix = rel + "/" if rel else ""
    chain = rules.chain_for(rel)
    dir_stat = _dir_stat(os.fstat(dir_fd), started_ns)  # before listing: later changes must show
    files: dict[str, _Key] = {}
    subdirs: list[str] = []
    ign_files: list[str] = []
    ign_dirs: list[str] = []
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
                files[name] = _UNKNOWN_KEY
                continue
            if ident is _UNTRACKABLE:
                continue
            mtime, ctime = st.st_mtime_ns, st.st_ctime_ns
            racy = _is_racy(mtime, started_ns) or _is_racy(ctime, started_ns)
            files[name] = (-1 if racy else st.st_size, mtime, ctime, st.st_ino, ident)  # type: ignore[assignment]
    return _Dir(files, _frozen(subdirs), _frozen(ign_files), _frozen(ign_dirs), dir_stat)


def _dir_stat(st: os.stat_result, started_ns: int) -> tuple[int, int, int] | None:
    mtime, ctime = st.st_mtime_ns, st.st_ctime_ns
    if _is_racy(mtime, started_ns) or _is_racy(ctime, started_ns):
        return None
    return mtime, ctime, st.st_ino


def _sum_subtrees(dirs: dict[str, _Dir]) -> None:
    """Fill ``_Dir.weight`` with the number of tracked files in each subtree (to balance parallel diffs)."""
    for rel in sorted(dirs, key=lambda r: r.count("/"), reverse=True):
        record = dirs[rel]
        record.weight += len(record.files)
        if rel:
            parent = dirs.get(rel.rpartition("/")[0])
            if parent is not None:
                parent.weight += record.weight


_NO_DIR = _Dir({}, _EMPTY, _EMPTY, _EMPTY)
_UNKNOWN_KEY: _Key = (-1, 0, 0, 0, None)


def diff(before: Snapshot, options: TrackerOptions = TrackerOptions()) -> Changes:
    """Walk the tree again and compare it with ``before`` (pass the options given to ``take_snapshot``).

    On Linux with 2+ CPUs and at least ``PARALLEL_MIN_FILES`` tracked files, part of the tree is walked by a
    forked child process (it inherits ``before``, walks, sends back its findings and ``_exit``s); any failure
    of the child falls back to walking that part in-process.
    """
    walk = _DiffWalk(before, options)
    if not _parallel_ok(before):
        walk.walk([""])
        return walk.finish()
    items: list[str] = []
    walk.scan("", items)
    items = _expand(walk, items, before._dirs)
    mine, theirs = _split(items, before._dirs)
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
        "root",
        "old_dirs",
        "rules",
        "excluded",
        "created",
        "modified",
        "deleted",
        "visited",
        "unreadable",
    )

    def __init__(self, before: Snapshot, options: TrackerOptions) -> None:
        self.root = os.fspath(before.root)
        self.old_dirs = before._dirs
        self.rules = IgnoreRules(self.root, enabled=options.respect_gitignore, spec_cache=before._spec_cache)
        self.excluded = _excluded(options)
        self.created: list[str] = []
        self.modified: list[str] = []
        self.deleted: list[str] = []
        self.visited: list[str] = []  # snapshot directories that were walked again
        self.unreadable: list[str] = []  # directories we may not read: their files are not reported

    def fresh(self) -> _DiffWalk:
        """A walker sharing this one's configuration, with no findings."""
        other = object.__new__(_DiffWalk)
        for name in ("root", "old_dirs", "rules", "excluded"):
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
        old = self.old_dirs.get(rel)
        try:
            dir_fd = _open_dir(self.root, rel)
        except PermissionError:
            self.unreadable.append(rel)
            return
        except OSError:  # gone, or replaced by a file/symlink: its files count as deleted
            return
        try:
            if old is not None and TRUST_DIR_STAT and old.stat is not None and _same_dir(dir_fd, old.stat):
                self._scan_unchanged_dir(dir_fd, rel, old, stack)
            else:
                self._scan_fd(dir_fd, rel, old or _NO_DIR, stack)
        except PermissionError:
            self.unreadable.append(rel)
            return
        except OSError:
            return
        finally:
            os.close(dir_fd)
        if old is not None:
            self.visited.append(rel)

    def _scan_fd(self, dir_fd: int, rel: str, old: _Dir, stack: list[str]) -> None:
        # Hot loop (once per file of the tree): only unchanged, already-known files take the short path.
        prefix = rel + "/" if rel else ""
        get_key = old.files.get
        seen: list[str] = []
        see = seen.append
        with os.scandir(dir_fd) as it:
            for entry in it:
                name = entry.name
                key = get_key(name)
                try:
                    if key is None:
                        self._unknown_entry(entry, name, prefix, old, stack)
                        continue
                    st = entry.stat(follow_symlinks=False)
                    if (
                        key[0] == st.st_size
                        and key[1] == st.st_mtime_ns
                        and key[2] == st.st_ctime_ns
                        and key[3] == st.st_ino
                    ):
                        see(name)
                        continue
                    ident = _ident(dir_fd, name, st)
                except FileNotFoundError:
                    continue
                except OSError:  # cannot tell: not reported
                    if key is not None:
                        see(name)
                    continue
                if ident is _UNTRACKABLE:  # now a directory, FIFO...: the file is deleted
                    if _S_ISDIR(st.st_mode):
                        self._unknown_entry(entry, name, prefix, old, stack)
                    continue
                see(name)
                if ident is None or key[4] is None or ident != key[4]:
                    self.modified.append(prefix + name)
        if len(seen) != len(old.files):
            self.deleted.extend(prefix + name for name in old.files.keys() - set(seen))

    def _scan_unchanged_dir(self, dir_fd: int, rel: str, old: _Dir, stack: list[str]) -> None:
        """Same entries as at snapshot time (directory mtime/ctime/inode unchanged): lstat the known files
        by name instead of listing the directory."""
        prefix = rel + "/" if rel else ""
        lstat = os.lstat
        for name, key in old.files.items():
            try:
                st = lstat(name, dir_fd=dir_fd)
                if (
                    key[0] == st.st_size
                    and key[1] == st.st_mtime_ns
                    and key[2] == st.st_ctime_ns
                    and key[3] == st.st_ino
                ):
                    continue
                ident = _ident(dir_fd, name, st)
            except FileNotFoundError:  # removed after we looked at the directory
                self.deleted.append(prefix + name)
                continue
            except OSError:
                continue
            if ident is _UNTRACKABLE:  # the directory changed after we looked at it after all
                self.deleted.append(prefix + name)
                if (
                    _S_ISDIR(st.st_mode)
                    and name not in self.excluded
                    and not self._ignored(prefix, name, True)
                ):
                    stack.append(prefix + name)
            elif ident is None or key[4] is None or ident != key[4]:
                self.modified.append(prefix + name)
        excluded = self.excluded
        stack.extend(prefix + name for name in old.subdirs if name not in excluded)

    def _unknown_entry(
        self, entry: os.DirEntry[str], name: str, prefix: str, old: _Dir, stack: list[str]
    ) -> None:
        """An entry that was not a tracked file: a directory, a new file or a known-ignored file."""
        if entry.is_dir(follow_symlinks=False):
            if name in self.excluded or name in old.ign_dirs:
                return
            if name in old.subdirs or not self._ignored(prefix, name, True):
                stack.append(prefix + name)
            return
        if name in old.ign_files or name == ".git":
            return
        if (entry.is_file(follow_symlinks=False) or entry.is_symlink()) and not self._ignored(
            prefix, name, False
        ):
            self.created.append(prefix + name)

    def _ignored(self, prefix: str, name: str, is_dir: bool) -> bool:
        chain = self.rules.chain_for(prefix[:-1])
        return bool(chain) and chain_ignores(chain, prefix + name, is_dir)

    def finish(self) -> Changes:
        """Add the files of snapshot directories that were not walked again, and sort."""
        visited = set(self.visited)
        for rel, old in self.old_dirs.items():
            if rel in visited or not old.files or _under_any(rel, self.unreadable):
                continue
            prefix = rel + "/" if rel else ""
            self.deleted.extend(prefix + name for name in old.files)
        return Changes(sorted(set(self.created)), sorted(set(self.modified)), sorted(set(self.deleted)))


def _same_dir(dir_fd: int, recorded: tuple[int, int, int]) -> bool:
    st = os.fstat(dir_fd)
    return recorded == (st.st_mtime_ns, st.st_ctime_ns, st.st_ino)


def _under_any(rel: str, prefixes: list[str]) -> bool:
    return any(not p or rel == p or rel.startswith(p + "/") for p in prefixes)


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
        return len(os.sched_getaffinity(0)) >= 2
    except (AttributeError, OSError):
        return (os.cpu_count() or 1) >= 2


def _weight(rel: str, dirs: dict[str, _Dir]) -> int:
    record = dirs.get(rel)
    return record.weight if record is not None else 0


def _expand(walk: _DiffWalk, items: list[str], dirs: dict[str, _Dir]) -> list[str]:
    """Scan the heaviest subtrees in-process until no single one holds more than a quarter of the work."""
    for _ in range(_EXPAND_LIMIT):
        if not items:
            break
        heavy = max(items, key=lambda rel: _weight(rel, dirs))
        if _weight(heavy, dirs) * 4 <= sum(_weight(rel, dirs) for rel in items):
            break
        items.remove(heavy)
        walk.scan(heavy, items)
    return items


def _split(items: list[str], dirs: dict[str, _Dir]) -> tuple[list[str], list[str]]:
    """Greedy two-way partition of subtrees by snapshot weight."""
    bins: tuple[list[str], list[str]] = ([], [])
    loads = [0, 0]
    for rel in sorted(items, key=lambda r: _weight(r, dirs), reverse=True):
        i = 0 if loads[0] <= loads[1] else 1
        bins[i].append(rel)
        loads[i] += _weight(rel, dirs)
    return bins


def _fork_walk(walk: _DiffWalk, items: list[str]) -> tuple[int, int] | None:
    """Walk ``items`` in a forked child: (pid, read end of its result pipe), or None if fork failed."""
    read_fd, write_fd = os.pipe()
    try:
        with warnings.catch_warnings():
            # 3.12+ warns about forking a multi-threaded process; the child only makes syscalls and exits.
            warnings.simplefilter("ignore", DeprecationWarning)
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


def _join_child(child: tuple[int, int]) -> tuple[list[str], ...] | None:
    """The child's findings, or None if it failed (the caller then walks its part itself)."""
    pid, read_fd = child
    chunks: list[bytes] = []
    try:
        while chunk := os.read(read_fd, _CHUNK):
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
