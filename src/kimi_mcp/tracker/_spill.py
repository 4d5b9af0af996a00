"""Where a snapshot keeps its per-file records: an anonymous temporary file, mapped but not resident.

A snapshot of 100k files has ~6 MB of per-file records (names, stat fields, inodes, content hashes), and
``diff`` usually needs those of a few directories only. So ``take_snapshot`` appends them, one block per
directory, to a temporary file in ``tempfile.gettempdir()`` (never inside the tracked workspace) that has no
name from the start (``O_TMPFILE``, or created and unlinked at once by ``tempfile.TemporaryFile``) and is
close-on-exec: nothing can be left behind, whatever happens to the process. Blocks are written from a small
buffer, so the tree's records are never all in memory.

When the snapshot is complete the file is mapped read-only and its descriptor closed: a snapshot holds no
descriptor (Python's ``mmap`` would keep a duplicate open until 3.13's ``trackfd=False``, hence ``ctypes``).
The data lives in the kernel's page cache (reclaimable; written back to disk under memory pressure), not in
the process: ``read`` copies one block out of the mapping, then drops the mapping's page-table entries again
(``MADV_DONTNEED``), so the resident set does not grow with the blocks read. The mapping, and with it the
file, goes when the ``Records`` are garbage-collected. A read error of the temporary file's disk would come
as ``SIGBUS``, as with any mapped file; ``TrackerOptions.spill`` False (``KIMI_MCP_TRACKER_SPILL=false``)
keeps the records in memory instead.

The records also stay in memory (one ``bytearray`` as compact as the file, logged at debug) when the
temporary directory is unusable (missing, read-only, inside the workspace), when a write fails (``ENOSPC``:
what was written is read back), or when mapping fails.
"""

from __future__ import annotations

import ctypes
import mmap
import os
import tempfile
import weakref
from collections.abc import Callable
from typing import IO, NamedTuple

from .._logging import get_logger

__all__ = ["Records", "open_records"]

log = get_logger("tracker.spill")

FLUSH_BYTES = 128 * 1024
"""Blocks are written to the file once this much is pending (the only records the snapshot holds in memory)."""


class _LibC(NamedTuple):
    mmap: Callable[..., int | None]
    munmap: Callable[[int, int], int]
    madvise: Callable[[int, int, int], int]


def _load_libc() -> _LibC | None:
    """``mmap``, ``munmap`` and ``madvise`` from the C library, or None if they cannot be called."""
    if not hasattr(mmap, "MADV_DONTNEED"):  # pragma: no cover - not a POSIX platform
        return None
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        functions = _LibC(libc.mmap, libc.munmap, libc.madvise)
    except (OSError, AttributeError):  # pragma: no cover - not a POSIX C library
        return None
    c_void_p, c_size_t, c_int = ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int
    # off_t is a C long on LP64 and for the 32-bit `mmap` symbol alike; the offset is always 0 anyway.
    functions.mmap.argtypes = (c_void_p, c_size_t, c_int, c_int, c_int, ctypes.c_long)  # type: ignore[attr-defined]
    functions.mmap.restype = c_void_p  # type: ignore[attr-defined]
    functions.munmap.argtypes = (c_void_p, c_size_t)  # type: ignore[attr-defined]
    functions.munmap.restype = c_int  # type: ignore[attr-defined]
    functions.madvise.argtypes = (c_void_p, c_size_t, c_int)  # type: ignore[attr-defined]
    functions.madvise.restype = c_int  # type: ignore[attr-defined]
    return functions


_LIBC = _load_libc()
_MAP_FAILED = ctypes.c_void_p(-1).value


def _map(fd: int, size: int) -> int:
    """Address of a read-only shared mapping of the first ``size`` bytes of ``fd``."""
    if _LIBC is None:  # pragma: no cover - see _load_libc
        raise OSError("mmap cannot be called through ctypes")
    addr = _LIBC.mmap(None, size, mmap.PROT_READ, mmap.MAP_SHARED, fd, 0)
    if addr is None or addr == _MAP_FAILED:
        err = ctypes.get_errno()
        raise OSError(err, f"mmap: {os.strerror(err)}")
    return addr


def _unmap(addr: int, size: int) -> None:
    _LIBC.munmap(addr, size)  # type: ignore[union-attr]


def _evict(addr: int, size: int) -> None:
    """Drop the mapping's page-table entries (the pages stay in the page cache): the resident set does not
    grow with what was read. One system call (a few microseconds) whatever the size."""
    _LIBC.madvise(addr, size, mmap.MADV_DONTNEED)  # type: ignore[union-attr]


def _write_all(fd: int, data: bytes | bytearray) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def _read_all(fd: int, size: int) -> bytearray:
    data = bytearray()
    while len(data) < size:
        chunk = os.pread(fd, min(size - len(data), 1 << 20), len(data))
        if not chunk:
            raise OSError(f"the snapshot's temporary file is short: {len(data)} of {size} bytes")
        data += chunk
    return data


def _inside(path: str, root: str) -> bool:
    path, root = os.path.realpath(path), os.path.realpath(root)
    return path == root or path.startswith(root.rstrip(os.sep) + os.sep)


