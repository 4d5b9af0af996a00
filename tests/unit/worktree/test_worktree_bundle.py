"""The tree as git between a server and a worker (``worktree._bundle``): the base travels as a bundle
(uncommitted and untracked files in, ignored files out), the worker's turns come back as bundles of one
commit each and land in the copy's work tree exactly as the worker left its own."""

from __future__ import annotations

from pathlib import Path

import pytest
from wt_helpers import fingerprint, tree_files, write

from kimi_mcp import worktree
from kimi_mcp.worktree import bundles

JOB = "job_00000000000000b1"


def files(top: Path) -> dict[str, bytes]:
    """``tree_files`` without a work tree's ``.git`` file (the worker's checkouts are work trees)."""
    return {k: v for k, v in tree_files(top).items() if k != ".git"}


def worker_turn(checkout: Path, start: str, out: Path) -> tuple[str, str]:
    return bundles.pack_turn(checkout, start, out, JOB)


def on_a_worker(iso: worktree.Isolated, folder: Path, start: str | None = None) -> Path:
    """Bundle the copy (its base, and its newest turn if any) and check it out in a fresh worker's origin
    under ``folder`` at ``start`` (default: the base); returns the checkout."""
    bundle, checkout = folder / "copy.bundle", folder / "tree"
    folder.mkdir(parents=True, exist_ok=True)
    bundles.pack_base(iso, bundle)
    bundles.check_out_base(folder / "o.git", bundle, start or iso.base, checkout, JOB)
    return checkout


def test_a_base_travels_and_two_turns_come_back_exactly(repo: Path, state: Path, tmp_path: Path) -> None:
    before = fingerprint(repo)
    iso = worktree.create(repo, state, JOB)
    base_bundle = tmp_path / "base.bundle"
    assert bundles.pack_base(iso, base_bundle) == iso.base
    origin, checkout = tmp_path / "worker" / "origin.git", tmp_path / "worker" / "checkouts" / JOB / "tree"
    bundles.check_out_base(origin, base_bundle, iso.base, checkout, JOB, "*.tmp\n")
    assert files(checkout) == files(iso.checkout)  # ignored files (build/, *.log) stayed home
    assert (
        not (checkout / "debug.log").exists() and (checkout / "notes.txt").read_text() == "untracked notes\n"
    )

    write(checkout / "app.py", "changed on the worker\n")
    (checkout / "README.md").unlink()
    (checkout / "lib" / "util.py").rename(checkout / "lib" / "moved.py")
    write(checkout / "new.bin", bytes(range(256)) * 4)
    write(checkout / "scratch.tmp", "ignored by the user's info/exclude\n")
    start = bundles.turn_start(iso)
    assert start == iso.base
    ref, end = worker_turn(checkout, start, tmp_path / "turn1.bundle")
    bundles.unpack_turn(iso, tmp_path / "turn1.bundle", ref, start, end)
    assert files(iso.checkout) == {k: v for k, v in files(checkout).items() if k != "scratch.tmp"}
    change = {f.path: f.status for f in worktree.diff(iso).files}
    assert (
        change["app.py"] == "modified" and change["README.md"] == "deleted" and change["new.bin"] == "added"
    )
    assert "scratch.tmp" not in change and bundles.turn_start(iso) == end

    write(checkout / "app.py", "the follow-up's version\n")
    ref2, end2 = worker_turn(checkout, end, tmp_path / "turn2.bundle")
    assert (tmp_path / "turn2.bundle").stat().st_size < (tmp_path / "turn1.bundle").stat().st_size
    bundles.unpack_turn(iso, tmp_path / "turn2.bundle", ref2, end, end2)
    assert (iso.checkout / "app.py").read_text() == "the follow-up's version\n"
    assert "+the follow-up's version" in worktree.diff(iso).text  # the whole change, against the base
    assert fingerprint(repo) == before  # the user's repository as it was


def test_a_bundle_that_does_not_hold_the_turn_is_refused(repo: Path, state: Path, tmp_path: Path) -> None:
    from kimi_mcp.errors import WorkspaceError

    iso = worktree.create(repo, state, JOB)
    checkout = on_a_worker(iso, tmp_path / "w")
    write(checkout / "x.txt", "x\n")
    ref, _end = worker_turn(checkout, iso.base, tmp_path / "t.bundle")
    with pytest.raises(WorkspaceError, match="not the turn's commit"):
        bundles.unpack_turn(iso, tmp_path / "t.bundle", ref, iso.base, "0" * 40)
    assert not (iso.checkout / "x.txt").exists()


def test_a_later_bundle_leaves_out_what_the_worker_holds_and_a_worker_without_it_says_so(
    repo: Path, state: Path, tmp_path: Path
) -> None:
    first = worktree.create(repo, state, JOB)
    bundles.pack_base(first, tmp_path / "full.bundle")
    origin = tmp_path / "w" / "origin.git"
    bundles.check_out_base(origin, tmp_path / "full.bundle", first.base, tmp_path / "w" / "c1" / "tree", JOB)
    write(repo / "app.py", "edited again\n")
    second = worktree.create(repo, state, "job_00000000000000b2")
    assert first.head is not None and second.head == first.head
    bundles.pack_base(
        second, tmp_path / "thin.bundle", [first.head, "0" * 40]
    )  # an unknown commit is ignored
    thin, full = (tmp_path / "thin.bundle").stat().st_size, (tmp_path / "full.bundle").stat().st_size
    assert thin < full
    checkout = tmp_path / "w" / "c2" / "tree"
    bundles.check_out_base(origin, tmp_path / "thin.bundle", second.base, checkout, "job_00000000000000b2")
    assert files(checkout) == files(second.checkout) and (checkout / "app.py").read_text() == "edited again\n"
    with pytest.raises(bundles.MissingCommits):
        bundles.check_out_base(
            tmp_path / "fresh.git", tmp_path / "thin.bundle", second.base, tmp_path / "f", "x"
        )


def test_a_copy_with_a_turn_moves_to_a_new_worker_at_its_newest_turn(
    repo: Path, state: Path, tmp_path: Path
) -> None:
    """A follow-up whose worker is gone: the copy's bundle carries its base and its newest turn, and the new
    worker checks out the turn, so the next turn starts where the last one ended."""
    iso = worktree.create(repo, state, JOB)
    first = on_a_worker(iso, tmp_path / "w1")
    write(first / "app.py", "turn one\n")
    ref, end = worker_turn(first, iso.base, tmp_path / "t1.bundle")
    bundles.unpack_turn(iso, tmp_path / "t1.bundle", ref, iso.base, end)

    start = bundles.turn_start(iso)
    assert start == end
    second = on_a_worker(iso, tmp_path / "w2", start)  # the first worker is gone
    assert files(second) == files(first)
    write(second / "app.py", "turn two\n")
    ref2, end2 = worker_turn(second, start, tmp_path / "t2.bundle")
    bundles.unpack_turn(iso, tmp_path / "t2.bundle", ref2, start, end2)
    assert (iso.checkout / "app.py").read_text() == "turn two\n"
    assert {f.path for f in worktree.diff(iso).files} == {"app.py"}
