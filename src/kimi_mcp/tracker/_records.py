"""The record format of a snapshot: a packed ``DirRecord`` per directory, a block of ``Files`` per directory.

The ``DirRecord`` stays in memory; the block of per-file records goes to the snapshot's ``Records``
(``_spill``) and is read back as ``Files`` when ``diff`` needs it.

Memory: what is per tracked file (its name, size/mtime/ctime, inode, content hash and a kind byte: about 61
bytes, 6 MB for 100k files) is not kept in memory. ``take_snapshot`` encodes each directory's records into one
block as soon as the directory is listed and appends it to the ``Records`` (an anonymous temporary file,
mapped once the snapshot is complete; see ``_spill``). In memory stays a ``DirRecord`` per directory (where
its block is, its xxh3 checksum, its file count and stat: a few bytes per file on a typical tree). ``diff``
reads back the blocks of the directories it re-examines (the watched diff: the dirty ones; the full walk,
and its forked helper: each directory as it gets there) and checks them. The ``Records`` go when the
snapshot is garbage-collected (``Snapshot.close()`` only stops watching: ``diff`` still works after it).
"""

from __future__ import annotations

import errno
import struct
from array import array
from collections.abc import Iterable
from dataclasses import dataclass

from pathspec import GitIgnoreSpec
from xxhash import xxh3_64_intdigest

from ._spill import Records

__all__ = [
    "KIND_FILE",
    "KIND_LINK",
    "KIND_UNKNOWN",
    "NO_FILES",
    "DirRecord",
    "Files",
    "Tree",
    "TreeBuilder",
    "encode_block",
]

KIND_FILE, KIND_LINK, KIND_UNKNOWN = 0, 1, 2  # what a file's hash field holds

# A directory in memory: its block's offset, length, checksum; tracked files; mtime_ns, ctime_ns, inode; stat known.
_DIR = struct.Struct("=QQQIqqQ?")
_BLOCK = struct.Struct("=IIII")  # tracked files, subdirectories, ignored files, ignored directories

_EMPTY: frozenset[str] = frozenset()


class DirRecord:
    """One walked directory of a snapshot, as held in memory: where its records are (a block of the
    snapshot's ``Records``, with its xxh3 checksum), how many tracked files they describe, and the
    directory's own ``stat``. Immutable, packed into one bytes object: about 220 bytes per directory, with
    its dict entry and key."""

    __slots__ = ("_packed",)

    def __init__(self, block: tuple[int, int, int], count: int, stat: tuple[int, int, int] | None) -> None:
        self._packed = _DIR.pack(*block, count, *(stat or (0, 0, 0)), stat is not None)

    @property
    def block(self) -> tuple[int, int, int]:
        """``(offset, length, checksum)`` of the directory's records; length 0 if it has none."""
        return _DIR.unpack_from(self._packed)[:3]  # type: ignore[return-value]

    @property
    def count(self) -> int:
        """Tracked files in the directory."""
        return _DIR.unpack_from(self._packed)[3]

    @property
    def stat(self) -> tuple[int, int, int] | None:
        """(mtime_ns, ctime_ns, inode) taken before listing; None if racy."""
        *_, mtime, ctime, inode, known = _DIR.unpack(self._packed)
        return (mtime, ctime, inode) if known else None


def _frozen(names: list[str]) -> frozenset[str]:
    return frozenset(names) if names else _EMPTY


class Files:
    """A directory's records, read back from its block: the tracked files' ``names`` and, slot by slot, their
    ``stats`` (size, -1 if racy: always re-hash; mtime_ns; ctime_ns), ``inodes``, ``hashes`` and ``kinds``
    (see ``ident``); the ``subdirs`` walked, and the entries found ignored at snapshot time."""

    __slots__ = ("names", "stats", "inodes", "hashes", "kinds", "subdirs", "ign_files", "ign_dirs")

    def __init__(self, block: bytes | bytearray) -> None:
        n, n_sub, n_ign_files, n_ign_dirs = _BLOCK.unpack_from(block)
        view = memoryview(block)
        start = _BLOCK.size
        self.stats = view[start : start + 24 * n].cast("q")
        start += 24 * n
        self.inodes = view[start : start + 8 * n].cast("Q")
        start += 8 * n
        self.hashes = view[start : start + 8 * n].cast("Q")
        start += 8 * n
        self.kinds = view[start : start + n]
        text = str(view[start + n :], "utf-8", "surrogatepass")
        strings = text.split("\0") if text else []
        self.names = strings[:n]
        end = n + n_sub
        self.subdirs = _frozen(strings[n:end])
        self.ign_files = _frozen(strings[end : end + n_ign_files])
        self.ign_dirs = _frozen(strings[end + n_ign_files : end + n_ign_files + n_ign_dirs])

    def ident(self, j: int) -> int | None:
        """The content identity (``_fs.ident``) recorded for slot ``j``."""
        kind = self.kinds[j]
        if kind == KIND_FILE:
            return self.hashes[j]
        if kind == KIND_LINK:
            return -1 - self.hashes[j]
        return None


