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
import os
import stat as stat_mod
import time
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

_CHUNK = 1 << 20
_BINARY_SNIFF = 8192
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | getattr(os, "O_CLOEXEC", 0)
_SUBDIR_FLAGS = _DIR_FLAGS | getattr(os, "O_NOFOLLOW", 0)
# O_NONBLOCK: a file swapped for a FIFO between stat and open must not block us.
_FILE_FLAGS = os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
_S_ISREG = stat_mod.S_ISREG
_S_ISLNK = stat_mod.S_ISLNK

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

    __slots__ = ("files", "subdirs", "ign_files", "ign_dirs")

    def __init__(
        self,
        files: dict[str, _Key],
        subdirs: frozenset[str],
        ign_files: frozenset[str],
        ign_dirs: frozenset[str],
    ) -> None:
        self.files = files
        self.subdirs = subdirs
        self.ign_files = ign_files
        self.ign_dirs = ign_dirs


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


def _hash_file(dir_fd: int, name: str, size: int) -> int | None:
    try:
        fd = os.open(name, _FILE_FLAGS, dir_fd=dir_fd)
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
    """Content identity (see ``_Key``), or ``_UNTRACKABLE`` for FIFOs, sockets, devices."""
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
    return Snapshot(root, started_ns, dirs, rules.spec_cache)


def _snapshot_dir(
    dir_fd: int, rel: str, rules: IgnoreRules, excluded: frozenset[str], started_ns: int, stack: list[str]
) -> _Dir:
    prefix = rel + "/" if rel else ""
    chain = rules.chain_for(rel)
    files: dict[str, _Key] = {}
    subdirs: list[str] = []
    ign_files: list[str] = []
    ign_dirs: list[str] = []
    with os.scandir(dir_fd) as it:
        for entry in it:
            name = entry.name
            try:
                is_dir = entry.is_dir(follow_symlinks=False)
                if is_dir:
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
    return _Dir(files, _frozen(subdirs), _frozen(ign_files), _frozen(ign_dirs))


_NO_DIR = _Dir({}, _EMPTY, _EMPTY, _EMPTY)
_UNKNOWN_KEY: _Key = (-1, 0, 0, 0, None)


def diff(before: Snapshot, options: TrackerOptions = TrackerOptions()) -> Changes:
    """Walk the tree again and compare it with ``before`` (use the options given to ``take_snapshot``)."""
    root_str = os.fspath(before.root)
    excluded = _excluded(options)
    rules = IgnoreRules(root_str, enabled=options.respect_gitignore, spec_cache=before._spec_cache)
    old_dirs = before._dirs
    changes = Changes()
    visited: set[str] = set()
    unreadable: list[str] = []
    stack = [""]
    while stack:
        rel = stack.pop()
        old = old_dirs.get(rel)
        try:
            dir_fd = _open_dir(root_str, rel)
        except PermissionError:
            unreadable.append(rel)
            continue
        except OSError:  # gone, or replaced by a file/symlink: its files count as deleted
            continue
        try:
            _diff_dir(dir_fd, rel, old or _NO_DIR, rules, excluded, changes, stack)
        except PermissionError:
            unreadable.append(rel)
        except OSError:
            continue
        finally:
            os.close(dir_fd)
        if old is not None:
            visited.add(rel)
    deleted = changes.deleted
    for rel, old in old_dirs.items():
        if rel in visited or not old.files or _under_any(rel, unreadable):
            continue
        prefix = rel + "/" if rel else ""
        deleted.extend(prefix + name for name in old.files)
    changes.created.sort()
    changes.modified.sort()
    deleted.sort()
    return changes


def _under_any(rel: str, prefixes: list[str]) -> bool:
    return any(not p or rel == p or rel.startswith(p + "/") for p in prefixes)


def _diff_dir(
    dir_fd: int,
    rel: str,
    old: _Dir,
    rules: IgnoreRules,
    excluded: frozenset[str],
    changes: Changes,
    stack: list[str],
) -> None:
    """Compare one directory with its snapshot record (``_NO_DIR`` if it is new). Hot loop: keep it flat."""
    prefix = rel + "/" if rel else ""
    old_files = old.files
    old_subdirs = old.subdirs
    created = changes.created
    modified = changes.modified
    seen: list[str] = []
    chain = None
    with os.scandir(dir_fd) as it:
        for entry in it:
            name = entry.name
            key = None
            try:
                if entry.is_dir(follow_symlinks=False):
                    if name in old_subdirs:
                        if name not in excluded:
                            stack.append(prefix + name)
                        continue
                    if name in excluded or name in old.ign_dirs:
                        continue
                    if chain is None:
                        chain = rules.chain_for(rel)
                    if not (chain and chain_ignores(chain, prefix + name, True)):
                        stack.append(prefix + name)
                    continue
                key = old_files.get(name)
                if key is None:
                    if name in old.ign_files or name == ".git":
                        continue
                    if not (entry.is_file(follow_symlinks=False) or entry.is_symlink()):
                        continue
                    if chain is None:
                        chain = rules.chain_for(rel)
                    if not (chain and chain_ignores(chain, prefix + name, False)):
                        created.append(prefix + name)
                    continue
                st = entry.stat(follow_symlinks=False)
                if (
                    key[0] == st.st_size
                    and key[1] == st.st_mtime_ns
                    and key[2] == st.st_ctime_ns
                    and key[3] == st.st_ino
                ):
                    seen.append(name)
                    continue
                ident = _ident(dir_fd, name, st)
            except FileNotFoundError:
                continue
            except OSError:  # cannot tell: not reported
                if key is not None:
                    seen.append(name)
                continue
            if ident is _UNTRACKABLE:
                continue  # became a FIFO/socket/device: reported as deleted
            seen.append(name)
            if ident is None or key[4] is None or ident != key[4]:
                modified.append(prefix + name)
    if len(seen) != len(old_files):
        changes.deleted.extend(prefix + name for name in old_files.keys() - set(seen))


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
        fd = os.open(real, _FILE_FLAGS)
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
