"""Making a copy: a private repository whose objects borrow the user's, holding the user's tree as it is.

The copy's repository is ``git init`` plus an ``objects/info/alternates`` file naming the user's object
directory: nothing is registered in the user's repository (no worktree entry, no remote, no ref), and
every object the copy writes goes to its own store. The base commit is built there from the user's
working tree through a copy of the user's index (its stat data means only changed files are hashed):
``git add -A`` with the copy as the git dir and the user's top level as the work tree, ``write-tree``,
``commit-tree`` (parent: the user's HEAD, if any). Meanwhile ``read-tree -u`` checks the user's HEAD
out in the copy; then the few paths where the base differs from HEAD are written (``checkout-index``).
Ignored files are not copied; submodules are copied as their commit (an empty directory), not their
files; Git LFS files as their pointers.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

from ..errors import BadInput
from ._git import GitFailed, finish_git, git, lines, split_z, start_git
from ._model import TREE_DIR, Isolated
from ._repo import UserRepo, config_text, locate, state_outside
from ._store import (
    BASE_INDEX,
    META_VERSION,
    TMP_PREFIX,
    check_id,
    isolated_from,
    locked,
    read_meta,
    rmtree,
    worktrees_dir,
    write_meta,
)

_IDENTITY = {"name": "kimi-mcp", "email": "kimi-mcp@localhost"}
# the copy's own settings: no automatic gc or maintenance (no background processes after Kimi's commits;
# refs/kimi/base keeps the base anyway). This package's own git commands also run no hooks (_git).
_COPY_CONFIG = (("gc.auto", "0"), ("maintenance.auto", "false"))


def create(workspace: Path, state: Path, job_id: str) -> Isolated:
    """Copy the user's workspace (its whole repository, as it is now) to ``<state>/worktrees/<job_id>``.

    Leaves the user's repository untouched: working tree, index, HEAD, refs, stash, worktree list,
    config and object store. BadInput if git is missing, the workspace is not in a git working tree
    (or is in a bare repository), ``state`` lies inside the repository, or the job already has a copy.
    """
    check_id(job_id)
    user = locate(Path(workspace))
    folder = worktrees_dir(state_outside(user, Path(state)))
    folder.mkdir(parents=True, exist_ok=True)
    final = folder / job_id
    _refuse_existing(final, job_id)
    tmp = Path(tempfile.mkdtemp(prefix=f"{TMP_PREFIX}{job_id}.", dir=folder))
    try:
        with locked(tmp):
            meta = _build(user, tmp, job_id)
            write_meta(tmp, meta)
            _publish(tmp, final, job_id)
    except BaseException:
        if tmp.exists():
            rmtree(tmp)
        raise
    return isolated_from(final, meta)


def _refuse_existing(final: Path, job_id: str) -> None:
    if read_meta(final) is not None:
        raise BadInput(
            f"job {job_id} already has an isolated copy",
            details={"job_id": job_id, "root": str(final)},
            suggestion="Discard it first, or use a new job id.",
        )


def _publish(tmp: Path, final: Path, job_id: str) -> None:
    """Give the finished copy its name (a half-created leftover under that name is replaced)."""
    if final.exists() and read_meta(final) is None:
        rmtree(final)
    try:
        os.rename(tmp, final)
    except OSError as exc:  # another create for the same id finished first
        raise BadInput(f"job {job_id} already has an isolated copy", details={"job_id": job_id}) from exc


def _build(user: UserRepo, root: Path, job_id: str) -> dict[str, Any]:
    tree = root / TREE_DIR
    dotgit = tree / ".git"
    fmt = [] if user.object_format == "sha1" else [f"--object-format={user.object_format}"]
    git(["init", "-q", "--template=", *fmt, str(tree)], cwd=root)
    _borrow(user, dotgit)
    base = _check_out(user, root, dotgit, job_id)
    (dotgit / "HEAD").write_text(base + "\n")  # detached at the base
    (dotgit / "refs" / "kimi").mkdir(parents=True, exist_ok=True)
    (dotgit / "refs" / "kimi" / "base").write_text(base + "\n")  # keeps the base if Kimi moves HEAD
    shutil.copy2(dotgit / "index", root / BASE_INDEX)  # the base's entries: where snapshots start
    _ensure_workspace(user, tree)
    return {
        "version": META_VERSION,
        "id": job_id,
        "repo": str(user.top),
        "subdir": user.subdir,
        "base": base,
        "head": user.head,
        "created_at": time.time(),
        "object_format": user.object_format,
        "filemode": user.filemode,
        "applied_at": None,
        "applied": [],
    }


def _check_out(user: UserRepo, root: Path, dotgit: Path, job_id: str) -> str:
    """Make the base commit and check it out in the copy; returns the base.

    The user's HEAD differs from their working tree in a few files at most, so it is checked out while
    the base commit is being made, and only the paths that differ are written afterwards.
    """
    tree = dotgit.parent
    head = user.head
    early = None
    if head is not None and not user.sparse:  # a sparse index's skip-worktree marks must not reach the copy
        early = start_git(["read-tree", "-u", "--reset", head], cwd=tree, git_dir=dotgit, work_tree=tree)
    try:
        base, index = _base_commit(user, root, dotgit, job_id, time.time())
    except BaseException:
        if early is not None:
            early.kill()
            early.wait()
        raise
    if early is None or head is None:
        git(["read-tree", "-u", "--reset", base], cwd=tree, git_dir=dotgit, work_tree=tree)
        index.unlink()
    else:
        finish_git(early, ["read-tree", "-u", "--reset", head], cwd=tree)
        _converge(tree, dotgit, head, base, index)
    return base


def _borrow(user: UserRepo, dotgit: Path) -> None:
    """Point the copy at the user's objects and give it the user's ignore/attribute rules and settings."""
    (dotgit / "objects" / "info").mkdir(parents=True, exist_ok=True)
    (dotgit / "objects" / "info" / "alternates").write_text(f"{user.objects}\n")
    (dotgit / "info").mkdir(exist_ok=True)
    for source, target in ((user.exclude, "info/exclude"), (user.attributes, "info/attributes")):
        if source.is_file():
            shutil.copyfile(source, dotgit / target)
    if user.shallow.is_file():  # a shallow clone's history ends there: the copy must know it
        shutil.copyfile(user.shallow, dotgit / "shallow")
    with open(dotgit / "config", "a", encoding="utf-8") as out:
        out.write(config_text(_COPY_CONFIG + user.copied_config))


def _base_commit(user: UserRepo, root: Path, dotgit: Path, job_id: str, now: float) -> tuple[str, Path]:
    """A commit (in the copy) of the user's working tree, uncommitted and untracked files included, and
    the index it was made from (its entries are the base's; its stat data describe the user's files)."""
    index = root / "user.index"
    if user.index.is_file():
        shutil.copy2(user.index, index)  # keeps mtimes: git's racy-entry checks stay as in the user's
    add = ["add", "-A"]
    try:
        git(add, cwd=user.top, git_dir=dotgit, work_tree=user.top, index=index)
    except GitFailed:  # e.g. a split index whose shared part the copy cannot see: hash everything
        with contextlib.suppress(FileNotFoundError):
            index.unlink()
        git(add, cwd=user.top, git_dir=dotgit, work_tree=user.top, index=index)
    tree = lines(git(["write-tree"], cwd=user.top, git_dir=dotgit, index=index).stdout)[0]
    stamp = f"@{int(now)} +0000"
    env = {
        "GIT_AUTHOR_NAME": _IDENTITY["name"],
        "GIT_AUTHOR_EMAIL": _IDENTITY["email"],
        "GIT_AUTHOR_DATE": stamp,
        "GIT_COMMITTER_NAME": _IDENTITY["name"],
        "GIT_COMMITTER_EMAIL": _IDENTITY["email"],
        "GIT_COMMITTER_DATE": stamp,
    }
    message = (
        f"kimi-mcp: base of job {job_id}\n\n"
        f"The working tree of {user.top} when the job started, uncommitted and untracked files included.\n"
    )
    parents = ["-p", user.head] if user.head else []
    done = git(["commit-tree", tree, *parents], cwd=root, git_dir=dotgit, env=env, stdin=message.encode())
    return lines(done.stdout)[0], index


def _converge(tree: Path, dotgit: Path, head: str, base: str, index: Path) -> None:
    """The copy's work tree holds ``head``: make it ``base`` by writing only the paths that differ.

    Unless nothing differs, the copy's index becomes ``index`` (the base's entries, with stat data that
    match none of the copy's files: the first ``git status`` or snapshot reads each file once, as it
    would after any checkout made within the same second). Writing the checkout's own index again
    here would cost that same full read right away.
    """
    diff = git(["diff-tree", "-r", "-z", "--no-renames", head, base], cwd=tree, git_dir=dotgit).stdout
    raw = split_z(diff)
    if not raw:  # no uncommitted change: the checkout's index already is the base's
        index.unlink()
        return
    put: list[str] = []
    for header, path in zip(raw[::2], raw[1::2], strict=True):
        if header[1:].split(" ")[1] == "000000":
            _remove(tree, path)  # deletions first: a file may stand where a directory must go
        else:
            put.append(path)
    if put:
        listed = b"".join(os.fsencode(path) + b"\0" for path in put)
        args = ["checkout-index", "-f", "-z", "--stdin"]  # no -u: the index is not rewritten
        git(args, cwd=tree, git_dir=dotgit, work_tree=tree, index=index, stdin=listed)
    os.replace(index, dotgit / "index")


def _remove(tree: Path, path: str) -> None:
    """Delete a path the base does not have, and the directories it leaves empty."""
    target = tree / path
    if target.is_symlink() or target.is_file():
        target.unlink()
    elif target.is_dir():  # a submodule's empty directory
        with contextlib.suppress(OSError):
            target.rmdir()
    folder = target.parent
    while folder != tree:
        try:
            folder.rmdir()
        except OSError:
            break
        folder = folder.parent


def _ensure_workspace(user: UserRepo, tree: Path) -> None:
    """The workspace must exist in the copy: git leaves out directories with no file it tracks."""
    if not user.subdir or (tree / user.subdir).is_dir():
        return
    ignored = git(["check-ignore", "-q", user.subdir], cwd=user.top, ok_codes=(0, 1)).returncode == 0
    if ignored:
        raise BadInput(
            f"the workspace {user.top / user.subdir} is ignored by git (.gitignore), so an isolated copy "
            "would not contain it",
            details={"repo": str(user.top), "subdir": user.subdir},
            suggestion="Use a workspace git does not ignore, or run the task with isolation='none'.",
        )
    (tree / user.subdir).mkdir(parents=True, exist_ok=True)
