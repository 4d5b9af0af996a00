"""The tracker's value types: what to track (``TrackerOptions``) and what changed (``Changes``)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from ..config import DEFAULT_EXCLUDED_DIRS, MAX_FILE_CHARS, MAX_TOTAL_CHARS

__all__ = ["DEFAULT_OPTIONS", "Changes", "TrackerOptions", "excluded_dirs"]


@dataclass(frozen=True, slots=True)
class TrackerOptions:
    """What to track, how much content to return, and how: the switches ``watch``, ``fork`` and ``spill``
    change the cost, never the result (the server sets them from the ``tracker_*`` settings)."""

    extra_excluded_dirs: frozenset[str] = frozenset()
    respect_gitignore: bool = True
    max_file_chars: int = MAX_FILE_CHARS
    max_total_chars: int = MAX_TOTAL_CHARS
    watch: bool = True
    """``take_snapshot`` watches the directories it walks with inotify (Linux), so ``diff`` re-examines only
    those where something happened; False: ``diff`` always walks the whole tree."""
    fork: bool = True
    """The whole-tree walk forks a helper for half of a large tree (>= 20k files, 2+ CPUs); False: never."""
    spill: bool = True
    """The snapshot's per-file records go to an anonymous temporary file (mapped, not resident); False: they
    stay in memory."""
    trust_dir_stat: bool = True
    """The full walk skips listing a directory whose own stat did not move; False: it lists every one (the
    slow path, kept for tests that prove both paths give the same result)."""


DEFAULT_OPTIONS = TrackerOptions()


def excluded_dirs(options: TrackerOptions) -> frozenset[str]:
    """Every directory name that is never walked: the defaults and the extra ones."""
    return DEFAULT_EXCLUDED_DIRS | options.extra_excluded_dirs


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
