"""Small helpers shared by the tracker tests (test_tracker*, test_tracker_watch, test_tracker_spill)."""

from __future__ import annotations

from array import array
from pathlib import Path
from typing import NamedTuple

from xxhash import xxh3_64_intdigest

from kimi_mcp.tracker import Changes, Snapshot, TrackerOptions
from kimi_mcp.tracker._records import NO_FILES, DirRecord, encode_block

DEFAULTS = TrackerOptions()


def write(root: Path, rel: str, data: str | bytes = "x\n") -> Path:
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data.encode() if isinstance(data, str) else data)
    return path


def changes(created=(), modified=(), deleted=()) -> Changes:
    return Changes(sorted(created), sorted(modified), sorted(deleted))


class FileRecord(NamedTuple):
    """What a snapshot recorded for one tracked file."""

    size: int
    mtime_ns: int
    ctime_ns: int
    inode: int
    ident: int | None


def recorded(snapshot: Snapshot, relpath: str) -> FileRecord | None:
    """What ``snapshot`` recorded for a tracked file, None if it is not tracked."""
    rel, _, name = relpath.rpartition("/")
    record = snapshot.tree.dirs.get(rel)
    files = snapshot.tree.load(rel, record) if record is not None else NO_FILES
    if name not in files.names:
        return None
    j = files.names.index(name)
    return FileRecord(*files.stats[3 * j : 3 * j + 3], files.inodes[j], files.ident(j))


def rewrite_record(snapshot: Snapshot, relpath: str, **fields: int) -> None:
    """Change what ``snapshot`` recorded for a tracked file: ``size``, ``mtime_ns``, ``ctime_ns`` or ``inode``
    (simulates a filesystem whose timestamps do not move). Moves the records into memory."""
    rel, _, name = relpath.rpartition("/")
    tree = snapshot.tree
    record = tree.dirs[rel]
    files = tree.load(rel, record)
    j = files.names.index(name)
    stats, inodes = array("q", files.stats), array("Q", files.inodes)
    for key, value in fields.items():
        if key == "inode":
            inodes[j] = value
        else:
            stats[3 * j + ("size", "mtime_ns", "ctime_ns").index(key)] = value
    block = encode_block(
        files.names,
        stats,
        inodes,
        array("Q", files.hashes),
        bytearray(files.kinds),
        files.subdirs,
        files.ign_files,
        files.ign_dirs,
    )
    offset = tree.records.append(block)
    tree.dirs[rel] = DirRecord((offset, len(block), xxh3_64_intdigest(block)), record.count, record.stat)


def set_dir_stat(snapshot: Snapshot, rel: str, stat: tuple[int, int, int] | None) -> None:
    """Change the (mtime_ns, ctime_ns, inode) ``snapshot`` recorded for directory ``rel``."""
    record = snapshot.tree.dirs[rel]
    snapshot.tree.dirs[rel] = DirRecord(record.block, record.count, stat)
