"""Isolated copies of a workspace (``isolation="worktree"``): Kimi works in a private copy of the user's
repository, and the caller reviews the change (``diff``), lands it with a three-way merge (``apply``) or
throws it away (``discard``).

A copy lives in ``<state>/worktrees/<job id>/``: ``tree/`` is a private git repository whose object store
borrows the user's (``objects/info/alternates``), checked out at a base commit holding the user's working
tree as it was (uncommitted and untracked files included; ignored files, submodule contents and Git LFS
contents not). Creating, diffing, verifying and discarding leave the user's repository exactly as it was
(working tree, index, HEAD, refs, stash, worktree list, config, object store); only ``apply`` writes, and
only the applied files of the working tree.

``repo_top`` checks a workspace (and the state directory) the way ``create`` would, before a job starts.

Limits: objects the base borrows from the user's store (staged blobs, HEAD's history) are not protected
from the user's own ``git gc --prune``, so a copy whose objects were pruned fails with a git error and
must be discarded; untracked files that are not ignored are copied however large (a ``node_modules``
missing from ``.gitignore`` is hashed into the copy); ``Change.text`` is not truncated.
"""

from __future__ import annotations

from . import _bundle as bundles
from ._apply import apply
from ._create import create
from ._diff import SECRET_NOTE, diff
from ._model import Applied, Change, Conflict, FileDiff, Isolated, Verify
from ._repo import repo_top
from ._store import WORKTREES_DIR, discard, disk_usage, load, prune, rmtree, tree_bytes
from ._verify import run_verify, verify_in

__all__ = [
    "SECRET_NOTE",
    "WORKTREES_DIR",
    "Applied",
    "Change",
    "Conflict",
    "FileDiff",
    "Isolated",
    "Verify",
    "apply",
    "bundles",
    "create",
    "diff",
    "discard",
    "disk_usage",
    "load",
    "prune",
    "repo_top",
    "rmtree",
    "run_verify",
    "tree_bytes",
    "verify_in",
]
