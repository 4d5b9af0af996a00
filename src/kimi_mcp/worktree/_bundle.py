"""The tree as git, between a server and a worker (``KIMI_MCP_BROKER``).

Server → worker: the base of a job's isolated copy (the user's tree as it is: HEAD plus uncommitted and
untracked files, ignored files never), as a bundle of ``refs/kimi/base`` (:func:`pack_base`). The worker keeps
one bare repository per origin; it fetches the bundle there and checks the base out in a work tree of that
repository for the job (:func:`check_out_base`). After the turn it commits what its work tree holds (ignored
files never) on top of where the turn started and bundles just that commit (:func:`pack_turn`); the server
fetches it into the copy's repository and applies the turn's change to the copy's work tree
(:func:`unpack_turn`), so ``diff``, ``kimi_apply`` and the rest see what a local turn would have left there.
"""

from __future__ import annotations

import contextlib
import fcntl
import subprocess
from collections.abc import Iterator
from pathlib import Path

from ..errors import WorkspaceError
from ._git import git, git_env, lines
from ._model import Isolated

__all__ = [
    "MissingCommits",
    "check_out_base",
    "forget_copy_refs",
    "origin_lock",
    "pack_base",
    "pack_turn",
    "prune_worktrees",
    "turn_start",
    "unpack_turn",
]

BASE_REF = "refs/kimi/base"
HEAD_REF = "refs/kimi/head"  # the copy's newest turn (server side)
_IDENTITY = {
    "GIT_AUTHOR_NAME": "kimi-mcp",
    "GIT_AUTHOR_EMAIL": "kimi-mcp@localhost",
    "GIT_COMMITTER_NAME": "kimi-mcp",
    "GIT_COMMITTER_EMAIL": "kimi-mcp@localhost",
}


class MissingCommits(WorkspaceError):
    """A bundle needs commits the repository fetching it lacks (it was made for one that had them)."""


def pack_base(iso: Isolated, out: Path, have: list[str] | tuple[str, ...] = ()) -> str:
    """Bundle the copy's base into ``out`` (and its newest turn, if it had one: a conversation moving to
    another worker): with its whole history, or only what the commits in ``have`` (the ones every worker
    holds already; unknown ones are ignored) do not hold. Returns the base."""
    dotgit = iso.checkout / ".git"
    known = _known_commits(iso, have)
    refs = [BASE_REF] if turn_start(iso) == iso.base else [BASE_REF, HEAD_REF]
    git(
        ["bundle", "create", "-q", str(out), *refs, *(f"^{c}" for c in known)],
        cwd=iso.checkout,
        git_dir=dotgit,
    )
    return iso.base


def _known_commits(iso: Isolated, commits: list[str] | tuple[str, ...]) -> list[str]:
    """The ones of ``commits`` that exist in the copy's repository (its own objects or the user's)."""
    if not commits:
        return []
    dotgit = iso.checkout / ".git"
    listed = "".join(f"{c}^{{commit}}\n" for c in commits).encode()
    out = git(["cat-file", "--batch-check"], cwd=iso.checkout, git_dir=dotgit, stdin=listed).stdout.decode()
    return [c for c, line in zip(commits, out.splitlines(), strict=False) if not line.endswith(" missing")]


def turn_start(iso: Isolated) -> str:
    """The commit the copy's next turn starts from: its newest turn's, else its base."""
    dotgit = iso.checkout / ".git"
    found = git(["rev-parse", "-q", "--verify", HEAD_REF], cwd=iso.checkout, git_dir=dotgit, ok_codes=(0, 1))
    return lines(found.stdout)[0] if found.returncode == 0 else iso.base


def unpack_turn(iso: Isolated, bundle: Path, ref: str, start: str, end: str) -> None:
    """Fetch a worker's turn (``ref`` in ``bundle``: commit ``end`` on top of ``start``) into the copy's
    repository and apply its change to the copy's work tree (its index stays the base's, as after a local
    turn)."""
    dotgit, tree = iso.checkout / ".git", iso.checkout
    git(["fetch", "-q", "--no-tags", str(bundle), f"+{ref}:{HEAD_REF}-incoming"], cwd=tree, git_dir=dotgit)
    fetched = lines(git(["rev-parse", f"{HEAD_REF}-incoming"], cwd=tree, git_dir=dotgit).stdout)[0]
    if fetched != end:
        raise WorkspaceError(f"the worker's bundle holds {fetched}, not the turn's commit {end}")
    patch = git(
        ["diff", "--binary", "--no-renames", "--full-index", start, end], cwd=tree, git_dir=dotgit
    ).stdout
    if patch:
        git(
            ["apply", "--binary", "--whitespace=nowarn", "-"],
            cwd=tree,
            git_dir=dotgit,
            work_tree=tree,
            stdin=patch,
        )
    git(["update-ref", HEAD_REF, end], cwd=tree, git_dir=dotgit)
    git(["update-ref", "-d", f"{HEAD_REF}-incoming"], cwd=tree, git_dir=dotgit)


