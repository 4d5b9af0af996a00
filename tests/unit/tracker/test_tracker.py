"""Tests for the workspace tracker (snapshots, diff, contents) and its ignore/secret rules."""

from __future__ import annotations

import os
import shutil
import sys
import time
from dataclasses import replace
from pathlib import Path

import pytest
from tracker_helpers import DEFAULTS, changes, recorded, rewrite_record, set_dir_stat, write

from kimi_mcp import tracker
from kimi_mcp.config import DEFAULT_EXCLUDED_DIRS, MAX_TOTAL_CHARS
from kimi_mcp.secrets import is_secret_path
from kimi_mcp.tracker import (
    Changes,
    ContentCut,
    Snapshot,
    TrackerOptions,
    _contents,
    _parallel,
    _walk,
    collect_contents,
)
from kimi_mcp.tracker._ignore import IgnoreRules

posix_only = pytest.mark.skipif(sys.platform == "win32", reason="POSIX semantics")
CAN_WATCH = sys.platform.startswith("linux")


UNWATCHED = TrackerOptions(watch=False)


@pytest.fixture(params=["watched", "full"])
def opts(request: pytest.FixtureRequest) -> TrackerOptions:
    """Run a test with snapshots that watch their directories (Linux) and with snapshots that do not."""
    return TrackerOptions(watch=request.param == "watched")


def take_snapshot(root: Path, options: TrackerOptions = DEFAULTS) -> Snapshot:
    """tracker.take_snapshot, checking it watches exactly when it should."""
    snapshot = tracker.take_snapshot(root, options)
    wanted = CAN_WATCH and options.watch
    assert snapshot.watching == wanted, snapshot.unwatched_reason
    return snapshot


def diff(before: Snapshot, options: TrackerOptions = DEFAULTS) -> Changes:
    """tracker.diff, checked against a full walk of the same snapshot: whatever path ``diff`` takes, the
    result must be the full walk's, and it must say which path it took."""
    watching = before.watching
    result = tracker.diff(before, options)
    assert result == _parallel.walk_full(before, options), "the watched diff differs from the full walk"
    assert result.method == ("watched" if watching and before.watching else "full"), result.reason
    return result


def pretend_stat_unchanged(snapshot: tracker.Snapshot, rel: str) -> None:
    """Simulate a filesystem whose timestamps did not move on the last write (coarse granularity):
    overwrite the recorded mtime/ctime/inode with the current ones, keeping the recorded size."""
    assert recorded(snapshot, rel) is not None
    st = os.lstat(snapshot.root / rel)
    rewrite_record(snapshot, rel, mtime_ns=st.st_mtime_ns, ctime_ns=st.st_ctime_ns, inode=st.st_ino)


# ------------------------------------------------------------------------------------------------ diff


def test_created_modified_deleted(opts: TrackerOptions, tmp_path: Path) -> None:
    write(tmp_path, "keep.txt", "keep\n")
    write(tmp_path, "edit.txt", "old\n")
    write(tmp_path, "gone.txt", "bye\n")
    write(tmp_path, "src/pkg/mod.py", "x = 1\n")
    before = take_snapshot(tmp_path, opts)
    assert len(before) == 4
    assert before.root == tmp_path
    assert before.started_ns <= time.time_ns()

    write(tmp_path, "edit.txt", "new content\n")
    (tmp_path / "gone.txt").unlink()
    write(tmp_path, "new.txt", "hello\n")
    write(tmp_path, "src/pkg/mod.py", "x = 2\n")
    assert diff(before, opts) == changes(
        created=["new.txt"], modified=["edit.txt", "src/pkg/mod.py"], deleted=["gone.txt"]
    )


def test_no_changes_is_empty(opts: TrackerOptions, tmp_path: Path) -> None:
    for i in range(30):
        write(tmp_path, f"d{i % 3}/f{i}.txt", f"{i}\n")
    before = take_snapshot(tmp_path, opts)
    assert diff(before, opts) == changes()
    assert diff(before, opts) == changes()  # the snapshot is not consumed


def test_rewrite_with_identical_content_is_not_modified(opts: TrackerOptions, tmp_path: Path) -> None:
    write(tmp_path, "same.txt", "same\n")
    write(tmp_path, "replaced.txt", "same too\n")
    before = take_snapshot(tmp_path, opts)
    time.sleep(0.01)
    write(tmp_path, "same.txt", "same\n")
    tmp = write(tmp_path, "replaced.txt.tmp", "same too\n")
    os.replace(tmp, tmp_path / "replaced.txt")  # new inode, same bytes
    assert os.stat(tmp_path / "replaced.txt").st_ino != recorded(before, "replaced.txt").inode
    assert diff(before, opts) == changes()


