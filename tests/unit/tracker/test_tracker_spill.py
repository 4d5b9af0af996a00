"""The snapshot's per-file records in an anonymous temporary file (``_spill.py``): they round-trip, the file
has no name from the start and holds no descriptor once the snapshot is taken, reading does not grow the
resident set, nothing is left behind, and every way of not getting a file keeps the records in memory with
the same diff results."""

from __future__ import annotations

import errno
import gc
import os
import random
import sys
import tempfile
import tracemalloc
from pathlib import Path

import pytest
from tracker_helpers import DEFAULTS, changes, recorded, write
from xxhash import xxh3_64_intdigest

from kimi_mcp import tracker
from kimi_mcp.tracker import Changes, Snapshot, TrackerOptions, _parallel, _snapshot, _spill

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc and inotify: Linux")


IN_MEMORY = TrackerOptions(spill=False)
UNWATCHED = TrackerOptions(watch=False)


@pytest.fixture
def spill_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A temporary directory of the test's own, returned by ``tempfile.gettempdir()``."""
    path = tmp_path / "tmp"
    path.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(path))
    return path


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    path = tmp_path / "ws"
    path.mkdir()
    return path


@pytest.fixture
def small_flushes(monkeypatch: pytest.MonkeyPatch) -> None:
    """Write the file every few blocks, so a small tree goes through many flushes."""
    monkeypatch.setattr(_spill, "FLUSH_BYTES", 256)


def check(before: Snapshot, expected: Changes, method: str, options: TrackerOptions = DEFAULTS) -> None:
    result = tracker.diff(before, options)
    assert result == expected
    assert result.method == method, result.reason
    assert _parallel.walk_full(before, options) == expected


def _open_fds() -> set[str]:
    return set(os.listdir("/proc/self/fd"))


def _maps_mentioning(text: str) -> list[str]:
    with open("/proc/self/maps") as fh:
        return [line.rstrip("\n") for line in fh if text in line]


def _mapping_rss_kb(addr: int) -> int:
    """Resident kB of the mapping that contains ``addr`` (from /proc/self/smaps)."""
    inside = False
    with open("/proc/self/smaps") as fh:
        for line in fh:
            head = line.split(maxsplit=1)[0]
            if "-" in head and not head.endswith(":"):
                lo, hi = (int(x, 16) for x in head.split("-"))
                inside = lo <= addr < hi
            elif inside and head == "Rss:":
                return int(line.split()[1])
    raise AssertionError(f"no mapping at {addr:#x}")


def _tree(root: Path, dirs: int = 40, per_dir: int = 6) -> None:
    for d in range(dirs):
        for i in range(per_dir):
            write(root, f"pkg{d % 4}/mod{d}/f{i}.py", f"# {d}.{i}\n" * (i + 1))
    write(root, ".gitignore", "*.log\nbuild/\n")
    write(root, "pkg0/debug.log", "ignored\n")
    write(root, "build/out.o", b"\0\1")
    write(root, "node_modules/x/index.js", "excluded\n")
    write(root, "top.txt", "top\n")
    os.symlink("top.txt", root / "link")
    (root / "empty").mkdir()


def _churn(root: Path) -> Changes:
    write(root, "pkg1/mod1/f0.py", "edited\n")
    (root / "pkg2/mod2/f3.py").unlink()
    write(root, "pkg3/mod3/new.py")
    write(root, "fresh/deep/er/new.txt")
    write(root, "pkg0/also.log", "ignored\n")
    os.unlink(root / "link")
    os.symlink("pkg0", root / "link")  # retargeted
    return changes(
        created=["fresh/deep/er/new.txt", "pkg3/mod3/new.py"],
        modified=["link", "pkg1/mod1/f0.py"],
        deleted=["pkg2/mod2/f3.py"],
    )


# ------------------------------------------------------------------------------------- the file itself


def test_records_round_trip_through_an_unnamed_close_on_exec_file(
    ws: Path, spill_dir: Path, small_flushes: None
) -> None:
    gc.collect()
    fds = _open_fds()
    records = _spill.open_records(str(ws))
    assert records.on_disk and records.reason is None
    fd = records._file.fileno()
    assert not os.get_inheritable(fd)
    target = os.readlink(f"/proc/self/fd/{fd}")
    assert target.startswith(str(spill_dir)) and target.endswith("(deleted)")  # O_TMPFILE or unlinked at once
    assert os.listdir(spill_dir) == []

    rng = random.Random(7)
    blocks = [rng.randbytes(rng.randrange(0, 3000)) for _ in range(400)]
    offsets = [records.append(block) for block in blocks]
    assert offsets == [sum(map(len, blocks[:i])) for i in range(len(blocks))]
    with pytest.raises(ValueError, match="still being written"):
        records.read(0, 1)
    records.seal()
    assert _open_fds() == fds  # the descriptor is closed: the mapping keeps the file
    assert records.on_disk and len(records) == sum(map(len, blocks))
    (mapping,) = _maps_mentioning(str(spill_dir))
    assert mapping.endswith("(deleted)") and " r--s " in mapping
    for i in rng.sample(range(len(blocks)), len(blocks)):
        assert records.read(offsets[i], len(blocks[i])) == blocks[i]
    assert _mapping_rss_kb(records._addr) == 0  # read pages are dropped from the mapping again
    assert os.listdir(spill_dir) == []
    records.close()
    records.close()
    assert _maps_mentioning(str(spill_dir)) == []
    with pytest.raises(ValueError, match="released"):
        records.read(0, 1)


