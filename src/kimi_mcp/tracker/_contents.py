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
    """Read created/modified files for the result within the budgets, cut fairly: every file gets the same
    head length (one that fits ``max_total_chars`` in all, at most ``max_file_chars``), so no file is cut
    or left out while another stays longer than it.

    Secrets are never opened; symlinks and anything resolving outside ``root`` get no content and are listed
    in ``binary_files``; files that vanished since the diff (or are no longer regular files) are skipped.
    A file is read up to ``max(8 KiB, 4 * chars_wanted + 4)`` bytes; ``size_bytes`` is the size on disk.
    """
    report = ContentReport()
    files = _regular_files(report, root, paths)
    whole: dict[str, str] = {}
    cut: dict[str, tuple[str, int]] = {}  # path -> (its head at the current share, size on disk)
    done: set[str] = set()  # whole, binary or unreadable
    share = -1
    for _round in range(4):  # the share grows while binaries and short texts free budget
        pending = [(path, real, size) for path, real, size in files if path not in done]
        budget = options.max_total_chars - sum(len(text) for text in whole.values())
        grown = fair_share([size for _path, _real, size in pending], budget, options.max_file_chars)
        if grown <= share or not pending:
            break
        share = grown
        cut.clear()
        for path, real, _size in pending:
            read = _read_text(report, path, real, share)
            if read is None:
                done.add(path)
            elif read[1] and len(read[0]) <= share:
                whole[path] = read[0]
                done.add(path)
            else:
                cut[path] = (read[0][:share], read[2])
    reason: Literal["file_too_large", "total_budget"] = (
        "file_too_large" if share >= options.max_file_chars else "total_budget"
    )
    for path, _real, _size in files:
        if path in whole:
            report.file_contents[path] = whole[path]
        elif path in cut:
            text, on_disk = cut[path]
            report.truncated.append(ContentCut(path, reason, on_disk, len(text)))
            if text:
                report.file_contents[path] = text
    return report


def fair_share(sizes: list[int], budget: int, cap: int) -> int:
    """The largest head length ``n`` (at most ``cap``) with ``sum(min(size, n)) <= budget``: files of up to
    ``n`` characters stay whole, every longer one gets its first ``n``. Sizes in bytes bound the
    characters of UTF-8 text from above, so the budget holds."""
    budget = max(0, budget)
    capped = sorted(min(size, cap) for size in sizes)
    if sum(capped) <= budget:
        return cap
    used = 0
    for index, size in enumerate(capped):
        longer = len(capped) - index  # files of at least this size
        if used + size * longer > budget:
            return (budget - used) // longer
        used += size
    return cap


def _regular_files(report: ContentReport, root: Path, paths: Iterable[str]) -> list[tuple[str, str, int]]:
    """(path, real path, size) of the regular files whose content may be returned; secrets, symlinks and
    anything outside ``root`` are listed in ``report`` instead."""
    files = []
    root_real = os.path.realpath(root)
    inside_prefix = root_real.rstrip(os.sep) + os.sep
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
            files.append((path, real, st.st_size))
    return files


def _read_text(report: ContentReport, path: str, real: str, limit: int) -> tuple[str, bool, int] | None:
    """The head of a regular file as text (enough bytes for ``limit`` characters), whether it is the whole
    file, and its size; a binary file is listed in ``report`` (None), as is one that cannot be read."""
    max_bytes = max(_BINARY_SNIFF, 4 * limit + 4)
    try:
        fd = open_file(real)
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        if not _S_ISREG(st.st_mode):
            return None
        head = _read_head(fd, max_bytes)
    except OSError:
        return None
    finally:
        os.close(fd)
    if b"\0" in head[:_BINARY_SNIFF]:
        report.binary_files.append(path)
        return None
    complete = len(head) < max_bytes or len(head) >= st.st_size
    if path in report.lossy_decoded:
        report.lossy_decoded.remove(path)  # read again with a larger share: decoded again
    return _decode(report, path, head, complete), complete, st.st_size


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
