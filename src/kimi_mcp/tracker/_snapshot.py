"""Taking a snapshot: walk and watch the tree, record every tracked file (``take_snapshot``, ``Snapshot``).

Each directory is watched before it is listed; each tracked file's stat key and content hash are recorded.
"""

from __future__ import annotations

import os
import time
import weakref
from array import array
from pathlib import Path

from ._fs import UNTRACKABLE, dir_id, ident, open_dir
from ._ignore import IgnoreRules, chain_ignores
from ._model import DEFAULT_OPTIONS, TrackerOptions, excluded_dirs
from ._records import KIND_FILE, KIND_LINK, KIND_UNKNOWN, Tree, TreeBuilder
from ._spill import Records, open_records
from ._watch import Watcher, open_watcher

__all__ = ["RACY_WINDOW_NS", "Snapshot", "take_snapshot"]

RACY_WINDOW_NS = 50_000_000
"""A file whose mtime/ctime is this close to (or after) the snapshot start may change again without its
stat key changing (timestamp granularity), so it is always re-hashed by ``diff``."""
_COARSE_RACY_WINDOW_NS = 2_000_000_000  # whole-second timestamps (FAT has 2 s): widen the window
_SECOND_NS = 1_000_000_000

WATCH_OFF = "disabled by the tracker_watch setting (KIMI_MCP_TRACKER_WATCH)"
"""Why a snapshot taken with ``TrackerOptions.watch`` False does not watch."""
SPILL_OFF = "disabled by the tracker_spill setting (KIMI_MCP_TRACKER_SPILL)"
"""Why the records of a snapshot taken with ``TrackerOptions.spill`` False are in memory."""


class Snapshot:
    """The state of a tree at one moment: ``root``, ``started_ns``, ``len()`` (tracked files), ``watching``
    and ``unwatched_reason``; otherwise opaque.

    Small: what is per tracked file lives in the records of its ``tree`` (``_records``, ``_spill``: an
    anonymous temporary file, mapped but not read into memory), one block per directory; in memory it keeps
    a packed ``DirRecord`` per directory (~220 bytes) and little else, so ~2.5 bytes per file on a typical
    tree. Nothing per file is a Python object that lives between diffs, and a forked helper shares the
    mapping.

    It may own an inotify watcher (see ``_diff``): ``close()`` it, or use the snapshot as a context manager,
    once done diffing; ``diff`` never closes it. An unclosed snapshot closes its watcher when it is
    garbage-collected; its records go with it.

    The rest of the tracker reads it through ``tree`` (what was recorded) and ``watcher``.
    """

    __slots__ = ("root", "started_ns", "_tree", "_watcher", "_unwatched", "_finalizer", "__weakref__")

    def __init__(self, root: Path, started_ns: int, tree: Tree, watch: Watcher | str) -> None:
        self.root = root
        self.started_ns = started_ns
        self._tree = tree
        self._watcher: Watcher | None = None
        self._unwatched: str | None = None
        self._finalizer: weakref.finalize | None = None
        if isinstance(watch, Watcher) and watch.active:
            self._watcher = watch
            self._finalizer = weakref.finalize(self, watch.close)
        else:
            self._unwatched = watch if isinstance(watch, str) else watch.reason

    def __len__(self) -> int:
        return self._tree.files

    def __repr__(self) -> str:
        return f"Snapshot(root={str(self.root)!r}, files={len(self)}, dirs={len(self._tree.dirs)})"

    @property
    def tree(self) -> Tree:
        """What the snapshot recorded (read by ``diff``)."""
        return self._tree

    @property
    def watcher(self) -> Watcher | None:
        """The inotify watcher the snapshot owns, also once it is closed or has given up (its ``plan`` then
        says why); None if watching never started."""
        return self._watcher

    @property
    def watching(self) -> bool:
        """True while an inotify watcher can still narrow ``diff`` down to the directories that changed."""
        return self._watcher is not None and self._watcher.active

    @property
    def unwatched_reason(self) -> str | None:
        """Why ``watching`` is False (None while it is True)."""
        return self._unwatched if self._watcher is None else self._watcher.reason

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


def take_snapshot(root: Path, options: TrackerOptions = DEFAULT_OPTIONS) -> Snapshot:
    """Walk ``root`` and record the stat key and content hash of every tracked file.

    On Linux every walked directory is also watched with inotify (unless ``options.watch`` is False), so
    ``diff`` can skip the directories where nothing happened: ``close()`` the snapshot when done.
    """
    root = Path(root)
    root_str = os.fspath(root)
    started_ns = time.time_ns()
    rules = IgnoreRules(root_str, enabled=options.respect_gitignore)
    root_id = dir_id(os.stat(root_str))
    records = open_records(root_str) if options.spill else Records(None, SPILL_OFF)
    watcher: Watcher | None = None
    try:
        builder = TreeBuilder(records, root_id)
        watch = open_watcher() if options.watch else WATCH_OFF
        watcher = watch if isinstance(watch, Watcher) else None
        _walk_snapshot(root_str, rules, excluded_dirs(options), started_ns, builder, watcher)
        records.seal()
    except BaseException:
        if watcher is not None:
            watcher.close()
        records.close()  # nothing is left behind by a failed snapshot
        raise
    return Snapshot(root, started_ns, builder.build(rules.spec_cache), watch)


