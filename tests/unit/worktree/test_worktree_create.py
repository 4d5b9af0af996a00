"""Creating an isolated copy: it holds the user's tree as it is (uncommitted, staged and untracked files,
not ignored ones) and leaves the user's repository exactly as it was."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
from wt_helpers import APP_EDITED, LOGO, README, fingerprint, git, tree_files, write

from kimi_mcp import worktree
from kimi_mcp.errors import BadInput, WorkspaceError

EXPECTED_COPY = {
    ".gitignore": b"build/\n*.log\n__pycache__/\n",
    "README.md": README.encode(),
    "app.py": APP_EDITED.encode(),
    "lib/util.py": None,  # committed contents, checked separately
    "logo.bin": LOGO,
    "notes.txt": b"untracked notes\n",
    "pkg/notes.md": b"package notes\n",
    "pkg/sub/mod.py": None,
    "script.sh": b"#!/bin/sh\necho hi\n",
    "staged.txt": b"staged content\n",
}


def test_create_copies_the_tree_as_it_is_and_leaves_the_repo_identical(repo: Path, state: Path) -> None:
    before = fingerprint(repo)
    iso = worktree.create(repo, state, "job-1")
    assert fingerprint(repo) == before

    assert iso.id == "job-1"
    assert iso.root == state.resolve() / "worktrees" / "job-1"
    assert iso.repo == repo.resolve()
    assert iso.subdir == ""
    assert iso.checkout == iso.root / "tree"
    assert iso.workspace == iso.checkout
    assert iso.user_workspace == repo.resolve()
    assert iso.head == git(repo, "rev-parse", "HEAD").strip()
    assert sorted(p.name for p in iso.root.iterdir()) == ["base.index", "lock", "meta.json", "tree"]

    copied = tree_files(iso.checkout)
    assert sorted(copied) == sorted(EXPECTED_COPY)  # no build/, no debug.log
    for path, content in EXPECTED_COPY.items():
        assert copied[path] == (content if content is not None else (repo / path).read_bytes())
    assert os.stat(iso.checkout / "script.sh").st_mode & 0o111 == 0

    # the copy: detached at the base, whose parent is the user's HEAD; clean; objects borrowed
    assert git(iso.checkout, "rev-parse", "HEAD").strip() == iso.base
    assert git(iso.checkout, "rev-parse", f"{iso.base}^").strip() == iso.head
    assert git(iso.checkout, "status", "--porcelain") == ""
    assert git(iso.checkout, "remote") == ""
    alternates = (iso.checkout / ".git" / "objects" / "info" / "alternates").read_text()
    assert alternates == f"{repo.resolve() / '.git' / 'objects'}\n"
    assert worktree.load(state, "job-1") == iso


def test_the_copy_is_a_repository_kimi_can_use(repo: Path, state: Path) -> None:
    iso = worktree.create(repo, state, "job-1")
    before = fingerprint(repo)
    write(iso.workspace / "app.py", "changed in the copy\n")
    git(iso.checkout, "add", "-A")
    git(iso.checkout, "commit", "-q", "-m", "kimi commits in the copy")
    assert git(iso.checkout, "log", "--format=%s", "-3").splitlines() == [
        "kimi commits in the copy",
        "kimi-mcp: base of job job-1",
        "initial",
    ]
    assert fingerprint(repo) == before


def test_nested_workspace_copies_the_whole_repository(repo: Path, state: Path) -> None:
    iso = worktree.create(repo / "pkg", state, "nested")
    assert iso.subdir == "pkg"
    assert iso.workspace == iso.checkout / "pkg"
    assert iso.user_workspace == repo.resolve() / "pkg"
    assert sorted(tree_files(iso.workspace)) == ["notes.md", "sub/mod.py"]
    assert (iso.checkout / "app.py").read_text() == APP_EDITED


def test_repository_without_commits(tmp_path: Path, state: Path) -> None:
    repo = tmp_path / "fresh"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    write(repo / "a.txt", "first file\n")
    write(repo / "dir" / "b.txt", "second file\n")
    git(repo, "add", "dir/b.txt")
    before = fingerprint(repo)
    iso = worktree.create(repo, state, "fresh-1")
    assert fingerprint(repo) == before
    assert iso.head is None
    assert git(iso.checkout, "rev-list", "--parents", "-n", "1", iso.base).split() == [iso.base]
    assert tree_files(iso.checkout) == {"a.txt": b"first file\n", "dir/b.txt": b"second file\n"}


def test_empty_repository(tmp_path: Path, state: Path) -> None:
    repo = tmp_path / "empty"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    iso = worktree.create(repo, state, "empty-1")
    assert tree_files(iso.checkout) == {}
    assert not (repo / ".git" / "index").exists()


def test_state_inside_the_repository_is_refused(repo: Path) -> None:
    before = fingerprint(repo)
    with pytest.raises(BadInput, match="is inside the repository") as caught:
        worktree.create(repo, repo / ".kimi-state", "job-1")
    assert caught.value.type == "bad_input"
    with pytest.raises(BadInput, match="is inside the repository"):
        worktree.create(repo / "pkg", repo / "lib" / "state", "job-1")
    assert fingerprint(repo) == before


def test_not_a_repository(tmp_path: Path, state: Path) -> None:
    plain = tmp_path / "plain"
    plain.mkdir()
    with pytest.raises(BadInput) as caught:
        worktree.create(plain, state, "job-1")
    assert caught.value.message == (
        f"isolation='worktree' needs the workspace inside a git repository: {plain.resolve()} is not"
    )
    assert "isolation='none'" in caught.value.suggestion
    assert "git init" in caught.value.suggestion
    assert not (state / "worktrees").exists() or list((state / "worktrees").iterdir()) == []


def test_bare_repository_is_refused(tmp_path: Path, repo: Path, state: Path) -> None:
    bare = tmp_path / "bare.git"
    git(tmp_path, "clone", "-q", "--bare", str(repo), str(bare))
    with pytest.raises(BadInput, match="bare repository"):
        worktree.create(bare, state, "job-1")


def test_workspace_inside_dot_git_is_refused(repo: Path, state: Path) -> None:
    with pytest.raises(BadInput, match=r"inside a repository's \.git directory"):
        worktree.create(repo / ".git", state, "job-1")


def test_missing_workspace(tmp_path: Path, state: Path) -> None:
    with pytest.raises(WorkspaceError, match="is not a directory"):
        worktree.create(tmp_path / "nowhere", state, "job-1")


def test_ignored_workspace_is_refused(repo: Path, state: Path) -> None:
    with pytest.raises(BadInput, match="is ignored by git"):
        worktree.create(repo / "build", state, "job-1")
    assert list((state / "worktrees").iterdir()) == []  # the half-made copy was removed


def test_workspace_without_tracked_files_exists_in_the_copy(repo: Path, state: Path) -> None:
    (repo / "empty-dir").mkdir()
    iso = worktree.create(repo / "empty-dir", state, "job-1")
    assert iso.workspace.is_dir()
    assert list(iso.workspace.iterdir()) == []


def test_git_missing(repo: Path, state: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(shutil, "which", lambda name, *a, **k: None)
    with pytest.raises(BadInput, match="git is needed for isolation='worktree'"):
        worktree.create(repo, state, "job-1")


def test_invalid_job_ids(repo: Path, state: Path) -> None:
    for bad in ["", "../x", "a/b", "a.b", "x" * 129, "ünï"]:
        with pytest.raises(BadInput, match="invalid job id"):
            worktree.create(repo, state, bad)
    assert not (state / "worktrees").exists()


def test_same_id_twice_is_refused(repo: Path, state: Path) -> None:
    worktree.create(repo, state, "job-1")
    with pytest.raises(BadInput, match="already has an isolated copy"):
        worktree.create(repo, state, "job-1")


def test_inherited_git_variables_are_ignored(
    tmp_path: Path, repo: Path, state: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A server started from a git hook inherits GIT_DIR & co; they must not redirect any command."""
    other = tmp_path / "other"
    other.mkdir()
    git(other, "init", "-q", "-b", "main")
    write(other / "x.txt", "other\n")
    git(other, "add", "-A")
    before_other, before_repo = fingerprint(other), fingerprint(repo)
    monkeypatch.setenv("GIT_DIR", str(other / ".git"))
    monkeypatch.setenv("GIT_WORK_TREE", str(other))
    monkeypatch.setenv("GIT_INDEX_FILE", str(other / ".git" / "index"))
    monkeypatch.setenv("GIT_OBJECT_DIRECTORY", str(other / ".git" / "objects"))
    iso = worktree.create(repo, state, "job-1")
    write(iso.workspace / "new.txt", "new\n")
    assert [f.path for f in worktree.diff(iso).files] == ["new.txt"]
    assert worktree.apply(iso).applied == ["new.txt"]
    monkeypatch.undo()
    assert fingerprint(other) == before_other
    (repo / "new.txt").unlink()
    assert fingerprint(repo) == before_repo