@pytest.mark.parametrize("trust_dir_stat", [True, False])
def test_same_size_edit_with_restored_mtime_is_modified(
    opts: TrackerOptions, tmp_path: Path, settled: None, trust_dir_stat: bool
) -> None:
    opts = replace(opts, trust_dir_stat=trust_dir_stat)
    path = write(tmp_path, "f.txt", "aaaa\n")
    st = os.stat(path)
    before = take_snapshot(tmp_path, opts)  # not racy: only the stat key can reveal the edit
    path.write_bytes(b"bbbb\n")
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    after = os.stat(path)
    assert (after.st_size, after.st_mtime_ns) == (st.st_size, st.st_mtime_ns)
    assert diff(before, opts) == changes(modified=["f.txt"])


@pytest.mark.parametrize("dir_trusted", [True, False])
def test_racy_file_is_rehashed_even_with_identical_stat_key(
    opts: TrackerOptions, tmp_path: Path, dir_trusted: bool
) -> None:
    write(tmp_path, "f.txt", "aaaa\n")
    before = take_snapshot(tmp_path, opts)  # written just now: racily clean
    write(tmp_path, "f.txt", "bbbb\n")
    pretend_stat_unchanged(before, "f.txt")
    if dir_trusted:  # as if the directory were old: its listing is skipped, the racy file still re-hashed
        st = os.stat(tmp_path)
        set_dir_stat(before, "", (st.st_mtime_ns, st.st_ctime_ns, st.st_ino))
    assert diff(before, opts) == changes(modified=["f.txt"])


def test_settled_file_with_identical_stat_key_takes_fast_path(
    opts: TrackerOptions, tmp_path: Path, settled: None
) -> None:
    # Control for the test above: proves the fast path exists (diff does not re-hash everything) and that
    # the racy rule is what catches the edit there.
    write(tmp_path, "f.txt", "aaaa\n")
    before = take_snapshot(tmp_path, opts)
    write(tmp_path, "f.txt", "bbbb\n")
    pretend_stat_unchanged(before, "f.txt")
    assert diff(before, opts) == changes()


def test_racy_double_write_around_snapshot_is_detected(opts: TrackerOptions, tmp_path: Path) -> None:
    path = tmp_path / "f.txt"
    for i in range(20):
        path.write_bytes(b"A%03d" % i)
        before = take_snapshot(tmp_path, opts)
        with open(path, "r+b") as fh:  # same inode, same size, within the same timestamp tick if coarse
            fh.write(b"B%03d" % i)
        assert diff(before, opts) == changes(modified=["f.txt"]), i


def test_file_in_new_directory_and_deleted_directory(opts: TrackerOptions, tmp_path: Path) -> None:
    for rel in ("old/a.txt", "old/sub/b.txt", "old/sub/deeper/c.txt", "stay.txt"):
        write(tmp_path, rel)
    before = take_snapshot(tmp_path, opts)
    write(tmp_path, "new/dir/deep/file.py", "print(1)\n")
    write(tmp_path, "new/top.txt")

    shutil.rmtree(tmp_path / "old")
    assert diff(before, opts) == changes(
        created=["new/dir/deep/file.py", "new/top.txt"],
        deleted=["old/a.txt", "old/sub/b.txt", "old/sub/deeper/c.txt"],
    )


def test_file_replaced_by_directory_and_back(opts: TrackerOptions, tmp_path: Path) -> None:
    write(tmp_path, "x")
    write(tmp_path, "d/inner.txt")
    before = take_snapshot(tmp_path, opts)
    (tmp_path / "x").unlink()
    write(tmp_path, "x/child.txt")
    (tmp_path / "d" / "inner.txt").unlink()
    (tmp_path / "d").rmdir()
    write(tmp_path, "d", "now a file\n")
    assert diff(before, opts) == changes(created=["d", "x/child.txt"], deleted=["d/inner.txt", "x"])


def test_empty_files(opts: TrackerOptions, tmp_path: Path) -> None:
    write(tmp_path, "was_empty.txt", b"")
    write(tmp_path, "stays_empty.txt", b"")
    before = take_snapshot(tmp_path, opts)
    write(tmp_path, "new_empty.txt", b"")
    write(tmp_path, "was_empty.txt", "now text\n")
    write(tmp_path, "stays_empty.txt", b"")
    result = diff(before, opts)
    assert result == changes(created=["new_empty.txt"], modified=["was_empty.txt"])
    report = collect_contents(tmp_path, result.created + result.modified)
    assert report.file_contents == {"new_empty.txt": "", "was_empty.txt": "now text\n"}
    assert report.truncated == [] and report.binary_files == []


