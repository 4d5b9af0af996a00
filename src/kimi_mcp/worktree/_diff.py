"""What the job changed: a snapshot of the copy's work tree, compared with the base commit.

The snapshot never touches the copy's own index (Kimi may have committed, staged or reset there): it
starts from ``base.index`` (the base's entries; once refreshed, its stat data mean only files changed
since are hashed), ``git add -A`` into a temporary copy of it, then ``write-tree``. Objects go to
the copy's store. Ignored files are not part of the change.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import tempfile
import time
from dataclasses import dataclass, replace
from pathlib import Path

from ..secrets import is_secret_path
from ._git import git, lines, split_z
from ._model import Change, FileDiff, Isolated, Status
from ._store import BASE_INDEX

SECRET_NOTE = "(secret file: contents withheld)"
_REFRESHED = "base.refreshed"
_SECTION = re.compile(rb"^diff --git ", re.MULTILINE)
_STATUS: dict[str, Status] = {"A": "added", "D": "deleted", "R": "renamed", "M": "modified", "T": "modified"}
ABSENT_MODE = "000000"


@dataclass(frozen=True, slots=True)
class Entry:
    """One changed path of ``git diff --raw``/``--numstat`` (paths relative to the workspace)."""

    status: str  # A, D, M, R or T
    path: str
    old_path: str | None
    old_mode: str
    new_mode: str
    old_id: str
    new_id: str
    insertions: int = 0
    deletions: int = 0
    binary: bool = False

    @property
    def kind(self) -> Status:
        if self.status == "M" and self.old_id == self.new_id:
            return "mode"
        return _STATUS.get(self.status, "modified")


def snapshot(iso: Isolated) -> str:
    """The tree object of the copy's work tree as it is now (written to the copy's object store)."""
    _refresh_base(iso)
    dotgit = iso.checkout / ".git"
    fd, name = tempfile.mkstemp(prefix=".snapshot.", suffix=".index", dir=iso.root)
    os.close(fd)
    index = Path(name)
    try:
        shutil.copy2(iso.root / BASE_INDEX, index)
        git(["add", "-A"], cwd=iso.checkout, git_dir=dotgit, work_tree=iso.checkout, index=index)
        return lines(git(["write-tree"], cwd=iso.checkout, git_dir=dotgit, index=index).stdout)[0]
    finally:
        with contextlib.suppress(FileNotFoundError):
            index.unlink()


def _refresh_base(iso: Isolated) -> None:
    """Once, a second or more after the copy was made: record fresh stat data in ``base.index``.

    Its stat data describe the user's files, or files written within the same second as the index (git
    treats those entries as "racily clean"): either way every snapshot would re-read every file.
    Refreshing later fixes that for the files Kimi has not touched (the others stay as they were: the
    index still says "base").
    """
    marker = iso.root / _REFRESHED
    if time.time() < iso.created_at + 1.0 or marker.exists():
        return
    dotgit = iso.checkout / ".git"
    done = git(
        ["update-index", "-q", "--refresh"],
        cwd=iso.checkout,
        git_dir=dotgit,
        work_tree=iso.checkout,
        index=iso.root / BASE_INDEX,
        ok_codes=range(256),  # 1: some files changed (expected); 128: another process holds the lock
    )
    if done.returncode in (0, 1):
        marker.touch()


def changes(iso: Isolated, tree: str) -> list[Entry]:
    """The changed paths of ``tree`` against the base, in the workspace, with renames detected."""
    args = ["diff", "--raw", "--numstat", "-z", "-M", "--no-abbrev", *_relative(iso), iso.base, tree]
    fields = split_z(git(args, cwd=iso.checkout, git_dir=iso.checkout / ".git").stdout)
    raw: list[Entry] = []
    i = 0
    while i < len(fields) and fields[i].startswith(":"):
        old_mode, new_mode, old_id, new_id, status = fields[i][1:].split(" ")
        if status[0] in "RC":
            entry = Entry(status[0], fields[i + 2], fields[i + 1], old_mode, new_mode, old_id, new_id)
            i += 3
        else:
            entry = Entry(status[0], fields[i + 1], None, old_mode, new_mode, old_id, new_id)
            i += 2
        raw.append(entry)
    counted: list[Entry] = []
    for entry in raw:  # --numstat lists the same paths in the same order
        added, deleted, path = fields[i].split("\t", 2)
        i += 1 if path else 3
        binary = added == "-"
        counted.append(
            replace(
                entry,
                insertions=0 if binary else int(added),
                deletions=0 if binary else int(deleted),
                binary=binary,
            )
        )
    return counted


def _relative(iso: Isolated) -> list[str]:
    return [f"--relative={iso.subdir}"] if iso.subdir else []


def is_secret(iso: Isolated, path: str | None) -> bool:
    """Whether a changed file's contents must not be shown (its name, in the workspace or the repo)."""
    if path is None:
        return False
    return is_secret_path(path) or bool(iso.subdir and is_secret_path(f"{iso.subdir}/{path}"))


def diff(iso: Isolated) -> Change:
    """The job's whole change (the copy's work tree against the base), restricted to the workspace.

    Paths are relative to the workspace; renames are detected; binary files are only named; secret
    files (``is_secret_path``) keep their ``diff --git`` line and a note in place of their contents.
    """
    tree = snapshot(iso)
    entries = changes(iso, tree)
    files = [
        FileDiff(
            path=e.path,
            status=e.kind,
            old_path=e.old_path,
            binary=e.binary,
            insertions=e.insertions,
            deletions=e.deletions,
            secret=is_secret(iso, e.path) or is_secret(iso, e.old_path),
        )
        for e in entries
    ]
    text = _patch(iso, tree, entries, [f.secret for f in files]) if entries else ""
    return Change(
        text=text,
        files=files,
        insertions=sum(f.insertions for f in files),
        deletions=sum(f.deletions for f in files),
        base=iso.base,
    )


def _patch(iso: Isolated, tree: str, entries: list[Entry], secret: list[bool]) -> str:
    """The unified diff, each secret file's section cut down to its header line and a note."""
    args = [
        "diff",
        "-M",
        "--no-color",
        "--no-ext-diff",
        "--no-textconv",
        "--src-prefix=a/",
        "--dst-prefix=b/",
    ]
    out = git(
        [*args, *_relative(iso), iso.base, tree], cwd=iso.checkout, git_dir=iso.checkout / ".git"
    ).stdout
    if not any(secret):
        return out.decode("utf-8", "replace")
    starts = [m.start() for m in _SECTION.finditer(out)]
    sections = [out[a:b] for a, b in zip(starts, [*starts[1:], len(out)], strict=True)]
    owners = [
        s for entry, s in zip(entries, secret, strict=True) for _ in range(2 if entry.status == "T" else 1)
    ]
    if len(owners) != len(sections):  # cannot tell which section is whose: show headers only
        owners = [True] * len(sections)
    kept = []
    for section, withheld in zip(sections, owners, strict=True):
        if withheld:
            header = section.split(b"\n", 1)[0]
            section = header + b"\n" + SECRET_NOTE.encode() + b"\n"
        kept.append(section)
    return b"".join(kept).decode("utf-8", "replace")
