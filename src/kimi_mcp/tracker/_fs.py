"""File-system primitives: open without following symlinks, and a file's content identity (xxh3-64).

POSIX only (directory file descriptors, ``O_NOFOLLOW``).
"""

from __future__ import annotations

import os
import stat as stat_mod

from xxhash import xxh3_64, xxh3_64_intdigest

__all__ = ["CHUNK", "UNTRACKABLE", "dir_id", "ident", "open_dir", "open_file"]

CHUNK = 1 << 20
"""Read size for hashing files and for pipes."""

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | getattr(os, "O_CLOEXEC", 0)
_SUBDIR_FLAGS = _DIR_FLAGS | getattr(os, "O_NOFOLLOW", 0)
# O_NONBLOCK: a file swapped for a FIFO between stat and open must not block us.
_FILE_FLAGS = os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
_O_NOATIME = getattr(os, "O_NOATIME", 0)
_S_ISREG = stat_mod.S_ISREG
_S_ISLNK = stat_mod.S_ISLNK

UNTRACKABLE = object()
"""What ``ident`` returns for something that is neither a regular file nor a symlink."""


def open_dir(root: str, rel: str) -> int:
    """fd of ``root/rel``; the root may be a symlink, nothing below it may."""
    if not rel:
        return os.open(root, _DIR_FLAGS)
    return os.open(os.path.join(root, rel), _SUBDIR_FLAGS)


def open_file(path: str, dir_fd: int | None = None) -> int:
    """Open for reading without following a final symlink, blocking on a FIFO or touching atime."""
    if _O_NOATIME:
        try:
            return os.open(path, _FILE_FLAGS | _O_NOATIME, dir_fd=dir_fd)
        except PermissionError:  # O_NOATIME needs ownership of the file
            pass
    return os.open(path, _FILE_FLAGS, dir_fd=dir_fd)


def _hash_file(dir_fd: int, name: str, size: int) -> int | None:
    try:
        fd = open_file(name, dir_fd)
    except OSError:
        return None
    try:
        want = size + 1 if size < CHUNK else CHUNK
        data = os.read(fd, want)
        if len(data) < want:
            return xxh3_64_intdigest(data)
        hasher = xxh3_64(data)
        while chunk := os.read(fd, CHUNK):
            hasher.update(chunk)
        return hasher.intdigest()
    except OSError:
        return None
    finally:
        os.close(fd)


def ident(dir_fd: int, name: str, st: os.stat_result) -> object:
    """Content identity: xxh3_64 of a file's bytes (>= 0); ``-1 - xxh3_64(target)`` for a symlink (< 0, so a
    type change always differs); None if unreadable; ``UNTRACKABLE`` for directories, FIFOs, devices..."""
    if _S_ISREG(st.st_mode):
        return _hash_file(dir_fd, name, st.st_size)
    if _S_ISLNK(st.st_mode):
        try:
            target = os.readlink(name, dir_fd=dir_fd)
        except OSError:
            return None
        return -1 - xxh3_64_intdigest(os.fsencode(target))
    return UNTRACKABLE


def dir_id(st: os.stat_result) -> tuple[int, int]:
    """``(device, inode)``: which directory a path names."""
    return st.st_dev, st.st_ino