def test_unicode_filenames(opts: TrackerOptions, tmp_path: Path) -> None:
    write(tmp_path, "café/naïve.txt", "1\n")
    before = take_snapshot(tmp_path, opts)
    write(tmp_path, "café/naïve.txt", "2\n")
    write(tmp_path, "日本語/ファイル.md", "# こんにちは\n")
    write(tmp_path, "emoji_🚀.txt", "🚀\n")
    result = diff(before, opts)
    assert result == changes(created=["emoji_🚀.txt", "日本語/ファイル.md"], modified=["café/naïve.txt"])
    report = collect_contents(tmp_path, result.created + result.modified)
    assert report.file_contents["日本語/ファイル.md"] == "# こんにちは\n"
    assert report.file_contents["emoji_🚀.txt"] == "🚀\n"


def test_excluded_heavy_directories(opts: TrackerOptions, tmp_path: Path) -> None:
    assert {".git", "node_modules", ".venv", "__pycache__", ".tox", ".nox", ".jj"} <= DEFAULT_EXCLUDED_DIRS
    write(tmp_path, "app.py")
    before = take_snapshot(tmp_path, replace(opts, extra_excluded_dirs=frozenset({"target"})))
    assert len(before) == 1
    for rel in (
        "node_modules/left-pad/index.js",
        "web/node_modules/x/y.js",
        ".venv/lib/site.py",
        "pkg/__pycache__/m.cpython-311.pyc",
        ".git/objects/ab/cdef",
        "target/debug/app",
        "deep/er/target/out.o",
        ".pytest_cache/v/cache",
    ):
        write(tmp_path, rel)
    write(tmp_path, "pkg/m.py")
    assert diff(before, replace(opts, extra_excluded_dirs=frozenset({"target"}))) == changes(
        created=["pkg/m.py"]
    )


def test_fifo_is_skipped_without_blocking(opts: TrackerOptions, tmp_path: Path) -> None:
    if not hasattr(os, "mkfifo"):
        pytest.skip("no FIFOs")
    write(tmp_path, "a.txt")
    os.mkfifo(tmp_path / "old_pipe")
    before = take_snapshot(tmp_path, opts)
    assert len(before) == 1
    os.mkfifo(tmp_path / "pipe")
    write(tmp_path, "b.txt")
    assert diff(before, opts) == changes(created=["b.txt"])
    assert collect_contents(tmp_path, ["pipe", "b.txt"]).file_contents == {"b.txt": "x\n"}


# ------------------------------------------------------------------------------------------------ symlinks


@posix_only
def test_symlink_to_outside_file_is_reported_but_never_read(opts: TrackerOptions, tmp_path: Path) -> None:
    root = tmp_path / "ws"
    root.mkdir()
    outside = write(tmp_path, "outside/secret_data.txt", "TOP-SECRET-OUTSIDE-CONTENT\n")
    write(root, "a.txt")
    before = take_snapshot(root, opts)
    os.symlink(outside, root / "link.txt")
    result = diff(before, opts)
    assert result == changes(created=["link.txt"])
    report = collect_contents(root, result.created)
    assert report.binary_files == ["link.txt"]
    assert report.file_contents == {}
    assert "TOP-SECRET-OUTSIDE-CONTENT" not in repr(report)


@posix_only
def test_symlink_retarget_and_type_change_are_modifications(opts: TrackerOptions, tmp_path: Path) -> None:
    write(tmp_path, "t1.txt", "one\n")
    write(tmp_path, "t2.txt", "two\n")
    write(tmp_path, "plain.txt", "t1.txt")  # same bytes as the link target path
    os.symlink("t1.txt", tmp_path / "link")
    os.symlink("t1.txt", tmp_path / "stable")
    before = take_snapshot(tmp_path, opts)
    (tmp_path / "link").unlink()
    os.symlink("t2.txt", tmp_path / "link")
    (tmp_path / "plain.txt").unlink()
    os.symlink("t1.txt", tmp_path / "plain.txt")  # file -> symlink, even with matching "content"
    write(tmp_path, "t1.txt", "changed target\n")  # a link is not modified when its target is
    assert diff(before, opts) == changes(modified=["link", "plain.txt", "t1.txt"])


@posix_only
def test_symlinked_directory_is_not_followed(opts: TrackerOptions, tmp_path: Path) -> None:
    root = tmp_path / "ws"
    write(root, "a.txt")
    target = tmp_path / "elsewhere"
    write(target, "inner.txt", "OUTSIDE-DIR-CONTENT\n")
    before = take_snapshot(root, opts)
    os.symlink(target, root / "linkdir")
    write(target, "added_later.txt")
    result = diff(before, opts)
    assert result == changes(created=["linkdir"])
    report = collect_contents(root, ["linkdir", "linkdir/inner.txt"])
    assert report.binary_files == ["linkdir", "linkdir/inner.txt"]
    assert "OUTSIDE-DIR-CONTENT" not in repr(report)


