"""Kimi's own session stores, both dialects: where a session's directory is (for pruning and reclaiming)."""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

from .kimi_code import KimiCodeDriver
from .legacy import LegacyDriver


def session_roots(env: dict[str, str]) -> list[Path]:
    """Kimi's session stores, both dialects, found as their drivers find them in ``env``."""
    return [LegacyDriver.sessions_root(env), KimiCodeDriver.sessions_root(env)]


def session_dirs(roots: Iterable[Path], session_ids: set[str]) -> list[Path]:
    """The directories of these sessions: ``<store>/<bucket>/<session id>`` (both dialects' layout, see
    the drivers' ``wire_glob``), each a real directory (not a symlink) found by listing the store (resolved:
    the store itself may be a symlink), so nothing outside it is ever named."""
    found: set[Path] = set()
    for root in roots:
        try:
            store = root.resolve(strict=True)
        except (OSError, RuntimeError):
            continue
        for bucket in subdirs(store):
            found.update(entry for entry in subdirs(bucket) if entry.name in session_ids)
    return sorted(found)


def subdirs(folder: Path) -> list[Path]:
    """The directories directly in ``folder`` (symlinks not followed, not listed)."""
    try:
        with os.scandir(folder) as entries:
            return [Path(entry.path) for entry in entries if entry.is_dir(follow_symlinks=False)]
    except OSError:
        return []
