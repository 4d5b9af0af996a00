"""What a worker lets go of (``reclaim``): a copy unused for the keep time goes with its refs, its
conversation's Kimi files and its live Kimi; a copy in use or used lately stays; an origin goes once no copy
of it is left and nothing was checked out of it for as long."""

from __future__ import annotations

import os
import time
from pathlib import Path

from wt_helpers import write

from kimi_mcp import worktree
from kimi_mcp.drivers.legacy import LegacyDriver
from kimi_mcp.remote.worker_reclaim import InUse, reclaim, record_use
from kimi_mcp.worktree import bundles
from kimi_mcp.worktree._git import git, lines

HOUR = 3600.0


def worker_copy(repo: Path, state: Path, tmp_path: Path, worker: Path, copy: str, sid: str) -> Path:
    """A copy checked out on the worker (state ``worker``) and turned once, as ``remote._run`` leaves it."""
    iso = worktree.create(repo, state, copy)
    bundle = tmp_path / f"{copy}.bundle"
    bundles.pack_base(iso, bundle)
    root = worker / "checkouts" / copy
    bundles.check_out_base(worker / "origins" / "o1.git", bundle, iso.base, root / "tree", copy)
    write(root / "tree" / "new.txt", "turn\n")
    bundles.pack_turn(root / "tree", iso.base, tmp_path / f"{copy}.turn", copy)
    record_use(root, "o1", sid)
    return root


def age(path: Path, seconds: float) -> None:
    then = time.time() - seconds
    os.utime(path, (then, then))


def refs(origin: Path) -> list[str]:
    return lines(git(["for-each-ref", "--format=%(refname)"], cwd=origin, git_dir=origin).stdout)


def test_an_unused_copy_goes_with_its_refs_conversation_and_live_kimi(
    repo: Path, state: Path, tmp_path: Path
) -> None:
    worker, env = tmp_path / "worker", {"HOME": str(tmp_path / "home")}
    old = worker_copy(repo, state, tmp_path, worker, "job_old", "sid-old")
    recent = worker_copy(repo, state, tmp_path, worker, "job_recent", "sid-recent")
    busy = worker_copy(repo, state, tmp_path, worker, "job_busy", "sid-busy")
    for root, sid in ((old, "sid-old"), (recent, "sid-recent"), (busy, "sid-busy")):
        (LegacyDriver.sessions_root(env) / LegacyDriver.store_key(str(root / "tree")) / sid).mkdir(
            parents=True
        )
    age(old / "job.json", 2 * HOUR)
    age(busy / "job.json", 2 * HOUR)
    in_use, closed = InUse(), []
    in_use.take("job_busy")

    done = reclaim(worker, env, HOUR, in_use, closed.append)

    assert done.copies == ["job_old"] and closed == ["sid-old"] and done.origins == []
    assert not old.exists() and recent.is_dir() and busy.is_dir()
    assert [p.parent.name for p in done.sessions] == [LegacyDriver.store_key(str(old / "tree"))]
    assert not any(p.name == "sid-old" for p in LegacyDriver.sessions_root(env).rglob("sid-*"))
    origin = worker / "origins" / "o1.git"
    assert not [r for r in refs(origin) if "job_old" in r]
    assert [r for r in refs(origin) if "job_recent" in r]  # the others' refs stay
    assert (
        git(["worktree", "list", "--porcelain"], cwd=origin, git_dir=origin).stdout.count(b"worktree ") == 3
    )


def test_an_origin_goes_once_no_copy_of_it_is_left_and_it_was_idle(
    repo: Path, state: Path, tmp_path: Path
) -> None:
    worker, env = tmp_path / "worker", {"HOME": str(tmp_path / "home")}
    only = worker_copy(repo, state, tmp_path, worker, "job_only", "sid-only")
    origin = worker / "origins" / "o1.git"
    age(only / "job.json", 2 * HOUR)
    in_use = InUse()
    done = reclaim(worker, env, HOUR, in_use)
    assert done.copies == ["job_only"] and done.origins == [] and origin.is_dir()  # fetched into a moment ago

    age(origin / "FETCH_HEAD", 2 * HOUR)
    assert reclaim(worker, env, HOUR, in_use).origins == ["o1"] and not origin.exists()
    assert reclaim(worker, env, HOUR, in_use).origins == []  # nothing more to do


def test_the_next_checkout_after_an_origin_went_starts_a_new_one(
    repo: Path, state: Path, tmp_path: Path
) -> None:
    worker = tmp_path / "worker"
    first = worker_copy(repo, state, tmp_path, worker, "job_a", "sid-a")
    age(first / "job.json", 2 * HOUR)
    age(worker / "origins" / "o1.git" / "FETCH_HEAD", 2 * HOUR)
    reclaim(worker, {"HOME": str(tmp_path / "home")}, HOUR, InUse())
    reclaim(worker, {"HOME": str(tmp_path / "home")}, HOUR, InUse())
    assert not (worker / "origins" / "o1.git").exists()
    again = worker_copy(repo, state, tmp_path, worker, "job_b", "sid-b")
    assert (again / "tree" / "new.txt").read_text() == "turn\n"


def test_a_copy_without_its_record_still_goes_and_its_origin_after_it(
    repo: Path, state: Path, tmp_path: Path
) -> None:
    """A job that died before it wrote ``job.json`` leaves a bare checkout: it goes when old, and the
    origin's stale work-tree entry does not keep the origin forever."""
    worker = tmp_path / "worker"
    root = worker_copy(repo, state, tmp_path, worker, "job_norecord", "sid-x")
    (root / "job.json").unlink()
    age(root, 2 * HOUR)
    age(worker / "origins" / "o1.git" / "FETCH_HEAD", 2 * HOUR)
    done = reclaim(worker, {"HOME": str(tmp_path / "home")}, HOUR, InUse())
    assert (
        done.copies == ["job_norecord"]
        and done.origins == ["o1"]
        and not (worker / "origins" / "o1.git").exists()
    )