def encode_block(
    names: list[str],
    stats: array,
    inodes: array,
    hashes: array,
    kinds: bytearray,
    subdirs: Iterable[str],
    ign_files: Iterable[str],
    ign_dirs: Iterable[str],
) -> bytes:
    """A directory's records (see ``Files``): counts, then the fixed-size fields column by column, then the
    names, NUL-separated UTF-8 (lone surrogates from undecodable names round-trip)."""
    subdirs, ign_files, ign_dirs = list(subdirs), list(ign_files), list(ign_dirs)
    text = "\0".join([*names, *subdirs, *ign_files, *ign_dirs]).encode("utf-8", "surrogatepass")
    counts = _BLOCK.pack(len(names), len(subdirs), len(ign_files), len(ign_dirs))
    return b"".join((counts, stats, inodes, hashes, kinds, text))


NO_FILES = Files(_BLOCK.pack(0, 0, 0, 0))
"""The records of a directory that has none (or is new)."""


@dataclass(frozen=True, slots=True, eq=False)  # compared by identity, never hashed by content
class Tree:
    """What a snapshot recorded: ``dirs`` (relative path -> ``DirRecord``; "" is the root), the ``records``
    they point into, the number of tracked ``files``, the directories the watcher cannot vouch for
    (``rescan``: always scanned), the root's ``(device, inode)`` and the compiled ignore files by content
    (``spec_cache``, shared with the diff's ignore rules)."""

    dirs: dict[str, DirRecord]
    records: Records
    files: int
    rescan: frozenset[str]
    root_id: tuple[int, int]
    spec_cache: dict[bytes, GitIgnoreSpec | None]

    def load(self, rel: str, record: DirRecord) -> Files:
        """The records of directory ``rel``, read back and checked."""
        offset, length, checksum = record.block
        if not length:
            return NO_FILES
        block = self.records.read(offset, length)
        if xxh3_64_intdigest(block) != checksum:
            raise OSError(errno.EIO, f"the snapshot's records of directory {rel!r} read back corrupted")
        return Files(block)


class TreeBuilder:
    """Accumulates a ``Tree`` while walking: directory records go to ``records`` as each is listed."""

    __slots__ = ("dirs", "records", "files", "rescan", "root_id")

    def __init__(self, records: Records, root_id: tuple[int, int]) -> None:
        self.dirs: dict[str, DirRecord] = {}
        self.records = records
        self.files = 0
        self.rescan: set[str] = set()
        self.root_id = root_id

    def add_dir(
        self,
        rel: str,
        files: tuple[list[str], array, array, array, bytearray],
        subdirs: list[str],
        ign_files: list[str],
        ign_dirs: list[str],
        stat: tuple[int, int, int] | None,
    ) -> None:
        names = files[0]
        where = (0, 0, 0)
        if names or subdirs or ign_files or ign_dirs:
            block = encode_block(*files, subdirs, ign_files, ign_dirs)
            where = (self.records.append(block), len(block), xxh3_64_intdigest(block))
        self.dirs[rel] = DirRecord(where, len(names), stat)
        self.files += len(names)

    def always_scan(self, rel: str) -> None:
        """The watcher cannot vouch for ``rel`` (it holds an unreadable or multiply-linked file)."""
        self.rescan.add(rel)

    def skipped(self, rel: str) -> None:
        """``rel`` could not be watched or walked: it is not in the snapshot, so ``diff`` walks it as new,
        and its parent (which lists it as a subdirectory) is always scanned to get there."""
        self.rescan.add(rel.rpartition("/")[0])

    def build(self, spec_cache: dict[bytes, GitIgnoreSpec | None]) -> Tree:
        return Tree(self.dirs, self.records, self.files, frozenset(self.rescan), self.root_id, spec_cache)