# -- the worker's side ---------------------------------------------------------------------------------
def check_out_base(origin: Path, bundle: Path, at: str, dest: Path, name: str, exclude: str = "") -> None:
    """Fetch ``bundle``'s refs (the copy's base, and its newest turn if it had one) into the origin's bare
    repository ``origin`` (made on first use) and check commit ``at`` (where the turn starts) out at
    ``dest``, a new work tree of it (``name``: the copy's id); ``exclude``: the user's ``info/exclude``
    rules."""
    origin.parent.mkdir(parents=True, exist_ok=True)
    with origin_lock(origin):  # two jobs of one origin at once on this worker: one after the other here
        _check_out_locked(origin, bundle, at, dest, name, exclude)


@contextlib.contextmanager
def origin_lock(origin: Path) -> Iterator[None]:
    """One at a time per origin on this worker: checking a copy out, forgetting one, removing the origin."""
    origin.parent.mkdir(parents=True, exist_ok=True)
    with open(origin.parent / f"{origin.name}.lock", "a+b") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def _check_out_locked(origin: Path, bundle: Path, at: str, dest: Path, name: str, exclude: str) -> None:
    if not (origin / "HEAD").is_file():
        git(["init", "-q", "--bare", "--template=", str(origin)], cwd=origin.parent)
        git(["config", "gc.auto", "0"], cwd=origin, git_dir=origin)
    dest.parent.mkdir(parents=True, exist_ok=True)
    verified = git(["bundle", "verify", "-q", str(bundle)], cwd=origin, git_dir=origin, ok_codes=(0, 1, 128))
    if verified.returncode != 0:
        raise MissingCommits(f"the bundle needs commits this worker lacks: {verified.stderr.decode()[:200]}")
    git(
        ["fetch", "-q", "--no-tags", str(bundle), f"+refs/kimi/*:refs/kimi/copies/{name}/*"],
        cwd=origin,
        git_dir=origin,
    )
    (origin / "info").mkdir(exist_ok=True)
    if exclude:
        (origin / "info" / "exclude").write_text(exclude)
    git(["worktree", "add", "-q", "--detach", str(dest), at], cwd=origin, git_dir=origin)


def pack_turn(checkout: Path, start: str, out: Path, name: str) -> tuple[str, str]:
    """Commit what ``checkout`` holds now (ignored files never) on top of ``start`` and bundle that commit
    alone into ``out`` (``name``: the copy's id); returns (the bundle's ref, the commit)."""
    git(["add", "-A"], cwd=checkout)
    tree = lines(git(["write-tree"], cwd=checkout).stdout)[0]
    commit = lines(
        git(
            ["commit-tree", tree, "-p", start, "-m", "kimi-mcp turn"], cwd=checkout, env=git_env(_IDENTITY)
        ).stdout
    )[0]
    ref = f"refs/kimi/turns/{name}"
    git(["update-ref", ref, commit], cwd=checkout)
    git(["reset", "-q", "--soft", commit], cwd=checkout)  # the next turn starts here
    git(["bundle", "create", "-q", str(out), ref, f"^{start}"], cwd=checkout)
    return ref, commit


def bundle_size_ok(path: Path, max_mb: float) -> bool:
    return path.stat().st_size <= max_mb * 1024 * 1024


def remove_checkout(origin: Path, dest: Path) -> None:
    """Forget a job's work tree (the origin's objects stay for the next job)."""
    subprocess.run(
        ["git", "--git-dir", str(origin), "worktree", "remove", "--force", str(dest)],
        capture_output=True,
        env=git_env(),
        check=False,
    )


def forget_copy_refs(origin: Path, name: str) -> None:
    """Drop the refs a copy left in its origin's repository (its base and turns): their objects become
    garbage the origin's next ``git gc`` may drop."""
    listed = git(
        ["for-each-ref", "--format=%(refname)", f"refs/kimi/copies/{name}/", f"refs/kimi/turns/{name}"],
        cwd=origin,
        git_dir=origin,
    )
    refs = lines(listed.stdout)
    if refs:
        git(
            ["update-ref", "--stdin"],
            cwd=origin,
            git_dir=origin,
            stdin="".join(f"delete {r}\n" for r in refs).encode(),
        )
    prune_worktrees(origin)


def prune_worktrees(origin: Path) -> None:
    """Forget the work trees of ``origin`` whose folders are gone."""
    git(["worktree", "prune"], cwd=origin, git_dir=origin)
