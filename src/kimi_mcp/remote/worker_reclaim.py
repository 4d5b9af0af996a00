"""What a ``kimi-mcp worker`` keeps on disk, and when it lets go (``kimi-mcp worker --keep-copies``).

A worker keeps, for each copy it ran a job in, a work tree (``<state>/checkouts/<copy>/tree``, a work tree of
its origin's bare repository ``<state>/origins/<origin>.git``) and Kimi's files of the copy's conversation,
so a follow-up finds both at hand. None of it is the only copy: the server keeps the copy, its turns and
Kimi's files of the conversation, and a follow-up that finds its copy gone here asks for it again
(``needs_copy``). So a copy no job used for ``keep_s`` seconds goes, with its conversation's files and its
refs in the origin's repository; an origin left without copies for as long goes too.

Each job writes ``<state>/checkouts/<copy>/job.json`` (its origin and session id) when it ends: its time is
the copy's last use. A copy a job runs in now (:class:`InUse`) is never touched.
"""

from __future__ import annotations

import json
import shutil
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from .._logging import get_logger
from ..drivers import session_dirs, session_roots
from ..worktree import bundles

log = get_logger("worker")

RECORD = "job.json"


class InUse:
    """The copies jobs run in now on this worker (a copy may serve two jobs: a job run again)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self._copies: Counter[str] = Counter()

    def take(self, copy: str) -> None:
        with self.lock:
            self._copies[copy] += 1

    def release(self, copy: str) -> None:
        with self.lock:
            self._copies[copy] -= 1
            if self._copies[copy] <= 0:
                del self._copies[copy]

    def __contains__(self, copy: object) -> bool:
        return copy in self._copies

    def __len__(self) -> int:
        with self.lock:
            return sum(self._copies.values())


@dataclass
class Reclaimed:
    copies: list[str] = field(default_factory=list)
    origins: list[str] = field(default_factory=list)
    sessions: list[Path] = field(default_factory=list)


def record_use(root: Path, origin: str, session_id: str | None) -> None:
    """After a job in the copy at ``root``: what it belongs to, and (its time) when it was last used."""
    root.mkdir(parents=True, exist_ok=True)
    (root / RECORD).write_text(json.dumps({"origin": origin, "session_id": session_id}))


def reclaim(
    state: Path,
    env: dict[str, str],
    keep_s: float,
    in_use: InUse,
    close_live: Callable[[str], None] = lambda session_id: None,
    now: float | None = None,
) -> Reclaimed:
    """Remove the copies no job used for ``keep_s`` seconds (and none uses now), their conversations' Kimi
    files (``close_live`` first stops a Kimi still alive in one), and the origins left without copies that
    long."""
    now = time.time() if now is None else now
    done = Reclaimed()
    for root in _folders(state / "checkouts"):
        if root.name in in_use or _last_use(root) > now - keep_s:
            continue
        with in_use.lock:  # a job starting on this copy now waits for its removal, then asks for it again
            if root.name in in_use:
                continue
            done.sessions += _forget_copy(state, root, env, close_live)
        done.copies.append(root.name)
    for origin in _folders(state / "origins"):
        if origin.suffix == ".git" and (origin / "HEAD").is_file() and _fetched_before(origin, now - keep_s):
            with bundles.origin_lock(origin):
                bundles.prune_worktrees(origin)  # a copy that went without its record leaves an entry
                trees = origin / "worktrees"
                if not (trees.is_dir() and any(trees.iterdir())):
                    shutil.rmtree(origin, ignore_errors=True)
                    done.origins.append(origin.stem)
    if done.copies or done.origins:
        log.info("reclaimed %d copies, %d origins", len(done.copies), len(done.origins))
    return done


def _forget_copy(
    state: Path, root: Path, env: dict[str, str], close_live: Callable[[str], None]
) -> list[Path]:
    record = _record(root)
    if record.get("session_id"):
        close_live(record["session_id"])  # its Kimi works in the tree that goes
    origin = state / "origins" / f"{record.get('origin', '')}.git"
    if record.get("origin") and (origin / "HEAD").is_file():
        with bundles.origin_lock(origin):
            bundles.remove_checkout(origin, root / "tree")
            bundles.forget_copy_refs(origin, root.name)
    shutil.rmtree(root, ignore_errors=True)
    sessions = session_dirs(session_roots(env), {record["session_id"]}) if record.get("session_id") else []
    for folder in sessions:
        shutil.rmtree(folder, ignore_errors=True)
    return sessions


def _fetched_before(origin: Path, then: float) -> bool:
    """Whether nothing was checked out of the origin (a fetch) since ``then``."""
    fetched = origin / "FETCH_HEAD"
    try:
        return (fetched if fetched.exists() else origin).stat().st_mtime <= then
    except FileNotFoundError:
        return False


def _last_use(root: Path) -> float:
    for path in (root / RECORD, root):
        try:
            return path.stat().st_mtime
        except FileNotFoundError:
            continue
    return 0.0


def _record(root: Path) -> dict:
    try:
        return json.loads((root / RECORD).read_text())
    except (OSError, ValueError):
        return {}


def _folders(top: Path) -> list[Path]:
    try:
        return sorted(p for p in top.iterdir() if p.is_dir() and not p.is_symlink())
    except FileNotFoundError:
        return []
