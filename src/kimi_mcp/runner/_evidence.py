"""What a finished turn reports besides Kimi's answer: the files it changed (with contents) and the
evidence of what it read and ran."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path

from .. import tracker
from ..config import Settings, state_dir
from ..drivers.base import Driver
from ..kimi_dirs import kimi_state_dirs
from ..models import Evidence, TaskResult, ToolCallTrace, TruncatedItem
from ..secrets import touches_secret, withhold_arguments
from ..session import CallRecord, TurnTrace
from ..session._wirelog import trim


def private_dirs(settings: Settings, env: dict[str, str]) -> list[Path]:
    """Directories whose files are Kimi's or kimi-mcp's own, never a task's changes."""
    dirs = [*kimi_state_dirs(env), state_dir(settings, env)]
    return dirs + ([Path(settings.transcript_dir)] if settings.transcript_dir else [])


def build_evidence(
    trace: TurnTrace, driver: Driver | None, workspace: Path, redact: Callable[[str], str]
) -> Evidence:
    files_read: list[str] = []
    for call in trace.calls.values():
        if driver is None or driver.tool_kind(call.name) != "read":
            continue
        shown = _read_path(call.arguments, workspace)
        if shown is not None and shown not in files_read:
            files_read.append(shown)
    return Evidence(
        files_read=files_read,
        tools_run=tool_traces(trace, redact),
        incomplete_trace=any(call.result is None for call in trace.calls.values()),
    )


def _read_path(arguments: str, workspace: Path) -> str | None:
    """The file a read call names, relative to the workspace when inside it."""
    try:
        args = json.loads(arguments or "{}")
    except ValueError:
        return None
    path = args.get("path") or args.get("file_path") if isinstance(args, dict) else None
    if not isinstance(path, str) or not path:
        return None
    absolute = Path(os.path.expanduser(path))
    absolute = absolute if absolute.is_absolute() else workspace / absolute
    try:
        return absolute.resolve().relative_to(workspace.resolve()).as_posix()
    except ValueError:
        return str(absolute)


def fill_changes(
    result: TaskResult, workspace: Path, changes: tracker.Changes, options: tracker.TrackerOptions
) -> None:
    result.files_created = list(changes.created)
    result.files_modified = list(changes.modified)
    result.files_deleted = list(changes.deleted)
    report = tracker.collect_contents(workspace, [*changes.created, *changes.modified], options)
    result.file_contents = dict(report.file_contents)
    result.binary_files = list(report.binary_files)
    result.secret_files = list(report.secret_files)
    result.truncated = [
        TruncatedItem(
            path=item.path, reason=item.reason, size_bytes=item.size_bytes, returned_chars=item.returned_chars
        )
        for item in report.truncated
    ]


TRIM = 2_000  # characters of a call's arguments or result reported


def tool_traces(trace: TurnTrace, redact: Callable[[str], str]) -> list[ToolCallTrace]:
    """The calls in the order Kimi made them; ``redact`` is applied before long texts are cut (so no cut
    leaves half a secret)."""
    return [_call_trace(call, redact) for call in trace.calls.values()]


def _call_trace(call: CallRecord, redact: Callable[[str], str]) -> ToolCallTrace:
    arguments, result = call.arguments, call.result
    if touches_secret(arguments):
        arguments = withhold_arguments(arguments)
        result = None if result is None else "[withheld: the call touched a secret file]"
    return ToolCallTrace(
        name=call.name,
        arguments=trim(redact(arguments), TRIM),
        result=None if result is None else trim(redact(result), TRIM),
        is_error=call.is_error,
        approval=call.approval,  # type: ignore[arg-type]
    )