def test_symlinks_and_executables_are_copied(repo: Path, state: Path) -> None:
    os.symlink("README.md", repo / "readme-link")
    write(repo / "run.sh", "#!/bin/sh\n", 0o755)
    iso = worktree.create(repo, state, "job-1")
    assert os.readlink(iso.checkout / "readme-link") == "README.md"
    assert os.stat(iso.checkout / "run.sh").st_mode & 0o100


def test_repo_top_checks_a_workspace_before_a_job(tmp_path: Path, repo: Path, state: Path) -> None:
    before = fingerprint(repo)
    assert worktree.repo_top(repo / "pkg", state) == repo.resolve()
    with pytest.raises(BadInput, match="is inside the repository"):
        worktree.repo_top(repo / "pkg", repo / "state")
    (tmp_path / "plain").mkdir()
    with pytest.raises(BadInput, match="needs the workspace inside a git repository"):
        worktree.repo_top(tmp_path / "plain", state)
    assert not state.exists()
    assert fingerprint(repo) == before


def test_every_kind_of_uncommitted_change_is_copied(repo: Path, state: Path) -> None:
    (repo / "lib" / "util.py").unlink()  # unstaged deletion (lib/ becomes empty)
    (repo / "pkg" / "notes.md").unlink()
    write(repo / "pkg" / "notes.md" / "inside.md", "a file became a directory\n")
    os.unlink(repo / "script.sh")
    os.symlink("README.md", repo / "script.sh")  # a file became a symlink
    write(repo / "forced.log", "ignored, but added with -f\n")
    git(repo, "add", "-f", "forced.log")  # tracked although ignored: part of the base
    git(repo, "rm", "-q", "--cached", "logo.bin")
    write(repo / ".git" / "info" / "exclude", "logo.bin\n")  # untracked and ignored now: not copied
    before = fingerprint(repo)
    iso = worktree.create(repo, state, "job-1")
    assert fingerprint(repo) == before
    copied = tree_files(iso.checkout)
    assert sorted(copied) == [
        ".gitignore",
        "README.md",
        "app.py",
        "forced.log",
        "notes.txt",
        "pkg/notes.md/inside.md",
        "pkg/sub/mod.py",
        "script.sh",
        "staged.txt",
    ]
    assert copied["script.sh"] == b"-> README.md"
    assert copied["pkg/notes.md/inside.md"] == b"a file became a directory\n"
    assert not (iso.checkout / "lib").exists()
    assert git(iso.checkout, "status", "--porcelain", "--untracked-files=all") == ""
    assert worktree.diff(iso).files == []
    assert (iso.checkout / ".git" / "info" / "exclude").read_text() == "logo.bin\n"


def test_sparse_checkout_gives_a_full_copy(repo: Path, state: Path) -> None:
    git(repo, "sparse-checkout", "set", "--no-cone", "/*", "!/lib/")
    assert not (repo / "lib").exists()
    before = fingerprint(repo)
    iso = worktree.create(repo, state, "job-1")
    assert fingerprint(repo) == before
    assert (iso.checkout / "lib" / "util.py").is_file()  # in the base (the user's index has it)
    assert git(iso.checkout, "status", "--porcelain") == ""
    assert "sparse" not in (iso.checkout / ".git" / "config").read_text().lower()
    write(iso.checkout / "lib" / "util.py", "edited in the copy\n")
    assert [(f.path, f.status) for f in worktree.diff(iso).files] == [("lib/util.py", "modified")]
