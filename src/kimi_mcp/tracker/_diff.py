"""``diff``: re-examine only the directories the snapshot's watcher saw change, else walk the whole tree.

Watching (Linux): ``take_snapshot`` also opens an inotify instance (``_watch``) and watches every directory
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
Linux, ``TrackerOptions.watch`` False, no inotify instance left, the watch limit reached: at most a quarter
of ``max_user_watches`` is used) or can no longer be trusted: the event queue overflowed, a watched
directory was moved or renamed (its watches would map to stale paths; a new, unwatched directory may be
renamed freely), a filesystem was unmounted, the root was replaced, a changed directory cannot be read, or
a new or changed file has other hard links (written through another name, a file leaves no event in its
own directory). ``Changes.method`` and ``Changes.reason`` say which path was taken. Limits shared with
every inotify user: writes that leave no event are not seen (a file given a second name *after* the
snapshot where no tracked directory sees it, outside the workspace or in an ignored or excluded directory,
and written through that name; a shared ``mmap`` still mapped when ``diff`` runs, whose ``close_write``
comes at unmap; changes made by another machine on a network filesystem); turn watching off
(``KIMI_MCP_TRACKER_WATCH=false``) where that matters.
"""

from __future__ import annotations

import os

from .._logging import get_logger
from ._fs import dir_id
from ._model import DEFAULT_OPTIONS, Changes, TrackerOptions
from ._parallel import walk_full
from ._snapshot import Snapshot
from ._walk import DiffWalk

__all__ = ["diff"]

log = get_logger("tracker")


def diff(before: Snapshot, options: TrackerOptions = DEFAULT_OPTIONS) -> Changes:
    """Compare the tree with ``before`` (pass the options given to ``take_snapshot``). ``before`` is neither
    consumed nor closed: diffing it again compares with the same snapshot.

    While ``before`` is watching, only the directories its watcher saw change are re-examined
    (``Changes.method == "watched"``); otherwise, or if the watcher cannot be trusted (queue overflow, a
    watched directory moved, the root replaced, an unreadable directory...), the whole tree is walked again
    (``"full"``, with ``Changes.reason``). Both give the same result.
    """
    plan = _watch_plan(before)
    if not isinstance(plan, str):
        changes = _diff_dirty(before, options, *plan)
        if not isinstance(changes, str):
            changes.method = "watched"
            return changes
        plan = changes
    log.debug("tracker: walking the whole tree (%s)", plan)
    changes = walk_full(before, options)
    changes.reason = plan
    return changes


def _watch_plan(before: Snapshot) -> tuple[set[str], set[str]] | str:
    """The watcher's ``(dirty, gone)`` directories, or why the whole tree must be walked."""
    watcher = before.watcher
    if watcher is None:
        return before.unwatched_reason or "not watching"
    try:
        root_id = dir_id(os.stat(before.root))
    except OSError as exc:
        return f"the workspace root cannot be read: {exc}"
    if root_id != before.tree.root_id:
        return "the workspace root was replaced"
    return watcher.plan()


def _diff_dirty(before: Snapshot, options: TrackerOptions, dirty: set[str], gone: set[str]) -> Changes | str:
    """``diff`` limited to what the watcher saw: scan the dirty directories (and those always scanned),
    walk new directories whole, and take every other snapshot directory as unchanged. A deleted directory is
    scanned like a dirty one: if it is back, it was recreated unwatched and is walked whole; if not, its files
    are reported deleted.

    Returns why the full walk must decide instead if a changed directory could not be read (the full walk
    decides what that hides), or if a new or changed file has other hard links (one of its other names may
    sit in a directory that saw no event although the file's content changed)."""
    walk = DiffWalk.start(before, options, track_links=True)
    old_dirs = before.tree.dirs
    todo = sorted(dirty | gone | before.tree.rescan, reverse=True)  # any order gives the same result
    scanned: set[str] = set()
    subdirs: list[str] = []
    while todo:
        rel = todo.pop()
        if rel in scanned:
            continue
        scanned.add(rel)
        walk.scan(rel, subdirs)
        # Known subdirectories have watches of their own; new or recreated ones have none: walk them.
        todo.extend(sub for sub in subdirs if sub not in old_dirs or sub in gone)
        subdirs.clear()
    found = walk.found
    if found.unreadable:
        return f"a changed directory could not be read: {found.unreadable[0]!r}"
    if found.linked:
        return f"a changed file has other hard links: {found.linked[0]!r}"
    found.visited.extend(rel for rel in old_dirs if rel not in scanned)
    return walk.finish()
