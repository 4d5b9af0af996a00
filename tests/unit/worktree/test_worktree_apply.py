"""apply(): a three-way merge per path into the user's working tree, all or nothing, never the index,
never outside the workspace, once."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest
from wt_helpers import APP_EDITED, LOGO, MOD, README, fingerprint, git, tree_files, write

from kimi_mcp import worktree
from kimi_mcp.errors import BadInput
from kimi_mcp.worktree import Conflict

KIMI_README = README.replace("line 2\n", "line 2 by kimi\n")
USER_README = README.replace("line 9\n", "line 9 by the user\n")


def status(repo: Path) -> list[str]:
    return git(repo, "status", "--porcelain", "--untracked-files=all").splitlines()


def test_apply_keeps_a_user_edit_on_other_lines(repo: Path, state: Path) -> None:
    iso = worktree.create(repo, state, "job-1")
    write(iso.workspace / "README.md", KIMI_README)
    write(repo / "README.md", USER_README)
    index = (repo / ".git" / "index").read_bytes()
    result = worktree.apply(iso)
    assert result.ok and result.conflicts == []
    assert result.applied == ["README.md"]
    assert (repo / "README.md").read_text() == README.replace("line 2\n", "line 2 by kimi\n").replace(
        "line 9\n", "line 9 by the user\n"
    )
    assert (repo / ".git" / "index").read_bytes() == index


def test_conflict_writes_nothing_and_shows_the_hunk(repo: Path, state: Path) -> None:
    iso = worktree.create(repo, state, "job-1")
    write(iso.workspace / "README.md", README.replace("line 5\n", "line 5 by kimi\n"))
    write(iso.workspace / "new.txt", "a new file from kimi\n")  # would apply cleanly: must not be written
    (iso.workspace / "lib" / "util.py").unlink()
    write(repo / "README.md", README.replace("line 5\n", "line 5 by the user\n"))
    before = fingerprint(repo)
    result = worktree.apply(iso)
    assert not result.ok
    assert result.applied == []
    assert result.conflicts == [
        Conflict(
            "README.md",
            "the job and your working tree changed the same lines (1 place)",
            [
                "<<<<<<< README.md (your working tree)\n"
                "line 5 by the user\n"
                "||||||| README.md (base)\n"
                "line 5\n"
                "=======\n"
                "line 5 by kimi\n"
                ">>>>>>> README.md (job job-1)\n"
            ],
        )
    ]
    assert fingerprint(repo) == before
    assert json.loads((iso.root / "meta.json").read_text())["applied_at"] is None


def test_apply_twice_is_refused(repo: Path, state: Path) -> None:
    iso = worktree.create(repo, state, "job-1")
    write(iso.workspace / "new.txt", "new\n")
    assert worktree.apply(iso).applied == ["new.txt"]
    meta = json.loads((iso.root / "meta.json").read_text())
    assert meta["applied"] == ["new.txt"] and meta["applied_at"] > iso.created_at
    with pytest.raises(BadInput, match="was already applied at "):
        worktree.apply(iso)
    assert worktree.load(state, "job-1").applied == ("new.txt",)


def test_nothing_changed(repo: Path, state: Path) -> None:
    iso = worktree.create(repo, state, "job-1")
    write(iso.workspace / "ignored.log", "ignored\n")
    with pytest.raises(BadInput, match="the job changed nothing"):
        worktree.apply(iso)


def test_every_kind_of_change_lands_and_only_in_the_working_tree(repo: Path, state: Path) -> None:
    iso = worktree.create(repo, state, "job-1")
    ws = iso.workspace
    write(ws / "created" / "deep" / "file.py", "x = 1\n")  # creation with new directories
    (ws / "lib" / "util.py").unlink()  # deletion: lib/ is left empty and goes too
    os.chmod(ws / "script.sh", 0o755)  # mode change only
    write(ws / "logo.bin", LOGO[::-1])  # binary modification
    os.rename(ws / "pkg" / "sub" / "mod.py", ws / "pkg" / "sub" / "renamed.py")  # rename
    os.symlink("README.md", ws / "readme-link")  # a new symlink
    write(ws / "app.py", APP_EDITED + "# kimi\n")  # on top of the user's uncommitted edit
    index = (repo / ".git" / "index").read_bytes()
    head = git(repo, "rev-parse", "HEAD")

    result = worktree.apply(iso)
    assert result.ok
    assert result.applied == [
        "app.py",
        "created/deep/file.py",
        "lib/util.py",
        "logo.bin",
        "pkg/sub/mod.py",
        "pkg/sub/renamed.py",
        "readme-link",
        "script.sh",
    ]
    assert (repo / ".git" / "index").read_bytes() == index
    assert git(repo, "rev-parse", "HEAD") == head
    assert not (repo / "lib").exists()
    assert (repo / "created" / "deep" / "file.py").read_text() == "x = 1\n"
    assert stat.S_IMODE(os.stat(repo / "script.sh").st_mode) == 0o755
    assert stat.S_IMODE(os.stat(repo / "created" / "deep" / "file.py").st_mode) == 0o644
    assert (repo / "logo.bin").read_bytes() == LOGO[::-1]
    assert (repo / "pkg" / "sub" / "renamed.py").read_text() == MOD
    assert not (repo / "pkg" / "sub" / "mod.py").exists()
    assert os.readlink(repo / "readme-link") == "README.md"
    assert (repo / "app.py").read_text() == APP_EDITED + "# kimi\n"
    assert sorted(status(repo)) == [
        " D lib/util.py",
        " D pkg/sub/mod.py",
        " M app.py",
        " M logo.bin",
        " M script.sh",
        "?? created/deep/file.py",
        "?? notes.txt",  # untracked before: unchanged
        "?? pkg/sub/renamed.py",
        "?? readme-link",
        "A  staged.txt",  # staged before: still staged
    ]
    # the copy and the user's tree now agree (ignored files aside)
    mine = {k: v for k, v in tree_files(repo).items() if not k.startswith("build/") and k != "debug.log"}
    assert mine == tree_files(iso.checkout)


def test_paths_subset(repo: Path, state: Path) -> None:
    iso = worktree.create(repo, state, "job-1")
    write(iso.workspace / "README.md", KIMI_README)
    write(iso.workspace / "one.txt", "one\n")
    write(iso.workspace / "two.txt", "two\n")
    os.rename(iso.workspace / "pkg" / "notes.md", iso.workspace / "pkg" / "NOTES.md")
    before = fingerprint(repo)

    with pytest.raises(BadInput, match="not part of the job's change: 'three.txt'") as caught:
        worktree.apply(iso, ["one.txt", "three.txt"])
    assert caught.value.details["changed"] == [
        "README.md",
        "one.txt",
        "pkg/NOTES.md",
        "pkg/notes.md",
        "two.txt",
    ]
    for bad in ["../outside.txt", "/etc/passwd"]:
        with pytest.raises(BadInput, match="must be relative to the workspace"):
            worktree.apply(iso, [bad])
    with pytest.raises(BadInput):
        worktree.apply(iso, [])
    assert fingerprint(repo) == before

    result = worktree.apply(iso, ["./one.txt", "pkg/notes.md"])  # one side of a rename takes both
    assert result.applied == ["one.txt", "pkg/NOTES.md", "pkg/notes.md"]
    assert (repo / "one.txt").read_text() == "one\n"
    assert (repo / "pkg" / "NOTES.md").read_text() == "package notes\n"
    assert not (repo / "pkg" / "notes.md").exists()
    assert not (repo / "two.txt").exists()
    assert (repo / "README.md").read_text() == README


def test_nested_workspace(repo: Path, state: Path) -> None:
    iso = worktree.create(repo / "pkg", state, "job-1")
    write(iso.workspace / "sub" / "mod.py", MOD.replace("value_3 = 3", "value_3 = 'three'"))
    write(iso.workspace / "fresh.py", "fresh = True\n")
    write(iso.checkout / "README.md", "outside the workspace: never applied\n")
    write(repo / "pkg" / "sub" / "mod.py", MOD.replace("value_10 = 10", "value_10 = 'ten'"))
    result = worktree.apply(iso)
    assert result.applied == ["fresh.py", "sub/mod.py"]
    assert (repo / "pkg" / "sub" / "mod.py").read_text() == MOD.replace(
        "value_3 = 3", "value_3 = 'three'"
    ).replace("value_10 = 10", "value_10 = 'ten'")
    assert (repo / "pkg" / "fresh.py").read_text() == "fresh = True\n"
    assert (repo / "README.md").read_text() == README


def test_user_made_the_same_change(repo: Path, state: Path) -> None:
    iso = worktree.create(repo, state, "job-1")
    write(iso.workspace / "README.md", KIMI_README)
    (iso.workspace / "app.py").unlink()
    write(repo / "README.md", KIMI_README)
    (repo / "app.py").unlink()
    mtime = os.stat(repo / "README.md").st_mtime_ns
    assert worktree.apply(iso).applied == ["README.md", "app.py"]
    assert os.stat(repo / "README.md").st_mtime_ns == mtime  # not rewritten


@pytest.mark.parametrize(
    ("kimi", "user", "reason"),
    [
        ("delete", "modify", "deleted by the job, but changed in your working tree since"),
        ("modify", "delete", "changed by the job, but deleted in your working tree since"),
        ("create", "create", "created by the job and, with different contents, in your working tree"),
        ("binary", "binary", "a binary file changed both by the job and in your working tree"),
    ],
)
def test_other_conflicts(repo: Path, state: Path, kimi: str, user: str, reason: str) -> None:
    iso = worktree.create(repo, state, "job-1")
    path = {"create": "both.txt", "binary": "logo.bin"}.get(kimi, "app.py")
    for side, action in ((iso.workspace, kimi), (repo, user)):
        if action == "delete":
            (side / path).unlink()
        elif action == "binary":
            write(side / path, LOGO + os.fsencode(str(side)))
        else:
            write(side / path, f"{action} in {side}\n")
    before = fingerprint(repo)
    result = worktree.apply(iso)
    assert result.conflicts == [Conflict(path, reason, [])]
    assert fingerprint(repo) == before


def test_conflict_in_a_secret_file_shows_no_contents(repo: Path, state: Path) -> None:
    write(repo / "settings.env.txt", "")  # keep the repo's tracked set unchanged
    write(repo / ".env", "TOKEN=base-token-value\nOTHER=1\n")
    iso = worktree.create(repo, state, "job-1")
    write(iso.workspace / ".env", "TOKEN=kimi-token-value\nOTHER=1\n")
    write(repo / ".env", "TOKEN=user-token-value\nOTHER=1\n")
    result = worktree.apply(iso)
    assert result.conflicts == [
        Conflict(".env", "both changed the same lines of a secret file (contents withheld)", [])
    ]


def test_a_symlinked_directory_in_the_way_is_a_conflict(tmp_path: Path, repo: Path, state: Path) -> None:
    iso = worktree.create(repo, state, "job-1")
    write(iso.workspace / "pkg" / "sub" / "added.py", "added\n")
    outside = tmp_path / "outside"
    outside.mkdir()
    os.rename(repo / "pkg", tmp_path / "pkg-moved")
    os.symlink(outside, repo / "pkg")  # the user replaced pkg/ by a link leading out of the workspace
    result = worktree.apply(iso)
    assert result.conflicts == [
        Conflict("pkg/sub/added.py", "pkg is a symbolic link in your working tree", [])
    ]
    assert list(outside.iterdir()) == []


def test_file_replaced_by_a_directory_and_back(repo: Path, state: Path) -> None:
    iso = worktree.create(repo, state, "job-1")
    (iso.workspace / "app.py").unlink()
    write(iso.workspace / "app.py" / "__init__.py", "package = True\n")  # the module becomes a package
    (iso.workspace / "lib" / "util.py").unlink()
    (iso.workspace / "lib").rmdir()
    write(iso.workspace / "lib", "lib is a file now\n")  # the package becomes a file
    write(repo / "app.py", APP_EDITED)
    result = worktree.apply(iso)
    assert result.ok, result.conflicts
    assert result.applied == ["app.py", "app.py/__init__.py", "lib", "lib/util.py"]
    assert (repo / "app.py" / "__init__.py").read_text() == "package = True\n"
    assert (repo / "lib").read_text() == "lib is a file now\n"


def test_apply_after_discard(repo: Path, state: Path) -> None:
    iso = worktree.create(repo, state, "job-1")
    write(iso.workspace / "new.txt", "new\n")
    assert worktree.discard(state, "job-1") is True
    with pytest.raises(BadInput, match="has no isolated copy"):
        worktree.apply(iso)
    with pytest.raises(BadInput, match="has no isolated copy"):
        worktree.load(state, "job-1")
    assert not (repo / "new.txt").exists()


def test_permissions_of_replaced_files_are_kept(repo: Path, state: Path) -> None:
    os.chmod(repo / "README.md", 0o600)
    iso = worktree.create(repo, state, "job-1")
    write(iso.workspace / "README.md", KIMI_README)
    os.chmod(iso.workspace / "README.md", 0o755)  # the job made it executable
    assert worktree.apply(iso).ok
    assert stat.S_IMODE(os.stat(repo / "README.md").st_mode) == 0o700
    assert (repo / "README.md").read_text() == KIMI_README


def test_submodules_are_copied_as_their_commit_and_never_applied(repo: Path, state: Path) -> None:
    nested = repo / "vendor" / "lib"
    nested.mkdir(parents=True)
    git(nested, "init", "-q", "-b", "main")
    write(nested / "lib.c", "int lib;\n")
    git(nested, "add", "-A")
    git(nested, "commit", "-q", "-m", "nested")
    git(repo, "add", "vendor/lib")  # recorded as a gitlink (a submodule without .gitmodules)
    before = fingerprint(repo)
    iso = worktree.create(repo, state, "job-1")
    assert fingerprint(repo) == before
    assert (iso.checkout / "vendor" / "lib").is_dir()
    assert list((iso.checkout / "vendor" / "lib").iterdir()) == []  # contents are not copied
    assert worktree.diff(iso).files == []

    kimi_repo = iso.workspace / "tool"  # Kimi makes a repository of its own inside the copy
    kimi_repo.mkdir()
    git(kimi_repo, "init", "-q", "-b", "main")
    write(kimi_repo / "t.txt", "t\n")
    git(kimi_repo, "add", "-A")
    git(kimi_repo, "commit", "-q", "-m", "t")
    write(iso.workspace / "plain.txt", "plain\n")
    assert [(f.path, f.status) for f in worktree.diff(iso).files] == [
        ("plain.txt", "added"),
        ("tool", "added"),
    ]
    result = worktree.apply(iso)
    assert result.conflicts == [
        Conflict(
            "tool",
            "a submodule or nested git repository: its change cannot be applied as files (leave it out with "
            "paths=[...])",
            [],
        )
    ]
    assert fingerprint(repo) == before
    assert worktree.apply(iso, ["plain.txt"]).applied == ["plain.txt"]


def test_two_applies_at_once_apply_once(repo: Path, state: Path) -> None:
    import threading

    iso = worktree.create(repo, state, "job-1")
    write(iso.workspace / "new.txt", "new\n")
    outcomes: list[object] = []

    def run() -> None:
        try:
            outcomes.append(worktree.apply(iso).applied)
        except BadInput as exc:
            outcomes.append(exc.message)

    threads = [threading.Thread(target=run) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert ["new.txt"] in outcomes
    assert len([o for o in outcomes if isinstance(o, str) and "already applied" in o]) == 1
