"""The tracker's inotify watcher: a watched diff gives exactly the full walk's result, and every way the
watcher can become untrustworthy falls back to the full walk (with the same result)."""

from __future__ import annotations

import contextlib
import errno
import fcntl
import gc
import os
import shutil
import struct
import subprocess
import sys
import termios
import threading
import time
from array import array
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path

import pytest
from tracker_helpers import DEFAULTS, changes, write

from kimi_mcp import tracker
from kimi_mcp.tracker import Changes, Snapshot, TrackerOptions, _parallel, _snapshot, _walk, _watch

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="inotify is Linux-only")

EXCLUDE_TARGET = TrackerOptions(extra_excluded_dirs=frozenset({"target"}))


def sh(root: Path, script: str) -> None:
    """Change the tree from another process, as Kimi does."""
    subprocess.run(["sh", "-ec", script], cwd=root, check=True)


@contextlib.contextmanager
def scans() -> Iterator[list[str]]:
    """Record the directories ``diff`` scans."""
    seen: list[str] = []
    real = _walk.DiffWalk.scan

    def spy(self: _walk.DiffWalk, rel: str, stack: list[str]) -> None:
        seen.append(rel)
        real(self, rel, stack)

    _walk.DiffWalk.scan = spy  # type: ignore[method-assign]
    try:
        yield seen
    finally:
        _walk.DiffWalk.scan = real  # type: ignore[method-assign]


def check(
    before: Snapshot,
    expected: Changes,
    method: str,
    options: TrackerOptions = DEFAULTS,
    scanned: list[str] | None = None,
) -> Changes:
    """diff() gives ``expected`` by ``method`` (the directories it scanned go to ``scanned``), and so does a
    full walk of the same snapshot."""
    with scans() as seen:
        result = tracker.diff(before, options)
    if scanned is not None:
        scanned.extend(seen)
    assert result == expected
    assert result.method == method, result.reason
    assert _parallel.walk_full(before, options) == expected
    return result


# ------------------------------------------------------------------------------------- equivalence


def _tree(root: Path) -> None:
    for rel in ("a/one.txt", "a/two.txt", "a/sub/deep.txt", "b/three.txt", "c/d/e/four.txt", "top.txt"):
        write(root, rel, f"{rel}\n")
    for i in range(5):
        write(root, f"quiet{i}/f.txt", f"{i}\n")  # never touched: must not be scanned by a watched diff
    write(root, "img.bin", bytes(range(256)) * 4)
    write(root, ".gitignore", "*.log\nbuild/\n")
    write(root, "build/out.o", b"\x00\x01")
    write(root, "a/debug.log", "log\n")
    write(root, "node_modules/pkg/index.js", "module.exports = 1\n")
    write(root, "target/debug/app", b"\x7fELF")
    os.symlink("top.txt", root / "link")


def _create_modify_delete(root: Path) -> Changes:
    write(root, "a/one.txt", "edited\n")
    (root / "b/three.txt").unlink()
    write(root, "b/new.txt")
    write(root, "img.bin", bytes(range(255, -1, -1)) * 4)  # binary, same size
    return changes(created=["b/new.txt"], modified=["a/one.txt", "img.bin"], deleted=["b/three.txt"])


def _nested_new_dirs(root: Path) -> Changes:
    write(root, "n1/n2/n3/leaf.py", "x = 1\n")
    write(root, "n1/top.py")
    write(root, "a/sub/more/inner.txt")
    write(root, "n1/n2/skip.log")  # ignored by the rules in force
    return changes(created=["a/sub/more/inner.txt", "n1/n2/n3/leaf.py", "n1/top.py"])


def _deleted_dirs(root: Path) -> Changes:
    shutil.rmtree(root / "c")
    shutil.rmtree(root / "a/sub")
    return changes(deleted=["a/sub/deep.txt", "c/d/e/four.txt"])


def _deleted_and_recreated_dir(root: Path) -> Changes:
    shutil.rmtree(root / "c/d")
    write(root, "c/d/e/four.txt", "c/d/e/four.txt\n")  # same content, new (unwatched) directories
    write(root, "c/d/e/five.txt")
    write(root, "c/d/f/six.txt")
    return changes(created=["c/d/e/five.txt", "c/d/f/six.txt"])


