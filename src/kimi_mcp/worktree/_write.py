"""Putting an apply's result into the user's working tree: every new file is first written next to its
target (a temporary name in the same directory), then all are renamed into place and deletions done.

A failure while preparing leaves the working tree as it was. Paths were checked by the planner (no
symlinked ancestor, no ``..``); directories are created as needed and ones left empty by a deletion are
removed, up to but excluding the workspace.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import stat
import tempfile
from pathlib import Path

from ..errors import WorkspaceError
from ._merge import EXEC, LINK, Op

_DEFAULT_UMASK = 0o022


def write_all(ws: Path, ops: list[Op]) -> list[str]:
    """Carry out ``ops`` in ``ws``; returns the paths written or deleted."""
    staged: list[tuple[Path, Op]] = []
    made: list[Path] = []
    later: list[Op] = []  # targets a deletion must clear first (a file in the way of a directory...)
    try:
        for op in (op for op in ops if op.action == "write"):
            if _ready(ws, op.path):
                staged.append((_stage(ws, op, made), op))
            else:
                later.append(op)
    except OSError as exc:
        _unstage([tmp for tmp, _ in staged], made)
        raise WorkspaceError(
            f"could not write {exc.filename or 'a file'} in your working tree ({exc.strerror}); nothing "
            "was changed",
            details={"workspace": str(ws)},
            suggestion="Fix the permissions or free disk space, then apply again.",
        ) from exc
    done: list[str] = []
    try:
        for op in (op for op in ops if op.action == "delete"):
            _delete(ws, op.path)
            done.append(op.path)
        while staged:
            tmp, op = staged[0]
            os.replace(tmp, ws / op.path)
            staged.pop(0)
            done.append(op.path)
        for op in later:
            os.replace(_stage(ws, op, []), ws / op.path)
            done.append(op.path)
    except OSError as exc:
        _unstage([tmp for tmp, _ in staged], [])
        raise WorkspaceError(
            f"applying stopped part-way: {exc}",
            details={"done": done, "workspace": str(ws)},
            suggestion="The paths in details.done were already written or deleted; check `git status`.",
        ) from exc
    return done


def _ready(ws: Path, path: str) -> bool:
    """Whether the target's directories exist or can be made now, and no directory is where it goes."""
    here = ws
    for part in path.split("/"):
        here = here / part
        try:
            info = os.lstat(here)
        except FileNotFoundError:
            return True
        if here != ws / path and not stat.S_ISDIR(info.st_mode):
            return False
    return not stat.S_ISDIR(info.st_mode)


def _stage(ws: Path, op: Op, made: list[Path]) -> Path:
    """Write ``op``'s content under a temporary name in the target's directory; returns that name."""
    target = ws / op.path
    here = ws
    for part in op.path.split("/")[:-1]:
        here = here / part
        if not os.path.isdir(here):
            os.mkdir(here)
            made.append(here)
    if op.mode == LINK:
        tmp = target.parent / f".{target.name}.kimi-{secrets.token_hex(4)}"
        os.symlink(os.fsdecode(op.data), tmp)
        return tmp
    fd, name = tempfile.mkstemp(prefix=f".{target.name}.kimi-", dir=target.parent)
    try:
        with os.fdopen(fd, "wb") as out:
            out.write(op.data)
            os.fchmod(out.fileno(), _perm(op))
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(name)
        raise
    return Path(name)


def _perm(op: Op) -> int:
    executable = op.mode == EXEC
    if op.perm is not None:  # the user's file: keep its bits, set or clear x where r is (like chmod +x)
        return op.perm | ((op.perm & 0o444) >> 2) if executable else op.perm & ~0o111
    return (0o777 if executable else 0o666) & ~umask()


def umask() -> int:
    """The process umask, read without changing it (``os.umask`` would race with other threads)."""
    try:
        with open("/proc/self/status", encoding="ascii", errors="replace") as status:
            for line in status:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    return _DEFAULT_UMASK


def _delete(ws: Path, path: str) -> None:
    with contextlib.suppress(FileNotFoundError):
        os.unlink(ws / path)
    folder = (ws / path).parent
    while folder != ws and folder.is_relative_to(ws):
        try:
            os.rmdir(folder)
        except OSError:
            break
        folder = folder.parent


def _unstage(temps: list[Path], made: list[Path]) -> None:
    for tmp in temps:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
    for folder in reversed(made):
        with contextlib.suppress(OSError):
            os.rmdir(folder)
