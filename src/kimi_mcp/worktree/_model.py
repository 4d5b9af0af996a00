"""The package's values: an isolated copy and the results of diffing, applying and verifying it.

All are frozen dataclasses of plain, JSON-friendly fields; ``to_dict()`` gives the JSON form.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

TREE_DIR = "tree"

Status = Literal["added", "modified", "deleted", "renamed", "mode"]


@dataclass(frozen=True, slots=True)
class Isolated:
    """One job's isolated copy of the user's workspace, persisted as ``<root>/meta.json``.

    ``base`` is the commit holding the user's tree as it was when the copy was made (uncommitted and
    untracked files included, ignored ones not); it exists only in the copy's repository. ``head`` is
    the user's HEAD commit then (None for a repository without commits). ``applied_at``/``applied``
    are set once the change was applied to the user's working tree.
    """

    id: str
    root: Path
    repo: Path
    subdir: str
    base: str
    created_at: float
    head: str | None = None
    applied_at: float | None = None
    applied: tuple[str, ...] = ()

    @property
    def checkout(self) -> Path:
        """The copy's work tree (a private git repository whose objects borrow the user's)."""
        return self.root / TREE_DIR

    @property
    def workspace(self) -> Path:
        """Where Kimi runs: the copy's counterpart of the user's workspace."""
        return self.checkout / self.subdir if self.subdir else self.checkout

    @property
    def user_workspace(self) -> Path:
        """The user's workspace (``repo / subdir``), where ``apply`` writes."""
        return self.repo / self.subdir if self.subdir else self.repo

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "root": str(self.root),
            "repo": str(self.repo),
            "subdir": self.subdir,
            "base": self.base,
            "created_at": self.created_at,
            "head": self.head,
            "applied_at": self.applied_at,
            "applied": list(self.applied),
            "checkout": str(self.checkout),
            "workspace": str(self.workspace),
        }


@dataclass(frozen=True, slots=True)
class FileDiff:
    """One changed file. ``path`` is relative to the workspace (posix); ``old_path`` is set for renames.
    Binary files have ``binary=True`` and 0/0 counts; a ``secret`` file's contents are not in the diff."""

    path: str
    status: Status
    old_path: str | None = None
    binary: bool = False
    insertions: int = 0
    deletions: int = 0
    secret: bool = False

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True, slots=True)
class Change:
    """The copy's whole change against its base: the unified diff ``text`` and the files in it."""

    text: str
    files: list[FileDiff]
    insertions: int
    deletions: int
    base: str

    @property
    def empty(self) -> bool:
        return not self.files

    def to_dict(self) -> dict[str, Any]:
        return {
            "text": self.text,
            "files": [f.to_dict() for f in self.files],
            "insertions": self.insertions,
            "deletions": self.deletions,
            "base": self.base,
        }


@dataclass(frozen=True, slots=True)
class Conflict:
    """A path that could not be applied because the user changed it too; ``hunks`` are the conflicting
    regions (diff3 blocks), empty for binary, deleted or secret files."""

    path: str
    reason: str
    hunks: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True, slots=True)
class Applied:
    """What ``apply`` did: every path written or deleted (or already as the job left it), or, if any path
    conflicts, nothing written and the conflicts."""

    applied: list[str]
    conflicts: list[Conflict]

    @property
    def ok(self) -> bool:
        return not self.conflicts

    def to_dict(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "applied": list(self.applied),
            "conflicts": [c.to_dict() for c in self.conflicts],
        }


@dataclass(frozen=True, slots=True)
class Verify:
    """A verification command's outcome in the copy. ``exit_code`` is None when it timed out (negative:
    killed by that signal); ``output_tail`` is the end of stdout and stderr merged."""

    command: str
    exit_code: int | None
    passed: bool
    timed_out: bool
    duration_s: float
    output_tail: str

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)