def _file_renamed_across_dirs(root: Path) -> Changes:
    os.rename(root / "a/two.txt", root / "b/two.txt")
    os.rename(root / "top.txt", root / "c/d/top.txt")
    return changes(
        created=["b/two.txt", "c/d/top.txt"], deleted=["a/two.txt", "top.txt"]
    )  # (the link now dangles: unchanged)


def _new_dir_renamed(root: Path) -> Changes:
    write(root, "fresh.tmp/x/y.txt")  # created after the snapshot, so unwatched: renaming it is harmless
    os.rename(root / "fresh.tmp", root / "fresh")
    return changes(created=["fresh/x/y.txt"])


def _same_size_same_mtime_edit(root: Path) -> Changes:
    path = root / "b/three.txt"
    st = path.stat()
    path.write_bytes(path.read_bytes().upper())
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    return changes(modified=["b/three.txt"])


def _identical_rewrite(root: Path) -> Changes:
    write(root, "a/one.txt", "a/one.txt\n")
    tmp = write(root, "b/three.txt.tmp", "b/three.txt\n")
    os.replace(tmp, root / "b/three.txt")
    os.chmod(root / "top.txt", 0o600)
    return changes()


def _gitignore_edited(root: Path) -> Changes:
    write(root, ".gitignore", "*.txt\n")  # tracked .txt files stay tracked; new ones are ignored
    write(root, "a/one.txt", "still reported\n")
    write(root, "a/new.txt")
    write(root, "a/new.log")  # no longer ignored
    write(root, "build/new.o")  # build/ was ignored at snapshot time: stays out
    write(root, "c/d/.gitignore", "*.md\n")
    write(root, "c/d/notes.md")
    return changes(created=["a/new.log", "c/d/.gitignore"], modified=[".gitignore", "a/one.txt"])


def _symlink_retarget(root: Path) -> Changes:
    (root / "link").unlink()
    os.symlink("a/one.txt", root / "link")
    os.symlink("../b/three.txt", root / "a/newlink")
    return changes(created=["a/newlink"], modified=["link"])


def _excluded_and_ignored(root: Path) -> Changes:
    write(root, "node_modules/pkg/index.js", "changed\n")
    write(root, "a/node_modules/x/y.js")
    write(root, "target/debug/app2", b"\x7f")
    write(root, "build/extra/z.o")
    write(root, "a/more.log")
    write(root, "c/d/e/target/out.bin")
    return changes()


def _type_changes(root: Path) -> Changes:
    (root / "b/three.txt").unlink()
    write(root, "b/three.txt/inside.txt")  # file -> directory
    shutil.rmtree(root / "c/d/e")
    write(root, "c/d/e", "now a file\n")  # directory -> file
    return changes(created=["b/three.txt/inside.txt", "c/d/e"], deleted=["b/three.txt", "c/d/e/four.txt"])


def _from_a_shell(root: Path) -> Changes:
    sh(
        root,
        "printf 'edited\\n' >> a/one.txt; rm b/three.txt; mkdir -p s/t; echo hi > s/t/u.txt;"
        " mv a/two.txt c/two.txt; rm -r a/sub; ln -sf b link",
    )
    return changes(
        created=["c/two.txt", "s/t/u.txt"],
        modified=["a/one.txt", "link"],
        deleted=["a/sub/deep.txt", "a/two.txt", "b/three.txt"],
    )


SCENARIOS: dict[str, Callable[[Path], Changes]] = {
    f.__name__.lstrip("_"): f
    for f in (
        _create_modify_delete,
        _nested_new_dirs,
        _deleted_dirs,
        _deleted_and_recreated_dir,
        _file_renamed_across_dirs,
        _new_dir_renamed,
        _same_size_same_mtime_edit,
        _identical_rewrite,
        _gitignore_edited,
        _symlink_retarget,
        _excluded_and_ignored,
        _type_changes,
        _from_a_shell,
    )
}


