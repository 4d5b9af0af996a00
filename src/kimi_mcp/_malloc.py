"""Fewer glibc malloc arenas for a long-running kimi-mcp process (the server, ``kimi-mcp dashboard``)."""

from __future__ import annotations

import ctypes
import ctypes.util
import os


def limit_malloc_arenas(arenas: int = 2) -> None:
    """glibc gives each thread that allocates its own malloc arena (up to 8 per core), and freed memory
    stays resident per arena; the server's threads (tool calls, tracker, sessions) allocate little, so
    two arenas keep its RSS down. A no-op off glibc (the same as MALLOC_ARENA_MAX=2)."""
    if "MALLOC_ARENA_MAX" in os.environ:
        return
    name = ctypes.util.find_library("c")
    try:
        libc = ctypes.CDLL(name) if name else None
        if libc is not None and hasattr(libc, "mallopt") and hasattr(libc, "gnu_get_libc_version"):
            libc.mallopt(-8, arenas)  # M_ARENA_MAX
    except OSError:
        pass
