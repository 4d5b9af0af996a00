"""Three-way decisions for ``apply``: per path, the base, the user's file now ("ours") and the job's
("theirs"); ``git merge-file`` where both changed a text file.

Sides are compared as git objects (mode and blob id): the user's files are hashed with ``git hash-object``
(clean filters and line-ending rules applied, nothing written), so a file equals the base exactly when
``git status`` would call it unchanged.
"""

from __future__ import annotations

import os
import stat
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from ..errors import WorkspaceError
from ._diff import is_secret
from ._git import blob_id, git, lines
from ._model import Conflict, Isolated

FILE, EXEC, LINK, GITLINK = "100644", "100755", "120000", "160000"
MAX_HUNKS = 10
MAX_HUNK_LINES = 40
MAX_HUNK_CHARS = 3000
_BINARY_PROBE = 8000  # git's own heuristic: a NUL in the first 8000 bytes


@dataclass(frozen=True, slots=True)
class Side:
    mode: str
    oid: str


@dataclass(frozen=True, slots=True)
class Target:
    """One path to apply: its base entry and the job's entry (None: absent)."""

    path: str
    base: Side | None
    theirs: Side | None


@dataclass(frozen=True, slots=True)
class Ours:
    """The user's file now. ``kind``: absent, file, link, dir, other (fifo, socket...), blocked (an
    ancestor is not a directory: ``where``), unsafe (an ancestor is a symlink: ``where``)."""

    kind: str
    side: Side | None = None
    perm: int | None = None
    where: str = ""


@dataclass(frozen=True, slots=True)
class Op:
    """What to do with one path: write ``data`` with ``mode``, delete it, or keep it as it is."""

    path: str
    action: Literal["write", "delete", "keep"]
    data: bytes = b""
    mode: str = FILE
    perm: int | None = None  # permission bits of the user's file being replaced, if any


@dataclass(frozen=True, slots=True)
class Context:
    iso: Isolated
    object_format: str
    filemode: bool

    @property
    def ws(self) -> Path:
        return self.iso.user_workspace

    @property
    def dotgit(self) -> Path:
        return self.iso.checkout / ".git"

    def repo_path(self, path: str) -> str:
        return f"{self.iso.subdir}/{path}" if self.iso.subdir else path


# ------------------------------------------------------------------------------------------ the user's


def read_ours(ctx: Context, targets: list[Target]) -> dict[str, Ours]:
    """The user's side of every target, without following symlinks anywhere below the workspace."""
    found = {t.path: _lstat_ours(ctx.ws, t.path) for t in targets}
    regular = [t for t in targets if found[t.path].kind == "file"]
    ids = _hash_files(ctx, [t.path for t in regular])
    for target in regular:
        ours = found[target.path]
        perm = ours.perm or 0
        if ctx.filemode:
            mode = EXEC if perm & stat.S_IXUSR else FILE
        else:  # git ignores exec bits here: the user's file keeps the base's
            mode = target.base.mode if target.base and target.base.mode in (FILE, EXEC) else FILE
        found[target.path] = Ours("file", Side(mode, ids[target.path]), ours.perm)
    for path, ours in found.items():
        if ours.kind == "link":
            data = os.fsencode(os.readlink(ctx.ws / path))
            found[path] = Ours("link", Side(LINK, blob_id(data, ctx.object_format)))
    return found


def _lstat_ours(ws: Path, path: str) -> Ours:
    parts = path.split("/")
    here = ws
    for i, part in enumerate(parts[:-1]):
        here = here / part
        try:
            info = os.lstat(here)
        except FileNotFoundError:
            return Ours("absent")
        where = "/".join(parts[: i + 1])
        if stat.S_ISLNK(info.st_mode):
            return Ours("unsafe", where=where)
        if not stat.S_ISDIR(info.st_mode):
            return Ours("blocked", where=where)
    try:
        info = os.lstat(ws / path)
    except FileNotFoundError:
        return Ours("absent")
    if stat.S_ISLNK(info.st_mode):
        return Ours("link")
    if stat.S_ISREG(info.st_mode):
        return Ours("file", perm=stat.S_IMODE(info.st_mode))
    return Ours("dir" if stat.S_ISDIR(info.st_mode) else "other")


def _hash_files(ctx: Context, paths: list[str]) -> dict[str, str]:
    """Blob ids of the user's files as ``git add`` would record them (filters applied, nothing written)."""
    batch = [p for p in paths if "\n" not in p and not ctx.repo_path(p).startswith('"')]
    ids: dict[str, str] = {}
    if batch:
        top = ctx.iso.repo
        text = "".join(ctx.repo_path(p) + "\n" for p in batch)
        done = git(
            ["hash-object", "--stdin-paths"],
            cwd=top,
            git_dir=ctx.dotgit,
            work_tree=top,
            stdin=os.fsencode(text),
        )
        ids.update(zip(batch, lines(done.stdout), strict=True))
    for path in paths:  # names git's line protocol cannot carry: hash the bytes as they are
        if path not in ids:
            ids[path] = blob_id((ctx.ws / path).read_bytes(), ctx.object_format)
    return ids


# ------------------------------------------------------------------------------------------- decisions