def _walk_snapshot(
    root: str,
    rules: IgnoreRules,
    excluded: frozenset[str],
    started_ns: int,
    builder: TreeBuilder,
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
            dir_fd = open_dir(root, rel)
        except OSError:
            if not rel:
                raise
            builder.skipped(rel)
            continue
        mark = len(stack)
        try:
            if not rel and watcher is not None and dir_id(os.fstat(dir_fd)) != builder.root_id:
                watcher.give_up("the workspace root was replaced while it was being snapshotted")
            _snapshot_dir(dir_fd, rel, rules, excluded, started_ns, stack, builder)
        except OSError:
            if not rel:
                raise
            del stack[mark:]  # forget a directory that failed half-way (its block was not added), its subdirs
            builder.skipped(rel)
        finally:
            os.close(dir_fd)


def _snapshot_dir(
    dir_fd: int,
    rel: str,
    rules: IgnoreRules,
    excluded: frozenset[str],
    started_ns: int,
    stack: list[str],
    builder: TreeBuilder,
) -> None:
    prefix = rel + "/" if rel else ""
    chain = rules.chain_for(rel)
    dir_stat = _dir_stat(os.fstat(dir_fd), started_ns)  # before listing: later changes must show
    files = _Files(started_ns)
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
                found = ident(dir_fd, name, st)
            except FileNotFoundError:
                continue
            except OSError:  # e.g. a directory we may list but not search: known, state unknown
                files.unknown(name)
                continue
            if found is not UNTRACKABLE:
                files.add(name, st, found)
    builder.add_dir(rel, files.columns(), subdirs, ign_files, ign_dirs, dir_stat)
    if files.rescan:
        builder.always_scan(rel)


class _Files:
    """The tracked files of one directory as it is listed, in the columns of its records (names; size,
    mtime and ctime; inodes; content hashes; kinds). ``rescan``: one of them is unreadable, or has other
    hard links (written through another name, it leaves no event here), which makes the directory one that
    diff always scans, watcher or not."""

    __slots__ = ("names", "stats", "inodes", "hashes", "kinds", "rescan", "_started_ns")

    def __init__(self, started_ns: int) -> None:
        self.names: list[str] = []
        self.stats, self.inodes, self.hashes, self.kinds = array("q"), array("Q"), array("Q"), bytearray()
        self.rescan = False
        self._started_ns = started_ns

    def unknown(self, name: str) -> None:
        """A file whose stat failed: listed, its state unknown."""
        self.names.append(name)
        self.stats.extend((-1, 0, 0))
        self.inodes.append(0)
        self.hashes.append(0)
        self.kinds.append(KIND_UNKNOWN)
        self.rescan = True

    def add(self, name: str, st: os.stat_result, found: object) -> None:
        """A file with its stat and :func:`ident`'s content identity (None: unreadable)."""
        mtime, ctime = st.st_mtime_ns, st.st_ctime_ns
        racy = _is_racy(mtime, self._started_ns) or _is_racy(ctime, self._started_ns)
        self.names.append(name)
        self.stats.extend((-1 if racy else st.st_size, mtime, ctime))
        self.inodes.append(st.st_ino)
        if found is None:
            self.hashes.append(0)
            self.kinds.append(KIND_UNKNOWN)
            self.rescan = True
        elif found >= 0:  # type: ignore[operator]
            self.hashes.append(found)  # type: ignore[arg-type]
            self.kinds.append(KIND_FILE)
        else:
            self.hashes.append(-1 - found)  # type: ignore[operator]
            self.kinds.append(KIND_LINK)
        if st.st_nlink > 1:
            self.rescan = True

    def columns(self) -> tuple[list[str], array, array, array, bytearray]:
        return self.names, self.stats, self.inodes, self.hashes, self.kinds


def _dir_stat(st: os.stat_result, started_ns: int) -> tuple[int, int, int] | None:
    mtime, ctime = st.st_mtime_ns, st.st_ctime_ns
    if _is_racy(mtime, started_ns) or _is_racy(ctime, started_ns):
        return None
    return mtime, ctime, st.st_ino


def _is_racy(t: int, started_ns: int) -> bool:
    if t >= started_ns - RACY_WINDOW_NS:
        return True
    return t % _SECOND_NS == 0 and t >= started_ns - _COARSE_RACY_WINDOW_NS