@posix_only
def test_snapshot_does_not_descend_symlinked_directory(opts: TrackerOptions, tmp_path: Path) -> None:
    root = tmp_path / "ws"
    write(tmp_path, "elsewhere/inner.txt")
    write(root, "a.txt")
    os.symlink(tmp_path / "elsewhere", root / "linkdir")
    before = take_snapshot(root, opts)
    assert len(before) == 2  # a.txt and the link itself
    write(tmp_path, "elsewhere/inner.txt", "changed\n")
    assert diff(before, opts) == changes()


# ------------------------------------------------------------------------------------------------ gitignore


def test_gitignore_root_nested_negation_and_info_exclude(opts: TrackerOptions, tmp_path: Path) -> None:
    write(tmp_path, ".gitignore", "*.log\nbuild/\n/root_only.txt\n!keep.log\n")
    write(tmp_path, ".git/info/exclude", "# local excludes\nscratch/\n")
    write(tmp_path, "sub/.gitignore", "*.tmp\n!important.log\n/anchored.txt\n")
    write(tmp_path, "sub/inner/.gitignore", "!*.tmp\n")
    write(tmp_path, "README.md")
    before = take_snapshot(tmp_path, opts)
    assert len(before) == 4  # .gitignore, sub/.gitignore, sub/inner/.gitignore, README.md
    new = [
        "app.log",  # ignored (root)
        "keep.log",  # re-included by negation
        "build/out.bin",  # ignored dir
        "src/build/x.o",  # "build/" matches at any depth
        "root_only.txt",  # anchored: ignored at the root...
        "sub/root_only.txt",  # ...but not below
        "scratch/notes.md",  # .git/info/exclude
        "sub/a.tmp",  # nested pattern
        "sub/important.log",  # nested negation beats the root pattern
        "sub/other.log",  # root pattern still applies in sub/
        "sub/anchored.txt",  # anchored to sub/
        "sub/x/anchored.txt",  # not anchored here
        "sub/inner/b.tmp",  # deeper negation wins
        "a.tmp",  # sub/.gitignore does not apply at the root
    ]
    for rel in new:
        write(tmp_path, rel)
    assert diff(before, opts) == changes(
        created=[
            "a.tmp",
            "keep.log",
            "sub/important.log",
            "sub/inner/b.tmp",
            "sub/root_only.txt",
            "sub/x/anchored.txt",
        ]
    )


def test_gitignore_cannot_reinclude_below_ignored_directory(opts: TrackerOptions, tmp_path: Path) -> None:
    write(tmp_path, ".gitignore", "logs/\n!logs/keep.txt\n")
    before = take_snapshot(tmp_path, opts)
    write(tmp_path, "logs/keep.txt")  # git cannot re-include a file whose parent directory is excluded
    write(tmp_path, "logs/.gitignore", "!keep.txt\n")
    assert diff(before, opts) == changes()


def test_gitignore_ignored_files_in_snapshot_are_not_tracked(opts: TrackerOptions, tmp_path: Path) -> None:
    write(tmp_path, ".gitignore", "dist/\n*.pyc\n")
    write(tmp_path, "dist/bundle.js", "v1")
    write(tmp_path, "m.pyc", "v1")
    write(tmp_path, "m.py")
    before = take_snapshot(tmp_path, opts)
    assert len(before) == 2
    write(tmp_path, "dist/bundle.js", "v2")
    write(tmp_path, "dist/new.js", "v2")
    write(tmp_path, "m.pyc", "v2")
    (tmp_path / "m.py").unlink()
    assert diff(before, opts) == changes(deleted=["m.py"])


def test_gitignore_respected_without_git_repo_and_can_be_disabled(
    opts: TrackerOptions, tmp_path: Path
) -> None:
    write(tmp_path, ".gitignore", "*.log\n")
    before = take_snapshot(tmp_path, replace(opts, respect_gitignore=False))
    write(tmp_path, "a.log")
    assert diff(before, replace(opts, respect_gitignore=False)) == changes(created=["a.log"])
    before = take_snapshot(tmp_path, opts)
    write(tmp_path, "b.log")
    assert diff(before, opts) == changes()