@pytest.mark.parametrize("watch", [True, False], ids=["watched", "full"])
@pytest.mark.parametrize("name", list(SCENARIOS))
def test_scenario_same_result_watched_or_not(tmp_path: Path, settled: None, name: str, watch: bool) -> None:
    options = replace(EXCLUDE_TARGET, watch=watch)
    _tree(tmp_path)
    with tracker.take_snapshot(tmp_path, options) as before:
        assert before.watching is watch
        expected = SCENARIOS[name](tmp_path)
        scanned: list[str] = []
        check(before, expected, "watched" if watch else "full", options, scanned)
        if watch:
            assert not any(rel.startswith("quiet") for rel in scanned)


def test_clean_directories_are_not_touched(tmp_path: Path) -> None:
    _tree(tmp_path)
    with tracker.take_snapshot(tmp_path) as before:
        write(tmp_path, "a/one.txt", "edited\n")
        write(tmp_path, "n/m/new.txt")
        with scans() as scanned:
            result = tracker.diff(before)
    assert result == changes(created=["n/m/new.txt"], modified=["a/one.txt"])
    assert result.method == "watched" and result.reason is None
    assert sorted(scanned) == ["", "a", "n", "n/m"]  # "" saw n/ created; n and n/m are new


def test_no_change_scans_nothing(tmp_path: Path) -> None:
    _tree(tmp_path)
    with tracker.take_snapshot(tmp_path) as before:
        scanned: list[str] = []
        check(before, changes(), "watched", scanned=scanned)
        assert scanned == []


