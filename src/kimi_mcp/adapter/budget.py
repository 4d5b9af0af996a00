"""Fit a result into the caller's budget (``KIMI_MCP_MAX_RESULT_CHARS``, the result's compact JSON), cutting
the least valuable text first and saying, once per item and with its true size, what was cut.

Order: the raw-answer preview and a refactor's before/after copies (the file on disk and the diff say the
same); then tool-call arguments and results in the evidence (200 characters each) and the output tails of
the fix rounds (their last 200 characters each; ``verify`` keeps the last round's); then the file contents,
the diff and Kimi's answer *share* what is left fairly: every text keeps the same number of leading
characters (a short one whole), so no file is dropped while another stays whole; last, if the lists alone
are too long, the evidence lists and then the change lists lose their tail. The budget is honoured exactly.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from urllib.parse import quote

from pydantic import BaseModel

from ..models import TaskResult, TruncatedItem

SCHEME = "kimi-mcp://jobs"  # where what a result left out stays readable (``resources`` serves it)
_FIELDS_FIRST = ("raw_response_preview", "original_content", "refactored_content")
_SHARED_FIELDS = ("diff", "output")  # share the budget with the file contents
_TRACE_CHARS = 200
_MARK = "… [cut to fit the result budget]"
_LISTS = (  # trimmed from the end, in this order, only when everything else is cut already
    ("evidence", "cited"),
    ("evidence", "files_read"),
    ("evidence", "tools_run"),
    (None, "binary_files"),
    (None, "secret_files"),
    (None, "files_deleted"),
    (None, "files_modified"),
    (None, "files_created"),
)


def file_uri(job_id: str, path: str) -> str:
    return f"{SCHEME}/{job_id}/files/{quote(path)}"


def field_uri(job_id: str, name: str) -> str:
    return f"{SCHEME}/{job_id}/{name}"


def result_json(payload: dict) -> str:
    """The JSON a result is measured by and sent as (compact)."""
    return json.dumps(payload, ensure_ascii=False, separators=(",", ":"))


def _size(result: TaskResult) -> int:
    return len(result_json(result.model_dump(mode="json")))


def fit_to_budget(result: TaskResult, limit: int) -> TaskResult:
    """Shrink ``result`` in place until its compact JSON has at most ``limit`` characters. Every cut text
    that a job resource holds whole gets its ``uri`` first (it counts in the budget too)."""
    for item in result.truncated:
        item.uri = item.uri or _uri(result, item.path)
    if limit <= 0 or _size(result) <= limit:
        return result
    for name in _FIELDS_FIRST:
        _cut_field(result, name, limit)
        if _size(result) <= limit:
            return result
    for trace in result.evidence.tools_run:
        trace.arguments = trace.arguments[:_TRACE_CHARS]
        trace.result = None if trace.result is None else trace.result[:_TRACE_CHARS]
    for fix in result.rounds:  # the end of each check's output (verify keeps the last one's)
        fix.output_tail = fix.output_tail[-_TRACE_CHARS:]
    if _size(result) <= limit:
        return result
    _share(result, limit)
    if _size(result) > limit:
        _trim_lists(result, limit)
    return result


def split_budget(sizes: list[int], total: int) -> list[int]:
    """Share ``total`` characters among results of ``sizes`` fairly: the smaller ones whole, what they
    leave shared evenly among the larger ones (each cut to its share; at least 1: a positive budget is never
    "no limit")."""
    shares = [0] * len(sizes)
    left = max(0, total)
    for done, index in enumerate(sorted(range(len(sizes)), key=sizes.__getitem__)):
        fair = left // (len(sizes) - done)
        shares[index] = min(sizes[index], fair)
        left -= shares[index]
    return [max(1, share) for share in shares]


def _cut_field(result: TaskResult, name: str, limit: int) -> None:
    value = getattr(result, name, None)
    if not isinstance(value, str) or not value:
        return
    keep = max(0, len(value) - (_size(result) - limit) - len(_MARK) - 16)
    setattr(result, name, value[:keep] + _MARK if keep else "")
    _record(result, name, len(value.encode()), keep)


def _share(result: TaskResult, limit: int) -> None:
    """Cut the file contents, the diff and the answer to one common length: the longest that fits (a binary
    search on the real JSON size, escapes included)."""
    texts: dict[tuple[str, str], str] = {("file", p): t for p, t in result.file_contents.items()}
    texts |= {("field", n): getattr(result, n) for n in _SHARED_FIELDS if getattr(result, n, None)}
    if not texts:
        return
    listed = [item.model_copy() for item in result.truncated]

    def apply(cap: int) -> int:
        result.truncated = [item.model_copy() for item in listed]
        for (kind, key), text in texts.items():
            cut = text if len(text) <= cap else (text[:cap] + _MARK if cap else "")
            if kind == "file":
                result.file_contents[key] = cut
            else:
                setattr(result, key, cut)
            if cut is not text:
                _record(result, key, len(text.encode()), cap)  # listed now: the list counts too
        return _size(result)

    low, high = (
        0,
        max(len(t) for t in texts.values()),
    )  # the longest common length that fits is in [low, high)
    while high - low > 1:
        middle = (low + high) // 2
        low, high = (middle, high) if apply(middle) <= limit else (low, middle)
    apply(low)


def _record(result: TaskResult, path: str, size: int, kept: int) -> None:
    """List a cut once: a file the tracker had cut already keeps its entry (and its true size on disk)."""
    for item in result.truncated:
        if item.path == path:
            item.reason, item.returned_chars = "result_budget", min(item.returned_chars, kept)
            item.uri = _uri(result, path)
            return
    result.truncated.append(
        TruncatedItem(
            path=path, reason="result_budget", size_bytes=size, returned_chars=kept, uri=_uri(result, path)
        )
    )


def _uri(result: TaskResult, path: str) -> str | None:
    """The resource holding a cut text whole (set here, so the budget counts it)."""
    if not result.job_id:
        return None
    if path in ("output", "diff"):
        return field_uri(result.job_id, path)
    return file_uri(result.job_id, path) if path in {*result.files_created, *result.files_modified} else None


def _trim_lists(result: TaskResult, limit: int) -> None:
    """Drop the tails of the lists, in ``_LISTS`` order, keeping the longest head of each that fits."""
    for owner, name in _LISTS:
        holder = result.evidence if owner else result
        if getattr(holder, name):
            _keep_head(result, limit, holder, name, f"{owner}.{name}" if owner else name)
        if _size(result) <= limit:
            return


def _keep_head(result: TaskResult, limit: int, holder: object, name: str, label: str) -> None:
    items = list(getattr(holder, name))
    listed = [item.model_copy() for item in result.truncated]
    size = len(json.dumps([_plain(item) for item in items]))

    def keep(count: int) -> int:
        setattr(holder, name, items[:count])
        result.truncated = [item.model_copy() for item in listed]
        if count < len(items):
            _record(result, label, size, len(json.dumps([_plain(item) for item in items[:count]])))
        return _size(result)

    keep(_longest(keep, len(items) + 1, limit))


def _longest(size_with: Callable[[int], int], high: int, limit: int) -> int:
    """The largest ``n`` in ``[0, high)`` with ``size_with(n) <= limit`` (0 if none): a binary search,
    sizes growing with ``n``."""
    low = 0
    while high - low > 1:
        middle = (low + high) // 2
        low, high = (middle, high) if size_with(middle) <= limit else (low, middle)
    return low


def _plain(item: object) -> object:
    return item.model_dump(mode="json") if isinstance(item, BaseModel) else item