def test_gitignore_edited_during_turn(opts: TrackerOptions, tmp_path: Path) -> None:
    # Paths that existed at snapshot time keep their classification; new paths follow the new rules.
    write(tmp_path, ".gitignore", "*.log\n")
    write(tmp_path, "app.txt", "1")
    write(tmp_path, "old.log", "1")
    write(tmp_path, "sub/data.txt", "1")
    before = take_snapshot(tmp_path, opts)
    write(tmp_path, ".gitignore", "*.txt\n")
    write(tmp_path, "sub/.gitignore", "*.csv\n")
    write(tmp_path, "app.txt", "2")  # now matches an ignore pattern, but was tracked: still reported
    write(tmp_path, "new.txt")  # new and ignored by the new rules
    write(tmp_path, "sub/new.csv")  # ignored by the new nested file
    write(tmp_path, "new.log")  # no longer ignored
    assert diff(before, opts) == changes(
        created=["new.log", "sub/.gitignore"], modified=[".gitignore", "app.txt"]
    )


def test_ignore_rules_is_ignored(tmp_path: Path) -> None:
    write(tmp_path, ".gitignore", "build/\n*.log\n")
    write(tmp_path, "pkg/.gitignore", "!debug.log\n")
    rules = IgnoreRules(tmp_path)
    assert rules.is_ignored("a.log", is_dir=False)
    assert not rules.is_ignored("pkg/debug.log", is_dir=False)
    assert rules.is_ignored("pkg/other.log", is_dir=False)
    assert rules.is_ignored("build", is_dir=True)
    assert not rules.is_ignored("build", is_dir=False)
    assert rules.is_ignored("build/x/y.txt", is_dir=False)
    assert not rules.is_ignored("src/main.py", is_dir=False)
    assert not IgnoreRules(tmp_path, enabled=False).is_ignored("a.log", is_dir=False)


# ------------------------------------------------------------------------------------------------ secrets


@pytest.mark.parametrize(
    "path",
    [
        ".env",
        ".env.local",
        ".env.production",
        "config/.ENV",
        "server.pem",
        "tls/private.KEY",
        "cert.p12",
        "cert.pfx",
        "release.jks",
        "app.keystore",
        "id_rsa",
        "home/id_ed25519",
        "id_ecdsa_backup",
        "id_dsa",
        ".netrc",
        ".pgpass",
        ".pypirc",
        ".npmrc",
        "credentials",
        "credentials.yml",
        "gcp-credentials.json",
        "service_credentials_prod.json",
        "secrets.yaml",
        "Secrets.JSON",
        ".htpasswd",
        "vault.kdbx",
        ".ssh/config",
        "home/.aws/config",
        ".gnupg/pubring.kbx",
        "x/.SSH/known_hosts",
    ],
)
def test_is_secret_path_true(path: str) -> None:
    assert is_secret_path(path)


@pytest.mark.parametrize(
    "path",
    [
        ".env.example",
        ".env.sample",
        ".env.template",
        ".env.dist",
        "config/.env.local.example",
        "id_rsa.pub",
        "keys/id_ed25519.pub",
        "environment.py",
        "keyboard.py",
        "monkey.txt",
        "credentials.md.bak/notes.txt",
        "my_secrets.txt",
        "ssh/config",
        "README.md",
        "src/credentials_helper.py",
        "env",
    ],
)
def test_is_secret_path_false(path: str) -> None:
    assert not is_secret_path(path)


