"""Small helpers shared by the tracker tests (test_tracker*, test_tracker_watch, test_tracker_spill)."""

from __future__ import annotations

from pathlib import Path

from kimi_mcp.tracker import Changes, TrackerOptions

DEFAULTS = TrackerOptions()


def write(root: Path, rel: str, data: str | bytes = "x\n") -> Path:
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data.encode() if isinstance(data, str) else data)
    return path


def changes(created=(), modified=(), deleted=()) -> Changes:
    return Changes(sorted(created), sorted(modified), sorted(deleted))
