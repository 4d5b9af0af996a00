"""Where copies live and their bookkeeping: ``<state>/worktrees/<id>/{tree/, meta.json, lock}``.

A copy is built in ``.tmp.<id>.<random>`` and renamed to ``<id>`` once its ``meta.json`` is written, so a
directory named after a job is always complete; one being removed is first renamed to
``.trash.<id>.<random>``. ``lock`` is held (``fcntl.flock``) while a copy is created, applied or removed.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import re
import shutil
import stat
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from ..errors import BadInput, WorkspaceError
from ._model import Isolated

WORKTREES_DIR = "worktrees"
META_FILE = "meta.json"
LOCK_FILE = "lock"
BASE_INDEX = "base.index"
META_VERSION = 1
TMP_PREFIX = ".tmp."
TRASH_PREFIX = ".trash."
LOCK_WAIT_S = 60.0
HALF_CREATED_GRACE_S = 60.0  # a .tmp dir without a lock file younger than this may be a create starting

_ID = re.compile(r"[A-Za-z0-9_-]{1,128}")


def check_id(job_id: str) -> str:
    """``job_id`` if it is a valid copy id (letters, digits, ``_``, ``-``; at most 128); else BadInput."""
    if not isinstance(job_id, str) or not _ID.fullmatch(job_id):
        raise BadInput(
            f"invalid job id for an isolated copy: {job_id!r}",
            details={"job_id": repr(job_id)},
            suggestion="Job ids are 1-128 characters of letters, digits, '_' and '-'.",
        )
    return job_id


def worktrees_dir(state: Path) -> Path:
    return Path(state).expanduser().resolve() / WORKTREES_DIR


def root_of(state: Path, job_id: str) -> Path:
    return worktrees_dir(state) / check_id(job_id)


# ------------------------------------------------------------------------------------------- meta.json


def read_meta(root: Path) -> dict[str, Any] | None:
    """The copy's metadata, or None if it has none (gone, or half-created)."""
    try:
        text = (root / META_FILE).read_text(encoding="utf-8")
    except (FileNotFoundError, NotADirectoryError):
        return None
    except OSError as exc:
        raise WorkspaceError(f"cannot read {root / META_FILE}: {exc.strerror}") from exc
    try:
        meta = json.loads(text)
    except ValueError as exc:
        raise WorkspaceError(f"{root / META_FILE} is damaged: {exc}") from exc
    return meta if isinstance(meta, dict) else None