def test_write_right_after_a_directory_was_listed_is_seen(
    tmp_path: Path, settled: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The watch is in place before the listing: a change in the window after it leaves an event."""
    path = write(tmp_path, "d/f.txt", "aaaa\n")
    st = path.stat()
    real = _snapshot._snapshot_dir

    def then_edit(dir_fd, rel, *args):
        real(dir_fd, rel, *args)
        if rel == "d":  # listed and hashed; the rest of the snapshot is still to come
            path.write_bytes(b"bbbb\n")
            os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))

    monkeypatch.setattr(_snapshot, "_snapshot_dir", then_edit)
    with tracker.take_snapshot(tmp_path) as before:
        monkeypatch.setattr(_snapshot, "_snapshot_dir", real)
        check(before, changes(modified=["d/f.txt"]), "watched")


def test_hard_linked_file_written_through_its_other_name(tmp_path: Path, settled: None) -> None:
    """Such a write leaves no event in the tracked directory: directories with multi-link files are always
    scanned."""
    root = tmp_path / "ws"
    write(root, "d/linked.txt", "aaaa\n")
    write(root, "e/plain.txt")
    os.link(root / "d/linked.txt", tmp_path / "outside.txt")
    with tracker.take_snapshot(root) as before:
        assert before.tree.rescan == {"d"}
        with open(tmp_path / "outside.txt", "r+b") as fh:
            fh.write(b"bb")
        scanned: list[str] = []
        check(before, changes(modified=["d/linked.txt"]), "watched", scanned=scanned)
        assert scanned == ["d"]


def test_file_linked_after_the_snapshot_falls_back(tmp_path: Path, settled: None) -> None:
    """A write through a new name leaves no event in the original's directory: a new file with other
    names makes the diff walk the whole tree."""
    write(tmp_path, "a/f.txt", "aaaa\n")
    write(tmp_path, "b/g.txt")
    with tracker.take_snapshot(tmp_path) as before:
        assert before.tree.rescan == frozenset()
        os.link(tmp_path / "a/f.txt", tmp_path / "b/f_link.txt")
        with open(tmp_path / "b/f_link.txt", "r+b") as fh:
            fh.write(b"bb")
        result = check(before, changes(created=["b/f_link.txt"], modified=["a/f.txt"]), "full")
        assert "hard links" in (result.reason or "")


def test_skipped_directory_is_walked_as_new(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A directory that vanished (or could not be watched) during the snapshot is not in it; its parent is
    always scanned so the diff finds it again, as the full walk does."""
    write(tmp_path, "p/q/r.txt")
    write(tmp_path, "p/s.txt")
    real = _watch.INotify.add_watch

    def flaky(self, path, mask):
        if os.fsdecode(path).endswith("/p/q"):
            raise OSError(errno.ENOENT, "gone")
        return real(self, path, mask)

    monkeypatch.setattr(_watch.INotify, "add_watch", flaky)
    with tracker.take_snapshot(tmp_path) as before:
        monkeypatch.setattr(_watch.INotify, "add_watch", real)
        assert before.watching and "p/q" not in before.tree.dirs and before.tree.rescan == {"p"}
        check(before, changes(created=["p/q/r.txt"]), "watched")


def test_diff_twice_and_snapshot_not_consumed(tmp_path: Path) -> None:
    _tree(tmp_path)
    with tracker.take_snapshot(tmp_path) as before:
        write(tmp_path, "a/new.txt")
        check(before, changes(created=["a/new.txt"]), "watched")
        (tmp_path / "a/new.txt").unlink()
        write(tmp_path, "b/later.txt")
        check(before, changes(created=["b/later.txt"]), "watched")
        assert before.watching  # diff does not close it


# ------------------------------------------------------------------------------------- fallbacks


def test_queue_overflow_falls_back(tmp_path: Path) -> None:
    _tree(tmp_path)
    with tracker.take_snapshot(tmp_path) as before:
        expected = _create_modify_delete(tmp_path)
        watcher = before.watcher
        assert watcher is not None
        with watcher._lock:  # as the kernel reports it: wd -1, IN_Q_OVERFLOW
            watcher._note(struct.pack("iIII", -1, _watch._OVERFLOW, 0, 0))
        result = check(before, expected, "full")
        assert "overflow" in (result.reason or "")
        assert not before.watching


def test_real_queue_overflow_without_draining(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """With the drain thread stopped, more events than the kernel queue holds overflow it."""
    limit = int(Path("/proc/sys/fs/inotify/max_queued_events").read_text())
    if limit > 20_000:
        pytest.skip("queue too large to overflow quickly")
    write(tmp_path, "d/seed.txt")
    monkeypatch.setattr(_watch.Watcher, "_run", lambda self: None)  # no drain thread
    with tracker.take_snapshot(tmp_path) as before:
        n = limit // 2 + 100  # create + modify + close_write each: ~1.5x the queue
        sh(tmp_path, f"cd d; i=0; while [ $i -lt {n} ]; do echo $i > f$i; i=$((i+1)); done")
        result = check(before, changes(created=[f"d/f{i}" for i in range(n)]), "full")
        assert "overflow" in (result.reason or "")


def test_drain_thread_keeps_the_queue_from_overflowing(tmp_path: Path) -> None:
    """More events than the kernel queue holds, in bursts: the thread empties the queue between them."""
    limit = int(Path("/proc/sys/fs/inotify/max_queued_events").read_text())
    if limit > 20_000:
        pytest.skip("queue too large")
    write(tmp_path, "d/seed.txt")
    with tracker.take_snapshot(tmp_path) as before:
        watcher = before.watcher
        assert watcher is not None
        per_burst = limit // 6  # files; three events each: half a queue per burst
        names = []
        for burst in range(3):
            first = burst * per_burst
            sh(
                tmp_path,
                f"cd d; i={first}; while [ $i -lt {first + per_burst} ]; do echo $i > f$i; i=$((i+1)); done",
            )
            names += [f"d/f{i}" for i in range(first, first + per_burst)]
            _wait_until_drained(watcher)
        check(before, changes(created=names), "watched")


def _wait_until_drained(watcher: _watch.Watcher) -> None:
    pending = array("i", [0])
    for _ in range(1000):  # bounded: up to ~10 s on a very loaded machine
        fcntl.ioctl(watcher._fd, termios.FIONREAD, pending)
        if pending[0] == 0 and watcher._dirty:
            return
        time.sleep(0.01)
    raise AssertionError("the drain thread did not read the queue")


def test_watched_directory_renamed_falls_back(tmp_path: Path) -> None:
    _tree(tmp_path)
    with tracker.take_snapshot(tmp_path) as before:
        os.rename(tmp_path / "c", tmp_path / "c2")
        write(tmp_path, "a/one.txt", "edited\n")
        result = check(
            before,
            changes(created=["c2/d/e/four.txt"], modified=["a/one.txt"], deleted=["c/d/e/four.txt"]),
            "full",
        )
        assert "moved" in (result.reason or "")


def test_watched_directory_moved_into_new_directory_falls_back(tmp_path: Path) -> None:
    _tree(tmp_path)
    with tracker.take_snapshot(tmp_path) as before:
        (tmp_path / "new").mkdir()
        os.rename(tmp_path / "a/sub", tmp_path / "new/sub")
        check(before, changes(created=["new/sub/deep.txt"], deleted=["a/sub/deep.txt"]), "full")


def test_root_replaced_falls_back(tmp_path: Path) -> None:
    root = tmp_path / "ws"
    write(root, "f.txt", "one\n")
    with tracker.take_snapshot(root) as before:
        os.rename(root, tmp_path / "old")
        write(root, "f.txt", "two\n")
        result = check(before, changes(modified=["f.txt"]), "full")
        assert result.reason


def test_root_symlink_retargeted_falls_back(tmp_path: Path) -> None:
    write(tmp_path, "one/f.txt", "one\n")
    write(tmp_path, "two/f.txt", "two\n")
    os.symlink("one", tmp_path / "ws")
    with tracker.take_snapshot(tmp_path / "ws") as before:
        (tmp_path / "ws").unlink()
        os.symlink("two", tmp_path / "ws")
        result = check(before, changes(modified=["f.txt"]), "full")
        assert "replaced" in (result.reason or "")


def test_unreadable_dirty_directory_falls_back(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _tree(tmp_path)
    with tracker.take_snapshot(tmp_path) as before:
        write(tmp_path, "b/new.txt")
        real = _walk.open_dir

        def denied(root: str, rel: str) -> int:
            if rel == "b":
                raise PermissionError(errno.EACCES, "denied")
            return real(root, rel)

        monkeypatch.setattr(_walk, "open_dir", denied)
        result = check(before, changes(), "full")  # as the full walk reports it: nothing under b/
        assert "could not be read" in (result.reason or "")


def test_watch_limit_falls_back(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """ENOSPC after a few watches (the user's watch limit): the watcher is closed, diff walks."""
    _tree(tmp_path)
    real = _watch.INotify.add_watch
    calls = []

    def limited(self, path, mask):
        calls.append(path)
        if len(calls) > 3:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real(self, path, mask)

    monkeypatch.setattr(_watch.INotify, "add_watch", limited)
    fds = _open_fds()
    before = tracker.take_snapshot(tmp_path)
    assert not before.watching and "inotify_add_watch" in (before.unwatched_reason or "")
    assert _open_fds() == fds  # the instance was closed as soon as watching was given up
    result = check(before, _create_modify_delete(tmp_path), "full")
    assert "inotify_add_watch" in (result.reason or "")
    before.close()


def test_watch_budget_falls_back(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _tree(tmp_path)
    monkeypatch.setattr(_watch, "_watch_budget", lambda: 4)
    with tracker.take_snapshot(tmp_path) as before:
        assert not before.watching and "directories to watch" in (before.unwatched_reason or "")
        check(before, _create_modify_delete(tmp_path), "full")


def test_no_inotify_instance_left(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def emfile(*args, **kwargs):
        raise OSError(errno.EMFILE, os.strerror(errno.EMFILE))

    monkeypatch.setattr(_watch, "INotify", emfile)
    _tree(tmp_path)
    with tracker.take_snapshot(tmp_path) as before:
        assert not before.watching and "inotify_init1" in (before.unwatched_reason or "")
        check(before, _create_modify_delete(tmp_path), "full")


def test_inotify_unavailable(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_watch, "INotify", None)  # as after a failed import, or on another platform
    _tree(tmp_path)
    with tracker.take_snapshot(tmp_path) as before:
        assert not before.watching
        check(before, _create_modify_delete(tmp_path), "full")


def test_same_directory_twice_falls_back(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Two paths to one directory (a bind mount) share a watch: the wd -> path map would be ambiguous."""
    _tree(tmp_path)
    real = _watch.INotify.add_watch
    monkeypatch.setattr(_watch.INotify, "add_watch", lambda self, path, mask: real(self, tmp_path, mask))
    with tracker.take_snapshot(tmp_path) as before:
        assert not before.watching and "same directory" in (before.unwatched_reason or "")
        check(before, _create_modify_delete(tmp_path), "full")


def test_kill_switch(tmp_path: Path) -> None:
    _tree(tmp_path)
    fds = _open_fds()
    with tracker.take_snapshot(tmp_path, TrackerOptions(watch=False)) as before:
        assert _open_fds() == fds
        result = check(before, _create_modify_delete(tmp_path), "full")
        assert "KIMI_MCP_TRACKER_WATCH" in (result.reason or "")


# ------------------------------------------------------------------------------------- resources


def _open_fds() -> set[str]:
    return set(os.listdir("/proc/self/fd"))


def _watch_threads() -> int:
    return sum(t.name == "kimi-tracker-watch" for t in threading.enumerate())


def test_close_releases_everything_and_is_idempotent(tmp_path: Path) -> None:
    _tree(tmp_path)
    gc.collect()
    fds, threads = _open_fds(), _watch_threads()
    before = tracker.take_snapshot(tmp_path)
    assert before.watching and _watch_threads() == threads + 1
    assert len(_open_fds() - fds) == 3  # the inotify instance and the drain thread's wake-up pipe
    check(before, _create_modify_delete(tmp_path), "watched")
    assert before.watching  # diff does not close it
    before.close()
    before.close()
    assert not before.watching
    assert _open_fds() == fds and _watch_threads() == threads
    write(tmp_path, "a/later.txt")
    expected = changes(
        created=["a/later.txt", "b/new.txt"], modified=["a/one.txt", "img.bin"], deleted=["b/three.txt"]
    )
    result = check(before, expected, "full")  # still usable: full walk
    assert result.reason == "closed"


def test_context_manager_and_garbage_collection_close(tmp_path: Path) -> None:
    _tree(tmp_path)
    gc.collect()
    fds, threads = _open_fds(), _watch_threads()
    with tracker.take_snapshot(tmp_path) as before:
        assert before.watching
    assert _open_fds() == fds and _watch_threads() == threads
    before = tracker.take_snapshot(tmp_path)
    assert before.watching
    del before
    gc.collect()
    assert _open_fds() == fds and _watch_threads() == threads


def test_snapshot_taken_in_another_thread(tmp_path: Path) -> None:
    """As in the runner: snapshot in a worker thread, diff and close in another."""
    _tree(tmp_path)
    fds = _open_fds()
    box: list[Snapshot] = []
    worker = threading.Thread(target=lambda: box.append(tracker.take_snapshot(tmp_path)))
    worker.start()
    worker.join()
    with box.pop() as before:
        check(before, _create_modify_delete(tmp_path), "watched")
    assert _open_fds() == fds


def test_inotify_descriptor_is_close_on_exec_and_non_blocking(tmp_path: Path) -> None:
    write(tmp_path, "f.txt")
    with tracker.take_snapshot(tmp_path) as before:
        watcher = before.watcher
        assert watcher is not None
        assert not os.get_inheritable(watcher._fd)
        assert fcntl.fcntl(watcher._fd, fcntl.F_GETFL) & os.O_NONBLOCK
        for fd in watcher._wake:
            assert not os.get_inheritable(fd)


def test_failed_snapshot_closes_its_watcher(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    write(tmp_path, "d/f.txt")
    fds = _open_fds()

    def boom(*args):
        raise RuntimeError("bug")

    monkeypatch.setattr(_snapshot, "_snapshot_dir", boom)
    with pytest.raises(RuntimeError):
        tracker.take_snapshot(tmp_path)
    assert _open_fds() == fds


def test_close_from_the_drain_thread_does_not_deadlock(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A garbage collection inside the drain thread may run the snapshot's finalizer there."""
    write(tmp_path, "d/f.txt")
    real_note = _watch.Watcher._note

    def note_then_close(self: _watch.Watcher, data: bytes) -> None:
        real_note(self, data)
        self.close()  # from the drain thread, holding the lock

    monkeypatch.setattr(_watch.Watcher, "_note", note_then_close)
    fds = _open_fds()
    before = tracker.take_snapshot(tmp_path)
    watcher = before.watcher
    assert watcher is not None
    thread = watcher._thread
    assert thread is not None
    write(tmp_path, "d/g.txt")
    thread.join(timeout=30)
    assert not thread.is_alive() and not before.watching
    before.close()
    assert _open_fds() == fds
    check(before, changes(created=["d/g.txt"]), "full")