def test_secret_files_listed_without_content(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    write(tmp_path, ".env", "API_KEY=sk-live-123\n")
    write(tmp_path, "deploy/server.pem", "-----BEGIN PRIVATE KEY-----\n")
    write(tmp_path, ".env.example", "API_KEY=\n")
    opened: list[str] = []
    real_open = os.open

    def spy(path, *args, **kwargs):
        opened.append(os.fspath(path))
        return real_open(path, *args, **kwargs)

    monkeypatch.setattr(_contents.os, "open", spy)
    report = collect_contents(tmp_path, [".env", "deploy/server.pem", ".env.example"])
    assert report.secret_files == [".env", "deploy/server.pem"]
    assert report.file_contents == {".env.example": "API_KEY=\n"}
    assert "sk-live" not in repr(report) and "PRIVATE" not in repr(report)
    assert not any(p.endswith((".env", "server.pem")) for p in opened)


# ------------------------------------------------------------------------------------------------ contents


def test_binary_detection(tmp_path: Path) -> None:
    write(tmp_path, "img.png", b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR")
    write(tmp_path, "late_nul.txt", b"a" * 9000 + b"\x00tail")  # NUL beyond the first 8 KiB: text
    report = collect_contents(tmp_path, ["img.png", "late_nul.txt"], TrackerOptions(max_file_chars=100_000))
    assert report.binary_files == ["img.png"]
    assert report.file_contents == {"late_nul.txt": "a" * 9000 + "\x00tail"}


def test_lossy_utf8(tmp_path: Path) -> None:
    write(tmp_path, "latin1.txt", "café\n".encode("latin-1"))
    write(tmp_path, "good.txt", "café\n")
    report = collect_contents(tmp_path, ["latin1.txt", "good.txt"])
    assert report.lossy_decoded == ["latin1.txt"]
    assert report.file_contents == {"latin1.txt": "caf\ufffd\n", "good.txt": "café\n"}


def test_per_file_budget_counts_characters(tmp_path: Path) -> None:
    write(tmp_path, "small.txt", "é" * 50)  # 100 bytes, 50 chars
    write(tmp_path, "big.txt", "€" * 5000)  # 15000 bytes: only a head is read, cut inside a character
    write(tmp_path, "fits.txt", "é" * 3000)
    opts = TrackerOptions(max_file_chars=3000, max_total_chars=100_000)
    report = collect_contents(tmp_path, ["small.txt", "big.txt", "fits.txt"], opts)
    assert report.file_contents == {"small.txt": "é" * 50, "big.txt": "€" * 3000, "fits.txt": "é" * 3000}
    assert report.truncated == [ContentCut("big.txt", "file_too_large", 15000, 3000)]
    assert report.lossy_decoded == []  # the character cut at the read boundary is not "lossy"


def test_the_total_budget_is_shared_fairly(tmp_path: Path) -> None:
    write(tmp_path, "a.txt", "a" * 40)
    write(tmp_path, "b.txt", "b" * 40)
    write(tmp_path, "c.txt", "c" * 40)
    write(tmp_path, "d.bin", b"\x00" * 10)
    write(tmp_path, "e.txt", b"")
    opts = TrackerOptions(max_file_chars=50, max_total_chars=60)
    report = collect_contents(tmp_path, ["a.txt", "b.txt", "c.txt", "d.bin", "e.txt"], opts)
    # one common head length: the binary and the empty file take nothing, the rest is split evenly
    assert report.file_contents == {"a.txt": "a" * 20, "b.txt": "b" * 20, "c.txt": "c" * 20, "e.txt": ""}
    assert report.truncated == [
        ContentCut(name, "total_budget", 40, 20) for name in ("a.txt", "b.txt", "c.txt")
    ]
    assert report.binary_files == ["d.bin"]


def test_with_the_default_budgets_no_file_is_dropped_while_another_stays_whole(tmp_path: Path) -> None:
    """What a new user met: three new 16 KB files came back whole, cut to 13,999 and empty."""
    for name in ("one.py", "two.py", "three.py"):
        write(tmp_path, name, "x" * 16_000)
    report = collect_contents(tmp_path, ["one.py", "two.py", "three.py"])
    assert [len(report.file_contents[name]) for name in ("one.py", "two.py", "three.py")] == [10_000] * 3
    assert sum(len(text) for text in report.file_contents.values()) <= MAX_TOTAL_CHARS
    write(tmp_path, "small.py", "s" * 30_000)
    write(tmp_path, "large.py", "l" * 150_000)
    report = collect_contents(tmp_path, ["small.py", "large.py"])
    assert [len(report.file_contents[name]) for name in ("small.py", "large.py")] == [15_000, 15_000]
    assert report.truncated == [
        ContentCut("small.py", "total_budget", 30_000, 15_000),
        ContentCut("large.py", "total_budget", 150_000, 15_000),
    ]


def test_budget_left_by_short_files_goes_to_the_long_ones(tmp_path: Path) -> None:
    write(tmp_path, "short.txt", "s" * 5)
    write(tmp_path, "multi.txt", "é" * 30)  # 60 bytes: its size overstates its characters
    write(tmp_path, "long.txt", "l" * 500)
    opts = TrackerOptions(max_file_chars=1000, max_total_chars=100)
    report = collect_contents(tmp_path, ["short.txt", "multi.txt", "long.txt"], opts)
    assert report.file_contents == {"short.txt": "s" * 5, "multi.txt": "é" * 30, "long.txt": "l" * 65}
    assert report.truncated == [ContentCut("long.txt", "total_budget", 500, 65)]


def test_budget_exact_fit_is_not_truncated(tmp_path: Path) -> None:
    write(tmp_path, "a.txt", "a" * 30)
    write(tmp_path, "b.txt", "b" * 30)
    report = collect_contents(
        tmp_path, ["a.txt", "b.txt"], TrackerOptions(max_file_chars=30, max_total_chars=60)
    )
    assert report.file_contents == {"a.txt": "a" * 30, "b.txt": "b" * 30}
    assert report.truncated == []


def test_large_file_reads_only_a_head(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    size = 5_000_000
    write(tmp_path, "huge.txt", b"z" * size)
    read_sizes: list[int] = []
    real_read = os.read

    def spy(fd: int, n: int) -> bytes:
        data = real_read(fd, n)
        read_sizes.append(len(data))
        return data

    monkeypatch.setattr(_contents.os, "read", spy)
    report = collect_contents(tmp_path, ["huge.txt"], TrackerOptions(max_file_chars=1000))
    assert report.file_contents["huge.txt"] == "z" * 1000
    assert report.truncated == [ContentCut("huge.txt", "file_too_large", size, 1000)]
    assert sum(read_sizes) <= 8192


def test_collect_skips_vanished_and_non_files(tmp_path: Path) -> None:
    write(tmp_path, "here.txt", "hi")
    (tmp_path / "adir").mkdir()
    report = collect_contents(tmp_path, ["vanished.txt", "adir", "here.txt", ".env"])
    assert report.file_contents == {"here.txt": "hi"}
    assert report.secret_files == [] and report.binary_files == [] and report.truncated == []


@posix_only
def test_collect_refuses_paths_resolving_outside_root(tmp_path: Path) -> None:
    root = tmp_path / "ws"
    write(tmp_path, "out/data.txt", "OUTSIDE\n")
    root.mkdir()
    os.symlink(tmp_path / "out", root / "sneaky")
    report = collect_contents(root, ["sneaky/data.txt", "../out/data.txt"])
    assert report.file_contents == {}
    assert report.binary_files == ["sneaky/data.txt", "../out/data.txt"]


# ------------------------------------------------------------------------------------------- parallel diff


def _busy_tree(root: Path) -> None:
    for top in range(6):
        for sub in range(3):
            for i in range(10):
                write(root, f"top{top}/s{sub}/f{i}.txt", f"{top}{sub}{i}\n")
    write(root, "root.txt")


def _churn(root: Path) -> Changes:
    write(root, "top0/s0/f0.txt", "modified\n")
    write(root, "top5/s2/f9.txt", "also modified\n")
    (root / "top3/s1/f4.txt").unlink()

    shutil.rmtree(root / "top4/s0")
    write(root, "top2/new/deep.txt")
    write(root, "brand_new/x.txt")
    return changes(
        created=["brand_new/x.txt", "top2/new/deep.txt"],
        modified=["top0/s0/f0.txt", "top5/s2/f9.txt"],
        deleted=["top3/s1/f4.txt"] + [f"top4/s0/f{i}.txt" for i in range(10)],
    )


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_parallel_diff_matches_serial(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _busy_tree(tmp_path)
    before = take_snapshot(tmp_path, UNWATCHED)  # the forked helper is part of the full walk
    expected = _churn(tmp_path)
    assert not _parallel.parallel_ok(before, UNWATCHED)
    assert tracker.diff(before, UNWATCHED) == expected  # serial: below PARALLEL_MIN_FILES
    forks: list[object] = []
    real_fork_walk = _parallel._fork_walk

    def spy(walk, items):
        result = real_fork_walk(walk, items)
        forks.append(result)
        return result

    monkeypatch.setattr(_parallel, "_fork_walk", spy)
    assert _parallel.walk_full(before, UNWATCHED, forked=True) == expected
    assert len(forks) == 1 and forks[0] is not None


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_parallel_diff_falls_back_when_child_fails(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _busy_tree(tmp_path)
    before = take_snapshot(tmp_path, UNWATCHED)
    expected = _churn(tmp_path)
    joined: list[object] = []
    real_join = _parallel._join_child
    monkeypatch.setattr(_parallel, "_join_child", lambda child: joined.append(real_join(child)))
    assert _parallel.walk_full(before, UNWATCHED, forked=True) == expected
    assert len(joined) == 1 and joined[0] is not None  # the child did answer; its findings were dropped
    assert diff(before, UNWATCHED) == expected


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_fork_option_off_walks_in_process(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_parallel, "PARALLEL_MIN_FILES", 1)  # any tree is big enough
    _busy_tree(tmp_path)
    before = take_snapshot(tmp_path, UNWATCHED)
    expected = _churn(tmp_path)
    forks: list[object] = []
    real_fork_walk = _parallel._fork_walk

    def spy(walk, items):
        forks.append(real_fork_walk(walk, items))
        return forks[-1]

    monkeypatch.setattr(_parallel, "_fork_walk", spy)
    no_fork = replace(UNWATCHED, fork=False)
    assert not _parallel.parallel_ok(before, no_fork)
    assert diff(before, no_fork) == expected
    assert forks == []
    if sys.platform.startswith("linux") and len(os.sched_getaffinity(0)) >= 2:  # control: it would fork
        assert _parallel.parallel_ok(before, UNWATCHED)
        assert tracker.diff(before, UNWATCHED) == expected
        assert len(forks) == 1 and forks[0] is not None


def test_watch_option_off_walks_the_whole_tree_and_says_why(tmp_path: Path) -> None:
    write(tmp_path, "a.txt")
    with tracker.take_snapshot(tmp_path, UNWATCHED) as before:
        assert not before.watching and before.watcher is None
        assert "KIMI_MCP_TRACKER_WATCH" in (before.unwatched_reason or "")
        write(tmp_path, "b.txt")
        result = tracker.diff(before, UNWATCHED)
        assert result == changes(created=["b.txt"])
        assert result.method == "full" and result.reason == before.unwatched_reason


# ------------------------------------------------------------------------------- unchanged-directory path


def _scenario(root: Path) -> Changes:
    write(root, "d1/edit.txt", "two\n")  # in place: d1's own stat does not move
    write(root, "d1/same.txt", "same\n")  # rewritten, identical
    (root / "d2/gone.txt").unlink()
    write(root, "d3/new.txt")
    d4 = os.stat(root / "d4")
    write(root, "d4/sneaky.txt")  # directory mtime put back: ctime still moves
    os.utime(root / "d4", ns=(d4.st_atime_ns, d4.st_mtime_ns))
    return changes(created=["d3/new.txt", "d4/sneaky.txt"], modified=["d1/edit.txt"], deleted=["d2/gone.txt"])


@pytest.mark.parametrize("trust_dir_stat", [True, False])
def test_unchanged_directories_are_not_listed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, settled: None, trust_dir_stat: bool
) -> None:
    for rel in ("d1/edit.txt", "d1/same.txt", "d1/keep.txt", "d2/gone.txt", "d3/a.txt", "d4/b.txt"):
        write(tmp_path, rel, "one\n" if rel.endswith("edit.txt") else "same\n")
    write(tmp_path, "d5/deep/er/f.txt")
    options = replace(UNWATCHED, trust_dir_stat=trust_dir_stat)
    before = take_snapshot(tmp_path, options)  # the full walk's own shortcut (see test_tracker_watch)
    expected = _scenario(tmp_path)
    fast: list[str] = []
    real = _walk.DiffWalk._scan_unchanged_dir

    def spy(self, dir_fd, rel, old, stack):
        fast.append(rel)
        return real(self, dir_fd, rel, old, stack)

    monkeypatch.setattr(_walk.DiffWalk, "_scan_unchanged_dir", spy)
    assert tracker.diff(before, options) == expected
    if trust_dir_stat:
        assert sorted(fast) == ["", "d1", "d5", "d5/deep", "d5/deep/er"]
    else:
        assert fast == []


def test_racy_directory_is_always_listed(opts: TrackerOptions, tmp_path: Path) -> None:
    write(tmp_path, "d/a.txt")
    before = take_snapshot(tmp_path, opts)  # d was just created: its stat is not trusted
    assert before.tree.dirs["d"].stat is None
    write(tmp_path, "d/b.txt")
    assert diff(before, opts) == changes(created=["d/b.txt"])


def test_very_deep_tree(opts: TrackerOptions, tmp_path: Path) -> None:
    levels = [tmp_path]
    try:
        for _ in range(1100):  # deeper than the recursion limit (os.makedirs itself would recurse)
            levels.append(levels[-1] / "a")
            levels[-1].mkdir()
        deep = levels[-1].relative_to(tmp_path).as_posix()
        write(tmp_path, ".gitignore", "*.tmp\n")
        write(tmp_path, f"{deep}/a.txt")
        before = take_snapshot(tmp_path, opts)
        write(tmp_path, f"{deep}/b.txt")
        write(tmp_path, f"{deep}/c.tmp")
        assert diff(before, opts) == changes(created=[f"{deep}/b.txt"])
    finally:  # shutil.rmtree, and so pytest's tmp_path cleanup, recurses once per level
        for level in reversed(levels[1:]):
            for child in level.glob("*.*"):
                child.unlink()
            level.rmdir()


def test_hung_fork_child_is_killed_and_reaped() -> None:
    """A walker child that never answers must not hang diff(): it is killed and its part re-walked."""
    import os
    import time as _time

    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - child
        os.close(read_fd)
        _time.sleep(60)
        os._exit(0)
    os.close(write_fd)
    assert _parallel._join_child((pid, read_fd), timeout=0.5) is None  # (a hang would trip pytest-timeout)
    with pytest.raises(ChildProcessError):
        os.waitpid(pid, os.WNOHANG)  # already reaped by _join_child
