"""Pruning finished jobs: which go (``choose``), what only they used (``leftovers``), and removing them
with their isolated copies and Kimi sessions (``prune``); the command is ``kimi-mcp prune``
(``cli.prune``), and a server prunes at start (``forget_sessions``).

Which jobs go: the finished ones (``done``, ``failed``, ``cancelled``, ``interrupted``; a running job whose
server died counts as interrupted now) that ended before the cutoff, or all of them. A job running in a live
server never goes, nor one that ended less than ``KIMI_MCP_SESSION_IDLE`` seconds ago in a live server (its
Kimi may still be alive for a follow-up). The rows go first, in one transaction that also reads every job
left, so a follow-up recorded meanwhile keeps what it uses. A session goes only if no job left names it; a
copy only if no job left names it (its result, or it made it) and no job left belongs to the conversation of
a job that named it. Only directories inside the stores go (see ``drivers.session_dirs``).
"""

from __future__ import annotations

import argparse
import sqlite3
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

from .. import worktree
from ..config import Settings, state_dir
from ..drivers import session_dirs, session_roots
from ..drivers._stores import subdirs
from ..errors import KimiMCPError
from ._store import FINISHED, JobRef, JobStore, owner_alive

DAY_S = 86_400.0


@dataclass
class Report:
    """What a prune removed (or, dry, would remove)."""

    dry: bool
    age: str  # which jobs: "ended over 7 days ago", "any age"
    jobs: list[str] = field(default_factory=list)
    copies: list[Path] = field(default_factory=list)
    sessions: list[Path] = field(default_factory=list)
    bytes_store: int = 0
    bytes_copies: int = 0
    bytes_sessions: int = 0
    kept_running: int = 0  # running or queued in a live server
    kept_live: int = 0  # ended in a live server within KIMI_MCP_SESSION_IDLE
    failures: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def lines(self, itemized: bool) -> list[str]:
        verb, freed = ("Would remove", "would be freed") if self.dry else ("Removed", "freed")
        total = self.bytes_store + self.bytes_copies + self.bytes_sessions
        lines = [
            f"{verb} {_count(len(self.jobs), 'finished job')} ({self.age}), "
            f"{_count(len(self.copies), 'isolated copy', 'isolated copies')} and "
            f"{_count(len(self.sessions), 'Kimi session')}: {human_bytes(total)} {freed}"
            f"{' (and the job store shrinks)' if self.dry and self.jobs else ''}."
        ]
        if not self.dry:
            lines.append(f"  job store: {human_bytes(self.bytes_store)}")
        lines.append(f"  isolated copies: {human_bytes(self.bytes_copies)}")
        lines.append(f"  Kimi sessions: {human_bytes(self.bytes_sessions)}")
        if itemized:
            lines += [f"  job {job}" for job in self.jobs]
            lines += [f"  copy {copy}" for copy in self.copies]
            lines += [f"  session {session}" for session in self.sessions]
        if self.kept_running:
            lines.append(f"Kept {_count(self.kept_running, 'job')} still running in a live kimi-mcp server.")
        if self.kept_live:
            lines.append(
                f"Kept {_count(self.kept_live, 'job')} that ended in a live kimi-mcp server less than "
                "KIMI_MCP_SESSION_IDLE ago (its Kimi may still be alive for a follow-up)."
            )
        return lines + self.notes + [f"Could not remove {failure}" for failure in self.failures]


def prune(store: JobStore, settings: Settings, env: dict[str, str], args: argparse.Namespace) -> Report:
    """Remove the jobs ``args`` select, then the copies and sessions only they used."""
    if not args.dry_run:
        store.interrupt_orphans()  # as any server opening the store would
    now = time.time()
    if args.all:
        cutoff, age = None, "any age"
    else:
        days = settings.job_ttl_days if args.older_than is None else args.older_than
        cutoff, age = now - days * DAY_S, f"ended over {days:g} days ago"
    report = Report(dry=args.dry_run, age=age)
    refs = store.refs()
    chosen = choose(refs, cutoff, now, settings.session_idle, owner_alive, report)
    size_before = _store_bytes(store.path)
    if report.dry:
        deleted = [ref for ref in refs if ref.job_id in chosen]
        left = [ref for ref in refs if ref.job_id not in chosen]
    else:
        deleted, left = store.delete(chosen)
    report.jobs = [ref.job_id for ref in deleted]
    sessions, copies = leftovers(deleted, left)
    _remove_copies(state_dir(settings, env), copies, report)
    _remove_sessions(session_roots(env), sessions, report)
    if deleted and not report.dry:
        _compact(store, size_before, report)
    return report


