"""``kimi-mcp prune``: remove finished jobs with what they left behind, and print what that freed.

A job leaves three things: its row in the job store, its isolated copy (``isolation="worktree"``: a copy
under ``<state>/worktrees/<id>/``, named after the job that made it and shared by the later turns of its
conversation) and the Kimi session it ran in (a directory in Kimi's own session store: legacy kimi-cli
``~/.kimi/sessions/<md5 of the workspace>/<session id>/``, Kimi Code
``~/.kimi-code/sessions/<workspace key>/<session id>/``, their homes moved by ``KIMI_SHARE_DIR`` and
``KIMI_CODE_HOME`` as the drivers read them). Which jobs go: the finished ones (``done``, ``failed``,
``cancelled``, ``interrupted``; a running job whose server died counts as interrupted now) that ended more
than ``--older-than`` days ago (default ``KIMI_MCP_JOB_TTL_DAYS``), or all of them (``--all``). A job
running in a live server never goes, nor one that ended less than ``KIMI_MCP_SESSION_IDLE`` seconds ago in
a live server (its Kimi may still be alive for a follow-up).

The rows go first, in one transaction that also reads every job left, so a follow-up recorded meanwhile
keeps what it uses. A session goes only if no job left names it; a copy only if no job left names it (its
result, or it made it) and no job left belongs to the conversation of a job that named it. Only
directories inside the stores go: a session is a real directory two levels below its store (a store may be
a symlink, nothing below it is followed), and nothing else there is touched.

Imported to build ``--help``: nothing heavy at module level; ``run`` imports what it needs.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .config import Settings
    from .jobs import JobRef, JobStore

DAY_S = 86_400.0


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of ``kimi-mcp prune``."""
    when = parser.add_mutually_exclusive_group()
    when.add_argument(
        "--older-than",
        type=_days,
        metavar="DAYS",
        help="finished jobs that ended more than DAYS days ago (default: KIMI_MCP_JOB_TTL_DAYS, 7)",
    )
    when.add_argument("--all", action="store_true", help="every finished job, whatever its age")
    parser.add_argument("--dry-run", action="store_true", help="list what would be removed; remove nothing")
    parser.add_argument(
        "-v", "--verbose", action="store_true", help="list every job, copy and session removed"
    )


def _days(text: str) -> float:
    try:
        days = float(text)
    except ValueError:
        days = -1.0
    if not days >= 0 or days == float("inf"):
        raise argparse.ArgumentTypeError(f"not a number of days: {text!r}")
    return days


def run(args: argparse.Namespace) -> int:
    """Prune as ``args`` say; print what was (or would be) freed. 0 on success; 1 (with a one-line error
    on stderr) when the configuration or the job store cannot be read, or something could not be removed."""
    import sqlite3

    from .config import ConfigError, load_env_file, load_settings, read_environment, state_dir
    from .jobs import STORE_FILE, JobStore

    load_env_file()
    env = read_environment()
    try:
        settings = load_settings(env)
    except ConfigError as exc:
        return _fail(str(exc))
    path = state_dir(settings, env) / STORE_FILE
    if not path.exists():
        print(f"No job store at {path}: nothing to prune.")
        return 0
    try:
        store = JobStore(path)
    except (sqlite3.Error, OSError) as exc:
        return _fail(f"cannot open the job store {path}: {exc}")
    try:
        report = prune(store, settings, env, args)
    except sqlite3.Error as exc:
        return _fail(f"cannot prune the job store {path}: {exc}")
    finally:
        store.close()
    print("\n".join(report.lines(args.verbose or args.dry_run)))
    return 1 if report.failures else 0


def _fail(message: str) -> int:
    print(f"kimi-mcp prune: error: {message}", file=sys.stderr)
    return 1


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
    from .config import state_dir
    from .jobs import owner_alive

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
    used go with them (their copies go with ``tools._isolation.prune_copies``); the directories removed."""
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
    from .jobs import FINISHED

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


def session_roots(env: dict[str, str]) -> list[Path]:
    """Kimi's session stores, both dialects, found as their drivers find them in ``env``."""
    from .drivers.kimi_code import KimiCodeDriver
    from .drivers.legacy import LegacyDriver

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
        for bucket in _subdirs(store):
            found.update(entry for entry in _subdirs(bucket) if entry.name in session_ids)
    return sorted(found)


def _subdirs(folder: Path) -> list[Path]:
    """The directories directly in ``folder`` (symlinks not followed, not listed)."""
    try:
        with os.scandir(folder) as entries:
            return [Path(entry.path) for entry in entries if entry.is_dir(follow_symlinks=False)]
    except OSError:
        return []


def _remove_sessions(roots: list[Path], session_ids: set[str], report: Report) -> None:
    from . import worktree
    from .errors import KimiMCPError

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
    from . import worktree
    from .errors import KimiMCPError

    for folder in _subdirs(state / worktree.WORKTREES_DIR):
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
    import sqlite3

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
    from .worktree import tree_bytes

    return sum(tree_bytes(Path(f"{path}{suffix}")) for suffix in ("", "-wal"))


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