def write_meta(root: Path, meta: dict[str, Any]) -> None:
    """Replace ``meta.json`` atomically."""
    fd, tmp = tempfile.mkstemp(prefix=".meta.", dir=root)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            json.dump(meta, out, indent=2, sort_keys=True)
        os.replace(tmp, root / META_FILE)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def isolated_from(root: Path, meta: dict[str, Any]) -> Isolated:
    try:
        return Isolated(
            id=str(meta["id"]),
            root=root,
            repo=Path(meta["repo"]),
            subdir=str(meta["subdir"]),
            base=str(meta["base"]),
            created_at=float(meta["created_at"]),
            head=meta.get("head"),
            applied_at=meta.get("applied_at"),
            applied=tuple(meta.get("applied") or ()),
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise WorkspaceError(f"{root / META_FILE} is damaged: missing or bad {exc}") from exc


class Gone(BadInput):
    """The job has no isolated copy (any more)."""

    def __init__(self, job_id: str) -> None:
        super().__init__(
            f"job {job_id} has no isolated copy: it was discarded or pruned, or the job did not run with "
            "isolation='worktree'",
            details={"job_id": job_id},
            suggestion="Run the task again with isolation='worktree' to get a new copy.",
        )


def load(state: Path, job_id: str) -> Isolated:
    """The isolated copy made for ``job_id``; BadInput if there is none (discarded, pruned, never made)."""
    root = root_of(state, job_id)
    meta = read_meta(root)
    if meta is None:
        raise Gone(job_id)
    return isolated_from(root, meta)


# ---------------------------------------------------------------------------------------------- locks


@contextlib.contextmanager
def locked(root: Path, *, wait_s: float = LOCK_WAIT_S) -> Iterator[None]:
    """Hold the copy's exclusive lock (waiting up to ``wait_s``); WorkspaceError if it stays taken."""
    try:
        fd = os.open(root / LOCK_FILE, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    except (FileNotFoundError, NotADirectoryError) as exc:
        raise Gone(root.name) from exc
    try:
        deadline = time.monotonic() + wait_s
        while not _try_lock(fd):
            if time.monotonic() > deadline:
                raise WorkspaceError(
                    f"the isolated copy {root.name} is busy (another create, apply or discard holds it)",
                    suggestion="Retry in a moment.",
                    retryable=True,
                )
            time.sleep(0.05)
        yield
    finally:
        os.close(fd)


def _try_lock(fd: int) -> bool:
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as exc:
        if exc.errno in (errno.EAGAIN, errno.EACCES, errno.EWOULDBLOCK):
            return False
        raise
    return True


def _free(folder: Path) -> int | None:
    """A descriptor holding ``folder``'s lock if nobody else holds it, else None."""
    try:
        fd = os.open(folder / LOCK_FILE, os.O_RDWR | os.O_CLOEXEC)
    except OSError:
        return None
    if _try_lock(fd):
        return fd
    os.close(fd)
    return None


# ------------------------------------------------------------------------------------- removing copies


def discard(state: Path, job_id: str) -> bool:
    """Remove the job's copy; True if there was one. Idempotent; waits for an apply in progress."""
    root = root_of(state, job_id)
    if not root.is_dir() or root.is_symlink():
        return False
    try:
        with locked(root):
            if not root.is_dir():  # removed by someone else while we waited
                return False
            trash = Path(tempfile.mkdtemp(prefix=f"{TRASH_PREFIX}{job_id}.", dir=root.parent))
            os.replace(root, trash)  # the id is free at once; a crash below leaves only trash for prune
            rmtree(trash)
    except Gone:
        return False
    return True


def prune(state: Path, keep: Callable[[str], bool]) -> list[str]:
    """Remove every copy whose id ``keep`` rejects, and leftovers of interrupted creates and removals.

    Copies locked by a create, apply or discard in progress are skipped. Returns the removed ids, sorted.
    """
    folder = worktrees_dir(state)
    try:
        entries = list(os.scandir(folder))
    except FileNotFoundError:
        return []
    removed: set[str] = set()
    for entry in entries:
        if not entry.is_dir(follow_symlinks=False):
            continue
        path = Path(entry.path)
        job_id = _id_of(entry.name)
        complete = job_id == entry.name and (path / META_FILE).is_file()
        if complete and keep(job_id):
            continue
        if not complete and not (path / LOCK_FILE).exists() and _age(path) < HALF_CREATED_GRACE_S:
            continue  # a create that has not taken its lock yet
        fd = _free(path) if (path / LOCK_FILE).exists() else -1
        if fd is None:
            continue
        try:
            rmtree(path)
        finally:
            if fd >= 0:
                os.close(fd)
        removed.add(job_id)
    return sorted(removed)


def _id_of(name: str) -> str:
    for prefix in (TMP_PREFIX, TRASH_PREFIX):
        if name.startswith(prefix):
            return name[len(prefix) :].rsplit(".", 1)[0]
    return name


def _age(path: Path) -> float:
    try:
        return time.time() - path.stat().st_mtime
    except OSError:
        return 0.0


def rmtree(path: Path) -> None:
    """Remove a directory tree without following symlinks, also when Kimi left read-only directories."""
    try:
        shutil.rmtree(path)
        return
    except FileNotFoundError:
        return
    except OSError:
        pass
    with contextlib.suppress(OSError):
        os.chmod(path, stat.S_IRWXU)
    for folder, dirs, _files in os.walk(path):  # make every directory writable, then try again
        for name in dirs:
            child = os.path.join(folder, name)
            if not os.path.islink(child):
                with contextlib.suppress(OSError):
                    os.chmod(child, stat.S_IRWXU)
    try:
        shutil.rmtree(path)
    except FileNotFoundError:
        pass
    except OSError as exc:
        raise WorkspaceError(f"cannot remove {path}: {exc}", details={"path": str(path)}) from exc


# ----------------------------------------------------------------------------------------- disk usage


def disk_usage(iso: Isolated) -> int:
    """Bytes of disk the copy takes (allocated blocks under its root; the borrowed objects not counted)."""
    return tree_bytes(iso.root)


def tree_bytes(top: Path) -> int:
    """Allocated bytes of ``top`` and every file, directory and link under it (hard links counted once),
    as ``du -s`` counts them."""
    try:
        total = os.lstat(top).st_blocks * 512
    except OSError:
        return 0
    seen: set[tuple[int, int]] = set()
    stack = [str(top)]
    while stack:
        folder = stack.pop()
        try:
            entries = list(os.scandir(folder))
        except OSError:
            continue
        for entry in entries:
            try:
                info = entry.stat(follow_symlinks=False)
            except OSError:
                continue
            if info.st_nlink > 1:
                if (info.st_dev, info.st_ino) in seen:
                    continue
                seen.add((info.st_dev, info.st_ino))
            total += info.st_blocks * 512
            if entry.is_dir(follow_symlinks=False):
                stack.append(entry.path)
    return total