def forget_sessions(env: dict[str, str], deleted: list[JobRef], left: list[JobRef]) -> list[Path]:
    """A server's own pruning at start (``JobManager.on_pruned``): the Kimi sessions only the pruned jobs
    used go with them (their copies go with ``adapter.isolation.prune_copies``); the directories removed."""
    report = Report(dry=False, age="")
    sessions, _copies = leftovers(deleted, left)
    _remove_sessions(session_roots(env), sessions, report)
    return report.sessions


def choose(
    refs: Iterable[JobRef],
    cutoff: float | None,
    now: float,
    session_idle: float,
    is_alive: Callable[[str], bool],
    report: Report,
) -> set[str]:
    """The ids of the jobs to remove: finished (or unfinished with a dead server: interrupted now) and ended
    at or before ``cutoff`` (None: whenever), except those a live server may still use (counted in
    ``report``). Each owner is checked once."""
    alive: dict[str, bool] = {}
    chosen: set[str] = set()
    for ref in refs:
        if ref.owner not in alive:
            alive[ref.owner] = is_alive(ref.owner)
        live_owner = alive[ref.owner]
        if ref.status in FINISHED:
            ended = ref.ended_at
        elif live_owner:
            report.kept_running += 1
            continue
        else:
            ended = now
        if cutoff is not None and ended > cutoff:
            continue
        if live_owner and now - ended < session_idle:
            report.kept_live += 1
            continue
        chosen.add(ref.job_id)
    return chosen


def leftovers(deleted: Iterable[JobRef], left: Iterable[JobRef]) -> tuple[set[str], set[str]]:
    """(session ids, copy ids) the deleted jobs used and no job left uses. A job left keeps its session,
    the copy its result names and the copy named after it (it made it: a running one has no result yet);
    a conversation with a job left keeps every copy of its deleted jobs too (a follow-up running in the
    copy has no result naming it yet)."""
    left = list(left)
    kept_sessions = {ref.session_id for ref in left if ref.session_id}
    kept_copies = {str(name) for ref in left for name in (ref.copy, ref.job_id) if name}
    sessions: set[str] = set()
    copies: set[str] = set()
    for ref in deleted:
        if ref.session_id and ref.session_id not in kept_sessions:
            sessions.add(ref.session_id)
        if ref.session_id not in kept_sessions:
            copies.update(str(name) for name in (ref.copy, ref.job_id) if name)
    return sessions, copies - kept_copies


def _remove_sessions(roots: list[Path], session_ids: set[str], report: Report) -> None:
    for folder in session_dirs(roots, session_ids):
        size = worktree.tree_bytes(folder)
        if not report.dry:
            try:
                if not folder.is_dir() or folder.is_symlink():  # replaced since it was listed
                    continue
                worktree.rmtree(folder)
            except (KimiMCPError, OSError) as exc:
                report.failures.append(f"the Kimi session {folder}: {exc}")
                continue
        report.sessions.append(folder)
        report.bytes_sessions += size


def _remove_copies(state: Path, copy_ids: set[str], report: Report) -> None:
    for folder in subdirs(state / worktree.WORKTREES_DIR):
        if folder.name not in copy_ids:
            continue
        size = worktree.tree_bytes(folder)
        if not report.dry:
            try:
                if not worktree.discard(state, folder.name):
                    continue
            except (KimiMCPError, OSError) as exc:
                report.failures.append(f"the isolated copy {folder}: {exc}")
                continue
        report.copies.append(folder)
        report.bytes_copies += size


def _compact(store: JobStore, size_before: int, report: Report) -> None:
    try:
        store.compact()
    except sqlite3.OperationalError as exc:
        report.notes.append(
            f"The job store was not compacted ({exc}: another kimi-mcp server is using it); its free space "
            "is reused by new jobs."
        )
    report.bytes_store = max(0, size_before - _store_bytes(store.path))


def _store_bytes(path: Path) -> int:
    """The job store's file and its write-ahead log, as allocated on disk."""
    return sum(worktree.tree_bytes(Path(f"{path}{suffix}")) for suffix in ("", "-wal"))


def _count(n: int, singular: str, plural: str | None = None) -> str:
    return f"{n} {singular if n == 1 else plural or singular + 's'}"


def human_bytes(n: int) -> str:
    """``n`` bytes for a person: ``0 B``, ``812 B``, ``4.0 KiB``, ``48.2 MiB``, ``1.3 GiB``."""
    size, unit = float(n), "B"
    for bigger in ("KiB", "MiB", "GiB", "TiB"):
        if size < 1024:
            break
        size, unit = size / 1024, bigger
    return f"{n} B" if unit == "B" else f"{size:.1f} {unit}"