def test_snapshot_records_are_those_kept_in_memory(ws: Path, spill_dir: Path, settled: None) -> None:
    """The same tree snapshotted with its records spilled and in memory: identical records."""
    _tree(ws)
    undecodable = os.fsencode(ws) + b"/pkg1/caf\xe9.txt"  # not UTF-8: a lone surrogate in the name
    with open(undecodable, "wb") as fh:
        fh.write(b"latin-1\n")
    write(ws, "pkg1/naïve ☃.txt", "unicode\n")
    write(ws, "pkg1/new\nline.txt", "newline\n")
    with tracker.take_snapshot(ws) as spilled, tracker.take_snapshot(ws, IN_MEMORY) as kept:
        assert spilled.tree.records.on_disk and not kept.tree.records.on_disk
        assert "KIMI_MCP_TRACKER_SPILL" in (kept.tree.records.reason or "")
        assert len(spilled) == len(kept) == 40 * 6 + 6  # + .gitignore, top.txt, link and the three odd names
        assert spilled.tree.dirs.keys() == kept.tree.dirs.keys()
        for rel, record in spilled.tree.dirs.items():
            ours, theirs = spilled.tree.load(rel, record), kept.tree.load(rel, kept.tree.dirs[rel])
            for name in _FIELDS:
                assert list(getattr(ours, name)) == list(getattr(theirs, name)), (rel, name)
            assert record.stat == kept.tree.dirs[rel].stat is not None
    name = os.fsdecode(b"caf\xe9.txt")
    record = recorded(spilled, f"pkg1/{name}")
    st = os.lstat(undecodable)
    assert record == (st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino, xxh3_64_intdigest(b"latin-1\n"))
    assert recorded(spilled, "link").ident == -1 - xxh3_64_intdigest(b"top.txt")
    assert spilled.tree.load("pkg0", spilled.tree.dirs["pkg0"]).ign_files == {"debug.log"}
    assert spilled.tree.load("", spilled.tree.dirs[""]).ign_dirs == {"build"}
    assert spilled.tree.dirs["empty"].block == (0, 0, 0)  # nothing to record: no block
    write(ws, f"pkg1/{name}", "edited\n")
    write(ws, "pkg1/new\nline.txt", "edited\n")
    check(spilled, changes(modified=[f"pkg1/{name}", "pkg1/new\nline.txt"]), "full")


_FIELDS = ("names", "stats", "inodes", "hashes", "kinds", "subdirs", "ign_files", "ign_dirs")


def test_snapshot_holds_no_descriptor_and_leaves_nothing_behind(ws: Path, spill_dir: Path) -> None:
    _tree(ws)
    entries = sorted(os.listdir(ws))
    gc.collect()
    fds = _open_fds()
    before = tracker.take_snapshot(ws)
    assert before.tree.records.on_disk
    assert len(_open_fds() - fds) == 3  # only the watcher's: inotify and its wake-up pipe
    assert len(_maps_mentioning(str(spill_dir))) == 1 and os.listdir(spill_dir) == []
    assert sorted(os.listdir(ws)) == entries
    expected = _churn(ws)
    check(before, expected, "watched")
    before.close()
    assert _open_fds() == fds
    check(before, expected, "full")  # still usable: the records stay until the snapshot goes
    del before
    gc.collect()
    assert _maps_mentioning(str(spill_dir)) == [] and os.listdir(spill_dir) == []


def test_garbage_collection_releases_the_records(ws: Path, spill_dir: Path) -> None:
    _tree(ws)
    gc.collect()
    fds = _open_fds()
    before = tracker.take_snapshot(ws)
    assert _maps_mentioning(str(spill_dir))
    del before  # never closed
    gc.collect()
    assert _open_fds() == fds and _maps_mentioning(str(spill_dir)) == []


