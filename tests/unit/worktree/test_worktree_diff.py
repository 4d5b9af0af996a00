"""diff(): the copy's whole change against its base, exact, with renames, modes, binaries and secret
files whose contents never appear."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from wt_helpers import README, UTIL, fingerprint, git, write

from kimi_mcp import worktree
from kimi_mcp.worktree import FileDiff, Isolated

SECRET_VALUE = "sk-verysecretvalue123456"


def short(iso: Isolated, content: bytes) -> str:
    """The abbreviated blob id git prints in a diff's ``index`` line."""
    path = iso.root / "probe"
    path.write_bytes(content)
    sha = git(iso.checkout, "hash-object", str(path)).strip()
    path.unlink()
    return git(iso.checkout, "rev-parse", "--short=7", sha).strip()


def kimi_edits(ws: Path) -> None:
    """Every kind of change: modify, create, delete, rename, chmod +x, a binary, a secret file, and
    files git ignores."""
    write(ws / "README.md", README.replace("line 5\n", "line 5 changed by kimi\n"))
    write(ws / "new.py", "print('new')\n")
    (ws / "lib" / "util.py").unlink()
    os.rename(ws / "pkg" / "sub" / "mod.py", ws / "pkg" / "sub" / "mod2.py")
    os.chmod(ws / "script.sh", 0o755)
    write(ws / "data.bin", b"\0binary\1")
    write(ws / ".env", f"API_TOKEN={SECRET_VALUE}\n")
    write(ws / "__pycache__" / "x.pyc", b"\0ignored")
    write(ws / "out.log", "ignored log\n")


def test_diff_is_exact(repo: Path, state: Path) -> None:
    iso = worktree.create(repo, state, "job-1")
    kimi_edits(iso.workspace)
    before = fingerprint(repo)
    copy_index = (iso.checkout / ".git" / "index").read_bytes()
    change = worktree.diff(iso)
    assert fingerprint(repo) == before
    assert (iso.checkout / ".git" / "index").read_bytes() == copy_index  # the copy's own index untouched

    assert change.files == [
        FileDiff(".env", "added", insertions=1, secret=True),
        FileDiff("README.md", "modified", insertions=1, deletions=1),
        FileDiff("data.bin", "added", binary=True),
        FileDiff("lib/util.py", "deleted", deletions=24),
        FileDiff("new.py", "added", insertions=1),
        FileDiff("pkg/sub/mod2.py", "renamed", old_path="pkg/sub/mod.py"),
        FileDiff("script.sh", "mode"),
    ]
    assert (change.insertions, change.deletions, change.base) == (3, 25, iso.base)
    readme_old, readme_new = (
        short(iso, README.encode()),
        short(iso, README.replace("line 5\n", "line 5 changed by kimi\n").encode()),
    )
    deleted = "".join(f"-{line}\n" for line in UTIL.splitlines())
    data_id, util_id, new_id = (
        short(iso, b"\0binary\1"),
        short(iso, UTIL.encode()),
        short(iso, b"print('new')\n"),
    )
    assert change.text == (
        "diff --git a/.env b/.env\n"
        "(secret file: contents withheld)\n"
        "diff --git a/README.md b/README.md\n"
        f"index {readme_old}..{readme_new} 100644\n"
        "--- a/README.md\n"
        "+++ b/README.md\n"
        "@@ -2,7 +2,7 @@ line 1\n"
        " line 2\n line 3\n line 4\n-line 5\n+line 5 changed by kimi\n line 6\n line 7\n line 8\n"
        "diff --git a/data.bin b/data.bin\n"
        "new file mode 100644\n"
        f"index 0000000..{data_id}\n"
        "Binary files /dev/null and b/data.bin differ\n"
        "diff --git a/lib/util.py b/lib/util.py\n"
        "deleted file mode 100644\n"
        f"index {util_id}..0000000\n"
        "--- a/lib/util.py\n"
        "+++ /dev/null\n"
        "@@ -1,24 +0,0 @@\n"
        f"{deleted}"
        "diff --git a/new.py b/new.py\n"
        "new file mode 100644\n"
        f"index 0000000..{new_id}\n"
        "--- /dev/null\n"
        "+++ b/new.py\n"
        "@@ -0,0 +1 @@\n"
        "+print('new')\n"
        "diff --git a/pkg/sub/mod.py b/pkg/sub/mod2.py\n"
        "similarity index 100%\n"
        "rename from pkg/sub/mod.py\n"
        "rename to pkg/sub/mod2.py\n"
        "diff --git a/script.sh b/script.sh\n"
        "old mode 100644\n"
        "new mode 100755\n"
    )
    assert SECRET_VALUE not in change.text
    assert "API_TOKEN" not in change.text


