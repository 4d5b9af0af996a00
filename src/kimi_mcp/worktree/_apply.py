"""Applying a job's change to the user's working tree: a three-way merge per path, all or nothing.

Everything is decided before anything is written: if any path conflicts, nothing is written and the
conflicts are returned. The user's index is never touched, and nothing is written outside the workspace.
A copy is applied at most once (recorded in its ``meta.json``, under its lock).
"""

from __future__ import annotations

import os
import time
from datetime import UTC, datetime
from pathlib import Path, PurePosixPath

from ..errors import BadInput, WorkspaceError
from ._diff import ABSENT_MODE, Entry, changes, snapshot
from ._merge import Context, Op, Ours, Side, Target, decide, read_ours
from ._model import Applied, Conflict, Isolated
from ._store import Gone, locked, read_meta, write_meta
from ._write import write_all

_LISTED = 50  # changed paths named in a BadInput


def apply(iso: Isolated, paths: list[str] | None = None) -> Applied:
    """Land the job's change (all of it, or ``paths``, relative to the workspace) in the user's workspace.

    Per path: the user's file unchanged since the base → the job's version; already as the job left it →
    nothing to do; both changed a text file → ``git merge-file``; anything else both changed → a conflict.
    Any conflict → nothing written. BadInput if the job changed nothing, a path is not in the change, or
    the change was already applied.
    """
    with locked(iso.root):
        meta = read_meta(iso.root)
        if meta is None:
            raise Gone(iso.id)
        if meta.get("applied_at"):
            when = datetime.fromtimestamp(meta["applied_at"], UTC).isoformat(timespec="seconds")
            raise BadInput(
                f"the change of job {iso.id} was already applied at {when}",
                details={"applied_at": meta["applied_at"], "applied": meta.get("applied", [])},
                suggestion="Nothing to do; discard the copy when you no longer need it.",
            )
        if not iso.user_workspace.is_dir():
            raise WorkspaceError(f"the workspace {iso.user_workspace} no longer exists")
        entries = changes(iso, snapshot(iso))
        if not entries:
            raise BadInput(f"the job changed nothing: its copy is identical to the base ({iso.base[:12]})")
        targets = _targets(_select(entries, paths))
        ctx = Context(iso, str(meta.get("object_format", "sha1")), bool(meta.get("filemode", True)))
        try:
            ops, conflicts = _plan(ctx, targets)
        except OSError as exc:
            raise WorkspaceError(
                f"cannot read {exc.filename or 'a file'} to apply the change: {exc.strerror}",
                details={"workspace": str(iso.user_workspace)},
                suggestion="Fix the file's permissions, then apply again; nothing was written.",
            ) from exc
        if conflicts:
            return Applied(applied=[], conflicts=conflicts)
        write_all(iso.user_workspace, ops)
        applied = sorted(op.path for op in ops)
        meta.update(applied_at=time.time(), applied=applied)
        write_meta(iso.root, meta)
    return Applied(applied=applied, conflicts=[])


def _select(entries: list[Entry], paths: list[str] | None) -> list[Entry]:
    """The entries ``paths`` names (either side of a rename selects both); all if ``paths`` is None."""
    if paths is None:
        return entries
    by_path: dict[str, Entry] = {}
    for entry in entries:
        by_path[entry.path] = entry
        if entry.old_path is not None:
            by_path[entry.old_path] = entry
    chosen: dict[int, Entry] = {}
    unknown = []
    for raw in paths:
        path = _normal(raw)
        if path in by_path:
            chosen[id(by_path[path])] = by_path[path]
        else:
            unknown.append(raw)
    if unknown or not chosen:
        changed = sorted(by_path)
        raise BadInput(
            f"not part of the job's change: {', '.join(map(repr, unknown)) or 'no path given'}",
            details={"unknown": unknown, "changed": changed[:_LISTED], "changed_count": len(changed)},
            suggestion="Pass paths relative to the workspace, as listed in the diff's files.",
        )
    return [e for e in entries if id(e) in chosen]


def _normal(raw: str) -> str:
    """A path relative to the workspace in git's form; BadInput for absolute paths or ``..``."""
    text = raw.replace(os.sep, "/") if os.sep != "/" else raw
    pure = PurePosixPath(text)
    if not text or "\0" in text or pure.is_absolute() or ".." in pure.parts:
        raise BadInput(
            f"paths must be relative to the workspace and stay inside it: {raw!r}",
            details={"path": raw},
        )
    return pure.as_posix().removeprefix("./")


def _targets(entries: list[Entry]) -> list[Target]:
    """One target per path: a rename becomes the deletion of its old path and the addition of its new."""
    targets: dict[str, Target] = {}
    for e in entries:
        old = None if e.old_mode == ABSENT_MODE else Side(e.old_mode, e.old_id)
        new = None if e.new_mode == ABSENT_MODE else Side(e.new_mode, e.new_id)
        if e.old_path is not None:
            targets[e.old_path] = Target(e.old_path, old, None)
            targets[e.path] = Target(e.path, None, new)
        else:
            targets[e.path] = Target(e.path, old, new)
    return list(targets.values())


def _plan(ctx: Context, targets: list[Target]) -> tuple[list[Op], list[Conflict]]:
    """Decide every path; paths blocked by the user's files are settled after the deletions are known."""
    ours = read_ours(ctx, targets)
    ops: list[Op] = []
    conflicts: list[Conflict] = []
    waiting: list[Target] = []
    for target in targets:
        state = ours[target.path]
        if state.kind == "unsafe":
            conflicts.append(Conflict(target.path, f"{state.where} is a symbolic link in your working tree"))
        elif state.kind in ("dir", "blocked", "other"):
            waiting.append(target)
        else:
            _add(decide(ctx, target, state), ops, conflicts)
    deleted = {op.path for op in ops if op.action == "delete"}
    for target in waiting:
        state = ours[target.path]
        if _cleared(ctx.iso.user_workspace, target.path, state, deleted):
            _add(decide(ctx, target, Ours("absent")), ops, conflicts)
        else:
            what = {"dir": "a directory", "other": "not a regular file"}.get(state.kind)
            where = f"{target.path} is {what}" if what else f"{state.where} is a file"
            conflicts.append(Conflict(target.path, f"{where} in your working tree"))
    return ops, conflicts


def _add(result: Op | Conflict, ops: list[Op], conflicts: list[Conflict]) -> None:
    if isinstance(result, Conflict):
        conflicts.append(result)
    else:
        ops.append(result)


def _cleared(ws: Path, path: str, state: Ours, deleted: set[str]) -> bool:
    """Whether the deletions of this apply remove what is in the way (the file, or all of the directory)."""
    if state.kind == "blocked":
        return state.where in deleted
    if state.kind != "dir":
        return False
    for folder, dirs, files in os.walk(ws / path):
        links = [d for d in dirs if os.path.islink(os.path.join(folder, d))]
        dirs[:] = [d for d in dirs if d not in links]
        if not (files or dirs or links):
            return False  # an empty directory no deletion will remove
        for name in [*files, *links]:
            if Path(folder, name).relative_to(ws).as_posix() not in deleted:
                return False
    return True
