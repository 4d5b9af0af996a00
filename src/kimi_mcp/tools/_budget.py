"""Fit a result into the caller's budget: cut the least valuable text first and say what was cut."""

from __future__ import annotations

from ..models import TaskResult, TruncatedItem

# Large text fields, least valuable first; file contents come after these, Kimi's answer last.
_FIELDS_FIRST = ("raw_response_preview", "original_content", "refactored_content")
_FIELDS_LAST = ("diff", "output")
_MARK = "… [cut to fit the result budget]"


def _size(result: TaskResult) -> int:
    return len(result.model_dump_json())


def _cut_field(result: TaskResult, name: str, limit: int) -> bool:
    value = getattr(result, name, None)
    if not isinstance(value, str) or not value:
        return False
    excess = _size(result) - limit
    keep = max(0, len(value) - excess - len(_MARK) - 16)
    setattr(result, name, value[:keep] + _MARK if keep else "")
    result.truncated.append(
        TruncatedItem(path=name, reason="result_budget", size_bytes=len(value.encode()), returned_chars=keep)
    )
    return _size(result) <= limit


def fit_to_budget(result: TaskResult, limit: int) -> TaskResult:
    """Shrink ``result`` in place until its JSON has at most ``limit`` characters."""
    if limit <= 0 or _size(result) <= limit:
        return result
    for name in _FIELDS_FIRST:
        if _cut_field(result, name, limit):
            return result
    for path in sorted(result.file_contents, key=lambda p: -len(result.file_contents[p])):
        text = result.file_contents.pop(path)
        result.truncated.append(
            TruncatedItem(path=path, reason="result_budget", size_bytes=len(text.encode()), returned_chars=0)
        )
        if _size(result) <= limit:
            return result
    for trace in result.evidence.tools_run:
        trace.arguments = trace.arguments[:200]
        trace.result = None if trace.result is None else trace.result[:200]
    if _size(result) <= limit:
        return result
    for name in _FIELDS_LAST:
        if _cut_field(result, name, limit):
            return result
    return result