def test_failed_snapshot_releases_its_file(
    ws: Path, spill_dir: Path, small_flushes: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    _tree(ws)
    gc.collect()
    fds = _open_fds()
    real = _snapshot._snapshot_dir
    listed: list[str] = []

    def fail_late(dir_fd, rel, *args):
        listed.append(rel)
        if len(listed) > 20:  # after several blocks were written to the file
            raise RuntimeError("bug")
        real(dir_fd, rel, *args)

    monkeypatch.setattr(_snapshot, "_snapshot_dir", fail_late)
    with pytest.raises(RuntimeError):
        tracker.take_snapshot(ws)
    assert _open_fds() == fds and _maps_mentioning(str(spill_dir)) == []


def test_reading_records_does_not_grow_the_resident_set(
    ws: Path, spill_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _tree(ws, dirs=60, per_dir=60)  # ~180 kB of records
    no_fork = TrackerOptions(fork=False)
    with tracker.take_snapshot(ws, no_fork) as before:
        addr = before.tree.records._addr
        assert addr and _mapping_rss_kb(addr) == 0
        check(before, changes(), "watched", no_fork)
        _parallel.walk_full(before, no_fork)  # reads every block
        assert _mapping_rss_kb(addr) == 0
        # Control: without dropping the pages, the same reads would stay resident.
        monkeypatch.setattr(_spill, "_evict", lambda addr, size: None)
        _parallel.walk_full(before, no_fork)
        assert _mapping_rss_kb(addr) > 0


# ------------------------------------------------------------------------------------- fallback to memory


def _unusable_missing(tmp_path: Path, ws: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[str, str]:
    return str(tmp_path / "missing"), "no temporary file"


def _unusable_not_a_directory(tmp_path: Path, ws: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[str, str]:
    path = tmp_path / "a_file"
    path.write_text("")
    return str(path), "no temporary file"


def _unusable_read_only(tmp_path: Path, ws: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[str, str]:
    path = tmp_path / "read_only"
    path.mkdir(mode=0o500)
    if os.geteuid() == 0:  # root may write anyway: as on a read-only filesystem

        def read_only(*args: object, **kwargs: object) -> None:
            raise OSError(errno.EROFS, os.strerror(errno.EROFS))

        monkeypatch.setattr(tempfile, "TemporaryFile", read_only)
    return str(path), "no temporary file"


def _unusable_inside_the_workspace(
    tmp_path: Path, ws: Path, monkeypatch: pytest.MonkeyPatch
) -> tuple[str, str]:
    path = ws / "tmp"
    path.mkdir()
    return str(path), "inside the workspace"


def _unusable_the_workspace_itself(
    tmp_path: Path, ws: Path, monkeypatch: pytest.MonkeyPatch
) -> tuple[str, str]:
    return str(ws), "inside the workspace"


UNUSABLE = {
    f.__name__.removeprefix("_unusable_"): f
    for f in (
        _unusable_missing,
        _unusable_not_a_directory,
        _unusable_read_only,
        _unusable_inside_the_workspace,
        _unusable_the_workspace_itself,
    )
}


@pytest.mark.parametrize("watch", [True, False], ids=["watched", "full"])
@pytest.mark.parametrize("case", sorted(UNUSABLE))
def test_unusable_temporary_directory_keeps_records_in_memory(
    tmp_path: Path, ws: Path, monkeypatch: pytest.MonkeyPatch, case: str, watch: bool
) -> None:
    options = TrackerOptions(watch=watch)
    _tree(ws)
    directory, why = UNUSABLE[case](tmp_path, ws, monkeypatch)
    monkeypatch.setattr(tempfile, "tempdir", directory)
    logged: list[str] = []
    monkeypatch.setattr(_spill.log, "debug", lambda msg, *args: logged.append(msg % args))
    gc.collect()
    fds = _open_fds()
    with tracker.take_snapshot(ws, options) as before:
        assert not before.tree.records.on_disk and why in (before.tree.records.reason or "")
        assert logged and why in logged[0]
        check(before, _churn(ws), "watched" if watch else "full", options)
    assert _open_fds() == fds


def test_disabled_by_the_spill_option(ws: Path, spill_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    logged: list[str] = []
    monkeypatch.setattr(_spill.log, "debug", lambda msg, *args: logged.append(msg % args))
    _tree(ws)
    with tracker.take_snapshot(ws, IN_MEMORY) as before:
        assert not before.tree.records.on_disk and _maps_mentioning(str(spill_dir)) == []
        assert "KIMI_MCP_TRACKER_SPILL" in (before.tree.records.reason or "") and logged
        check(before, _churn(ws), "watched", IN_MEMORY)


@pytest.mark.parametrize("partial", [False, True], ids=["enospc", "short_write_then_enospc"])
def test_disk_full_while_snapshotting_keeps_records_in_memory(
    ws: Path, spill_dir: Path, small_flushes: None, monkeypatch: pytest.MonkeyPatch, partial: bool
) -> None:
    """ENOSPC after a few flushes: what was written is read back, the rest stays in memory."""
    _tree(ws)
    real = _spill._write_all
    calls: list[int] = []

    def fill_up(fd: int, data: bytes | bytearray) -> None:
        calls.append(len(data))
        if len(calls) <= 3:
            real(fd, data)
            return
        if partial:
            os.write(fd, bytes(data[: len(data) // 2]))  # a half-written flush must not be read back
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(_spill, "_write_all", fill_up)
    gc.collect()
    fds = _open_fds()
    with tracker.take_snapshot(ws) as before:
        assert len(calls) == 4
        assert not before.tree.records.on_disk and "No space left" in (before.tree.records.reason or "")
        assert _maps_mentioning(str(spill_dir)) == []
        check(before, _churn(ws), "watched")
    assert _open_fds() == fds


def test_mapping_failure_keeps_records_in_memory(
    ws: Path, spill_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def no_map(fd: int, size: int) -> int:
        raise OSError(errno.ENOMEM, os.strerror(errno.ENOMEM))

    monkeypatch.setattr(_spill, "_map", no_map)
    _tree(ws)
    gc.collect()
    fds = _open_fds()
    with tracker.take_snapshot(ws) as before:
        assert not before.tree.records.on_disk and "cannot be mapped" in (before.tree.records.reason or "")
        check(before, _churn(ws), "watched")
    assert _open_fds() == fds and _maps_mentioning(str(spill_dir)) == []


def test_empty_tree(ws: Path, spill_dir: Path) -> None:
    with tracker.take_snapshot(ws) as before:
        assert len(before) == 0 and not before.tree.records.on_disk
        write(ws, "a.txt")
        check(before, changes(created=["a.txt"]), "watched")


# ------------------------------------------------------------------------------------- diffs


@pytest.mark.parametrize("spill", [True, False], ids=["spilled", "in_memory"])
def test_diff_with_many_dirty_directories(
    ws: Path, spill_dir: Path, small_flushes: None, spill: bool
) -> None:
    options = TrackerOptions(spill=spill)
    for d in range(300):
        for i in range(4):
            write(ws, f"top{d % 7}/d{d}/f{i}.txt", f"{d}/{i}\n")
    with tracker.take_snapshot(ws, options) as before:
        assert before.tree.records.on_disk == spill
        created, modified, deleted = [], [], []
        for d in range(0, 300, 2):  # half the directories
            rel = f"top{d % 7}/d{d}"
            write(ws, f"{rel}/f0.txt", "edited, longer\n")
            modified.append(f"{rel}/f0.txt")
            if d % 3 == 0:
                (ws / rel / "f1.txt").unlink()
                deleted.append(f"{rel}/f1.txt")
            if d % 5 == 0:
                write(ws, f"{rel}/new.txt")
                write(ws, f"{rel}/sub/new.txt")
                created += [f"{rel}/new.txt", f"{rel}/sub/new.txt"]
        check(before, changes(created, modified, deleted), "watched", options)


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_forked_helper_reads_the_mapped_records(
    ws: Path, spill_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _tree(ws, dirs=80)
    forks: list[object] = []
    real_fork_walk = _parallel._fork_walk

    def spy(walk, items):
        forks.append(real_fork_walk(walk, items))
        return forks[-1]

    monkeypatch.setattr(_parallel, "_fork_walk", spy)
    with tracker.take_snapshot(ws, UNWATCHED) as before:
        assert before.tree.records.on_disk
        expected = _churn(ws)
        assert _parallel.walk_full(before, UNWATCHED, forked=True) == expected
        assert tracker.diff(before, UNWATCHED) == expected  # (too small to fork by itself)
    assert len(forks) == 1 and forks[0] is not None


def test_corrupted_records_are_an_error_not_a_wrong_diff(ws: Path) -> None:
    options = TrackerOptions(spill=False, watch=False)
    _tree(ws)
    with tracker.take_snapshot(ws, options) as before:
        offset, length, _ = before.tree.dirs["pkg1/mod1"].block
        before.tree.records._data[offset + length - 1] ^= 0xFF
        with pytest.raises(OSError, match="pkg1/mod1") as info:
            tracker.diff(before, options)
        assert info.value.errno == errno.EIO


def test_in_memory_part_is_small(ws: Path, spill_dir: Path) -> None:
    """The packed per-directory index is all a snapshot holds per directory: no per-file objects."""
    _tree(ws, dirs=50, per_dir=200)
    tracker.take_snapshot(ws, UNWATCHED).close()  # first-use caches
    gc.collect()
    tracemalloc.start()
    try:
        before = tracker.take_snapshot(ws, UNWATCHED)
        held, _ = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert len(before) > 10_000 and before.tree.records.on_disk
    assert held / len(before) < 5, held  # ~61 bytes per file when the records are in memory
    before.close()