def decide(ctx: Context, target: Target, ours: Ours) -> Op | Conflict:
    """The operation for one path whose user side is absent, a file or a link; or why it conflicts."""
    base, theirs, mine = target.base, target.theirs, ours.side
    if any(s is not None and s.mode == GITLINK for s in (base, theirs)):
        return Conflict(
            target.path,
            "a submodule or nested git repository: its change cannot be applied as files (leave it out with "
            "paths=[...])",
        )
    if mine == theirs:
        return Op(target.path, "keep")
    if mine == base:
        return take_theirs(ctx, target, ours)
    if theirs is None:
        return Conflict(target.path, "deleted by the job, but changed in your working tree since")
    if base is None:
        return Conflict(target.path, "created by the job and, with different contents, in your working tree")
    if mine is None:
        return Conflict(target.path, "changed by the job, but deleted in your working tree since")
    return _three_way(ctx, target, ours, base, theirs, mine)


def take_theirs(ctx: Context, target: Target, ours: Ours) -> Op:
    if target.theirs is None:
        return Op(target.path, "delete")
    return Op(target.path, "write", theirs_bytes(ctx, target.path), target.theirs.mode, ours.perm)


def theirs_bytes(ctx: Context, path: str) -> bytes:
    """The job's version of a file as the copy holds it (a symlink: its target), never read through a
    symlinked directory of the copy."""
    found = _lstat_ours(ctx.iso.workspace, path)
    where = ctx.iso.workspace / path
    if found.kind == "link":
        return os.fsencode(os.readlink(where))
    if found.kind != "file":
        raise WorkspaceError(
            f"{path} changed in the isolated copy while it was being applied (it is no longer a file there)",
            details={"path": path},
            suggestion="Apply again once nothing works in the copy any more.",
            retryable=True,
        )
    return where.read_bytes()


def _three_way(
    ctx: Context, target: Target, ours: Ours, base: Side, theirs: Side, mine: Side
) -> Op | Conflict:
    """Both sides changed a path present in all three: merge the contents and the modes separately."""
    path = target.path
    if LINK in (base.mode, theirs.mode, mine.mode) and {base.mode, theirs.mode, mine.mode} != {LINK}:
        return Conflict(path, "turned into or from a symbolic link on one side and changed on the other")
    if mine.mode == base.mode:
        mode = theirs.mode
    elif theirs.mode in (base.mode, mine.mode):
        mode = mine.mode
    else:
        return Conflict(path, "the file type or executable bit changed differently on both sides")
    if mine.oid == base.oid:
        data = theirs_bytes(ctx, path)
    elif theirs.oid == base.oid:
        data = os.fsencode(os.readlink(ctx.ws / path)) if mine.mode == LINK else (ctx.ws / path).read_bytes()
    elif mine.mode == LINK:
        return Conflict(path, "a symbolic link changed differently on both sides")
    else:
        merged = merge_text(ctx, path, base)
        if isinstance(merged, Conflict):
            return merged
        data = merged
    return Op(path, "write", data, mode, ours.perm)


def merge_text(ctx: Context, path: str, base: Side) -> bytes | Conflict:
    """``git merge-file`` of the user's file, the base and the job's; the result or the conflict."""
    ours = (ctx.ws / path).read_bytes()
    theirs = theirs_bytes(ctx, path)
    old = git(
        ["cat-file", "--filters", f"--path={ctx.repo_path(path)}", base.oid],
        cwd=ctx.iso.checkout,
        git_dir=ctx.dotgit,
    ).stdout
    if any(b"\0" in data[:_BINARY_PROBE] for data in (ours, old, theirs)):
        return Conflict(path, "a binary file changed both by the job and in your working tree")
    with tempfile.TemporaryDirectory(prefix=".merge.", dir=ctx.iso.root) as scratch:
        names = []
        for label, data in (("ours", ours), ("base", old), ("theirs", theirs)):
            (Path(scratch) / label).write_bytes(data)
            names.append(label)
        labels = [f"{path} (your working tree)", f"{path} (base)", f"{path} (job {ctx.iso.id})"]
        args = ["merge-file", "-p", "--diff3", *(a for label in labels for a in ("-L", label)), *names]
        done = git(args, cwd=Path(scratch), ok_codes=range(128))
    if done.returncode == 0:
        return done.stdout
    if is_secret(ctx.iso, path):
        return Conflict(path, "both changed the same lines of a secret file (contents withheld)")
    hunks = conflict_hunks(done.stdout)
    return Conflict(
        path, f"the job and your working tree changed the same lines ({_places(done.returncode)})", hunks
    )


def conflict_hunks(merged: bytes) -> list[str]:
    """The conflicting regions of ``merge-file`` output (from ``<<<<<<<`` to ``>>>>>>>``), trimmed."""
    hunks: list[str] = []
    current: list[str] | None = None
    for line in merged.decode("utf-8", "replace").splitlines(keepends=True):
        if line.startswith("<<<<<<< "):
            current = [line]
        elif current is not None:
            current.append(line)
            if line.startswith(">>>>>>> "):
                hunks.append(_trim(current))
                current = None
    if len(hunks) > MAX_HUNKS:
        hunks = hunks[:MAX_HUNKS] + [f"... and {len(hunks) - MAX_HUNKS} more conflicting regions\n"]
    return hunks


def _trim(block: list[str]) -> str:
    if len(block) > MAX_HUNK_LINES:
        head, tail = MAX_HUNK_LINES // 2, MAX_HUNK_LINES // 2 - 1
        block = [*block[:head], f"... ({len(block) - head - tail} lines not shown)\n", *block[-tail:]]
    text = "".join(block)
    if len(text) > MAX_HUNK_CHARS:
        text = text[: MAX_HUNK_CHARS // 2] + "\n... (cut) ...\n" + text[-MAX_HUNK_CHARS // 2 :]
    return text


def _places(count: int) -> str:
    return "1 place" if count == 1 else f"{count} places"