def open_records(workspace: str) -> Records:
    """Empty records for a snapshot of ``workspace``: in an anonymous temporary file, or in memory if none
    can be had (the reason is logged at debug and kept in ``Records.reason``)."""
    if _LIBC is None:  # pragma: no cover - see _load_libc
        return Records(None, "mmap cannot be called through ctypes")
    try:
        directory = tempfile.gettempdir()
    except OSError as exc:  # no usable candidate at all
        return Records(None, f"no temporary directory: {exc}")
    if _inside(directory, workspace):
        return Records(None, f"the temporary directory {directory!r} is inside the workspace")
    try:
        file = tempfile.TemporaryFile(dir=directory, prefix="kimi-mcp-snapshot-", buffering=0)  # noqa: SIM115
    except OSError as exc:
        return Records(None, f"no temporary file in {directory!r}: {exc}")
    return Records(file, None)


class Records:
    """Append-only byte blocks, addressed by ``(offset, length)``: written while a snapshot is taken,
    ``seal``ed once it is complete, then only read (from any thread, or a forked child).

    ``reason`` is None while the blocks go to (or are mapped from) the temporary file, else why they are in
    memory. ``close`` releases everything at once (a failed snapshot); otherwise the file goes with the
    object.
    """

    __slots__ = ("reason", "_file", "_pending", "_size", "_data", "_addr", "_unmapper", "__weakref__")

    def __init__(self, file: IO[bytes] | None, reason: str | None) -> None:
        self.reason = reason
        self._file = file  # while writing to the temporary file
        self._pending = bytearray()  # blocks not written to it yet
        self._size = 0  # bytes appended so far
        self._data: bytearray | None = None if file is not None else bytearray()  # the blocks, in memory
        self._addr = 0  # the sealed file's mapping
        self._unmapper: weakref.finalize | None = None
        if reason is not None:
            log.debug("tracker: snapshot records kept in memory (%s)", reason)

    def __len__(self) -> int:
        return self._size

    @property
    def on_disk(self) -> bool:
        """True if the blocks are in the temporary file (being written, or mapped)."""
        return self._file is not None or bool(self._addr)

    def append(self, block: bytes) -> int:
        """Add a block; returns its offset."""
        offset = self._size
        if self._addr:  # sealed: only tests and debugging add blocks afterwards
            self._to_memory("a block was added after sealing")
        self._size += len(block)
        if self._data is not None:
            self._data += block
            return offset
        self._pending += block
        if len(self._pending) >= FLUSH_BYTES:
            self._flush()
        return offset

    def seal(self) -> None:
        """No more blocks: map the temporary file and close its descriptor."""
        if self._file is None:
            return
        self._flush()
        if self._file is None:
            return
        if not self._size:
            self._to_memory("no records")
            return
        try:
            addr = _map(self._file.fileno(), self._size)
        except OSError as exc:
            self._to_memory(f"the temporary file cannot be mapped: {exc}")
            return
        self._addr = addr
        self._unmapper = weakref.finalize(self, _unmap, addr, self._size)
        self._unmapper.atexit = False  # a daemon thread may still read at exit: the process unmaps it
        self._close_file()

    def read(self, offset: int, length: int) -> bytes | bytearray:
        """A copy of the block at ``offset``."""
        if offset < 0 or length < 0 or offset + length > self._size:
            raise ValueError(f"no block at {offset}+{length} in {self._size} bytes of records")
        if self._addr:
            data = ctypes.string_at(self._addr + offset, length)
            _evict(self._addr, self._size)
            return data
        if self._data is None:
            if self._file is not None:
                raise ValueError("the snapshot's records are still being written")
            raise ValueError("the snapshot's records were released")
        return self._data[offset : offset + length]

    def close(self) -> None:
        """Release the file (or the memory) now, while no other thread reads (a failed snapshot). Idempotent;
        reading afterwards raises ValueError."""
        self._close_file()
        if self._unmapper is not None:
            self._unmapper()
        self._addr = 0
        self._data = None
        self._pending = bytearray()

    def _flush(self) -> None:
        if not self._pending or self._file is None:
            return
        try:
            _write_all(self._file.fileno(), self._pending)
        except OSError as exc:
            self._to_memory(f"writing the temporary file failed: {exc}")
            return
        self._pending.clear()

    def _to_memory(self, reason: str) -> None:
        """Move the blocks written so far into memory and let go of the file."""
        pending = self._pending
        on_file = self._size - len(pending)
        if self._addr:
            data = bytearray(ctypes.string_at(self._addr, on_file))
            self._unmapper()  # type: ignore[misc]
            self._addr = 0
        elif self._file is not None and on_file:
            try:
                data = _read_all(self._file.fileno(), on_file)  # nothing beyond what was fully written
            except OSError as exc:  # the records are lost: the snapshot cannot be completed
                raise RuntimeError(f"the snapshot's temporary file cannot be read back: {exc}") from exc
        else:
            data = bytearray()
        data += pending
        self._close_file()
        self._data = data
        self._pending = bytearray()
        self.reason = reason
        log.debug("tracker: snapshot records kept in memory (%s)", reason)

    def _close_file(self) -> None:
        file, self._file = self._file, None
        if file is not None:
            file.close()
