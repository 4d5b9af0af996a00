"""Keeping copies: load, discard (idempotent), prune (rejected, half-created and half-removed copies),
disk usage; the user's repository stays as it was throughout."""

from __future__ import annotations

import fcntl
import os
import subprocess
from pathlib import Path

import pytest
from wt_helpers import fingerprint, write

from kimi_mcp import worktree
from kimi_mcp.errors import BadInput


def test_discard_is_idempotent_and_leaves_the_repo_as_before(repo: Path, state: Path) -> None:
    before = fingerprint(repo)
    iso = worktree.create(repo, state, "job-1")
    write(iso.workspace / "README.md", "changed in the copy\n")
    worktree.diff(iso)
    worktree.run_verify(iso, "git status --short > /dev/null; echo ok", 10)
    assert worktree.discard(state, "job-1") is True
    assert not iso.root.exists()
    assert list((state / "worktrees").iterdir()) == []
    assert worktree.discard(state, "job-1") is False
    assert worktree.discard(state, "never-made") is False
    assert fingerprint(repo) == before
    with pytest.raises(BadInput, match="job job-1 has no isolated copy"):
        worktree.load(state, "job-1")


def test_discard_removes_read_only_directories(repo: Path, state: Path) -> None:
    iso = worktree.create(repo, state, "job-1")
    locked_dir = iso.workspace / "cache" / "deep"
    write(locked_dir / "file.txt", "x\n", 0o444)
    os.chmod(locked_dir, 0o555)
    os.chmod(locked_dir.parent, 0o500)
    assert worktree.discard(state, "job-1") is True
    assert not iso.root.exists()


def test_load_round_trips_and_validates(repo: Path, state: Path) -> None:
    iso = worktree.create(repo / "pkg", state, "job_2-x")
    assert worktree.load(state, "job_2-x") == iso
    assert iso.to_dict()["workspace"] == str(iso.checkout / "pkg")
    with pytest.raises(BadInput, match="invalid job id"):
        worktree.load(state, "../job_2-x")
    with pytest.raises(BadInput, match="has no isolated copy"):
        worktree.load(state, "other")


def test_prune_removes_rejected_and_half_made_copies(repo: Path, state: Path) -> None:
    for job in ("keep-1", "drop-1", "keep-2", "drop-2"):
        worktree.create(repo, state, job)
    folder = state / "worktrees"
    crashed_create = folder / ".tmp.crashed.abc123"  # a create killed half-way: lock file, no meta
    write(crashed_create / "tree" / "partial.txt", "partial\n")
    write(crashed_create / "lock", "")
    no_meta = folder / "stray"  # a directory under an id's name without meta.json
    write(no_meta / "lock", "")
    crashed_discard = folder / ".trash.gone-1.xyz"
    write(crashed_discard / "meta.json", "{}")
    write(crashed_discard / "lock", "")
    before = fingerprint(repo)

    removed = worktree.prune(state, lambda job_id: job_id.startswith("keep"))
    assert removed == ["crashed", "drop-1", "drop-2", "gone-1", "stray"]
    assert sorted(p.name for p in folder.iterdir()) == ["keep-1", "keep-2"]
    assert worktree.load(state, "keep-1").id == "keep-1"
    assert fingerprint(repo) == before
    assert worktree.prune(state, lambda job_id: True) == []
    assert worktree.prune(state / "nowhere", lambda job_id: False) == []


def test_prune_skips_copies_in_use(repo: Path, state: Path) -> None:
    iso = worktree.create(repo, state, "busy")
    starting = state / "worktrees" / ".tmp.starting.abc"  # a create that has not taken its lock yet
    starting.mkdir()
    with open(iso.root / "lock", "w") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        assert worktree.prune(state, lambda job_id: False) == []
    assert iso.root.exists() and starting.exists()
    assert worktree.prune(state, lambda job_id: False) == ["busy"]


def test_disk_usage(repo: Path, state: Path) -> None:
    iso = worktree.create(repo, state, "job-1")
    used = worktree.disk_usage(iso)
    du = subprocess.run(["du", "-s", "-B1", str(iso.root)], capture_output=True, text=True, check=True)
    assert used == int(du.stdout.split()[0])
    write(iso.workspace / "big.bin", os.urandom(200_000))
    assert worktree.disk_usage(iso) >= used + 200_000


def test_create_replaces_a_leftover_without_meta(repo: Path, state: Path) -> None:
    leftover = state / "worktrees" / "job-1"
    write(leftover / "tree" / "junk.txt", "from a crash\n")
    iso = worktree.create(repo, state, "job-1")
    assert not (iso.checkout / "junk.txt").exists()
    assert worktree.load(state, "job-1") == iso
