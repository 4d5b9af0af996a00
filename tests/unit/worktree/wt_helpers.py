"""Helpers for the worktree tests: git with a fixed identity and no user config, a repository with every
kind of state (committed, edited, staged, untracked, ignored), and a fingerprint of everything in it."""

from __future__ import annotations

import hashlib
import os
import stat
from pathlib import Path

from git_helpers import git, git_env  # noqa: F401 - the worktree tests import them from here

README = "".join(f"line {i}\n" for i in range(1, 11))
APP_COMMITTED = "def main():\n    return 1\n"
APP_EDITED = "def main():\n    return 2  # uncommitted edit\n"
UTIL = "".join(f"def f{i}():\n    return {i}\n\n" for i in range(8))
MOD = "".join(f"value_{i} = {i}\n" for i in range(12))
LOGO = bytes(range(256)) * 4


def write(path: Path, content: str | bytes, mode: int | None = None) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content)
    if mode is not None:
        os.chmod(path, mode)
    return path


def make_repo(root: Path) -> Path:
    """A repository with a commit, an uncommitted edit, a staged new file, an untracked file, ignored
    files (``build/``, ``*.log``), a nested package, a shell script (not executable) and a binary."""
    repo = root / "repo"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    write(repo / ".gitignore", "build/\n*.log\n__pycache__/\n")
    write(repo / "README.md", README)
    write(repo / "app.py", APP_COMMITTED)
    write(repo / "lib" / "util.py", UTIL)
    write(repo / "pkg" / "sub" / "mod.py", MOD)
    write(repo / "pkg" / "notes.md", "package notes\n")
    write(repo / "script.sh", "#!/bin/sh\necho hi\n", 0o644)
    write(repo / "logo.bin", LOGO)
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "initial")
    write(repo / "app.py", APP_EDITED)  # uncommitted edit
    write(repo / "staged.txt", "staged content\n")
    git(repo, "add", "staged.txt")  # staged, not committed
    write(repo / "notes.txt", "untracked notes\n")  # untracked
    for i in range(3):
        write(repo / "build" / f"out{i}.bin", os.urandom(20_000))  # ignored directory
    write(repo / "debug.log", "ignored log\n")
    return repo


def fingerprint(repo: Path) -> dict[str, object]:
    """Everything observable about a repository: every file and directory under it (``.git`` included:
    type, mode, content hash), the index file's bytes and mtime, and what git reports."""
    entries: dict[str, tuple[str, int, str]] = {}
    for folder, dirs, files in os.walk(repo):
        for name in sorted(dirs + files):
            path = Path(folder, name)
            info = path.lstat()
            rel = path.relative_to(repo).as_posix()
            if stat.S_ISLNK(info.st_mode):
                entries[rel] = ("link", 0, os.readlink(path))
            elif stat.S_ISDIR(info.st_mode):
                entries[rel] = ("dir", stat.S_IMODE(info.st_mode), "")
            else:
                digest = hashlib.sha256(path.read_bytes()).hexdigest()
                entries[rel] = ("file", stat.S_IMODE(info.st_mode), digest)
    index = repo / ".git" / "index"
    return {
        "entries": entries,
        "index": index.read_bytes() if index.exists() else None,
        "index_mtime": index.stat().st_mtime_ns if index.exists() else None,
        "status": git(repo, "status", "--porcelain", "--untracked-files=all", "--ignored"),
        "worktrees": git(repo, "worktree", "list", "--porcelain"),
        "branches": git(repo, "branch", "-a", "-v"),
        "stash": git(repo, "stash", "list"),
        "refs": git(repo, "for-each-ref"),
        "objects": git(repo, "count-objects", "-v"),
        "fsck": git(repo, "fsck", "--no-progress", "--unreachable", "--dangling", "--no-reflogs"),
        "config": git(repo, "config", "--local", "--list"),
    }


def tree_files(top: Path) -> dict[str, bytes]:
    """Every file under ``top`` (``.git`` left out) and its bytes; symlinks as ``-> target``."""
    out: dict[str, bytes] = {}
    for folder, dirs, files in os.walk(top):
        dirs[:] = [d for d in dirs if d != ".git"]
        for name in files + [d for d in dirs if os.path.islink(os.path.join(folder, d))]:
            path = Path(folder, name)
            rel = path.relative_to(top).as_posix()
            out[rel] = b"-> " + os.fsencode(os.readlink(path)) if path.is_symlink() else path.read_bytes()
    return out