def test_no_change(repo: Path, state: Path) -> None:
    iso = worktree.create(repo, state, "job-1")
    write(iso.workspace / "__pycache__" / "only.pyc", b"ignored")
    change = worktree.diff(iso)
    assert (change.text, change.files, change.insertions, change.deletions) == ("", [], 0, 0)
    assert change.empty


def test_secret_files_in_any_form(repo: Path, state: Path) -> None:
    iso = worktree.create(repo, state, "job-1")
    write(iso.workspace / "keys" / "id_rsa", "-----BEGIN KEY-----\nPRIVATEKEYDATA\n")
    write(iso.workspace / "server.pem", "PEMDATA\n")
    write(iso.workspace / ".env.example", "API_TOKEN=placeholder\n")  # a template: shown
    change = worktree.diff(iso)
    assert [(f.path, f.secret) for f in change.files] == [
        (".env.example", False),
        ("keys/id_rsa", True),
        ("server.pem", True),
    ]
    assert "PRIVATEKEYDATA" not in change.text and "PEMDATA" not in change.text
    assert "+API_TOKEN=placeholder\n" in change.text
    assert "diff --git a/keys/id_rsa b/keys/id_rsa\n(secret file: contents withheld)\n" in change.text


def test_renamed_secret_file_is_withheld(repo: Path, state: Path) -> None:
    write(repo / "config.env.txt", "PASSWORD=hunter2hunter2\n")
    iso = worktree.create(repo, state, "job-1")
    os.rename(iso.workspace / "config.env.txt", iso.workspace / ".env")
    write(iso.workspace / ".env", "PASSWORD=hunter2hunter2\nMORE=x\n")
    change = worktree.diff(iso)
    assert change.files == [
        FileDiff(".env", "renamed", old_path="config.env.txt", insertions=1, secret=True),
    ]
    assert change.text == "diff --git a/config.env.txt b/.env\n(secret file: contents withheld)\n"


def test_typechange_to_a_symlink(repo: Path, state: Path) -> None:
    iso = worktree.create(repo, state, "job-1")
    (iso.workspace / "app.py").unlink()
    os.symlink("README.md", iso.workspace / "app.py")
    write(iso.workspace / ".env", "SECRET=abcdefgh12345\n")
    change = worktree.diff(iso)
    assert [(f.path, f.status, f.secret) for f in change.files] == [
        (".env", "added", True),
        ("app.py", "modified", False),
    ]
    assert change.text.count("diff --git a/app.py b/app.py\n") == 2  # git shows a deletion and an addition
    assert "+README.md\n\\ No newline at end of file\n" in change.text
    assert "abcdefgh12345" not in change.text


def test_nested_workspace_diff_is_relative_and_restricted(repo: Path, state: Path) -> None:
    iso = worktree.create(repo / "pkg", state, "job-1")
    write(iso.workspace / "sub" / "mod.py", "value = 'changed'\n")
    write(iso.workspace / "added.txt", "added\n")
    write(iso.checkout / "README.md", "outside the workspace\n")  # not part of the workspace's change
    change = worktree.diff(iso)
    assert [(f.path, f.status) for f in change.files] == [("added.txt", "added"), ("sub/mod.py", "modified")]
    assert "diff --git a/sub/mod.py b/sub/mod.py\n" in change.text
    assert "README" not in change.text


def test_diff_ignores_what_kimi_did_to_the_copys_git(repo: Path, state: Path) -> None:
    """Kimi may commit, stage or reset in the copy: the change is still its work tree against the base."""
    iso = worktree.create(repo, state, "job-1")
    write(iso.workspace / "README.md", "rewritten\n")
    git(iso.checkout, "commit", "-q", "-am", "kimi's commit")
    write(iso.workspace / "later.txt", "after the commit\n")
    git(iso.checkout, "rm", "-q", "--cached", "app.py")
    change = worktree.diff(iso)
    assert [(f.path, f.status) for f in change.files] == [("README.md", "modified"), ("later.txt", "added")]


@pytest.mark.parametrize("delay", [0.0, 1.1])
def test_diff_sees_same_size_edits_right_after_create(repo: Path, state: Path, delay: float) -> None:
    """git's racy-file rules: an edit that keeps the size, made within the second of the checkout (and
    after base.index was refreshed), is still found."""
    import time

    iso = worktree.create(repo, state, "job-1")
    time.sleep(delay)
    worktree.diff(iso)  # may refresh base.index
    write(iso.workspace / "README.md", README.replace("line 5", "LINE 5"))
    assert [f.path for f in worktree.diff(iso).files] == ["README.md"]
