"""Reading created and modified files' contents for a result, within budgets (``collect_contents``).

Secret files are never opened, nor anything that resolves outside the workspace.
"""

from __future__ import annotations

import codecs
import os
import stat as stat_mod
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from ..secrets import is_secret_path
from ._fs import CHUNK, open_file
from ._model import DEFAULT_OPTIONS, TrackerOptions

__all__ = ["ContentReport", "ContentCut", "collect_contents"]

_BINARY_SNIFF = 8192
_S_ISREG = stat_mod.S_ISREG
_S_ISLNK = stat_mod.S_ISLNK


@dataclass
class ContentCut:
    """A file whose content was cut (or left out) for a budget; the runner reports it as a
    ``models.TruncatedItem``."""

    path: str
    reason: Literal["file_too_large", "total_budget"]
    size_bytes: int
    returned_chars: int


@dataclass
class ContentReport:
    """Contents of created/modified files, within budgets.

    Symlinks (and any path that resolves outside the root) never have content read and are listed in
    ``binary_files``.
    """

    file_contents: dict[str, str] = field(default_factory=dict)
    binary_files: list[str] = field(default_factory=list)
    secret_files: list[str] = field(default_factory=list)
    truncated: list[ContentCut] = field(default_factory=list)
    lossy_decoded: list[str] = field(default_factory=list)


def collect_contents(
    root: Path, paths: Iterable[str], options: TrackerOptions = DEFAULT_OPTIONS
) -> ContentReport:
    """Read created/modified files for the result, in the given priority order, within the budgets.

    Secrets are never opened; symlinks and anything resolving outside ``root`` get no content and are listed
    in ``binary_files``; files that vanished since the diff (or are no longer regular files) are skipped.
    At most ``max(8 KiB, 4 * chars_wanted + 4)`` bytes of a file are read; ``size_bytes`` is the size on disk.
    """
    report = ContentReport()
    root_real = os.path.realpath(root)
    inside_prefix = root_real.rstrip(os.sep) + os.sep
    remaining = options.max_total_chars
    for path in paths:
        full = os.path.join(root_real, path)
        try:
            st = os.lstat(full)
        except OSError:
            continue
        if is_secret_path(path):
            report.secret_files.append(path)
            continue
        real = os.path.realpath(full)
        if _S_ISLNK(st.st_mode) or not real.startswith(inside_prefix):
            report.binary_files.append(path)
            continue
        if _S_ISREG(st.st_mode):
            remaining -= _collect_one(report, path, real, options, remaining)
    return report


def _collect_one(report: ContentReport, path: str, real: str, options: TrackerOptions, remaining: int) -> int:
    """Add one regular file to ``report``; return the number of characters returned."""
    limit = max(0, min(options.max_file_chars, remaining))
    max_bytes = max(_BINARY_SNIFF, 4 * limit + 4)
    try:
        fd = open_file(real)
    except OSError:
        return 0
    try:
        st = os.fstat(fd)
        if not _S_ISREG(st.st_mode):
            return 0
        head = _read_head(fd, max_bytes)
    except OSError:
        return 0
    finally:
        os.close(fd)
    if b"\0" in head[:_BINARY_SNIFF]:
        report.binary_files.append(path)
        return 0
    complete = len(head) < max_bytes or len(head) >= st.st_size
    text = _decode(report, path, head, complete)
    if complete and len(text) <= limit:
        report.file_contents[path] = text
        return len(text)
    reason: Literal["file_too_large", "total_budget"] = (
        "file_too_large" if options.max_file_chars <= remaining else "total_budget"
    )
    report.truncated.append(ContentCut(path, reason, st.st_size, limit))
    if limit:
        report.file_contents[path] = text[:limit]
    return limit


def _read_head(fd: int, max_bytes: int) -> bytes:
    parts: list[bytes] = []
    got = 0
    while got < max_bytes:
        chunk = os.read(fd, min(CHUNK, max_bytes - got))
        if not chunk:
            break
        parts.append(chunk)
        got += len(chunk)
    return b"".join(parts)


def _decode(report: ContentReport, path: str, data: bytes, complete: bool) -> str:
    """Strict UTF-8, else lossy (recorded). A multi-byte character cut off at the end of a head is dropped."""
    try:
        return codecs.getincrementaldecoder("utf-8")("strict").decode(data, final=complete)
    except UnicodeDecodeError:
        report.lossy_decoded.append(path)
        return codecs.getincrementaldecoder("utf-8")("replace").decode(data, final=complete)
