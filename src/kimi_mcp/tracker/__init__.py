"""The file tracker: what Kimi created, modified or deleted during a turn, and the new contents.

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

Where things are: ``_snapshot`` takes the snapshot (``Snapshot``), ``_records`` is its record format and
``_spill`` where the records live, ``_watch`` the inotify watcher; ``_diff`` is ``diff`` and its watched
path, ``_walk`` the per-directory comparison, ``_parallel`` the full walk with its forked helper;
``_contents`` reads contents for results; ``_fs`` and ``_ignore`` are the file-system and git-ignore
primitives; ``_model`` holds ``TrackerOptions`` and ``Changes``.

POSIX only (directory file descriptors, ``O_NOFOLLOW``).
"""

from __future__ import annotations

from ._contents import ContentCut, ContentReport, collect_contents
from ._diff import diff
from ._model import Changes, TrackerOptions
from ._snapshot import Snapshot, take_snapshot

__all__ = [
    "Changes",
    "ContentCut",
    "ContentReport",
    "Snapshot",
    "TrackerOptions",
    "collect_contents",
    "diff",
    "take_snapshot",
]
